#!/usr/bin/env python3
"""Run Holistic Trace Analysis (HTA) on one Kineto trace and print its numbers as JSON.

usage: hta_run.py TRACE [--diag] [--rank-hint R]

What a user of HTA gets, in HTA's own code (hta.trace_analysis.TraceAnalysis, defaults):
  - get_temporal_breakdown():   idle / compute / non-compute time per rank;
  - get_idle_time_breakdown():  host wait / kernel wait / other per stream, for every rank.
HTA wants a directory of traces and finds each file's rank by the regex `"rank":\\s+(\\d+)`
(hta/common/trace_file.py, rank 0 when absent), so the trace is linked alone into a fresh
temporary directory under its own name (it must end in .json or .gz).

A seed timeline JSON (gpu_kernels / cpu_events) is converted to a minimal Kineto trace first
(kernels -> cat "kernel" on pid 0, tid = stream; cpu events -> cat "cpu_op"; no correlation,
because the seed's model has none).

--diag adds, outside what a user runs (and outside the timed run):
  raw_exact   : the same two HTA analyses (HTA's code) on the whole trace, without HTA's
                ProfilerStep filter and with HTA_DISABLE_NS_ROUNDING=1, plus span/idle over
                kernel events only and the busy time each event category adds;
  raw_rounded : the whole trace with HTA's default rounding of ns-precision timestamps;
  default     : which event categories HTA's default pipeline kept as GPU work.
"""
import argparse
import gzip
import json
import logging
import os
import sys
import tempfile
import time

T0 = time.perf_counter()


def seed_timeline_to_kineto(src: str, dst: str) -> None:
    with open(src) as f:
        d = json.load(f)
    ev = []
    for k in d.get("gpu_kernels", []):
        kind = k.get("kind", "kernel")
        cat = {"kernel": "kernel", "memcpy": "gpu_memcpy", "memset": "gpu_memset"}.get(kind, "kernel")
        stream = int(k.get("stream", 7))
        ev.append({"ph": "X", "cat": cat, "name": k["name"], "pid": int(k.get("device", 0)),
                   "tid": stream, "ts": k["start_us"], "dur": k["end_us"] - k["start_us"],
                   "args": {"device": int(k.get("device", 0)), "stream": stream}})
    for c in d.get("cpu_events", []):
        ev.append({"ph": "X", "cat": "cpu_op", "name": c["name"], "pid": 1, "tid": 1,
                   "ts": c["start_us"], "dur": c["end_us"] - c["start_us"], "args": {}})
    with open(dst, "w") as f:
        json.dump({"schemaVersion": 1, "distributedInfo": {"rank": 0}, "traceEvents": ev}, f,
                  indent=1)


def is_seed_timeline(path: str) -> bool:
    if path.endswith(".gz"):
        return False
    with open(path, "rb") as f:
        head = f.read(4096)
    return b'"gpu_kernels"' in head and b'"traceEvents"' not in head


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("trace")
    ap.add_argument("--diag", action="store_true")
    args = ap.parse_args()

    tmp = tempfile.mkdtemp(prefix="hta-compare-")
    src = os.path.abspath(args.trace)
    converted = False
    if is_seed_timeline(src):
        dst = os.path.join(tmp, os.path.basename(src).rsplit(".", 1)[0] + ".kineto.json")
        seed_timeline_to_kineto(src, dst)
        converted = True
    else:
        dst = os.path.join(tmp, os.path.basename(src))
        if not (dst.endswith(".gz") or dst.endswith(".json")):
            dst += ".json"
        os.symlink(src, dst)

    import pandas as pd  # noqa: F401  (HTA's dependency; imported here to time it with HTA)
    from hta.configs.config import logger as hta_logger
    from hta.trace_analysis import TraceAnalysis

    hta_logger.setLevel(logging.ERROR)
    t_import = time.perf_counter()

    out = {"tool": "hta", "trace": args.trace, "converted_from_seed_timeline": converted}
    an = TraceAnalysis(trace_dir=tmp)
    t_load = time.perf_counter()
    tb = an.get_temporal_breakdown(visualize=False)
    t_temporal = time.perf_counter()
    ranks = an.t.get_ranks()
    ib, _ = an.get_idle_time_breakdown(ranks=ranks, visualize=False)
    t_idle = time.perf_counter()

    out["ranks"] = ranks
    out["temporal"] = summarize_temporal(tb)
    out["idle_breakdown"] = summarize_idle(ib)
    out["timing_s"] = {
        "import": t_import - T0,
        "load": t_load - t_import,
        "temporal_breakdown": t_temporal - t_load,
        "idle_time_breakdown": t_idle - t_temporal,
        "analysis_total": t_idle - t_import,
    }
    if args.diag:
        out["diag"] = diagnostics(an, tmp, ranks)
    json.dump(out, sys.stdout, indent=1, default=float)
    sys.stdout.write("\n")
    return 0


