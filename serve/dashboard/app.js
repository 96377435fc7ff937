// The bubblewatch dashboard. Without ?job= it shows the fleet ranking; with
// ?job=NAME (and optionally &last=1h) one job's utilization over time, each
// window's span stacked as compute + bubble time by cause, the rolling
// figures and the top bubbles.
//
// Data comes from the JSON API (docs/query.md).
// With a bearer token configured, the token is asked once and kept in
// sessionStorage (or passed as #token=... in the URL).
//
// When the page has drawn what it shows, #status gets data-state="rendered"
// (plus data-windows / data-rows): the headless-browser test waits for it.
'use strict';

const CAUSES = ['host_sync', 'launch_overhead', 'allocator', 'memcpy',
  'data_loading', 'host_compute', 'gpu_dependency', 'unattributed'];
const CAUSE_COLORS = {
  host_sync: '#d92d20', launch_overhead: '#f79009', allocator: '#7a5af8',
  memcpy: '#06aed4', data_loading: '#ee46bc', host_compute: '#98a2b3',
  gpu_dependency: '#3e4784', unattributed: '#d0d5dd',
};
const REFRESH_MS = 15000;

const $ = (id) => document.getElementById(id);
const params = new URLSearchParams(location.search);
let chart = null;

function setStatus(state, text, data) {
  const s = $('status');
  s.dataset.state = state;
  s.textContent = text;
  for (const [k, v] of Object.entries(data || {})) s.dataset[k] = String(v);
}

