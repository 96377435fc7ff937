// The bubblewatch dashboard. Without ?job= it shows the fleet ranking, with
// each job's last-seen time (stale jobs dimmed) and alert state; with
// ?job=NAME (and optionally &last=1h, &y=auto|full|zoom) one job's
// utilization over time, each window's span stacked as compute + bubble time
// by cause, the rolling figures, utilization per device per window (lines,
// or a heat map beyond HEATMAP_FROM devices), for a multi-rank job a rank ×
// window heat map of busy-useful utilization with each window's straggler
// marked, the window table, and the top bubbles. Where a job's windows carry
// their observed time (docs/semantics.md#observations), the job page shows
// the period's observed and unobserved time, each window's coverage, and
// marks partly observed windows (hatched bars, marked rows). Clicking a cell
// of the rank heat map (or &window=START_NS in the URL) opens that window's
// per-rank timeline (docs/query.md#window-timeline): one row per rank,
// coloured by compute / wait / transfer / bubble cause, the window's root
// straggler and the ranks it held up marked.
//
// Data comes from the JSON API (docs/query.md).
// With a bearer token configured, the token is asked once and kept in
// sessionStorage (or passed as #token=... in the URL).
//
// When the page has drawn what it shows, #status gets data-state="rendered"
// plus what the headless-browser test checks (tests/cli/
// dashboard_browser_test.cc): data-windows / data-rows and the other counts,
// the page's scroll and view widths, and the boxes (x,y,w,h in CSS px) of the
// drawn regions, whose pixels the test reads in a screenshot.
'use strict';

const CAUSES = ['host_sync', 'launch_overhead', 'allocator', 'memcpy',
  'data_loading', 'host_compute', 'gpu_dependency', 'unattributed'];
const CAUSE_COLORS = {
  host_sync: '#d92d20', launch_overhead: '#f79009', allocator: '#7a5af8',
  memcpy: '#06aed4', data_loading: '#ee46bc', host_compute: '#98a2b3',
  gpu_dependency: '#3e4784', unattributed: '#d0d5dd',
};
const REFRESH_MS = 15000;
// A job is stale when it has not reported for STALE_WINDOWS window lengths
// (its latest window's), and at least STALE_MIN_MS: the processor commits
// a live job every few seconds, so 3 missed windows is no jitter.
const STALE_WINDOWS = 3;
const STALE_MIN_MS = 30000;
// More devices than lines one can tell apart: a heat map instead.
const HEATMAP_FROM = 9;
// Viridis (perceptually uniform, colour-blind safe): 0 % to 100 % busy.
const HEAT_STOPS = ['#440154', '#3b528b', '#21918c', '#5ec962', '#fde725'];
const HEAT_EMPTY = '#eaecf0';
// The mark of a window's straggler on the rank heat map (no viridis colour
// comes near it), inside a white frame.
const STRAGGLER_MARK = '#ff2d2d';
// The states of a rank's timeline, by stored value (schemas/
// window_summary.h TimelineState; the API names them in "states"): compute,
// wait, transfer, the bubble causes in CAUSES order, unobserved.
const TIMELINE_COLORS = {
  compute: '#12b76a', wait: '#fdb022', transfer: '#84caff',
  ...CAUSE_COLORS, unobserved: '#ffffff', unknown: '#667085',
};
// The outline of the root straggler's row and of the rows it held up.
const ROOT_OUTLINE = STRAGGLER_MARK;
// Lines of the per-device view, device 0 first.
const DEVICE_COLORS = ['#2f6fdf', '#f79009', '#12b76a', '#d92d20', '#7a5af8',
  '#06aed4', '#ee46bc', '#3e4784'];
// The stripes over a partly observed window's bar (no bar colour is white).
const PARTIAL_HATCH = '#ffffff';

const $ = (id) => document.getElementById(id);
const params = new URLSearchParams(location.search);
const charts = {};
// The server's clock (the Date header of its last API reply), which "last
// seen" is measured against; the browser's clock only when there is none.
let serverNowMs = null;

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
  const date = Date.parse(res.headers.get('Date') || '');
  if (!Number.isNaN(date)) serverNowMs = date;
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
  nameCell(row, short, name);
}

// A cell for a long name, cut to the column's width (style.css td.name);
// `full` is the tooltip.
function nameCell(row, text, full) {
  cell(row, text, 'name');
  row.lastChild.title = full;
}

// A figure of the job's summary; `key` names it for the browser test
// (data-card), `data` adds data-* attributes, `title` is the tooltip.
function card(label, value, key, data, title) {
  const d = document.createElement('div');
  d.className = 'card';
  if (key) d.dataset.card = key;
  for (const [k, v] of Object.entries(data || {})) d.dataset[k] = String(v);
  if (title) d.title = title;
  const l = document.createElement('div');
  l.className = 'label';
  l.textContent = label;
  const v = document.createElement('div');
  v.className = 'value';
  v.textContent = value;
  d.append(l, v);
  return d;
}

// "12 s ago", "5 min ago", "3 h ago", "2 d ago".
function ago(ms) {
  const s = Math.max(0, Math.round(ms / 1000));
  if (s < 120) return s + ' s ago';
  if (s < 7200) return Math.round(s / 60) + ' min ago';
  if (s < 172800) return Math.round(s / 3600) + ' h ago';
  return Math.round(s / 86400) + ' d ago';
}

// "x,y,w,h" of an element's box in CSS px of the page (for the test's
// pixel checks).
function box(el) {
  const r = el.getBoundingClientRect();
  return [r.left + scrollX, r.top + scrollY, r.width, r.height]
    .map((v) => Math.round(v)).join(',');
}

// The page's layout figures: a page wider than its view scrolls sideways.
function layout() {
  const d = document.documentElement;
  return { scrollWidth: d.scrollWidth, viewWidth: d.clientWidth };
}

