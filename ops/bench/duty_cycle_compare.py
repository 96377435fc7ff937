"""The comparison and summary of ops/bench/duty_cycle_bench. Python standard library only.

  python3 duty_cycle_compare.py --bw build/bubblewatch --manifest DIR/manifest.json \
      --store STORE [--window-ns N] [--workers 2] [--stage NAME=SECONDS]...

The oracle: `bubblewatch analyze --window 10s --json` of every snapshot file (--workers at a
time). The stored windows: `bubblewatch query job J --store STORE --from T0 --to T1 --json` per
job over its period [T0, T1) = [start, start + duration), and `query jobs --json` for each
job's lifecycle and bad-input counts. Every window either side is matched by its start: per
window span, compute, bubble, largest bubble, culprit, device count and the eight causes must
be equal to the nanosecond (the JSON's microseconds are read as exact decimals), and the
stored `observed_us` must be the length of the window's intersection with the snapshots'
covered intervals (what `produce` sends as their observations). A window on one side only
differs too. Prints the summary (--stage lines are the earlier stages' wall times, in order)
and exits 1 if any window differs, 2 if a command failed."""
import argparse
import concurrent.futures
import decimal
import json
import subprocess
import sys
import time

CAUSES = ["host_sync", "launch_overhead", "allocator", "memcpy", "data_loading",
          "host_compute", "gpu_dependency", "unattributed"]
# (what, analyze's key, query's key): times in microseconds.
TIMES = [("span", "total_span_us", "span_us"), ("compute", "compute_time_us", "compute_us"),
         ("bubble", "bubble_time_us", "bubble_us"),
         ("largest_bubble", "largest_bubble_us", "largest_bubble_us")]


def ns(us):
    """Exact ns of a JSON microseconds value read as a Decimal."""
    v = decimal.Decimal(us) * 1000
    if v != v.to_integral_value():
        raise ValueError("%s us is not a whole number of ns" % us)
    return int(v)


def load(text):
    return json.loads(text, parse_float=decimal.Decimal)