function token() {
  const m = /(?:^#|&)token=([^&]+)/.exec(location.hash);
  if (m) sessionStorage.setItem('bubblewatch-token', decodeURIComponent(m[1]));
  return sessionStorage.getItem('bubblewatch-token') || '';
}

async function api(path) {
  const headers = {};
  const t = token();
  if (t) headers.Authorization = 'Bearer ' + t;
  const res = await fetch(path, { headers, cache: 'no-store' });
  const body = await res.json().catch(() => ({ error: 'bad reply' }));
  if (res.status === 401) {
    $('token-form').hidden = false;
    throw new Error('this server needs a bearer token');
  }
  if (!res.ok) throw new Error(body.error || ('HTTP ' + res.status));
  return body;
}

const pct = (x) => (100 * x).toFixed(1) + '%';
function duration(us) {
  const a = Math.abs(us);
  if (a < 1e3) return us.toFixed(1) + ' us';
  if (a < 1e6) return (us / 1e3).toFixed(2) + ' ms';
  return (us / 1e6).toFixed(2) + ' s';
}
// Event times are ns since the epoch; ms precision is plenty for display.
const utc = (ns) => new Date(ns / 1e6).toISOString().replace('T', ' ').slice(0, 19);
const clock = (ns) => new Date(ns / 1e6).toISOString().slice(11, 19);

function dominant(attribution) {
  let best = null;
  for (const c of CAUSES) {
    if (attribution[c] > 0 && (best === null || attribution[c] > attribution[best])) best = c;
  }
  return best;
}

function cell(row, text, cls) {
  const td = document.createElement('td');
  if (text instanceof Node) td.appendChild(text); else td.textContent = text;
  if (cls) td.className = cls;
  row.appendChild(td);
}

// A kernel's name, shortened in the middle (templated CUDA names run to
// hundreds of characters); the full name is the cell's tooltip.
function kernelCell(row, kernel) {
  const name = kernel ? kernel.name : '-';
  const max = 40;
  const short = name.length <= max ? name
    : name.slice(0, 25) + '…' + name.slice(name.length - (max - 26));
  cell(row, short);
  row.lastChild.title = name;
}

function card(label, value) {
  const d = document.createElement('div');
  d.className = 'card';
  const l = document.createElement('div');
  l.className = 'label';
  l.textContent = label;
  const v = document.createElement('div');
  v.className = 'value';
  v.textContent = value;
  d.append(l, v);
  return d;
}

async function showFleet() {
  $('fleet-view').hidden = false;
  const order = $('order');
  order.value = params.get('by') || 'bubble_ratio';
  order.onchange = () => { params.set('by', order.value); location.search = params; };
  const fleet = await api('api/v1/fleet?top=100&by=' + encodeURIComponent(order.value));
  const body = $('fleet-table').tBodies[0];
  body.replaceChildren();
  for (const e of fleet.top) {
    const w = e.window;
    const tr = document.createElement('tr');
    const link = document.createElement('a');
    link.href = '?job=' + encodeURIComponent(e.job);
    link.textContent = e.job;
    const dom = dominant(w.attribution_us);
    cell(tr, String(e.rank), 'num');
    cell(tr, link);
    cell(tr, utc(w.start_ns));
    cell(tr, pct(w.utilization), 'num');
    cell(tr, pct(w.bubble_ratio), 'num');
    cell(tr, duration(w.bubble_us), 'num');
    cell(tr, dom ? dom + ' ' + pct(w.attribution_us[dom] / w.bubble_us) : '-');
    kernelCell(tr, w.culprit_before_bubble);
    body.appendChild(tr);
  }
  $('fleet-summary').textContent = `${fleet.jobs} job(s); fleet utilization ` +
    `${pct(fleet.fleet.utilization)} over each job's latest window`;
  setStatus('rendered', `Fleet: top ${fleet.top.length} of ${fleet.jobs} jobs`,
    { rows: fleet.top.length });
}

function drawChart(report) {
  const labels = report.windows.map((w) => clock(w.start_ns));
  // Each window's span as 100 %: compute at the bottom, then each cause's
  // share, so the bar's top edge is always 100 % and the compute part is the
  // utilization.
  const share = (w, us) => (w.span_us > 0 ? (100 * us) / w.span_us : 0);
  const datasets = [{
    label: 'compute (utilization)',
    data: report.windows.map((w) => share(w, w.compute_us)),
    backgroundColor: '#12b76a',
    stack: 'span',
  }];
  for (const c of CAUSES) {
    if (!report.windows.some((w) => w.attribution_us[c] > 0)) continue;
    datasets.push({
      label: c,
      data: report.windows.map((w) => share(w, w.attribution_us[c])),
      backgroundColor: CAUSE_COLORS[c],
      stack: 'span',
    });
  }
  const marker = {
    id: 'renderedMarker',
    afterRender: (c) => setStatus('rendered',
      `${report.job}: ${report.windows.length} windows`,
      { windows: report.windows.length, datasets: c.data.datasets.length }),
  };
  if (chart) chart.destroy();
  chart = new Chart($('util-chart'), {
    type: 'bar',
    data: { labels, datasets },
    plugins: [marker],
    options: {
      animation: false,
      maintainAspectRatio: false,
      barPercentage: 1.0,
      categoryPercentage: 1.0,
      interaction: { mode: 'index', intersect: false },
      scales: {
        x: { stacked: true, ticks: { maxTicksLimit: 12 } },
        y: { stacked: true, min: 0, max: 100, title: { display: true, text: '% of GPU span' } },
      },
      plugins: {
        title: { display: true, text: 'Utilization and bubble attribution per window (UTC)' },
        tooltip: { callbacks: { label: (ctx) => `${ctx.dataset.label}: ${ctx.parsed.y.toFixed(1)}%` } },
      },
    },
  });
}

async function showJob(job) {
  $('job-view').hidden = false;
  $('job-name').textContent = job;
  document.title = job + ' — bubblewatch';
  const last = $('last');
  last.value = params.get('last') || '1h';
  last.onchange = () => { params.set('last', last.value); location.search = params; };
  const report = await api('api/v1/jobs/' + encodeURIComponent(job) +
    '/windows?bubbles=10&last=' + encodeURIComponent(last.value));
  const cards = $('cards');
  cards.replaceChildren();
  for (const r of report.rolling) cards.appendChild(card('utilization, last ' + r.range, pct(r.utilization)));
  const s = report.summary;
  cards.appendChild(card('mean utilization', pct(s.utilization)));
  if (s.worst_utilization !== null) cards.appendChild(card('worst window', pct(s.worst_utilization)));
  cards.appendChild(card('bubble time', duration(s.bubble_us)));
  if (s.dominant_cause) cards.appendChild(card('dominant cause', s.dominant_cause));
  $('advice').textContent = s.advice || '';

  const body = $('bubbles-table').tBodies[0];
  body.replaceChildren();
  for (const b of report.top_bubbles) {
    const tr = document.createElement('tr');
    cell(tr, duration(b.duration_us), 'num');
    cell(tr, String(b.device), 'num');
    cell(tr, utc(b.start_ns));
    cell(tr, b.cause);
    kernelCell(tr, b.before);
    kernelCell(tr, b.after);
    cell(tr, b.blamed || '-');
    body.appendChild(tr);
  }
  if (report.windows.length === 0) {
    setStatus('rendered', `${job}: no windows in this period`, { windows: 0 });
    return;
  }
  drawChart(report);
}

async function main() {
  $('token-form').onsubmit = (e) => {
    e.preventDefault();
    sessionStorage.setItem('bubblewatch-token', $('token').value);
    location.reload();
  };
  const job = params.get('job');
  const show = () => (job ? showJob(job) : showFleet())
    .catch((err) => setStatus('error', String(err.message || err)));
  await show();
  // New windows arrive every window length (10 s by default).
  setInterval(show, REFRESH_MS);
}

main();