// The alert-state cell of `job`: the rules firing for it, "ok" when the
// processor's rules evaluated it and none fires, "-" when none did (no
// rules, or none selecting this job).
function alertCell(row, job, alerts) {
  const span = document.createElement('span');
  let state;
  if (alerts.error) {
    state = 'unknown';
    span.textContent = '?';
    span.title = 'alert state unavailable: ' + alerts.error;
  } else {
    const firing = alerts.firing.filter((a) => a.job === job);
    if (firing.length > 0) {
      state = 'firing';
      span.textContent = firing.map((a) => a.rule).join(', ');
      span.title = firing.map((a) => `${a.severity}: ${a.summary} (since ${a.starts_at})`).join('\n');
    } else if (alerts.evaluated_jobs.includes(job)) {
      state = 'ok';
      span.textContent = 'ok';
      span.title = 'alert rules evaluated, none firing';
    } else {
      state = 'none';
      span.textContent = '-';
      span.title = 'no alert rule evaluated this job';
    }
  }
  span.className = 'alert ' + state;
  cell(row, span, 'alerts');
  row.lastChild.dataset.alert = state;
  return state;
}

async function showFleet() {
  $('fleet-view').hidden = false;
  const order = $('order');
  order.value = params.get('by') || 'bubble_ratio';
  order.onchange = () => { params.set('by', order.value); location.search = params; };
  // The fleet is ranked over a period (the API's default, the last hour up
  // to the fleet's newest window); each row's figures are the period's.
  const last = $('fleet-last');
  const period = params.get('last') || '1h';
  if (![...last.options].some((o) => o.value === period)) {
    last.add(new Option(period, period));  // A period typed into the URL.
  }
  last.value = period;
  last.onchange = () => { params.set('last', last.value); location.search = params; };
  // The alert state is optional: a server without it still shows the fleet.
  const [fleet, jobs, alerts] = await Promise.all([
    api('api/v1/fleet?top=100&last=' + encodeURIComponent(period) + '&by=' +
        encodeURIComponent(order.value)),
    api('api/v1/jobs'),
    api('api/v1/alerts').catch((err) => ({ error: String(err.message || err) })),
  ]);
  const now = serverNowMs !== null ? serverNowMs : Date.now();
  const info = new Map(jobs.jobs.map((j) => [j.job, j]));
  const body = $('fleet-table').tBodies[0];
  body.replaceChildren();
  let stale = 0;
  let firing = 0;
  for (const e of fleet.top) {
    const w = e.window;
    const p = e.period || w;  // The period's totals; a window without them.
    const tr = document.createElement('tr');
    const link = document.createElement('a');
    link.href = '?job=' + encodeURIComponent(e.job);
    link.textContent = e.job;
    const dom = dominant(p.attribution_us);
    cell(tr, String(e.rank), 'num');
    cell(tr, link);
    cell(tr, utc(w.start_ns));
    // Last seen: wall time of the job's last report to the processor.
    const j = info.get(e.job);
    const seenMs = j ? Date.parse(j.last_seen) : NaN;
    const age = now - seenMs;
    const limit = Math.max(STALE_WINDOWS * (w.end_ns - w.start_ns) / 1e6, STALE_MIN_MS);
    const isStale = !(age <= limit) || seenMs <= 0;
    cell(tr, Number.isNaN(seenMs) || seenMs <= 0 ? 'never' : ago(age), 'num seen');
    tr.lastChild.title = j ? j.last_seen : 'unknown';
    // The job's lifecycle (docs/semantics.md#job-lifecycle): active, paused
    // between duty-cycle snapshots, or ended.
    cell(tr, e.state || (j && j.state) || '-', 'state');
    if (isStale) {
      tr.classList.add('stale');
      tr.title = `stale: not seen for more than ${Math.round(limit / 1000)} s`;
      ++stale;
    }
    cell(tr, pct(p.utilization), 'num');
    cell(tr, pct(p.bubble_ratio), 'num');
    cell(tr, duration(p.bubble_us), 'num');
    if (p.partial_windows > 0) {
      tr.lastChild.textContent += '*';
      tr.lastChild.title = `${p.partial_windows} of ${p.windows} window(s) partly ` +
        'observed, counted by the GPU time they hold';
    }
    cell(tr, dom ? dom + ' ' + pct(p.attribution_us[dom] / p.bubble_us) : '-');
    kernelCell(tr, w.culprit_before_bubble);
    if (alertCell(tr, e.job, alerts) === 'firing') ++firing;
    tr.dataset.job = e.job;
    body.appendChild(tr);
  }
  let alertText = '';
  if (!alerts.error) {
    const fleetAlerts = alerts.firing.filter((a) => a.job === '');
    alertText = `; ${alerts.firing.length} alert(s) firing` +
      fleetAlerts.map((a) => ` (fleet: ${a.rule} over ${a.jobs.join(', ')})`).join('');
  }
  const lost = fleet.fleet.bubble_gpu_hours;
  $('fleet-summary').textContent = `${fleet.jobs} job(s), ${stale} stale; over the last ` +
    `${period}: fleet utilization ${pct(fleet.fleet.utilization)}` +
    (typeof lost === 'number' ? `, ${lost.toFixed(2)} GPU-hours lost to bubbles` : '') +
    alertText;
  const firstOf = (sel) => body.querySelector(sel);
  const rects = {};
  const staleRow = firstOf('tr.stale');
  const freshRow = firstOf('tr:not(.stale)');
  const firingCell = firstOf('td[data-alert="firing"] .alert');
  if (staleRow) rects.rectStale = box(staleRow);
  if (freshRow) rects.rectFresh = box(freshRow);
  if (firingCell) rects.rectFiring = box(firingCell);
  const l = layout();
  setStatus('rendered', `Fleet: top ${fleet.top.length} of ${fleet.jobs} jobs`, {
    rows: fleet.top.length, stale, firing, scrollWidth: l.scrollWidth,
    viewWidth: l.viewWidth, ...rects,
  });
}

