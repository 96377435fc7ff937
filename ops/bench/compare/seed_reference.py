#!/usr/bin/env python3
"""The first seed's reference answer, `analyze_timeline_bubbles`, transcribed as is, and a CLI
that feeds it a trace converted to the seed's model.

The function below is the seed's answer section ("参考答案（仅 answer 分支）", lesson 1 of
/work/shared/seeds/000_e776c3fa15b66d7a.txt) verbatim; only the Chinese comments are translated.
It is a comparison baseline for ops/bench/compare, not part of bubblewatch.

usage: seed_reference.py TRACE        (prints one JSON object)

TRACE is a seed timeline JSON (gpu_kernels / cpu_events), a Kineto / PyTorch-profiler trace
(.json or .json.gz) or an Nsight Systems SQLite export. Conversion to the seed's model:
  gpu_kernels: {name, start_us, end_us, stream} for every `kernel` event (cat "kernel" or
               "Kernel"; timeline entries whose kind is absent or "kernel") on the trace's main
               device (the device with the most kernels; args.device, else pid);
  cpu_events:  {name, start_us, end_us} for the CPU categories bubblewatch reads (cpu_op,
               user_annotation, python_function, cuda_runtime, cuda_driver and their old
               spellings); the reference does not use them, they are passed for fidelity.
  Nsight Systems: rows of CUPTI_ACTIVITY_KIND_KERNEL on the device with the most kernels, name =
               shortName, times in µs relative to that table's first start (integer ns are
               subtracted before the division, so floats keep sub-ns precision); cpu_events from
               CUPTI_ACTIVITY_KIND_RUNTIME.
Besides the reference's result, the JSON has `check`, computed here outside the reference:
the kernel whose end is the start of the largest gap (what the product calls the culprit),
so the report can show why the names differ.
"""
import gzip
import json
import sys
import time


def analyze_timeline_bubbles(gpu_kernels, cpu_events):
    if not gpu_kernels:
        return {
            "total_span_us": 0.0,
            "compute_time_us": 0.0,
            "bubble_time_us": 0.0,
            "bubble_ratio": 0.0,
            "largest_bubble_us": 0.0,
            "culprit_before_bubble": None
        }

    # 1. Sort the GPU kernels by start time
    sorted_kernels = sorted(gpu_kernels, key=lambda k: k["start_us"])

    min_start = sorted_kernels[0]["start_us"]
    max_end = max(k["end_us"] for k in sorted_kernels)
    total_span = max_end - min_start

    # 2. Compute time and bubbles (merge overlaps, compute the continuous active intervals)
    compute_time = 0.0
    bubble_time = 0.0
    largest_bubble = 0.0
    culprit_name = None

    current_end = sorted_kernels[0]["start_us"]
    last_kernel_name = sorted_kernels[0]["name"]

    for i, k in enumerate(sorted_kernels):
        k_start = k["start_us"]
        k_end = k["end_us"]

        if k_start > current_end:
            # an idle bubble
            gap = k_start - current_end
            bubble_time += gap
            if gap > largest_bubble:
                largest_bubble = gap
                culprit_name = last_kernel_name
            current_end = k_end
            compute_time += (k_end - k_start)
        else:
            # overlap or back-to-back
            if k_end > current_end:
                compute_time += (k_end - current_end)
                current_end = k_end
        last_kernel_name = k["name"]

    bubble_ratio = bubble_time / total_span if total_span > 0 else 0.0

    return {
        "total_span_us": total_span,
        "compute_time_us": compute_time,
        "bubble_time_us": bubble_time,
        "bubble_ratio": bubble_ratio,
        "largest_bubble_us": largest_bubble,
        "culprit_before_bubble": culprit_name
    }


# ---------------------------------------------------------------------------------------------
# Harness side: loading and converting traces, and the check of the culprit.

KERNEL_CATS = {"kernel", "Kernel"}
CPU_CATS = {"cpu_op", "user_annotation", "python_function", "cuda_runtime", "cuda_driver",
            "Operator", "Runtime", "Driver", "python_function"}


def load_nsys(path):
    import sqlite3

    con = sqlite3.connect("file:%s?mode=ro" % path, uri=True)
    names = dict(con.execute("SELECT id, value FROM StringIds"))
    counts = dict(con.execute(
        "SELECT deviceId, count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL GROUP BY deviceId"))
    if not counts:
        return [], [], {"format": "nsys", "device": None, "devices": {}}
    main = max(counts, key=lambda d: (counts[d], -d))
    origin = con.execute("SELECT min(start) FROM CUPTI_ACTIVITY_KIND_KERNEL").fetchone()[0]
    kernels = [{"name": names.get(n, str(n)), "start_us": (s - origin) / 1000.0,
                "end_us": (e - origin) / 1000.0, "stream": st}
               for s, e, st, n in con.execute(
                   "SELECT start, end, streamId, shortName FROM CUPTI_ACTIVITY_KIND_KERNEL "
                   "WHERE deviceId = ?", (main,))]
    cpu = []
    has_rt = con.execute("SELECT count(*) FROM sqlite_master WHERE name = "
                         "'CUPTI_ACTIVITY_KIND_RUNTIME'").fetchone()[0]
    if has_rt:
        cpu = [{"name": names.get(n, str(n)), "start_us": (s - origin) / 1000.0,
                "end_us": (e - origin) / 1000.0}
               for s, e, n in con.execute(
                   "SELECT start, end, nameId FROM CUPTI_ACTIVITY_KIND_RUNTIME")]
    return kernels, cpu, {"format": "nsys", "device": main, "time_origin_ns": origin,
                          "devices": {str(d): c for d, c in counts.items()}}


