#!/usr/bin/env python3
"""Concatenate a Kineto trace with itself, shifted in time, up to a target JSON size (gzip out).

usage: scale_trace.py BASE.json[.gz] OUT.json.gz TARGET_MB

Copy i of the base's complete events ("X") and flow events is shifted by i * (base span + 1 ms);
correlation ids, External ids and flow ids are offset by i * (largest id + 1) so launches still
join their kernels and no two copies share an id; "ProfilerStep#N" becomes N + i * (number of
steps) so steps stay distinct. Metadata events ("M") and top-level keys (distributedInfo first,
on its own line, so HTA's rank regex finds it without reading the whole file) appear once.
One event per line, the separators of Python's json (so `"rank": 0` matches HTA's regex).
Prints one JSON line: copies, events, json_bytes, gz_bytes.
"""
import gzip
import json
import math
import re
import sys

STEP_RE = re.compile(r"^ProfilerStep#(\d+)$")


def main():
    base, out, target_mb = sys.argv[1], sys.argv[2], float(sys.argv[3])
    opener = gzip.open if base.endswith(".gz") else open
    with opener(base, "rb") as f:
        raw = f.read()
    doc = json.loads(raw)
    events = doc.pop("traceEvents")
    del raw

    timed = [e for e in events if e.get("ph") != "M" and "ts" in e]
    meta = [e for e in events if e.get("ph") == "M" or "ts" not in e]
    t0 = min(float(e["ts"]) for e in timed)
    t1 = max(float(e["ts"]) + float(e.get("dur", 0) or 0) for e in timed)
    period = (t1 - t0) + 1000.0
    if all(isinstance(e["ts"], int) for e in timed):
        period = int(math.ceil(period))
    max_id = 0
    steps = []
    for e in timed:
        a = e.get("args") or {}
        for k in ("correlation", "External id"):
            v = a.get(k)
            if isinstance(v, int):
                max_id = max(max_id, v)
        if isinstance(e.get("id"), int):
            max_id = max(max_id, e["id"])
        m = STEP_RE.match(str(e.get("name", "")))
        if m:
            steps.append(int(m.group(1)))
    id_off = max_id + 1
    step_off = (max(steps) - min(steps) + 1) if steps else 0

    target = target_mb * 1024 * 1024
    copies = 0
    n = 0
    json_bytes = 0
    with gzip.open(out, "wt", compresslevel=1, encoding="utf-8") as f:
        def w(s):
            nonlocal json_bytes
            f.write(s)
            json_bytes += len(s)

        keys = list(doc.keys())
        if "distributedInfo" in keys:
            keys.remove("distributedInfo")
            keys.insert(0, "distributedInfo")
        w("{\n")
        for k in keys:
            w(json.dumps(k) + ": " + json.dumps(doc[k]) + ",\n")
        w('"traceEvents": [\n')
        first = True
        for e in meta:
            w(("" if first else ",\n") + json.dumps(e))
            first = False
            n += 1
        i = -1
        while i < 0 or json_bytes < target:
            i += 1
            copies += 1
            shift = i * period
            for e in timed:
                c = dict(e)
                c["ts"] = e["ts"] + shift
                if i:
                    if isinstance(e.get("id"), int):
                        c["id"] = e["id"] + i * id_off
                    a = e.get("args")
                    if a and ("correlation" in a or "External id" in a):
                        a = dict(a)
                        for k in ("correlation", "External id"):
                            if isinstance(a.get(k), int) and a[k] > 0:
                                a[k] += i * id_off
                        c["args"] = a
                    if step_off:
                        m = STEP_RE.match(str(e.get("name", "")))
                        if m:
                            c["name"] = "ProfilerStep#%d" % (int(m.group(1)) + i * step_off)
                w(("" if first else ",\n") + json.dumps(c))
                first = False
                n += 1
        w("\n]}\n")
    import os
    print(json.dumps({"copies": copies, "events": n, "json_bytes": json_bytes,
                      "gz_bytes": os.path.getsize(out), "base": base}))


if __name__ == "__main__":
    main()
