#!/usr/bin/env python3
"""Does HTA get each rank's numbers from a multi-rank `bubblewatch analyze --timeline` export?

usage: hta_rank_split.py EXPORT INPUT...      (exit 1 when a number differs)

HTA reads one rank per file (its rank from the file's `"rank":\\s+(\\d+)`), so it loads the
inputs as one job (TraceAnalysis over a directory of them) and the export once per rank: each
rank's "file" is the export, and the rows HTA's own parser (hta.common.trace_parser.
parse_trace_dataframe) gives for it are cut to those whose pid is the rank (the export's one
process per rank) before the rest of HTA's loading runs (fwd/bwd links, correlation, iteration,
the ProfilerStep filter, alignment). Then per rank: the event counts by category, HTA's temporal
breakdown and its idle time breakdown (HTA's defaults, as hta_run.py summarizes them), compared
(bubblewatch's own tracks, categories bubblewatch_*, left out of the counts: HTA loads them too,
without a stream, so they add no GPU time).
Times may differ by what a removed clock drift changes (a few ppm): relative 1e-5, or 0.01 us.
Prints one line per rank and a JSON summary on the last line.
"""
import json
import logging
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from hta_run import summarize_idle, summarize_temporal  # noqa: E402


def close(a, b):
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(close(a[k], b[k]) for k in a)
    if isinstance(a, (int, float)):
        return abs(a - b) <= max(0.01, 1e-5 * abs(a))
    return a == b


def figures(an):
    t = an.t
    syms = t.symbol_table.get_sym_table()
    out = {}
    tb = summarize_temporal(an.get_temporal_breakdown(visualize=False))
    ranks = t.get_ranks()
    ib = summarize_idle(an.get_idle_time_breakdown(ranks=ranks, visualize=False)[0])
    for r in ranks:
        df = t.get_trace(r)
        cats = df["cat"].map(lambda i: syms[i] if 0 <= i < len(syms) else "?")
        counts = cats.value_counts()
        out[r] = {
            # bubblewatch's own tracks (bubblewatch_* categories) are the export's addition.
            "events_by_cat": {str(k): int(v) for k, v in counts.items()
                              if not str(k).startswith("bubblewatch_")},
            "bubblewatch_events": int(counts[[str(k).startswith("bubblewatch_")
                                              for k in counts.index]].sum()),
            "kernel_us": float(df[cats.isin(["kernel", "Kernel"])]["dur"].sum()),
            "temporal": tb.get(r),
            "idle_breakdown": ib.get(r),
        }
    return out


def main() -> int:
    export, inputs = sys.argv[1], sys.argv[2:]
    import hta.common.trace as hta_trace
    from hta.configs.config import logger as hta_logger
    from hta.trace_analysis import TraceAnalysis

    hta_logger.setLevel(logging.ERROR)
    tmp = tempfile.mkdtemp(prefix="hta-split-")
    in_dir = os.path.join(tmp, "inputs")
    os.mkdir(in_dir)
    for p in inputs:
        os.symlink(os.path.abspath(p), os.path.join(in_dir, os.path.basename(p)))
    original = TraceAnalysis(trace_dir=in_dir)
    want = figures(original)

    # The export once per rank, each link's name saying the rank.
    files = {}
    for r in want:
        link = os.path.join(tmp, f"export.rank{r}.json.gz")
        os.symlink(os.path.abspath(export), link)
        files[r] = link
    parse = hta_trace.parse_trace_dataframe

    def parse_rank(path, cfg):
        meta, df, symbols = parse(path, cfg)
        rank = int(os.path.basename(path).split(".rank")[1].split(".")[0])
        return meta, df[df["pid"] == rank].copy(), symbols

    hta_trace.parse_trace_dataframe = parse_rank
    got = figures(TraceAnalysis(trace_files=files, trace_dir=tmp))

    bad = []
    for r in want:
        diff = [k for k in want[r]
                if k != "bubblewatch_events" and not close(want[r][k], got.get(r, {}).get(k))]
        t = got[r]["temporal"]
        print(("FAIL" if diff else "ok  "), f"rank {r} of the export:",
              f"{sum(got[r]['events_by_cat'].values())} events",
              f"(and {got[r]['bubblewatch_events']} of bubblewatch's tracks),",
              f"HTA temporal idle {t['idle_us']:.0f} us, compute {t['compute_us']:.0f} us,",
              f"non-compute {t['non_compute_us']:.0f} us;",
              ("differs in " + ", ".join(diff)) if diff else
              "event counts by category, kernel time, temporal and idle breakdowns equal the input's")
        if diff:
            bad.append(r)
            for k in diff:
                print("   input: ", json.dumps(want[r][k], default=float)[:400])
                print("   export:", json.dumps(got[r].get(k), default=float)[:400])
    print(json.dumps({"ranks": list(want), "failed": bad}))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