def summarize_temporal(tb):
    rows = {}
    for _, r in tb.iterrows():
        rows[int(r["rank"])] = {
            "idle_us": float(r["idle_time(us)"]),
            "compute_us": float(r["compute_time(us)"]),
            "non_compute_us": float(r["non_compute_time(us)"]),
            "span_us": float(r["kernel_time(us)"]),
            "idle_pctg": float(r["idle_time_pctg"]),
            "compute_pctg": float(r["compute_time_pctg"]),
            "non_compute_pctg": float(r["non_compute_time_pctg"]),
        }
    return rows


def summarize_idle(ib):
    rows = {}
    for _, r in ib.iterrows():
        rk = rows.setdefault(int(r["rank"]), {"host_wait_us": 0.0, "kernel_wait_us": 0.0,
                                               "other_us": 0.0, "streams": {}})
        cat = str(r["idle_category"])
        v = float(r["idle_time"]) if r["idle_time"] == r["idle_time"] else 0.0  # NaN -> 0
        rk[cat + "_us"] = rk.get(cat + "_us", 0.0) + v
        rk["streams"].setdefault(str(int(r["stream"])), {})[cat] = v
    for rk in rows.values():
        rk["total_us"] = rk["host_wait_us"] + rk["kernel_wait_us"] + rk["other_us"]
    return rows


KERNEL_CATS = ("kernel", "Kernel")


def span_idle(df, mask):
    """HTA's own interval merge (hta.utils.utils.merge_kernel_intervals) over df[mask]."""
    from hta.utils.utils import merge_kernel_intervals

    sub = df[mask][["ts", "dur"]].copy()
    if len(sub) == 0:
        return {"span_us": 0.0, "idle_us": 0.0, "busy_us": 0.0, "events": 0}
    m = merge_kernel_intervals(sub)
    span = float(m["end"].max() - m["ts"].min())
    busy = float((m["end"] - m["ts"]).sum())
    return {"span_us": span, "idle_us": span - busy, "busy_us": busy, "events": int(len(sub))}


def category_view(t, rank):
    df = t.get_trace(rank)
    syms = t.symbol_table.get_sym_table()
    cats = df["cat"].map(lambda i: syms[i] if 0 <= i < len(syms) else "?")
    on_stream = df["stream"].ne(-1)
    counts = cats[on_stream].value_counts().to_dict()
    kernel_mask = on_stream & cats.isin(KERNEL_CATS)
    res = {
        "events_on_stream_by_cat": {str(k): int(v) for k, v in counts.items()},
        "kernels_only": span_idle(df, kernel_mask),
        "all_stream_events": span_idle(df, on_stream),
    }
    # Busy time each non-kernel category adds on top of the kernels (HTA's temporal breakdown
    # counts every event with stream != -1 as busy).
    add = {}
    for c in counts:
        if c in KERNEL_CATS:
            continue
        with_c = span_idle(df, kernel_mask | (on_stream & cats.eq(c)))
        add[str(c)] = res["kernels_only"]["idle_us"] - with_c["idle_us"]
    res["idle_removed_by_cat_us"] = add
    return res


def diagnostics(an, tmp, ranks):
    from hta.analyzers.breakdown_analysis import BreakdownAnalysis
    from hta.common.trace import Trace

    d = {"default": {}, "raw_rounded": {}, "raw_exact": {}}
    syms = an.t.symbol_table.get_sym_id_map()
    steps = sorted(k for k in syms if isinstance(k, str) and "ProfilerStep" in k)
    d["profiler_steps"] = steps
    d["profiler_step_filter_applied"] = len(steps) >= 2
    for r in ranks:
        d["default"][r] = category_view(an.t, r)

    passes = [("raw_exact", "1")]
    if d["profiler_step_filter_applied"]:  # otherwise raw_rounded is what `default` holds
        passes.insert(0, ("raw_rounded", "0"))
    for key, no_round in passes:
        os.environ["HTA_DISABLE_NS_ROUNDING"] = no_round
        t = Trace(trace_dir=tmp)
        t.parse_traces(use_multiprocessing=False)
        t._align_all_ranks()  # what load_traces does, minus _filter_irrelevant_gpu_kernels
        for r in ranks:
            v = category_view(t, r)
            if key == "raw_exact":
                tb = BreakdownAnalysis.get_temporal_breakdown(t, visualize=False)
                v["temporal"] = summarize_temporal(tb).get(r)
                ib, _ = BreakdownAnalysis.get_idle_time_breakdown(t, 30, r, None, False, False, False)
                v["idle_breakdown"] = summarize_idle(ib).get(r)
            d[key][r] = v
    os.environ.pop("HTA_DISABLE_NS_ROUNDING", None)
    return d


if __name__ == "__main__":
    sys.exit(main())