def load(path):
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rb") as f:
        return json.load(f)


def to_seed_model(doc):
    """Returns (gpu_kernels, cpu_events, info)."""
    if "gpu_kernels" in doc and "traceEvents" not in doc:
        kernels = [{"name": k["name"], "start_us": k["start_us"], "end_us": k["end_us"],
                    "stream": k.get("stream", 0)}
                   for k in doc["gpu_kernels"] if k.get("kind", "kernel") == "kernel"]
        cpu = [{"name": c["name"], "start_us": c["start_us"], "end_us": c["end_us"]}
               for c in doc.get("cpu_events", [])]
        return kernels, cpu, {"format": "timeline", "device": 0, "devices": {"0": len(kernels)}}
    by_dev = {}
    cpu = []
    for e in doc.get("traceEvents", []):
        if e.get("ph") != "X":
            continue
        cat = e.get("cat")
        if cat in KERNEL_CATS:
            a = e.get("args") or {}
            dev = a.get("device", e.get("pid"))
            ts = float(e["ts"])
            by_dev.setdefault(dev, []).append(
                {"name": e.get("name", ""), "start_us": ts, "end_us": ts + float(e.get("dur", 0)),
                 "stream": a.get("stream", e.get("tid"))})
        elif cat in CPU_CATS:
            ts = float(e["ts"])
            cpu.append({"name": e.get("name", ""), "start_us": ts,
                        "end_us": ts + float(e.get("dur", 0))})
    if not by_dev:
        return [], cpu, {"format": "chrome", "device": None, "devices": {}}
    main = max(by_dev, key=lambda d: (len(by_dev[d]), -int(d) if str(d).lstrip("-").isdigit() else 0))
    return by_dev[main], cpu, {"format": "chrome", "device": main,
                               "devices": {str(d): len(v) for d, v in by_dev.items()}}


def culprit_check(kernels):
    """The largest gap of the merged busy set (earliest on ties) and the kernel whose end is its
    start (ties: the one that started last) -- the product's definition
    (docs/semantics.md#largest-bubble-and-culprit)."""
    if not kernels:
        return None
    ks = sorted(kernels, key=lambda k: (k["start_us"], k["end_us"]))
    best = None
    cur_end = ks[0]["end_us"]
    for k in ks[1:]:
        if k["start_us"] > cur_end:
            gap = k["start_us"] - cur_end
            if best is None or gap > best[0]:
                best = (gap, cur_end, k["start_us"])
        cur_end = max(cur_end, k["end_us"])
    if best is None:
        return {"largest_gap_us": 0.0}
    gap, g0, g1 = best
    enders = [k for k in ks if k["end_us"] == g0]
    last_started_before = max((k for k in ks if k["start_us"] < g1 and k["start_us"] <= g0),
                              key=lambda k: k["start_us"])
    ender = max(enders, key=lambda k: k["start_us"]) if enders else None
    return {"largest_gap_us": gap, "gap_start_us": g0, "gap_end_us": g1,
            "kernel_ending_at_gap_start": ender["name"] if ender else None,
            "ender_start_us": ender["start_us"] if ender else None,
            "last_started_before_gap": last_started_before["name"],
            "last_started_start_us": last_started_before["start_us"],
            "last_started_end_us": last_started_before["end_us"]}


def main():
    if len(sys.argv) != 2:
        print(__doc__.split("\n\n")[2], file=sys.stderr)
        return 2
    t0 = time.perf_counter()
    if sys.argv[1].endswith(".sqlite"):
        kernels, cpu, info = load_nsys(sys.argv[1])
    else:
        doc = load(sys.argv[1])
        kernels, cpu, info = to_seed_model(doc)
        del doc
    t1 = time.perf_counter()
    res = analyze_timeline_bubbles(kernels, cpu)
    t2 = time.perf_counter()
    out = {"tool": "seed_reference", "trace": sys.argv[1], "result": res, "model": info,
           "kernels": len(kernels), "cpu_events": len(cpu),
           "timing_s": {"load_and_convert": t1 - t0, "analyze_timeline_bubbles": t2 - t1}}
    out["check"] = culprit_check(kernels)
    json.dump(out, sys.stdout, indent=1)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