// Resolves once `chart` has drawn (Chart.js may draw in its constructor or
// on a later frame).
function drawn(make) {
  return new Promise((resolve) => {
    make({ id: 'drawn', afterRender: (c) => resolve(c) });
  });
}

// The lower end of the y axis. "full": 0. "zoom": just below the lowest
// busy share shown, so that the bubbles above it fill most of the height (a
// 0.4 % bubble over 99.6 % busy gets the upper 80 %). "auto": zoom when every
// bubble is under 10 % of its span (it would be a sliver at 0..100 %).
function yMin(mode, busyShares) {
  const shares = busyShares.filter((v) => v !== null && v !== undefined);
  if (shares.length === 0 || mode === 'full') return 0;
  const low = Math.min(...shares);
  if (mode === 'auto' && low < 90) return 0;
  const min = low - 0.25 * (100 - low);
  // Round down to a step that keeps 2-4 ticks readable.
  const step = min > 99 ? 0.1 : min > 90 ? 1 : 5;
  return Math.max(0, Number((Math.floor(min / step) * step).toFixed(1)));
}

function drawChart(report, mode) {
  const labels = report.windows.map((w) => clock(w.start_ns));
  // Each window's span as 100 %: compute at the bottom, then each cause's
  // share, so the bar's top edge is always 100 % and the compute part is the
  // utilization.
  const share = (w, us) => (w.span_us > 0 ? (100 * us) / w.span_us : 0);
  const busy = report.windows.map((w) => share(w, w.compute_us));
  const datasets = [{
    label: 'compute (utilization)',
    data: busy,
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
  const min = yMin(mode, report.windows.filter((w) => w.span_us > 0)
    .map((w) => share(w, w.compute_us)));
  // Partly observed windows: white stripes across the whole column, so a
  // bar of the GPU span observed is not read as a whole window.
  const partial = report.windows.map(partlyObserved);
  const hatch = {
    id: 'partial-hatch',
    afterDatasetsDraw: (c) => {
      const bars = c.getDatasetMeta(0).data;
      const { top, bottom } = c.chartArea;
      const h = bottom - top;
      const ctx = c.ctx;
      partial.forEach((p, i) => {
        if (!p || !bars[i]) return;
        const x0 = bars[i].x - bars[i].width / 2;
        const w = bars[i].width;
        ctx.save();
        ctx.beginPath();
        ctx.rect(x0, top, w, h);
        ctx.clip();
        ctx.strokeStyle = PARTIAL_HATCH;
        ctx.lineWidth = 3;
        ctx.beginPath();
        for (let d = -h; d < w; d += 9) {
          ctx.moveTo(x0 + d, bottom);
          ctx.lineTo(x0 + d + h, top);
        }
        ctx.stroke();
        ctx.restore();
      });
    },
  };
  const footer = (items) => {
    const w = report.windows[items[0].dataIndex];
    if (w.observed_us === undefined) return '';
    return `observed ${duration(w.observed_us)} of ${duration((w.end_ns - w.start_ns) / 1e3)} ` +
      `(${pct(w.coverage)})` + (partlyObserved(w) ? ': partly observed window' : '');
  };
  if (charts.util) charts.util.destroy();
  return drawn((plugin) => {
    charts.util = new Chart($('util-chart'), {
      type: 'bar',
      data: { labels, datasets },
      plugins: [hatch, plugin],
      options: {
        animation: false,
        maintainAspectRatio: false,
        barPercentage: 1.0,
        categoryPercentage: 1.0,
        interaction: { mode: 'index', intersect: false },
        scales: {
          x: { stacked: true, ticks: { maxTicksLimit: 12 } },
          y: {
            stacked: true, min, max: 100,
            title: { display: true, text: min > 0 ? `% of GPU span (zoomed: ${min}-100)` : '% of GPU span' },
          },
        },
        plugins: {
          title: { display: true, text: 'Utilization and bubble attribution per window (UTC)' },
          tooltip: {
            callbacks: {
              label: (ctx) => `${ctx.dataset.label}: ${ctx.parsed.y.toFixed(2)}%`,
              footer,
            },
          },
        },
      },
    });
  }).then((c) => ({
    datasets: c.data.datasets.length, yMin: min,
    plotBox: [c.chartArea.left, c.chartArea.top, c.chartArea.width, c.chartArea.height],
  }));
}

// Whether window `w` was observed for less than its whole length (its
// observed time known: docs/semantics.md#observations).
function partlyObserved(w) {
  return w.observed_us !== undefined && w.coverage < 1;
}

// The cards of the period's observed time, when some window's is known: the
// observed time and its share of those windows, the unobserved time, and how
// many windows were partly observed.
function observedCards(cards, s, windows) {
  if (s.observed_windows === undefined) return;
  const unknown = windows - s.observed_windows;
  const over = `over the ${s.observed_windows} window(s) whose observed time is known` +
    (unknown > 0 ? `; ${unknown} window(s) of unknown observed time are in no figure` : '');
  cards.appendChild(card('observed time', `${duration(s.observed_us)} (${pct(s.coverage)})`,
    'observed', { us: s.observed_us, coverage: s.coverage },
    'time some observation of the job covered, and its share of the windows\' length, ' + over));
  cards.appendChild(card('unobserved time', duration(s.unobserved_us), 'unobserved',
    { us: s.unobserved_us },
    'time of the windows nobody observed: never a bubble, ' + over));
  cards.appendChild(card('partly observed windows',
    `${s.partly_observed_windows} of ${s.observed_windows}`, 'partial',
    { count: s.partly_observed_windows },
    'windows observed for less than their whole length (an observation\'s edge, a job\'s tail)'));
}

// The window table, newest first: each window's figures and, where its
// observed time is known, the observed time and coverage; partly observed
// rows marked (class "partial", a "partial" badge). The observed columns are
// hidden when no window's observed time is known. Returns the counts.
function drawWindowTable(report) {
  const table = $('window-table');
  const known = report.windows.some((w) => w.observed_us !== undefined);
  table.classList.toggle('no-observed', !known);
  const body = table.tBodies[0];
  body.replaceChildren();
  let partial = 0;
  for (const w of [...report.windows].reverse()) {
    const tr = document.createElement('tr');
    const observed = w.observed_us !== undefined;
    tr.dataset.coverage = observed ? String(w.coverage) : '';
    tr.dataset.observedUs = observed ? String(w.observed_us) : '';
    cell(tr, utc(w.start_ns));
    cell(tr, pct(w.utilization), 'num');
    cell(tr, duration(w.bubble_us), 'num');
    const dom = dominant(w.attribution_us);
    cell(tr, dom ? dom + ' ' + pct(w.attribution_us[dom] / w.bubble_us) : '-');
    cell(tr, duration(w.largest_bubble_us), 'num');
    kernelCell(tr, w.culprit_before_bubble);
    cell(tr, observed ? duration(w.observed_us) : '-', 'num obs observed');
    cell(tr, observed ? pct(w.coverage) : '-', 'num obs coverage');
    if (!observed) {
      tr.lastChild.title = 'observed time unknown (the producer sends no observations)';
    } else if (partlyObserved(w)) {
      const mark = document.createElement('span');
      mark.className = 'badge partial';
      mark.textContent = 'partial';
      tr.lastChild.appendChild(mark);
      tr.lastChild.title = `observed ${duration(w.observed_us)} of ` +
        `${duration((w.end_ns - w.start_ns) / 1e3)}: its figures cover only that`;
      tr.classList.add('partial');
      ++partial;
    }
    body.appendChild(tr);
  }
  $('window-note').textContent = `${report.windows.length} window(s)` +
    (known ? `; ${partial} partly observed` : '');
  $('coverage-legend').hidden = partial === 0;
  return { partial };
}

// Utilization as a colour of HEAT_STOPS, interpolated.
function heatColor(u) {
  const x = Math.min(Math.max(u, 0), 1) * (HEAT_STOPS.length - 1);
  const i = Math.min(Math.floor(x), HEAT_STOPS.length - 2);
  const f = x - i;
  const rgb = (h) => [1, 3, 5].map((k) => parseInt(h.slice(k, k + 2), 16));
  const a = rgb(HEAT_STOPS[i]);
  const b = rgb(HEAT_STOPS[i + 1]);
  return 'rgb(' + a.map((v, k) => Math.round(v + f * (b[k] - v))).join(',') + ')';
}

// One row per device, one column per window, coloured by utilization; the
// canvas's title names the cell under the pointer.
function drawHeatmap(devices) {
  const canvas = $('device-heatmap');
  const n = devices.window_starts_ns.length;
  const rows = devices.devices.length;
  const left = 64;
  const bottom = 20;
  const cellH = Math.max(4, Math.min(18, Math.floor(320 / rows)));
  const pad = getComputedStyle(canvas.parentElement);
  const width = Math.floor(canvas.parentElement.clientWidth -
    parseFloat(pad.paddingLeft) - parseFloat(pad.paddingRight));
  const height = rows * cellH + bottom;
  canvas.width = width;
  canvas.height = height;
  canvas.style.width = width + 'px';
  canvas.style.height = height + 'px';
  const ctx = canvas.getContext('2d');
  ctx.clearRect(0, 0, width, height);
  const plotW = width - left;
  const x = (i) => left + Math.round((i * plotW) / n);
  ctx.font = '11px system-ui, sans-serif';
  ctx.textBaseline = 'middle';
  devices.devices.forEach((d, r) => {
    const y = r * cellH;
    ctx.fillStyle = '#667085';
    if (cellH >= 9 || r % Math.ceil(9 / cellH) === 0) ctx.fillText('GPU ' + d.device, 4, y + cellH / 2);
    d.windows.forEach((u, i) => {
      ctx.fillStyle = u === null ? HEAT_EMPTY : heatColor(u);
      ctx.fillRect(x(i), y, x(i + 1) - x(i), cellH);
    });
  });
  ctx.fillStyle = '#667085';
  ctx.textBaseline = 'top';
  ctx.fillText(clock(devices.window_starts_ns[0]), left, rows * cellH + 4);
  const end = clock(devices.window_ends_ns[n - 1]);
  ctx.fillText(end, width - ctx.measureText(end).width - 2, rows * cellH + 4);
  canvas.onmousemove = (ev) => {
    const r = Math.floor(ev.offsetY / cellH);
    const i = Math.floor(((ev.offsetX - left) * n) / plotW);
    const d = devices.devices[r];
    if (!d || i < 0 || i >= n) { canvas.title = ''; return; }
    const u = d.windows[i];
    canvas.title = `GPU ${d.device}, ${clock(devices.window_starts_ns[i])}: ` +
      (u === null ? 'no data' : pct(u));
  };
  $('heat-legend').hidden = false;
  return Promise.resolve({ plotBox: [left, 0, plotW, rows * cellH] });
}

function drawDeviceLines(devices, mode) {
  const labels = devices.window_starts_ns.map(clock);
  const datasets = devices.devices.map((d, k) => ({
    label: 'GPU ' + d.device,
    data: d.windows.map((u) => (u === null ? null : 100 * u)),
    borderColor: DEVICE_COLORS[k % DEVICE_COLORS.length],
    backgroundColor: DEVICE_COLORS[k % DEVICE_COLORS.length],
    pointRadius: 0,
    borderWidth: 2,
    spanGaps: false,
  }));
  const min = yMin(mode, datasets.flatMap((d) => d.data));
  if (charts.devices) charts.devices.destroy();
  return drawn((plugin) => {
    charts.devices = new Chart($('device-chart'), {
      type: 'line',
      data: { labels, datasets },
      plugins: [plugin],
      options: {
        animation: false,
        maintainAspectRatio: false,
        interaction: { mode: 'index', intersect: false },
        scales: {
          x: { ticks: { maxTicksLimit: 12 } },
          y: { min, max: 100, title: { display: true, text: '% busy' } },
        },
        plugins: {
          title: { display: true, text: 'Utilization per device per window (UTC)' },
          tooltip: { callbacks: { label: (ctx) => `${ctx.dataset.label}: ${ctx.parsed.y.toFixed(2)}%` } },
        },
      },
    });
  }).then(() => ({}));
}

// The straggler of window `w`: the rank that caused the most wait in it
// (stragglers[] is by wait caused: the root, docs/semantics.md#root-cause),
// or null when no rank caused any.
function stragglerOf(w) {
  const s = w.stragglers && w.stragglers[0];
  return s && s.wait_caused_us > 0 ? s.rank : null;
}

// The ranks window `w`'s root straggler held up (its via[]: they were late
// only because they waited for it), as a Set; empty without a root.
function heldUpOf(w) {
  const s = w.stragglers && w.stragglers[0];
  if (!s || !(s.wait_caused_us > 0)) return new Set();
  return new Set((s.via || []).filter((v) => v.rank !== s.rank).map((v) => v.rank));
}

// " on HOST pid PID" for a rank row of the API (host and pid when known,
// docs/query.md), "" without either.
function processOf(r) {
  if (!r) return '';
  return (r.host ? ` on ${r.host}` : '') + (r.pid != null ? ` pid ${r.pid}` : '');
}

// The rank × window heat map of a multi-rank job: one row per rank seen in
// any window's collective analysis, one column per window of the report,
// coloured by the rank's busy-useful utilization ((busy - comm wait) /
// span), grey where the window has no analysis or the rank is not in it;
// each window's straggler is marked. The same figures go to #rank-table
// (hidden: for screen readers, and what the browser test reads). Returns
// null for a job without any analysis in the period.
function drawRankHeatmap(report) {
  const windows = report.windows;
  const ranks = [...new Set(windows.flatMap((w) => (w.ranks || []).map((r) => r.rank)))]
    .sort((a, b) => a - b);
  $('rank-view').hidden = ranks.length === 0;
  if (ranks.length === 0) return null;
  const row = new Map(ranks.map((r, k) => [r, k]));
  const n = windows.length;
  // grid[k][i]: rank ranks[k] in window i, or undefined.
  const grid = ranks.map(() => new Array(n));
  windows.forEach((w, i) => {
    for (const r of w.ranks || []) grid[row.get(r.rank)][i] = r;
  });
  const stragglers = windows.map(stragglerOf);
  const heldUp = windows.map(heldUpOf);

  const canvas = $('rank-heatmap');
  const left = 64;
  const bottom = 20;
  const cellH = Math.max(4, Math.min(18, Math.floor(320 / ranks.length)));
  const pad = getComputedStyle(canvas.parentElement);
  const width = Math.floor(canvas.parentElement.clientWidth -
    parseFloat(pad.paddingLeft) - parseFloat(pad.paddingRight));
  const height = ranks.length * cellH + bottom;
  canvas.width = width;
  canvas.height = height;
  canvas.style.width = width + 'px';
  canvas.style.height = height + 'px';
  const ctx = canvas.getContext('2d');
  ctx.clearRect(0, 0, width, height);
  const plotW = width - left;
  const x = (i) => left + Math.round((i * plotW) / n);
  ctx.font = '11px system-ui, sans-serif';
  ctx.textBaseline = 'middle';
  ranks.forEach((rank, k) => {
    const y = k * cellH;
    ctx.fillStyle = '#667085';
    if (cellH >= 9 || k % Math.ceil(9 / cellH) === 0) ctx.fillText('rank ' + rank, 4, y + cellH / 2);
    for (let i = 0; i < n; ++i) {
      const r = grid[k][i];
      const w = x(i + 1) - x(i);
      ctx.fillStyle = r ? heatColor(r.busy_useful_utilization) : HEAT_EMPTY;
      ctx.fillRect(x(i), y, w, cellH);
      if (stragglers[i] === rank) {
        // A framed block in the cell's middle half.
        const mw = Math.max(2, Math.floor(w / 2));
        const mh = Math.max(2, Math.floor(cellH / 2));
        const mx = x(i) + Math.floor((w - mw) / 2);
        const my = y + Math.floor((cellH - mh) / 2);
        ctx.fillStyle = '#fff';
        ctx.fillRect(mx - 1, my - 1, mw + 2, mh + 2);
        ctx.fillStyle = STRAGGLER_MARK;
        ctx.fillRect(mx, my, mw, mh);
      } else if (heldUp[i].has(rank)) {
        // A hollow frame of the same size: held up, not late by itself.
        const mw = Math.max(6, Math.floor(w / 2));
        const mh = Math.max(6, Math.floor(cellH / 2));
        const mx = x(i) + Math.floor((w - mw) / 2);
        const my = y + Math.floor((cellH - mh) / 2);
        ctx.fillStyle = '#fff';
        ctx.fillRect(mx - 1, my - 1, mw + 2, mh + 2);
        ctx.fillStyle = STRAGGLER_MARK;
        ctx.fillRect(mx, my, mw, mh);
        ctx.fillStyle = r ? heatColor(r.busy_useful_utilization) : HEAT_EMPTY;
        ctx.fillRect(mx + 2, my + 2, mw - 4, mh - 4);
      }
    }
  });
  ctx.fillStyle = '#667085';
  ctx.textBaseline = 'top';
  ctx.fillText(clock(windows[0].start_ns), left, ranks.length * cellH + 4);
  const end = clock(windows[n - 1].end_ns);
  ctx.fillText(end, width - ctx.measureText(end).width - 2, ranks.length * cellH + 4);
  // The cell under a point of the canvas (client coordinates), or null.
  const cellAt = (clientX, clientY) => {
    const c = canvas.getBoundingClientRect();
    const k = Math.floor((clientY - c.top) / cellH);
    const i = Math.floor(((clientX - c.left - left) * n) / plotW);
    return k < 0 || k >= ranks.length || i < 0 || i >= n ? null : { k, i };
  };
  // A click on a cell opens its window's timeline, the window's root and
  // the ranks it held up marked.
  canvas.onclick = (ev) => {
    const at = cellAt(ev.clientX, ev.clientY);
    if (!at) return;
    const w = windows[at.i];
    timelineOpening = openTimeline(report.job, w, ranks[at.k], 'click');
    timelineOpening.catch((err) => {
      $('timeline-note').textContent = 'cannot show it: ' + String(err.message || err);
    });
  };
  canvas.style.cursor = 'pointer';
  rankHeatGeometry = {
    // The client coordinates of the middle of the cell of `rank` in the
    // window starting at `startNs`, or null.
    cellCenter(rank, startNs) {
      const k = row.get(rank);
      const i = windows.findIndex((w) => String(w.start_ns) === String(startNs));
      if (k === undefined || i < 0) return null;
      const c = canvas.getBoundingClientRect();
      return { x: c.left + (x(i) + x(i + 1)) / 2, y: c.top + k * cellH + cellH / 2 };
    },
  };
  canvas.onmousemove = (ev) => {
    const at = cellAt(ev.clientX, ev.clientY);
    const k = at ? at.k : -1;
    const i = at ? at.i : -1;
    if (k < 0 || k >= ranks.length || i < 0 || i >= n) { canvas.title = ''; return; }
    const r = grid[k][i];
    canvas.title = `rank ${ranks[k]}${processOf(r)}, ${clock(windows[i].start_ns)}: ` +
      (r ? `${pct(r.busy_useful_utilization)} busy-useful, comm wait ` +
        duration(r.comm_wait_us) : 'no analysis') +
      (stragglers[i] === ranks[k] ? `; root straggler, caused ${duration(windows[i].stragglers[0].wait_caused_us)} of waits` : '') +
      (heldUp[i].has(ranks[k]) ? `; held up by rank ${stragglers[i]}` : '');
  };

  // The table: a row per rank, a cell per window (data-u: the figure as
  // the API gave it, "" for none; data-straggler on the marked cells).
  const head = document.createElement('tr');
  cell(head, 'rank');
  for (const w of windows) {
    cell(head, clock(w.start_ns));
    head.lastChild.dataset.start = String(w.start_ns);
  }
  $('rank-table').tHead.replaceChildren(head);
  const body = $('rank-table').tBodies[0];
  body.replaceChildren();
  ranks.forEach((rank, k) => {
    const tr = document.createElement('tr');
    tr.dataset.rank = String(rank);
    cell(tr, String(rank));
    // Its process (host, pid: Inspector logs name it) from its latest row.
    const latest = [...grid[k]].reverse().find((r) => r !== undefined);
    if (latest && processOf(latest)) tr.lastChild.title = processOf(latest).slice(1);
    for (let i = 0; i < n; ++i) {
      const r = grid[k][i];
      const marked = stragglers[i] === rank;
      const held = !marked && heldUp[i].has(rank);
      cell(tr, (r ? pct(r.busy_useful_utilization) : '-') + (marked ? '*' : '') + (held ? '+' : ''));
      tr.lastChild.dataset.u = r ? String(r.busy_useful_utilization) : '';
      if (marked) tr.lastChild.dataset.straggler = '1';
      if (held) tr.lastChild.dataset.heldUp = '1';
    }
    body.appendChild(tr);
  });
  const marked = stragglers.filter((s) => s !== null).length;
  $('rank-note').textContent = `${ranks.length} rank(s); a straggler in ${marked} of ${n} window(s)`;
  return { ranks: ranks.length, stragglerWindows: marked, plotBox: [left, 0, plotW, ranks.length * cellH] };
}

// The rank heat map's geometry (drawRankHeatmap), and the timeline being
// opened (a promise of its figures), for the status and the test hook.
let rankHeatGeometry = null;
let timelineOpening = null;

// Fetches the timeline of `job`'s window `w` (a report window) and draws
// it; `clickedRank` is the rank whose cell was clicked (null for a link).
// Resolves to the figures #status carries.
async function openTimeline(job, w, clickedRank, openedBy) {
  const view = $('timeline-view');
  view.hidden = false;
  $('timeline-note').textContent = 'loading…';
  const t = await api('api/v1/jobs/' + encodeURIComponent(job) +
    '/timeline?start_ns=' + encodeURIComponent(String(w.start_ns)));
  const drawnFigures = drawTimeline(t, clickedRank);
  return { ...drawnFigures, timelineOpenedBy: openedBy };
}

// The SVG of one window's timeline `t` (the API's reply): a row per rank
// (its segments from start_us on, one rect each, with the stored state and
// length as data-* attributes), the window's bounds as lines, the root's
// row outlined in red, the rows it held up dashed.
function drawTimeline(t, clickedRank) {
  const svgNs = 'http://www.w3.org/2000/svg';
  const el = (name, attrs, parent) => {
    const e = document.createElementNS(svgNs, name);
    for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, String(v));
    if (parent) parent.appendChild(e);
    return e;
  };
  const svg = $('timeline-svg');
  svg.replaceChildren();
  const lengthUs = (Number(t.end_ns) - Number(t.start_ns)) / 1e3;
  const rows = t.ranks.filter((r) => r.timeline && r.timeline.segments.length > 0);
  // The axis: the window, widened to every rank's segments (a rank's last
  // kernel may end past the window's end; a clock offset may start it
  // before).
  let from = 0;
  let to = lengthUs;
  for (const r of rows) {
    const end = r.timeline.start_us + r.timeline.segments.reduce((a, s) => a + s[1], 0);
    from = Math.min(from, r.timeline.start_us);
    to = Math.max(to, end);
  }
  const left = 150;
  const rowH = 18;
  const gap = 4;
  const top = 4;
  const axisH = 18;
  const width = Math.floor(svg.parentElement.clientWidth - 16);
  const plotW = width - left - 8;
  const height = top + t.ranks.length * (rowH + gap) + axisH;
  svg.setAttribute('width', width);
  svg.setAttribute('height', height);
  svg.setAttribute('viewBox', `0 0 ${width} ${height}`);
  const x = (us) => left + ((us - from) * plotW) / (to - from || 1);
  const heldUp = new Set(t.held_up);
  const present = new Set();
  let segments = 0;
  t.ranks.forEach((r, k) => {
    const y = top + k * (rowH + gap);
    const g = el('g', { class: 'tl-row', 'data-rank': r.rank }, svg);
    const isRoot = t.root === r.rank;
    const isHeld = !isRoot && heldUp.has(r.rank);
    if (isRoot) g.setAttribute('data-root', '1');
    if (isHeld) g.setAttribute('data-held-up', '1');
    const label = el('text', { x: 4, y: y + rowH / 2, 'dominant-baseline': 'middle',
      class: 'tl-label' + (isRoot ? ' root' : '') }, g);
    label.textContent = `rank ${r.rank}` + (isRoot ? ' · root' : isHeld ? ' · held up' : '') +
      (r.rank === clickedRank ? ' ◂' : '');
    if (!r.timeline || r.timeline.segments.length === 0) {
      const none = el('text', { x: left + 4, y: y + rowH / 2, 'dominant-baseline': 'middle',
        class: 'tl-none' }, g);
      none.textContent = t.timelines_left_out > 0 ? 'timeline trimmed to fit the windows topic'
        : 'no timeline stored for this window';
      return;
    }
    let at = r.timeline.start_us;
    for (const [state, us] of r.timeline.segments) {
      const name = t.states[state] || 'unknown';
      present.add(name);
      const rect = el('rect', {
        x: x(at).toFixed(3), y, width: Math.max(0, x(at + us) - x(at)).toFixed(3), height: rowH,
        fill: TIMELINE_COLORS[name] || TIMELINE_COLORS.unknown,
        'data-rank': r.rank, 'data-state': name, 'data-state-id': state,
        'data-start-us': at, 'data-us': us,
      }, g);
      const tip = el('title', {}, rect);
      tip.textContent = `rank ${r.rank}: ${name} ${duration(us)} from +${duration(at)}`;
      at += us;
      ++segments;
    }
    if (isRoot || isHeld) {
      el('rect', {
        x: x(r.timeline.start_us) - 1, y: y - 1, width: x(at) - x(r.timeline.start_us) + 2,
        height: rowH + 2, fill: 'none', stroke: ROOT_OUTLINE, 'stroke-width': 2,
        'stroke-dasharray': isHeld ? '6 3' : 'none', class: isRoot ? 'tl-root' : 'tl-held-up',
      }, g);
    }
  });
  // The window's bounds and the axis labels.
  const bottom = top + t.ranks.length * (rowH + gap);
  for (const us of [0, lengthUs]) {
    el('line', { x1: x(us), x2: x(us), y1: 0, y2: bottom, stroke: '#10131a',
      'stroke-dasharray': '2 2', class: 'tl-bound' }, svg);
  }
  const startLabel = el('text', { x: x(0), y: bottom + 12, class: 'tl-axis' }, svg);
  startLabel.textContent = clock(Number(t.start_ns));
  const endLabel = el('text', { x: x(lengthUs), y: bottom + 12, 'text-anchor': 'end',
    class: 'tl-axis' }, svg);
  endLabel.textContent = clock(Number(t.end_ns)) + ` (${duration(lengthUs)})`;

  const legend = $('timeline-legend');
  legend.replaceChildren();
  for (const name of t.states) {
    if (!present.has(name)) continue;
    const sw = document.createElement('span');
    sw.className = 'swatch';
    sw.style.background = TIMELINE_COLORS[name] || TIMELINE_COLORS.unknown;
    sw.dataset.state = name;
    legend.append(sw, name);
  }
  const root = document.createElement('span');
  root.className = 'root-outline';
  const held = document.createElement('span');
  held.className = 'held-outline';
  legend.append(root, 'root straggler', held, 'held up by it');
  const merged = rows.reduce((a, r) => a + r.timeline.merged_us, 0);
  // Binned ranks (too many phases for exact segments) show each bin's time
  // per state, not its moments: the note says at what resolution.
  const binUs = rows.reduce((a, r) => Math.max(a, r.timeline.bin_us || 0), 0);
  $('timeline-title').textContent = `Window ${clock(Number(t.start_ns))} per rank`;
  $('timeline-note').textContent =
    `${t.ranks.length} rank(s); ` +
    (binUs > 0 ? `in bins of ${duration(binUs)}: each bin's time per state, in the order they first occur in it`
      : 'exact to 1 us') +
    (merged > 0 ? `; ${duration(merged)} over all ranks shown as another state (the shortest phases merged)` : '') +
    (t.root === null ? '; no root straggler in this window' : `; root: rank ${t.root}`);
  const c = svg.getBoundingClientRect();
  return {
    timelineStartNs: String(t.start_ns),
    timelineRanks: rows.length,
    timelineSegments: segments,
    timelineRoot: t.root === null ? '' : t.root,
    rectTimeline: [c.left + scrollX + left, c.top + scrollY + top, plotW,
      t.ranks.length * (rowH + gap)].map(Math.round).join(','),
    rectTimelineSvg: box(svg),
    // In the SVG's own coordinates: the plot's left and width, and the us
    // (from the window start) at its two ends.
    timelineAxis: [left, plotW, from, to].join(','),
  };
}

// Test hook and deep link, once per page: #click=RANK,START_NS clicks that
// cell of the rank heat map (a click event at its middle, through the
// canvas's own handler); &window=START_NS opens that window's timeline.
let timelineHookDone = false;
function openRequestedTimeline(report) {
  if (timelineHookDone) return null;
  timelineHookDone = true;
  const m = /(?:^#|&)click=(-?\d+),(\d+)/.exec(location.hash);
  if (m && rankHeatGeometry) {
    const p = rankHeatGeometry.cellCenter(Number(m[1]), m[2]);
    if (!p) return Promise.reject(new Error('no heat map cell ' + m[1] + ',' + m[2]));
    timelineOpening = null;
    $('rank-heatmap').dispatchEvent(new MouseEvent('click', {
      clientX: p.x, clientY: p.y, bubbles: true, view: window,
    }));
    return timelineOpening || Promise.reject(new Error('the click opened no timeline'));
  }
  const start = params.get('window');
  if (start) {
    const w = report.windows.find((v) => String(v.start_ns) === start) || { start_ns: start };
    return openTimeline(report.job, w, null, 'link');
  }
  return null;
}

// The per-device view: lines for a few devices, a heat map for many.
function drawDevices(devices, mode) {
  const heat = devices.devices.length >= HEATMAP_FROM;
  $('device-lines').hidden = heat;
  $('device-heat').hidden = !heat;
  $('heat-legend').hidden = !heat;
  const lowest = devices.devices.reduce(
    (a, d) => (d.span_us > 0 && (a === null || d.utilization < a.utilization) ? d : a), null);
  $('device-note').textContent = `${devices.devices.length} device(s)` +
    (lowest ? `; least busy: GPU ${lowest.device} at ${pct(lowest.utilization)}` : '');
  const drawing = heat ? drawHeatmap(devices) : drawDeviceLines(devices, mode);
  return drawing.then((r) => ({ view: heat ? 'heatmap' : 'lines', ...r }));
}

async function showJob(job) {
  $('job-view').hidden = false;
  $('job-name').textContent = job;
  document.title = job + ' — bubblewatch';
  const last = $('last');
  last.value = params.get('last') || '1h';
  last.onchange = () => { params.set('last', last.value); location.search = params; };
  const yzoom = $('yzoom');
  yzoom.value = params.get('y') || 'auto';
  yzoom.onchange = () => { params.set('y', yzoom.value); location.search = params; };
  const path = 'api/v1/jobs/' + encodeURIComponent(job);
  const period = 'last=' + encodeURIComponent(last.value);
  const [report, devices] = await Promise.all([
    api(path + '/windows?bubbles=10&' + period),
    api(path + '/devices?' + period),
  ]);
  const cards = $('cards');
  cards.replaceChildren();
  for (const r of report.rolling) cards.appendChild(card('utilization, last ' + r.range, pct(r.utilization)));
  const s = report.summary;
  cards.appendChild(card('mean utilization', pct(s.utilization)));
  if (s.worst_utilization !== null) cards.appendChild(card('worst window', pct(s.worst_utilization)));
  cards.appendChild(card('bubble time', duration(s.bubble_us)));
  if (s.dominant_cause) cards.appendChild(card('dominant cause', s.dominant_cause));
  observedCards(cards, s, report.windows.length);
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
    nameCell(tr, b.blamed || '-', b.blamed || '');
    body.appendChild(tr);
  }
  if (report.windows.length === 0) {
    $('charts').hidden = true;
    $('rank-view').hidden = true;
    setStatus('rendered', `${job}: no windows in this period`, { windows: 0 });
    return;
  }
  $('charts').hidden = false;
  const [util, dev] = await Promise.all([
    drawChart(report, yzoom.value),
    drawDevices(devices, yzoom.value),
  ]);
  const rankHeat = drawRankHeatmap(report);
  const table = drawWindowTable(report);
  const l = layout();
  const u = $('util-chart').getBoundingClientRect();
  const data = {
    windows: report.windows.length, datasets: util.datasets, yMin: util.yMin,
    devices: devices.devices.length, deviceView: dev.view,
    observedWindows: s.observed_windows === undefined ? 0 : s.observed_windows,
    partialWindows: table.partial,
    scrollWidth: l.scrollWidth, viewWidth: l.viewWidth,
    rectUtil: box($('util-chart')),
    rectUtilPlot: [u.left + scrollX + util.plotBox[0], u.top + scrollY + util.plotBox[1],
      util.plotBox[2], util.plotBox[3]].map(Math.round).join(','),
  };
  if (dev.plotBox) {
    const c = $('device-heatmap').getBoundingClientRect();
    const [x, y, w, h] = dev.plotBox;
    data.rectHeat = [c.left + scrollX + x, c.top + scrollY + y, w, h].map(Math.round).join(',');
  } else {
    data.rectDevices = box($('device-chart'));
  }
  if (rankHeat) {
    const c = $('rank-heatmap').getBoundingClientRect();
    const [x, y, w, h] = rankHeat.plotBox;
    data.ranks = rankHeat.ranks;
    data.stragglerWindows = rankHeat.stragglerWindows;
    data.rectRankHeat = [c.left + scrollX + x, c.top + scrollY + y, w, h].map(Math.round).join(',');
  }
  const opening = openRequestedTimeline(report);
  if (opening) Object.assign(data, await opening);
  setStatus('rendered', `${job}: ${report.windows.length} windows`, data);
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
