#!/usr/bin/env python3
"""bubblewatch vs HTA vs the seed's reference: agreement, speed and memory. Run by ./run.

usage: compare.py --bw BIN --out DIR [--scale-mb MB] [--repeat N] [--no-diag]

For every trace (Kineto: tests/testdata/real/hta/*.json.gz and ../shared/traces/hta; seed
timelines: tests/testdata/timeline/*.json and cases/*.json; Nsight Systems:
tests/testdata/real/nsys/*.sqlite and ../shared/traces/nsys; duplicates by content skipped):
  - `bubblewatch analyze --json`;
  - hta_run.py (HTA temporal + idle time breakdown; Kineto and timeline only) and once more with
    --diag (HTA's own code on the whole trace with exact timestamps; not timed);
  - seed_reference.py (the seed's analyze_timeline_bubbles on the trace's main device).
Each timed run goes through timed_exec (timed_exec.c: vfork, exec, wait4: wall time, peak RSS,
CPU of the tool alone); a tool runs up to
--repeat times (fewer once it has used 10 s) and the fastest run counts.
Then a scale test: the largest Kineto trace with CUDA kernels concatenated with itself (shifted
in time) to --scale-mb/16, /4 and --scale-mb MB of JSON, every tool once per size; a tool is
skipped at a size where its peak RSS, projected linearly from the previous size, would exceed
85 % of MemAvailable.
Writes DIR/report.md and DIR/results.json, prints a summary; exit 1 if any tool failed.
With the default DIR (ops/bench/compare/out) and no --only it also writes the compact record
ops/bench/results/compare.json (committed; ops/bench/readme renders docs/comparison.md's tables
from it); --results PATH writes it elsewhere (or '' never). --report-only rewrites all three from
an existing DIR/results.json.
"""
import argparse
import datetime
import glob
import hashlib
import json
import math
import os
import re
import shutil
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
from bench_env import git_state, iso, machine, utc_now  # noqa: E402  (ops/bench/bench_env.py)
ROOT = os.path.abspath(os.path.join(HERE, "..", "..", ".."))
PY = sys.executable
HOST_SIDE = ("host_sync", "allocator", "data_loading", "host_compute", "launch_overhead")
TOL_US = 0.05  # |difference| below this is float/ns rounding, reported as equal


# ------------------------------------------------------------------------------ running tools

LOAD = []


TIMER = os.path.join(HERE, ".venv", "bin", "timed_exec")  # compare/run compiles it.


def timed_run(cmd, stdout_path, env=None):
    """Runs `cmd` under timed_exec (timed_exec.c): wall time from spawn to reaping, and the
    child's own rusage (peak RSS, user and system CPU). Not /usr/bin/time, whose own fork and
    exec would be counted in a 35 ms bubblewatch run; not a child of this process either,
    which would start with the harness's ~90 MB (Linux keeps that high-water mark across
    exec, so ru_maxrss would be the harness's)."""
    LOAD.append(os.getloadavg()[0])
    p = subprocess.run([TIMER, stdout_path, stdout_path + ".err"] + cmd,
                       capture_output=True, text=True, env=env)
    try:
        t = json.loads(p.stdout)
    except ValueError:
        raise SystemExit(f"compare: {TIMER} failed on {cmd[0]}: {p.stderr.strip()}")
    info = {"rc": t["rc"] if not t["signal"] else -t["signal"], "wall_s": t["wall_s"],
            "cmd": " ".join(cmd), "rss_kb": float(t["rss_kb"]), "user_s": t["user_s"],
            "sys_s": t["sys_s"]}
    if t["signal"]:
        info["signal"] = str(t["signal"])
    if info["rc"] != 0:
        info["stderr_tail"] = open(stdout_path + ".err", errors="replace").read()[-2000:]
    return info


def measure(cmd, stdout_path, repeat, budget_s=10.0, env=None):
    """Fastest of up to `repeat` runs (stops repeating after budget_s); RSS = max over runs."""
    runs = []
    spent = 0.0
    for _ in range(max(1, repeat)):
        r = timed_run(cmd, stdout_path, env)
        runs.append(r)
        spent += r["wall_s"]
        if r["rc"] != 0 or spent > budget_s:
            break
    best = dict(min(runs, key=lambda r: r["wall_s"]))
    best["runs"] = len(runs)
    best["walls_s"] = [round(r["wall_s"], 4) for r in runs]
    best["rss_kb"] = max((r["rss_kb"] or 0) for r in runs)
    if any(r["rc"] != 0 for r in runs):
        bad = next(r for r in runs if r["rc"] != 0)
        best.update({k: bad[k] for k in bad if k in ("rc", "stderr_tail", "signal")})
    return best


def gunzip_floor(path, repeat):
    """Seconds `gzip -dc` needs for the file (fastest of `repeat`): every tool pays this."""
    if not path.endswith(".gz"):
        return None
    best = None
    for _ in range(max(1, repeat)):
        t0 = time.perf_counter()
        subprocess.run(["gzip", "-dc", path], stdout=subprocess.DEVNULL, check=True)
        w = time.perf_counter() - t0
        best = w if best is None else min(best, w)
    return best