def run(args):
    p = subprocess.run(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if p.returncode != 0:
        sys.stderr.write("duty_cycle_compare: %s: exit %d: %s\n"
                         % (" ".join(args), p.returncode, p.stderr.strip()[-2000:]))
        sys.exit(2)
    return p.stdout


def oracle_window(w):
    """analyze --window's window as {field: value}."""
    out = {f: ns(w[a]) for f, a, _ in TIMES}
    out["culprit"] = w["culprit_before_bubble"]
    out["devices"] = len(w["devices"])
    for c in CAUSES:
        out[c] = ns(w["attribution_us"][c])
    return out


def stored_window(w):
    """query job --json's window as {field: value}."""
    out = {f: ns(w[q]) for f, _, q in TIMES}
    culprit = w["culprit_before_bubble"]
    out["culprit"] = culprit.get("name") if isinstance(culprit, dict) else culprit
    out["devices"] = w["devices"]
    for c in CAUSES:
        out[c] = ns(w["attribution_us"][c])
    return out


def fmt_s(ns_value):
    return "%.3f s" % (ns_value / 1e9)


def fmt_h(ns_value):
    return "%.2f h" % (ns_value / 3.6e12)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bw", required=True)
    ap.add_argument("--manifest", required=True)
    ap.add_argument("--store", required=True)
    ap.add_argument("--window-ns", type=int, default=10_000_000_000)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--stage", action="append", default=[])
    ap.add_argument("--show", type=int, default=10, help="differences to list")
    a = ap.parse_args()
    with open(a.manifest) as f:
        m = json.load(f)
    window = "%dns" % a.window_ns
    t0, t1 = m["start_ns"], m["start_ns"] + m["duration_ns"]
    stages = [tuple(s.split("=", 1)) for s in a.stage]

    # The oracle: every snapshot through analyze.
    begin = time.monotonic()
    snaps = [(job["job"], s) for job in m["jobs"] for s in job["snapshots"]]

    def analyze(item):
        _, s = item
        return load(run([a.bw, "analyze", "--window", window, "--json", s["file"]]))

    with concurrent.futures.ThreadPoolExecutor(a.workers) as pool:
        reports = list(pool.map(analyze, snaps))
    stages.append(("analyze (oracle), %d files, %d at a time" % (len(snaps), a.workers),
                   "%.1f" % (time.monotonic() - begin)))

    # What the store holds.
    begin = time.monotonic()
    period = ["--from", "%d" % (t0 // 10**9), "--to", "%d" % (t1 // 10**9)]

    def query(job):
        return load(run([a.bw, "query", "job", job["job"], "--store", a.store, "--json"]
                        + period))

    with concurrent.futures.ThreadPoolExecutor(a.workers) as pool:
        stored = list(pool.map(query, m["jobs"]))
    jobs_info = {j["job"]: j for j in load(run([a.bw, "query", "jobs", "--store", a.store,
                                                "--json"]))["jobs"]}
    stages.append(("query (store), %d jobs" % len(m["jobs"]),
                   "%.1f" % (time.monotonic() - begin)))

    # Compare.
    want = {}        # (job, window start) -> (snapshot k, window), the oracle
    observed = {}    # (job, window start) -> expected observed ns
    shared = []      # windows two snapshots fall in: their oracle is not one file's
    for (job, s), r in zip(snaps, reports):
        for w in r.get("windows", []):
            start = ns(w["start_us"])
            if (job, start) in want:
                shared.append((job, start))
            want[(job, start)] = (s["k"], oracle_window(w))
        # The snapshot's observation, cut into the windows it touches.
        lo, hi = s["first_ns"], s["last_ns"]
        ws = lo - lo % a.window_ns
        while ws < hi:
            piece = min(hi, ws + a.window_ns) - max(lo, ws)
            if piece > 0:
                observed[(job, ws)] = observed.get((job, ws), 0) + piece
            ws += a.window_ns
    got = {}
    for job, q in zip(m["jobs"], stored):
        for w in q["windows"]:
            got[(job["job"], w["start_ns"])] = w
    diffs = []
    agree = 0
    for key in sorted(set(want) | set(got)):
        job, start = key
        if key not in got:
            diffs.append("%s window %d (snapshot %d): analyze has it, the store does not"
                         % (job, start, want[key][0]))
            continue
        if key not in want:
            diffs.append("%s window %d: stored (closed_by %s), but no snapshot's analyze has it"
                         % (job, start, got[key]["closed_by"]))
            continue
        k, o = want[key]
        s = stored_window(got[key])
        bad = ["%s analyze %s, stored %s" % (f, o[f], s[f]) for f in o if o[f] != s[f]]
        obs = got[key].get("observed_us")
        obs_ns = ns(obs) if obs is not None else None
        if obs_ns != observed.get(key):
            bad.append("observed: snapshot covers %s ns, stored %s" % (observed.get(key), obs_ns))
        if key in shared:
            bad.append("two snapshots in this window: no one file is its oracle")
        if bad:
            diffs.append("%s window %d (snapshot %d): %s" % (job, start, k, "; ".join(bad)))
        else:
            agree += 1

    # The summary.
    closed = {}
    obs_total = 0
    by_cause = dict.fromkeys(CAUSES, 0)
    span = compute = bubble = 0
    per_job_obs = []
    for job, q in zip(m["jobs"], stored):
        o = 0
        for w in q["windows"]:
            closed[w["closed_by"]] = closed.get(w["closed_by"], 0) + 1
            if w.get("observed_us") is not None:
                o += ns(w["observed_us"])
            sw = stored_window(w)
            span += sw["span"]
            compute += sw["compute"]
            bubble += sw["bubble"]
            for c in CAUSES:
                by_cause[c] += sw[c]
        per_job_obs.append(o)
        obs_total += o
    period_ns = t1 - t0
    jobs = len(m["jobs"])
    unobs_total = jobs * period_ns - obs_total
    print("duty-cycle fleet: %d jobs, a %s snapshot every %s over %s of event time "
          "(%d windows of %s)" % (jobs, fmt_s(m["snapshot_ns"]), fmt_s(m["period_ns"]),
                                 fmt_s(period_ns), period_ns // a.window_ns, fmt_s(a.window_ns)))
    print("  snapshots (files, one produce each)  %d, %d events" %
          (len(snaps), sum(s["events"] for _, s in snaps)))
    print("  windows: analyze %d, stored %d (closed by %s)" % (
        len(want), len(got),
        ", ".join("%s %d" % kv for kv in sorted(closed.items()))))
    print("  windows that agree exactly           %d" % agree)
    print("  windows that differ                  %d" % len(diffs))
    for d in diffs[:a.show]:
        print("    " + d)
    if len(diffs) > a.show:
        print("    ... and %d more" % (len(diffs) - a.show))
    stored_len = len(got) * a.window_ns
    want_obs = sum(v for (j, s), v in observed.items() if t0 <= s < t1)
    print("  observed time (stored observed_us)   %s = %.2f%% of the %d jobs' %s each "
          "(snapshots cover %s: %s)"
          % (fmt_s(obs_total), 100.0 * obs_total / (jobs * period_ns), jobs, fmt_s(period_ns),
             fmt_s(want_obs), "equal" if want_obs == obs_total else "DIFFERENT"))
    print("    per job                            %s .. %s observed, %s .. %s unobserved" %
          (fmt_s(min(per_job_obs)), fmt_s(max(per_job_obs)),
           fmt_s(period_ns - max(per_job_obs)), fmt_s(period_ns - min(per_job_obs))))
    print("  unobserved time (no span, no bubble) %s = %s, %.2f%% of the jobs' periods"
          % (fmt_s(unobs_total), fmt_h(unobs_total), 100.0 * unobs_total / (jobs * period_ns)))
    print("    of it inside the stored windows    %s of their %s (coverage %.1f%%)"
          % (fmt_s(stored_len - obs_total), fmt_s(stored_len),
             100.0 * obs_total / stored_len if stored_len else 0))
    print("  GPU span %s, compute %s, bubble %s (%.1f%% of span)" %
          (fmt_s(span), fmt_s(compute), fmt_s(bubble), 100.0 * bubble / span if span else 0))
    print("  GPU time wasted by cause (stored):")
    for c in sorted(CAUSES, key=lambda c: -by_cause[c]):
        if by_cause[c]:
            print("    %-16s %12s  %5.1f%%" % (c, fmt_s(by_cause[c]), 100.0 * by_cause[c] / bubble))
    states = {}
    cadences = []
    bad_input = 0
    for job in m["jobs"]:
        info = jobs_info.get(job["job"], {})
        states[info.get("state", "missing")] = states.get(info.get("state", "missing"), 0) + 1
        cadences.append(float(info.get("cadence_s", 0)))
        bad_input += sum(info.get(k, 0) for k in
                         ("batches_after_end", "overlapping_observations",
                          "observations_backwards"))
    print("  jobs at query time: %s; cadence learned %.3f .. %.3f s; bad input (batches after end, "
          "overlapping or backwards observations) %d"
          % (", ".join("%s %d" % kv for kv in sorted(states.items())),
             min(cadences), max(cadences), bad_input))
    print("  wall time:")
    for name, secs in stages:
        print("    %-44s %8s s" % (name, secs))
    sys.exit(1 if diffs else 0)


if __name__ == "__main__":
    main()