def load_json(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


# ------------------------------------------------------------------------------ traces

def sha(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for b in iter(lambda: f.read(1 << 20), b""):
            h.update(b)
    return h.hexdigest()


def discover():
    shared = os.path.join(ROOT, "..", "shared", "traces")
    groups = [
        ("kineto", sorted(glob.glob(os.path.join(ROOT, "tests/testdata/real/hta/*.json.gz")))
         + sorted(glob.glob(os.path.join(shared, "hta", "*.json.gz")))),
        ("timeline", sorted(glob.glob(os.path.join(ROOT, "tests/testdata/timeline/*.json")))
         + sorted(glob.glob(os.path.join(HERE, "cases", "*.json")))),
        ("nsys", sorted(glob.glob(os.path.join(ROOT, "tests/testdata/real/nsys/*.sqlite")))
         + sorted(glob.glob(os.path.join(shared, "nsys", "*.sqlite")))),
    ]
    seen = {}
    traces = []
    for kind, paths in groups:
        for p in paths:
            h = sha(p)
            if h in seen:
                continue
            seen[h] = p
            traces.append({"name": os.path.basename(p), "path": os.path.relpath(p, ROOT),
                           "kind": kind, "bytes": os.path.getsize(p), "sha256": h[:16]})
    return traces


def json_size(path):
    if path.endswith(".gz"):
        import gzip
        n = 0
        with gzip.open(path, "rb") as f:
            for b in iter(lambda: f.read(1 << 22), b""):
                n += len(b)
        return n
    return os.path.getsize(path)


# ------------------------------------------------------------------------------ per trace

def run_trace(t, args, workdir):
    path = os.path.join(ROOT, t["path"])
    stem = os.path.join(workdir, re.sub(r"[^A-Za-z0-9_.-]", "_", t["name"]))
    t["json_bytes"] = json_size(path) if t["kind"] != "nsys" else None
    rec = {"gunzip_s": gunzip_floor(path, args.repeat)}
    r = measure([args.bw, "analyze", "--json", "--top", "5", path], stem + ".bw.json", args.repeat)
    rec["bubblewatch"] = {"run": r, "result": load_json(stem + ".bw.json")}
    r = measure([PY, os.path.join(HERE, "seed_reference.py"), path], stem + ".seed.json",
                args.repeat)
    rec["seed"] = {"run": r, "result": load_json(stem + ".seed.json")}
    if t["kind"] in ("kineto", "timeline"):
        r = measure([PY, os.path.join(HERE, "hta_run.py"), path], stem + ".hta.json", args.repeat)
        rec["hta"] = {"run": r, "result": load_json(stem + ".hta.json")}
        if not args.no_diag:
            r = timed_run([PY, os.path.join(HERE, "hta_run.py"), "--diag", path],
                          stem + ".hta_diag.json")
            res = load_json(stem + ".hta_diag.json")
            rec["hta_diag"] = {"run": r, "result": res.get("diag") if res else None}
    t.update(rec)
    return t


def uncompressed_variant(traces, args, workdir):
    """The largest Kineto trace with CUDA kernels once more, gunzipped: every tool's cost without
    the decompression floor that a .json.gz puts under all three."""
    cands = [t for t in traces if t["kind"] == "kineto" and t["path"].endswith(".gz")
             and ((t.get("bubblewatch") or {}).get("result") or {}).get("input", {}).get("kernels", 0) > 0]
    if not cands:
        return None
    base = max(cands, key=lambda t: t["json_bytes"])
    import gzip
    import shutil
    out = os.path.join(workdir, base["name"][:-3])
    with gzip.open(os.path.join(ROOT, base["path"]), "rb") as src, open(out, "wb") as dst:
        shutil.copyfileobj(src, dst, 1 << 22)
    t = {"name": base["name"][:-3] + " (gunzipped)", "path": os.path.relpath(out, ROOT),
         "kind": "kineto", "bytes": os.path.getsize(out), "sha256": sha(out)[:16],
         "uncompressed_of": base["name"]}
    t0 = time.perf_counter()
    run_trace(t, args, workdir)
    analyze_trace(t)
    print(f"compare: {t['name']}: {time.perf_counter() - t0:.1f} s", file=sys.stderr, flush=True)
    return t


# ------------------------------------------------------------------------------ comparison

def fnum(x, nd=0):
    if x is None:
        return "–"
    if isinstance(x, str):
        return x
    if nd == 0 and abs(x - round(x)) < 5e-4:
        return f"{int(round(x)):,}"
    return f"{x:,.{max(nd, 3)}f}"


def pct(x):
    return "–" if x is None else f"{100 * x:.2f} %"


def short(name, n=48):
    if name is None:
        return "–"
    return name if len(name) <= n else name[: n - 1] + "…"


def one_rank(d):
    """HTA results are keyed by rank (str after JSON); our traces have one rank each."""
    if not d:
        return None
    return d[sorted(d.keys())[0]]


def our_device(bw, dev):
    if bw is None:
        return None
    for d in bw.get("devices", []):
        if dev is not None and str(d.get("device")) == str(dev):
            return d
    return None


def analyze_trace(t):
    """Fills t['rows'] (agreement table) and t['why'] (one line per difference)."""
    bw = (t.get("bubblewatch") or {}).get("result")
    seed = (t.get("seed") or {}).get("result")
    hta = (t.get("hta") or {}).get("result")
    diag = (t.get("hta_diag") or {}).get("result")
    why, flags = [], []
    rows = []
    if bw is None:
        t["rows"], t["why"], t["flags"] = rows, ["bubblewatch produced no result"], ["bw-failed"]
        return
    att = bw["attribution_us"]
    host_side = sum(att[c] for c in HOST_SIDE)
    seed_dev = (seed or {}).get("model", {}).get("device")
    ours_dev = our_device(bw, seed_dev) if seed else None
    n_dev = len(bw.get("devices", []))

    # --- HTA
    ht = one_rank((hta or {}).get("temporal"))
    hi = one_rank((hta or {}).get("idle_breakdown"))
    ex = one_rank((diag or {}).get("raw_exact")) if diag else None
    ext = (ex or {}).get("temporal")
    exi = (ex or {}).get("idle_breakdown")

    def hrow(label, ours, h, e, s, note=""):
        rows.append([label, ours, h, e, s, note])

    s_res = (seed or {}).get("result") or {}
    seed_on = bool(seed) and seed.get("kernels", 0) > 0
    hrow("GPU span (µs)", fnum(bw["total_span_us"]), fnum(ht and ht["span_us"]),
         fnum(ext and ext["span_us"]), fnum(s_res.get("total_span_us")) if seed_on else "–")
    busy_h = ht and ht["span_us"] - ht["idle_us"]
    busy_e = ext and ext["span_us"] - ext["idle_us"]
    hrow("GPU busy (µs)", fnum(bw["compute_time_us"]), fnum(busy_h), fnum(busy_e),
         fnum(s_res.get("compute_time_us")) if seed_on else "–",
         "HTA: span − idle (kernels, copies, syncs)" if t["kind"] != "nsys" else "")
    if t["kind"] != "nsys":
        hrow("HTA compute (µs)", "–", fnum(ht and ht["compute_us"]),
             fnum(ext and ext["compute_us"]), "–", "HTA: computation kernels only")
    hrow("idle / bubble (µs)", fnum(bw["bubble_time_us"]), fnum(ht and ht["idle_us"]),
         fnum(ext and ext["idle_us"]), fnum(s_res.get("bubble_time_us")) if seed_on else "–")
    hrow("utilization", pct(bw["utilization"]),
         (f"{100 - ht['idle_pctg']:.2f} % busy, {ht['compute_pctg']:.2f} % compute" if ht else "–"),
         (f"{100 - ext['idle_pctg']:.2f} % busy, {ext['compute_pctg']:.2f} % compute" if ext else "–"),
         pct(s_res["compute_time_us"] / s_res["total_span_us"]) if seed_on and s_res.get("total_span_us") else "–")
    hrow("largest bubble (µs)", fnum(bw["largest_bubble_us"]), "–", "–",
         fnum(s_res.get("largest_bubble_us")) if seed_on else "–")
    hrow("culprit before it", short(bw["culprit_before_bubble"]), "–", "–",
         short(s_res.get("culprit_before_bubble")) if seed_on else "–")
    hrow("host side ↔ host wait (µs)", fnum(host_side), fnum(hi and hi["host_wait_us"]),
         fnum(exi and exi["host_wait_us"]), "–",
         "ours: " + " + ".join(f"{c} {fnum(att[c])}" for c in HOST_SIDE if att[c]))
    hrow("gpu_dependency ↔ kernel wait (µs)", fnum(att["gpu_dependency"]),
         fnum(hi and hi["kernel_wait_us"]), fnum(exi and exi["kernel_wait_us"]), "–")
    hrow("– ↔ other (µs)", f"memcpy {fnum(att['memcpy'])}, unattributed {fnum(att['unattributed'])}",
         fnum(hi and hi["other_us"]), fnum(exi and exi["other_us"]), "–")
    if t["kind"] != "nsys":
        hrow("idle breakdown total (µs)", fnum(bw["bubble_time_us"]), fnum(hi and hi["total_us"]),
             fnum(exi and exi["total_us"]), "–", "HTA: Σ over streams")
    if n_dev > 1 and seed_on:
        rows.append([f"device {seed_dev} only: span / busy / bubble (µs)",
                     " / ".join(fnum(ours_dev[k]) for k in ("total_span_us", "compute_time_us", "bubble_time_us")) if ours_dev else "–",
                     "–", "–",
                     " / ".join(fnum(s_res[k]) for k in ("total_span_us", "compute_time_us", "bubble_time_us")), "seed: main device"])

    # --- explanations: HTA
    inp = bw.get("input", {})
    if hta is not None and inp.get("kernels", 0) == 0 and ht:
        dflt = one_rank(diag["default"]) if diag else None
        cats = ", ".join(f"{k} {v:,}" for k, v in (dflt or {}).get("events_on_stream_by_cat", {}).items())
        skipped = ", ".join(f"{k} {v:,}" for k, v in inp.get("skipped", {}).items() if "mtia" in k)
        why.append(f"bubblewatch reads CUDA activity only: this trace has no CUDA kernels "
                   f"(skipped: {skipped or 'see input.skipped'}); HTA takes every event with a "
                   f"stream as GPU work ({cats}) and reports span {fnum(ht['span_us'])} µs, idle "
                   f"{fnum(ht['idle_us'])} µs. Not a bug: MTIA is outside the product's inputs "
                   f"(docs/semantics.md#inputs: kernels are CUDA `kernel` activities).")
    elif diag and ht and ex:
        dflt = one_rank(diag["default"])
        rr = one_rank(diag.get("raw_rounded")) or dflt
        k_only = ex["kernels_only"]
        d_span = k_only["span_us"] - bw["total_span_us"]
        d_idle = k_only["idle_us"] - bw["bubble_time_us"]
        ok = abs(d_span) <= TOL_US and abs(d_idle) <= TOL_US
        why.append(("Same arithmetic: " if ok else "**MISMATCH** ") +
                   f"HTA's own interval merge (`merge_kernel_intervals`) over the trace's "
                   f"{k_only['events']:,} kernel events, whole trace, exact timestamps, gives span "
                   f"{fnum(k_only['span_us'])} µs and idle {fnum(k_only['idle_us'])} µs "
                   f"(ours {fnum(bw['total_span_us'])} / {fnum(bw['bubble_time_us'])}; "
                   f"Δ {d_span:+.3f} / {d_idle:+.3f} µs). The differences below come from what "
                   f"HTA counts, not from the merge.")
        if not ok:
            flags.append("hta-kernel-merge-mismatch")
        extra = {k: v for k, v in ex["idle_removed_by_cat_us"].items() if abs(v) > TOL_US}
        d_busy = ex["all_stream_events"]["idle_us"] - k_only["idle_us"]
        if extra:
            parts = ", ".join(
                f"{k} {('−' if v > 0 else '+')}{fnum(abs(v))} µs" for k, v in extra.items())
            why.append(f"HTA's temporal breakdown counts every event with a stream as busy "
                       f"(`get_temporal_breakdown`: `trace_df.stream.ne(-1)`), not only kernels: "
                       f"idle {('−' if d_busy < 0 else '+')}{fnum(abs(d_busy))} µs in all "
                       f"(by category, each alone: {parts})"
                       + ("; the cuda_sync events (Stream/Context Sync, Stream Wait Event) also "
                          "stretch its span" if "cuda_sync" in extra else "")
                       + ". Ours: copies are not compute; their time inside a gap is the "
                       f"`memcpy` cause ({fnum(att['memcpy'])} µs).")
        d_round = rr["all_stream_events"]["idle_us"] - ex["all_stream_events"]["idle_us"]
        if abs(d_round) > TOL_US:
            why.append(f"HTA rounds ns-precision timestamps inward to whole µs "
                       f"(`round_down_time_stamps`: ts = ceil(ts), end = floor(ts + dur)), so "
                       f"every event loses up to 2 µs: idle {d_round:+,.3f} µs. Ours keeps ns.")
        if diag.get("profiler_step_filter_applied"):
            kd = dflt["kernels_only"]["events"]
            why.append(f"HTA by default drops the last ProfilerStep and every GPU event not "
                       f"launched by a CPU op before it (`Trace._filter_irrelevant_gpu_kernels`, "
                       f"include_last_profiler_step=False; the trace has "
                       f"{', '.join(diag['profiler_steps'])}): it analyzed {kd:,} of "
                       f"{k_only['events']:,} kernels, span {fnum(ht['span_us'])} µs of "
                       f"{fnum(rr['all_stream_events']['span_us'])}; idle "
                       f"{ht['idle_us'] - rr['all_stream_events']['idle_us']:+,.0f} µs.")
        if ext and ext["compute_us"] < busy_e - TOL_US:
            why.append(f"HTA's compute time counts only kernels it classes as computation "
                       f"(`get_kernel_type`: not `^nccl.*Kernel`, not Memcpy/Memset, not `.*Sync`); "
                       f"the rest is non-compute ({fnum(ext['non_compute_us'])} µs of "
                       f"{fnum(busy_e)} busy on the whole trace). Ours: every kernel is compute, "
                       f"copies are not.")
        if exi:
            n_str = len(exi.get("streams", {}))
            why.append(f"HTA's idle time breakdown sums gaps per stream "
                       f"(`_analyze_idle_time_for_stream`), so a stream waiting while another "
                       f"runs is idle too, and it treats memcpy/memset as kernels of their "
                       f"stream: Σ over {n_str} stream(s) {fnum(exi['total_us'])} µs vs "
                       f"{fnum(ex['all_stream_events']['idle_us'])} µs of device idle (HTA) and "
                       f"our {fnum(bw['bubble_time_us'])} µs bubble.")
            nolaunch = inp.get("kernels", 0) - inp.get("kernels_with_launch", 0)
            why.append(f"HTA host wait = the kernel's runtime call began after the previous "
                       f"event on the same stream ended (`ts_runtime > prev_end_ts`)"
                       + (f"; {nolaunch:,} kernels have no runtime event, so their gaps can never "
                          f"be host wait" if nolaunch > 0 and t["kind"] == "kineto" else "")
                       + (" — the seed's model has no correlation, so nothing here can be host wait"
                          if t["kind"] == "timeline" else "")
                       + f". Ours splits each device gap: copies → memcpy, then the next kernel's "
                       f"launch decides. Host wait {fnum(exi['host_wait_us'])} µs (whole trace) vs "
                       f"our host-side causes {fnum(host_side)} µs.")
            kw_neg = any((s.get("kernel_wait") or 0) < 0 for s in exi.get("streams", {}).values())
            why.append(f"HTA calls a queued gap 'kernel wait' only when shorter than "
                       f"consecutive_kernel_delay = 30 (compared in the trace's µs although the "
                       f"docstring says ns), longer ones 'other'; ours books every gap whose next "
                       f"kernel was launched before it began as gpu_dependency, whatever its "
                       f"length: kernel wait + other {fnum(exi['kernel_wait_us'] + exi['other_us'])}"
                       f" µs vs our gpu_dependency {fnum(att['gpu_dependency'])} µs"
                       + ("; overlapping events on one stream give negative gaps, which HTA "
                          "adds to kernel wait" if kw_neg else "") + ".")
    # --- explanations: seed
    if seed_on:
        ref = ours_dev or bw
        diffs = {k: s_res[k] - ref[k] for k in
                 ("total_span_us", "compute_time_us", "bubble_time_us", "largest_bubble_us")}
        worst = max(abs(v) for v in diffs.values())
        if worst <= TOL_US:
            mag = max(abs(v) for v in (seed.get("check") or {}).values()
                      if isinstance(v, (int, float))) if seed.get("check") else 0
            why.append(f"Seed reference: span, compute, bubble and largest bubble equal ours "
                       f"(max |Δ| {worst:.4f} µs" +
                       (f"; the reference adds float µs at timestamps ~{mag:.1e} µs, ours integer ns"
                        if worst > 0 else "") + ")" +
                       (f"; it has no devices, so it got device {seed_dev}'s kernels only and is "
                        f"compared with our device {seed_dev}" if n_dev > 1 else "") + ".")
        else:
            flags.append("seed-mismatch")
            why.append("**MISMATCH** seed reference vs ours: " + ", ".join(
                f"{k} {v:+.3f} µs" for k, v in diffs.items()))
        chk = seed.get("check") or {}
        if s_res.get("culprit_before_bubble") != ref.get("culprit_before_bubble"):
            if chk.get("kernel_ending_at_gap_start") == ref.get("culprit_before_bubble"):
                why.append(f"Culprit: the reference names the last kernel in start order before "
                           f"the gap (`last_kernel_name`), {short(s_res['culprit_before_bubble'], 40)} "
                           f"[{fnum(chk['last_started_start_us'])}, {fnum(chk['last_started_end_us'])}]; "
                           f"ours names the kernel whose end is the gap's start "
                           f"(docs/semantics.md#largest-bubble-and-culprit), "
                           f"{short(ref['culprit_before_bubble'], 40)} ending at "
                           f"{fnum(chk['gap_start_us'])}.")
            else:
                flags.append("culprit-unexplained")
                why.append(f"**Culprit differs, unexplained**: reference "
                           f"{s_res['culprit_before_bubble']!r}, ours "
                           f"{ref.get('culprit_before_bubble')!r}, kernel ending at gap start "
                           f"{chk.get('kernel_ending_at_gap_start')!r}")
    elif seed and seed.get("kernels", 0) == 0:
        why.append("Seed reference: no CUDA `kernel` events, so the reference returns zeros "
                   "(its model has kernels only).")
    if t["kind"] == "timeline" and hta is not None:
        why.append("For HTA the seed timeline was converted to a Kineto trace (kernels on "
                   "pid 0 / tid = stream, CPU events as cpu_op, no correlation ids).")
    t["rows"], t["why"], t["flags"] = rows, why, flags


# ------------------------------------------------------------------------------ scale test

def mem_available_kb():
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemAvailable:"):
                return int(line.split()[1])
    return None


def scale_test(traces, args, workdir):
    cands = [t for t in traces if t["kind"] == "kineto"
             and ((t.get("bubblewatch") or {}).get("result") or {}).get("input", {}).get("kernels", 0) > 0]
    if not cands or args.scale_mb <= 0:
        return None
    base = max(cands, key=lambda t: t["json_bytes"])
    base_mb = math.ceil(base["json_bytes"] / 1048576)  # below one copy, sizes collapse into one
    sizes = sorted({max(base_mb, int(round(args.scale_mb / k))) for k in (16, 4, 1)})
    sdir = os.path.join(workdir, "scale")
    os.makedirs(sdir, exist_ok=True)
    limit_kb = 0.85 * mem_available_kb()
    res = {"base": base["name"], "base_json_bytes": base["json_bytes"], "sizes": [],
           "mem_limit_kb": limit_kb}
    prev = {}
    for mb in sizes:
        out = os.path.join(sdir, f"{base['name'].split('.')[0]}-{mb}MB.json.gz")
        meta_p = out + ".meta.json"
        meta = load_json(meta_p)
        if meta is None or not os.path.exists(out):
            t0 = time.perf_counter()
            p = subprocess.run([PY, os.path.join(HERE, "scale_trace.py"),
                                os.path.join(ROOT, base["path"]), out, str(mb)],
                               capture_output=True, text=True, check=True)
            meta = json.loads(p.stdout)
            meta["generate_s"] = time.perf_counter() - t0
            with open(meta_p, "w") as f:
                json.dump(meta, f)
        print(f"compare: scale {mb} MB: {meta['events']:,} events, {meta['copies']} copies",
              file=sys.stderr, flush=True)
        # gzip -dc of the file alone: the floor under every tool's run on it.
        entry = {"target_mb": mb, **meta, "tools": {}, "gunzip_s": gunzip_floor(out, 1)}
        tools = [("bubblewatch", [args.bw, "analyze", "--json", "--top", "5", out]),
                 ("seed", [PY, os.path.join(HERE, "seed_reference.py"), out]),
                 ("hta", [PY, os.path.join(HERE, "hta_run.py"), out])]
        for name, cmd in tools:
            if name == "hta" and meta["json_bytes"] > args.hta_max_mb * 1048576 * 1.05:
                entry["tools"][name] = {"skipped": f"above --hta-max-mb {args.hta_max_mb:g}"}
                continue
            if name in prev:
                pmb, prss = prev[name]
                proj = prss * meta["json_bytes"] / pmb
                if proj > limit_kb:
                    entry["tools"][name] = {"skipped": f"projected peak RSS {proj / 1048576:.1f} GiB "
                                                       f"> {limit_kb / 1048576:.1f} GiB available"}
                    continue
            stem = os.path.join(sdir, f"{mb}MB.{name}")
            r = timed_run(cmd, stem + ".json")
            res_j = load_json(stem + ".json")
            summary = None
            if res_j and name == "bubblewatch":
                summary = {k: res_j[k] for k in ("total_span_us", "compute_time_us", "bubble_time_us",
                                                 "utilization", "largest_bubble_us")}
                summary["kernels"] = res_j["input"]["kernels"]
            elif res_j and name == "seed":
                summary = dict(res_j["result"], kernels=res_j["kernels"], timing_s=res_j["timing_s"])
            elif res_j and name == "hta":
                summary = {"temporal": one_rank(res_j["temporal"]), "timing_s": res_j["timing_s"],
                           "idle_breakdown": {k: v for k, v in (one_rank(res_j["idle_breakdown"]) or {}).items()
                                              if k != "streams"}}
            entry["tools"][name] = {"run": r, "summary": summary}
            print(f"compare:   {name:12s} {r['wall_s']:8.2f} s  {(r['rss_kb'] or 0) / 1024:9.1f} MiB"
                  f"  rc={r['rc']}", file=sys.stderr, flush=True)
            if r["rc"] == 0:
                prev[name] = (meta["json_bytes"], r["rss_kb"])
        res["sizes"].append(entry)
    return res


# ------------------------------------------------------------------------------ report

def cpu(r):
    if not r or r.get("user_s") is None:
        return None
    return r["user_s"] + (r.get("sys_s") or 0)


def ratio(a, b):
    return None if not a or not b else a / b


def fx(x, nd=1):
    return "–" if x is None else f"{x:,.{nd}f}×"


def speed_rows(traces):
    rows = []
    for t in traces:
        bw = (t.get("bubblewatch") or {}).get("run") or {}
        hta = (t.get("hta") or {}).get("run") or {}
        seed = (t.get("seed") or {}).get("run") or {}
        hres = (t.get("hta") or {}).get("result") or {}
        rows.append({
            "trace": t["name"], "kind": t["kind"], "mb": (t.get("json_bytes") or t["bytes"]) / 1048576,
            "gunzip_s": t.get("gunzip_s"),
            "bw_s": bw.get("wall_s"), "bw_mib": (bw.get("rss_kb") or 0) / 1024 or None,
            "hta_s": hta.get("wall_s"), "hta_mib": (hta.get("rss_kb") or 0) / 1024 or None,
            "hta_analysis_s": (hres.get("timing_s") or {}).get("analysis_total"),
            "seed_s": seed.get("wall_s"), "seed_mib": (seed.get("rss_kb") or 0) / 1024 or None,
            # The seed's own split: loading and converting the JSON vs its function.
            "seed_function_s": (((t.get("seed") or {}).get("result") or {}).get("timing_s")
                                or {}).get("analyze_timeline_bubbles"),
            "hta_x": ratio(hta.get("wall_s"), bw.get("wall_s")),
            "seed_x": ratio(seed.get("wall_s"), bw.get("wall_s")),
            "mem": ratio(bw.get("rss_kb"), hta.get("rss_kb")),
            "bw_cpu": cpu(bw), "hta_cpu": cpu(hta), "seed_cpu": cpu(seed),
            "hta_cpu_x": ratio(cpu(hta), cpu(bw)), "seed_cpu_x": ratio(cpu(seed), cpu(bw)),
        })
    return rows


def seed_bubble_cell(bw, s):
    if not s.get("kernels"):
        return "–"
    cell = fnum(s["result"]["bubble_time_us"])
    if len(bw.get("devices", [])) > 1:
        cell += f" (device {s['model']['device']}; ours there {fnum((our_device(bw, s['model']['device']) or {}).get('bubble_time_us'))})"
    return cell


def busy_pct(ht, nd=2):
    return "–" if not ht else f"{100 - ht['idle_pctg']:.{nd}f} %"


def f2(x, nd=2):
    return "–" if x is None else f"{x:,.{nd}f}"


def write_report(res, path):
    L = []
    m = res["machine"]
    L.append("# bubblewatch vs HTA vs the seed's reference\n")
    L.append(f"Generated by `ops/bench/compare/run` on {res['date']} — {m.get('cores') or m.get('cpus')} CPU(s), "
             f"{m['mem_gib']:.0f} GiB RAM, {m['os']}; HolisticTraceAnalysis {res['hta_version']}, "
             f"pandas {res['pandas_version']}, Python {m['python']}; bubblewatch `{res['bubblewatch']}`. "
             f"Times are wall-clock seconds of the whole process (fastest of up to "
             f"{res['repeat']} runs), memory is peak RSS (the tool's own rusage, `timed_exec.c`). "
             f"1-minute load average before each "
             f"timed run {res['load']['min']:.2f}–{res['load']['max']:.2f} "
             f"(mean {res['load']['mean']:.2f}).\n")
    L.append("Columns: **bubblewatch** = `analyze --json`; **HTA** = what a user gets "
             "(`TraceAnalysis(trace_dir)` defaults, `get_temporal_breakdown`, "
             "`get_idle_time_breakdown` over all streams); **HTA whole/exact** = HTA's same two "
             "functions on the whole trace (no ProfilerStep filter) with "
             "`HTA_DISABLE_NS_ROUNDING=1`, to separate what HTA counts from where it looks; "
             "**seed** = the seed's `analyze_timeline_bubbles` (ops/bench/compare/seed_reference.py) "
             "on the trace's main device.\n")
    # summary
    L.append("## Agreement at a glance\n")
    L.append("| trace | kind | ours: bubble µs (util) | HTA idle µs (busy %) | seed bubble µs | seed = ours | host side vs HTA host wait | gpu_dep vs HTA kernel wait+other | flags |")
    L.append("|---|---|---|---|---|---|---|---|---|")
    for t in res["traces"]:
        bw = (t.get("bubblewatch") or {}).get("result")
        if not bw:
            L.append(f"| {t['name']} | {t['kind']} | FAILED | | | | | | |")
            continue
        ht = one_rank(((t.get("hta") or {}).get("result") or {}).get("temporal"))
        hi = one_rank(((t.get("hta") or {}).get("result") or {}).get("idle_breakdown"))
        s = (t.get("seed") or {}).get("result") or {}
        sr = s.get("result") or {}
        att = bw["attribution_us"]
        seed_eq = "–"
        if s.get("kernels"):
            seed_eq = "yes" if "seed-mismatch" not in t["flags"] else "**no**"
            ref = our_device(bw, s["model"]["device"]) or bw
            if sr.get("culprit_before_bubble") != ref.get("culprit_before_bubble"):
                seed_eq += " (culprit differs)"
        L.append(f"| {t['name']} | {t['kind']} | {fnum(bw['bubble_time_us'])} ({pct(bw['utilization'])}) | "
                 f"{fnum(ht and ht['idle_us'])} ({busy_pct(ht)}) | "
                 f"{seed_bubble_cell(bw, s)} | {seed_eq} | "
                 f"{fnum(sum(att[c] for c in HOST_SIDE))} vs {fnum(hi and hi['host_wait_us'])} | "
                 f"{fnum(att['gpu_dependency'])} vs {fnum(hi and hi['kernel_wait_us'] + hi['other_us'])} | "
                 f"{', '.join(t['flags']) or '–'} |")
    L.append("")
    # per trace
    L.append("## Per trace\n")
    for t in res["traces"]:
        L.append(f"### {t['name']} ({t['kind']}, {t['bytes'] / 1048576:.2f} MB on disk"
                 + (f", {t['json_bytes'] / 1048576:.1f} MB JSON" if t.get("json_bytes") else "") + ")\n")
        if t["kind"] == "nsys":
            L.append("HTA does not read Nsight Systems exports; bubblewatch and the seed reference "
                     "(kernels of the main device from the SQLite KERNEL table) only.\n")
        L.append("| quantity | bubblewatch | HTA | HTA whole/exact | seed | note |")
        L.append("|---|---|---|---|---|---|")
        for r in t.get("rows", []):
            L.append("| " + " | ".join(str(c).replace("|", "\\|") for c in r) + " |")
        L.append("")
        for w in t.get("why", []):
            L.append(f"- {w}")
        L.append("")
    # speed
    L.append("## Speed and memory per trace\n")
    L.append("| trace | MB JSON (nsys: file) | gunzip s | bubblewatch s | MiB | HTA s (analysis s) | MiB | seed s | MiB | HTA ÷ bw time (CPU) | seed ÷ bw time (CPU) | bw ÷ HTA memory |")
    L.append("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in res["speed"]:
        L.append(f"| {r['trace']} | {r['mb']:.1f} | {f2(r['gunzip_s'], 3)} | {f2(r['bw_s'], 3)} | {f2(r['bw_mib'], 1)} | "
                 f"{f2(r['hta_s'])} ({f2(r['hta_analysis_s'])}) | {f2(r['hta_mib'], 1)} | {f2(r['seed_s'])} | "
                 f"{f2(r['seed_mib'], 1)} | {fx(r['hta_x'])} ({fx(r['hta_cpu_x'])}) | "
                 f"{fx(r['seed_x'])} ({fx(r['seed_cpu_x'])}) | {f2(r['mem'], 3)} |")
    L.append("\n`gunzip s` is `gzip -dc` alone, a floor every tool pays on a .json.gz. "
             "HTA's process time includes importing pandas/HTA (about 1 s); the figure in "
             "parentheses is HTA's own load + two analyses. The seed's time includes reading the "
             "JSON with Python's `json`; the function itself is a small part (results.json: "
             "seed.result.timing_s).\n")
    sc = res.get("scale")
    if sc:
        L.append(f"## Scale test: {sc['base']} concatenated with itself\n")
        L.append(f"Each cell: wall s (CPU s) / peak MiB; one run per tool and size. Sizes: "
                 f"--scale-mb {res['scale_mb']:g} / 16, / 4 and itself; HTA up to "
                 f"--hta-max-mb {res.get('hta_max_mb', res['scale_mb']):g}.\n")
        L.append("| JSON MB | events | copies | bubblewatch | HTA | seed | HTA ÷ bw time | seed ÷ bw time | bw ÷ HTA memory |")
        L.append("|---|---|---|---|---|---|---|---|---|")
        for e in sc["sizes"]:
            def cell(n):
                x = e["tools"].get(n) or {}
                if "skipped" in x:
                    return "skipped: " + x["skipped"]
                r = x.get("run") or {}
                if r.get("rc"):
                    return f"FAILED rc={r['rc']}"
                return (f"{f2(r.get('wall_s'))} ({f2(cpu(r))}) / "
                        f"{f2((r.get('rss_kb') or 0) / 1024, 0)}")

            def run(n):
                x = e["tools"].get(n) or {}
                r = x.get("run") or {}
                return r if r and not r.get("rc") else {}
            b, h, s = run("bubblewatch"), run("hta"), run("seed")
            L.append(f"| {e['json_bytes'] / 1048576:,.0f} | {e['events']:,} | {e['copies']} | {cell('bubblewatch')} | "
                     f"{cell('hta')} | {cell('seed')} | {fx(ratio(h.get('wall_s'), b.get('wall_s')))} | "
                     f"{fx(ratio(s.get('wall_s'), b.get('wall_s')))} | "
                     f"{f2(ratio(b.get('rss_kb'), h.get('rss_kb')), 3)} |")
        L.append("")
    tg = res.get("targets")
    if tg:
        L.append("## Targets\n")
        L.append("| on | HTA ÷ bubblewatch, wall (CPU) time (target ≥ 50×) | seed ÷ bubblewatch, wall (CPU) time (≥ 100×) | bubblewatch ÷ HTA peak memory (≤ 0.1) |")
        L.append("|---|---|---|---|")
        for k in tg:
            L.append(f"| {k['on']} | {fx(k['hta_x'])} ({fx(k.get('hta_cpu_x'))}) {'met' if k['hta_ok'] else '**not met**'} | "
                     f"{fx(k['seed_x'])} ({fx(k.get('seed_cpu_x'))}) {'met' if k['seed_ok'] else '**not met**'} | "
                     f"{f2(k['mem'], 3)} {'met' if k['mem_ok'] else '**not met**'} |")
        L.append("\nMet/not met is judged on wall time; CPU time (user + sys) is shown because the "
                 "machine was shared; HTA and the seed are single-threaded, bubblewatch gunzips on a second thread.\n")
        L.append("")
    with open(path, "w") as f:
        f.write("\n".join(L))


def targets(res):
    out = []
    # The largest trace of all, whatever it holds (the comparison's "largest trace"); it may have no
    # CUDA kernels (mtia_rank_0): bubblewatch then reads and classifies every event, skips
    # them all, and the seed reference has nothing to analyze but still loads the JSON.
    every = [r for r in res["speed"] if r["kind"] == "kineto" and r["hta_x"]
             and not r["trace"].endswith("(gunzipped)")]
    if every:
        r = max(every, key=lambda r: r["mb"])
        t = next(t for t in res["traces"] if t["name"] == r["trace"])
        kernels = (((t.get("bubblewatch") or {}).get("result") or {}).get("input") or {}).get(
            "kernels", 0)
        out.append({"on": f"{r['trace']} ({r['mb']:.0f} MB JSON, the largest trace"
                          + ("" if kernels else "; no CUDA kernels") + ")",
                    "hta_x": r["hta_x"], "seed_x": r["seed_x"], "mem": r["mem"],
                    "hta_cpu_x": r["hta_cpu_x"], "seed_cpu_x": r["seed_cpu_x"]})
    real = [r for r in res["speed"] if r["kind"] == "kineto" and r["hta_x"] and
            ((next(t for t in res["traces"] if t["name"] == r["trace"]).get("bubblewatch") or {})
             .get("result") or {}).get("input", {}).get("kernels", 0) > 0]
    gz = [r for r in real if r["trace"].endswith(".gz")]
    if gz and max(gz, key=lambda r: r["mb"])["trace"] not in (k["on"].split(" ")[0] for k in out):
        r = max(gz, key=lambda r: r["mb"])
        out.append({"on": f"{r['trace']} ({r['mb']:.0f} MB JSON, largest real CUDA trace)",
                    "hta_x": r["hta_x"], "seed_x": r["seed_x"], "mem": r["mem"],
                    "hta_cpu_x": r["hta_cpu_x"], "seed_cpu_x": r["seed_cpu_x"]})
    for r in real:
        if r["trace"].endswith("(gunzipped)"):
            out.append({"on": f"{r['trace']} (the same JSON uncompressed: no gunzip floor)",
                        "hta_x": r["hta_x"], "seed_x": r["seed_x"], "mem": r["mem"],
                        "hta_cpu_x": r["hta_cpu_x"], "seed_cpu_x": r["seed_cpu_x"]})
    sc = res.get("scale")
    if sc:
        for e in reversed(sc["sizes"]):
            tl = e["tools"]
            ok = all((tl.get(n) or {}).get("run", {}).get("rc") == 0 for n in ("bubblewatch", "hta", "seed"))
            if ok:
                b, h, s = (tl[n]["run"] for n in ("bubblewatch", "hta", "seed"))
                seed_summary = (tl["seed"].get("summary") or {}).get("timing_s") or {}
                out.append({"on": f"scale test, {e['json_bytes'] / 1048576:,.0f} MB JSON (largest size all three ran)",
                            "hta_x": h["wall_s"] / b["wall_s"], "seed_x": s["wall_s"] / b["wall_s"],
                            "mem": b["rss_kb"] / h["rss_kb"],
                            "hta_cpu_x": ratio(cpu(h), cpu(b)), "seed_cpu_x": ratio(cpu(s), cpu(b)),
                            "seed_s": s["wall_s"], "bw_s": b["wall_s"],
                            "seed_function_s": seed_summary.get("analyze_timeline_bubbles"),
                            "gunzip_s": e.get("gunzip_s")})
                break
    # What 100x of the seed would ask of bubblewatch, beside the floors it cannot go under: its
    # process start (its whole run on the smallest trace) and gzip -dc of the file.
    smallest = min((r for r in res["speed"] if r.get("bw_s")), key=lambda r: r["mb"], default=None)
    by_name = {r["trace"]: r for r in res["speed"]}
    for k in out:
        r = by_name.get(k["on"].split(" (")[0])
        if r:
            k.update({"seed_s": r.get("seed_s"), "seed_function_s": r.get("seed_function_s"),
                      "bw_s": r.get("bw_s"), "gunzip_s": r.get("gunzip_s")})
        k["start_s"] = smallest and smallest["bw_s"]
    for k in out:
        k["hta_ok"] = (k["hta_x"] or 0) >= 50
        k["seed_ok"] = (k["seed_x"] or 0) >= 100
        k["mem_ok"] = k["mem"] is not None and k["mem"] <= 0.1
    return out


def print_summary(res, report):
    print()
    print(f"{'trace':52s} {'bw util':>8s} {'HTA busy':>9s} {'seed=ours':>10s} {'bw s':>7s} {'HTA s':>7s} {'seed s':>7s} {'HTA×':>7s} {'seed×':>7s} {'mem':>6s}")
    for t, r in zip(res["traces"], res["speed"]):
        bw = (t.get("bubblewatch") or {}).get("result") or {}
        ht = one_rank(((t.get("hta") or {}).get("result") or {}).get("temporal"))
        s = (t.get("seed") or {}).get("result") or {}
        se = "–" if not s.get("kernels") else ("no" if "seed-mismatch" in t["flags"] else "yes")
        print(f"{t['name'][:52]:52s} {pct(bw.get('utilization')):>8s} "
              f"{busy_pct(ht, 1):>9s} {se:>10s} "
              f"{f2(r['bw_s'], 3):>7s} {f2(r['hta_s']):>7s} {f2(r['seed_s']):>7s} "
              f"{fx(r['hta_x'], 0):>7s} {fx(r['seed_x'], 0):>7s} {f2(r['mem'], 2):>6s}")
    sc = res.get("scale")
    if sc:
        for e in sc["sizes"]:
            tl = e["tools"]
            cells = []
            for n in ("bubblewatch", "hta", "seed"):
                x = tl.get(n) or {}
                r = x.get("run")
                cells.append("skipped" if "skipped" in x else
                             (f"{r['wall_s']:.2f}s/{(r['rss_kb'] or 0) / 1024:.0f}MiB" if r else "–"))
            print(f"scale {e['json_bytes'] / 1048576:7.0f} MB JSON {e['events']:>10,} events: "
                  f"bw {cells[0]}  HTA {cells[1]}  seed {cells[2]}")
    for k in res.get("targets", []):
        print(f"target on {k['on']}: HTA {fx(k['hta_x'])} ({'met' if k['hta_ok'] else 'NOT met'}), "
              f"seed {fx(k['seed_x'])} ({'met' if k['seed_ok'] else 'NOT met'}), "
              f"memory {f2(k['mem'], 3)} of HTA ({'met' if k['mem_ok'] else 'NOT met'})")
    print(f"\nreport: {report}")


# ------------------------------------------------------------------------------ compact record

DEFAULT_OUT = os.path.join(HERE, "out")
RESULTS_JSON = os.path.join(ROOT, "ops", "bench", "results", "compare.json")


def rnd(x, nd=3):
    return None if x is None else round(x, nd)


def reproduce_command(res):
    """The command line that repeats this run: run's env knobs where they differ from its
    defaults, then compare.py's own options."""
    env = []
    if res.get("scale_mb") != 1024:
        env.append(f"BW_COMPARE_SCALE_MB={res['scale_mb']:g}")
    if res.get("hta_max_mb") != 256:
        env.append(f"BW_COMPARE_HTA_MAX_MB={res['hta_max_mb']:g}")
    if res.get("repeat") != 3:
        env.append(f"BW_COMPARE_REPEAT={res['repeat']}")
    opts = []
    if res.get("only"):
        opts.append(f"--only '{res['only']}'")
    if res.get("diag") is False:
        opts.append("--no-diag")
    return " ".join(env + ["ops/bench/compare/run"] + opts)


def seed_cell(t):
    """'equal', 'equal, culprit differs', '**differs**' or why there is no comparison."""
    bw = (t.get("bubblewatch") or {}).get("result") or {}
    seed = (t.get("seed") or {}).get("result") or {}
    if not seed:
        return "– (failed)" if (t.get("seed") or {}).get("run", {}).get("rc") else "–"
    if not seed.get("kernels"):
        return "– (no CUDA kernels)"
    dev = seed["model"].get("device")
    ref = our_device(bw, dev) if len(bw.get("devices", [])) > 1 else None
    ref = ref or bw
    sr = seed["result"]
    worst = max(abs(sr[k] - ref[k]) for k in
                ("total_span_us", "compute_time_us", "bubble_time_us", "largest_bubble_us"))
    cell = "equal" if worst <= TOL_US else f"**differs** (|Δ| {worst:,.3f} µs)"
    if worst <= TOL_US and worst >= 0.0005:
        cell += f" (|Δ| {worst:.3f} µs)"
    if sr.get("culprit_before_bubble") != ref.get("culprit_before_bubble"):
        cell += ", culprit differs"
    if len(bw.get("devices", [])) > 1:
        cell += f" (device {dev})"
    return cell


def hta_differences(t):
    """What each by-design difference is worth on this trace, from HTA's own code (--diag)."""
    bw = (t.get("bubblewatch") or {}).get("result") or {}
    diag = (t.get("hta_diag") or {}).get("result")
    ex = one_rank((diag or {}).get("raw_exact"))
    if not diag or not ex:
        return None
    ours = bool(bw.get("input", {}).get("kernels"))  # no CUDA kernels (MTIA): no merge to compare
    dflt = one_rank(diag["default"])
    rr = one_rank(diag.get("raw_rounded")) or dflt
    k_only = ex["kernels_only"]
    exi = ex.get("idle_breakdown") or {}
    streams = exi.get("streams", {})
    return {
        "merge_span_delta_us": rnd(k_only["span_us"] - bw["total_span_us"]) if ours else None,
        "merge_idle_delta_us": rnd(k_only["idle_us"] - bw["bubble_time_us"]) if ours else None,
        "kernels_total": k_only["events"],
        "kernels_hta_default": dflt["kernels_only"]["events"],
        "profiler_step_filter": bool(diag.get("profiler_step_filter_applied")),
        "busy_set_idle_delta_us": rnd(ex["all_stream_events"]["idle_us"] - k_only["idle_us"]),
        "rounding_idle_delta_us": rnd(rr["all_stream_events"]["idle_us"]
                                      - ex["all_stream_events"]["idle_us"]),
        "streams": len(streams),
        "idle_sum_over_streams_us": rnd(exi.get("total_us")),
        "device_idle_us": rnd(ex["all_stream_events"]["idle_us"]),
        "negative_kernel_wait_us": rnd(sum(min(0, s.get("kernel_wait") or 0)
                                           for s in streams.values())),
    }


def compact(res):
    """Only what the tables of docs/comparison.md need (ops/bench/readme renders them)."""
    agreement = []
    for t in res["traces"]:
        if t.get("uncompressed_of"):  # the same trace gunzipped: same figures, speed table only
            continue
        bw = (t.get("bubblewatch") or {}).get("result")
        ht = one_rank(((t.get("hta") or {}).get("result") or {}).get("temporal"))
        hi = one_rank(((t.get("hta") or {}).get("result") or {}).get("idle_breakdown"))
        ex = one_rank(((t.get("hta_diag") or {}).get("result") or {}).get("raw_exact"))
        ext = (ex or {}).get("temporal")
        row = {"trace": t["name"], "kind": t["kind"], "flags": t.get("flags", [])}
        if bw:
            att = bw["attribution_us"]
            row.update({
                "span_us": rnd(bw["total_span_us"]), "busy_us": rnd(bw["compute_time_us"]),
                "bubble_us": rnd(bw["bubble_time_us"]), "utilization": rnd(bw["utilization"], 6),
                "host_side_us": rnd(sum(att[c] for c in HOST_SIDE)),
                "gpu_dependency_us": rnd(att["gpu_dependency"])})
        row.update({
            "seed": seed_cell(t),
            "hta_idle_us": rnd(ht and ht["idle_us"]),
            "hta_busy_pct": rnd(ht and 100 - ht["idle_pctg"], 2),
            "hta_exact_idle_us": rnd(ext and ext["idle_us"]),
            "hta_host_wait_us": rnd(hi and hi["host_wait_us"]),
            "hta_kernel_wait_other_us": rnd(hi and hi["kernel_wait_us"] + hi["other_us"]),
            "hta_differences": hta_differences(t)})
        agreement.append(row)
    speed = [{k: (rnd(v, 4) if isinstance(v, float) else v) for k, v in r.items()}
             for r in res["speed"]]
    scale = None
    if res.get("scale"):
        sizes = []
        for e in res["scale"]["sizes"]:
            tools = {}
            for n, x in e["tools"].items():
                r = x.get("run") or {}
                if "skipped" in x:
                    tools[n] = {"skipped": x["skipped"]}
                elif r.get("rc"):
                    tools[n] = {"failed": f"rc={r['rc']}" + (f" signal {r['signal']}"
                                                             if r.get("signal") else "")}
                else:
                    tools[n] = {"wall_s": rnd(r.get("wall_s"), 3), "cpu_s": rnd(cpu(r), 2),
                                "rss_mib": rnd((r.get("rss_kb") or 0) / 1024, 1)}
            sizes.append({"json_mb": rnd(e["json_bytes"] / 1048576, 1), "events": e["events"],
                          "gunzip_s": rnd(e.get("gunzip_s"), 3),
                          "copies": e["copies"], "tools": tools})
        scale = {"base": res["scale"]["base"], "sizes": sizes}
    return {
        "schema": 1, "generated_by": "ops/bench/compare/run",
        "note": "compact record of ops/bench/compare/out/results.json for docs/comparison.md's "
                "tables (ops/bench/readme); report.md and results.json hold everything",
        "date": res["date"], "started": res.get("started"), "finished": res.get("finished"),
        "command": reproduce_command(res), "machine": res["machine"], "git": res.get("git"),
        "bubblewatch": res["bubblewatch"],
        "versions": {"hta": res["hta_version"], "pandas": res["pandas_version"],
                     "python": res["machine"].get("python")},
        "settings": {"repeat": res["repeat"], "scale_mb": res["scale_mb"],
                     "hta_max_mb": res.get("hta_max_mb"), "diag": res.get("diag"),
                     "only": res.get("only") or None},
        "load": {k: rnd(v, 2) for k, v in res["load"].items()},
        "agreement": agreement, "speed": speed, "scale": scale,
        "targets": [{k: (rnd(v, 4) if isinstance(v, float) else v) for k, v in x.items()}
                    for x in res.get("targets", [])],
        "failures": res.get("failures", []),
    }


def write_compact(res, args):
    path = args.results
    if path == "auto":
        default = os.path.realpath(args.out) == os.path.realpath(DEFAULT_OUT)
        path = RESULTS_JSON if default and not res.get("only") else ""
    if not path:
        return None
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "w") as f:
        json.dump(compact(res), f, indent=1, ensure_ascii=False, default=str)
        f.write("\n")
    return path



# ------------------------------------------------------------------------------ main

def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bw", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--scale-mb", type=float, default=1024)
    ap.add_argument("--hta-max-mb", type=float, default=256,
                    help="largest scale-test size HTA runs on (it needs ~15 min for 1 GB here)")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--no-diag", action="store_true")
    ap.add_argument("--only", default="", help="regex: only traces whose name matches")
    ap.add_argument("--report-only", action="store_true",
                    help="rewrite report.md (and the compact record) from an existing results.json")
    ap.add_argument("--results", default="auto", metavar="PATH",
                    help="compact record for docs/comparison.md (default: ops/bench/results/compare.json when "
                         "--out is the default and there is no --only; '' = none)")
    args = ap.parse_args()
    if args.report_only:
        res = load_json(os.path.join(args.out, "results.json"))
        for t in res["traces"]:
            analyze_trace(t)
        res["speed"] = speed_rows(res["traces"])
        res["targets"] = targets(res)
        with open(os.path.join(args.out, "results.json"), "w") as f:
            json.dump(res, f, indent=1, default=str)
        report = os.path.join(args.out, "report.md")
        write_report(res, report)
        print_summary(res, os.path.relpath(report, ROOT))
        written = write_compact(res, args)
        if written:
            print(f"compact record: {os.path.relpath(written, ROOT)}")
        return 1 if res.get("failures") else 0
    args.bw = os.path.abspath(args.bw)
    os.makedirs(args.out, exist_ok=True)
    work = os.path.join(args.out, "runs")
    os.makedirs(work, exist_ok=True)

    import pandas
    from importlib.metadata import version
    git = git_state()
    res = {"date": os.environ.get("BW_COMPARE_DATE") or
           datetime.datetime.now(datetime.timezone.utc).date().isoformat(),
           "started": iso(utc_now()), "machine": machine(), "git": git,
           "hta_version": version("HolisticTraceAnalysis"), "pandas_version": pandas.__version__,
           "bubblewatch": f"{os.path.relpath(args.bw, ROOT)} (git {git['short'] or '?'}"
                          f"{', worktree dirty' if git['dirty'] else ''})",
           "repeat": args.repeat, "scale_mb": args.scale_mb, "hta_max_mb": args.hta_max_mb,
           "diag": not args.no_diag, "only": args.only}

    traces = discover()
    if args.only:
        traces = [t for t in traces if re.search(args.only, t["name"])]
    for t in traces:
        t0 = time.perf_counter()
        run_trace(t, args, work)
        analyze_trace(t)
        print(f"compare: {t['name']}: {time.perf_counter() - t0:.1f} s", file=sys.stderr, flush=True)
    plain = uncompressed_variant(traces, args, work)
    if plain:
        traces.append(plain)
    res["traces"] = traces
    res["speed"] = speed_rows(traces)
    res["scale"] = scale_test([t for t in traces if not t.get("uncompressed_of")], args, args.out)
    res["targets"] = targets(res)

    failures = []
    for t in traces:
        for tool in ("bubblewatch", "hta", "hta_diag", "seed"):
            r = (t.get(tool) or {}).get("run")
            if r and r["rc"] != 0:
                failures.append(f"{tool} on {t['name']}: rc={r['rc']} {r.get('stderr_tail', '')[-300:]}")
    for e in (res["scale"] or {}).get("sizes", []):
        for tool, x in e["tools"].items():
            r = x.get("run")
            if r and r["rc"] != 0:
                failures.append(f"{tool} on scale {e['target_mb']} MB: rc={r['rc']} "
                                f"{r.get('signal', '')} {r.get('stderr_tail', '')[-300:]}")
    res["failures"] = failures
    res["load"] = {"min": min(LOAD), "max": max(LOAD), "mean": sum(LOAD) / len(LOAD)} if LOAD \
        else {"min": 0, "max": 0, "mean": 0}
    res["finished"] = iso(utc_now())
    with open(os.path.join(args.out, "results.json"), "w") as f:
        json.dump(res, f, indent=1, default=str)
    report = os.path.join(args.out, "report.md")
    write_report(res, report)
    print_summary(res, os.path.relpath(report, ROOT))
    written = write_compact(res, args)
    if written:
        print(f"compact record: {os.path.relpath(written, ROOT)}")
    for fl in failures:
        print("FAILED: " + fl, file=sys.stderr)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
