"""The traces of ops/bench/duty_cycle_bench: a duty-cycle fleet of single-GPU jobs, each
profiled for SNAPSHOT every PERIOD of event time, one PyTorch-profiler (Kineto) Chrome trace
per snapshot. Python standard library only.

  python3 duty_cycle_traces.py generate --out DIR --jobs 50 --snapshot-ns N --period-ns N \
      --duration-ns N --window-ns N [--start-ns T] [--seed S]
  python3 duty_cycle_traces.py tamper FILE     # lengthens the last kernel by 1 us, in place

`generate` writes DIR/JOB/snap-KKK.json for k = 0, 1, ... while k x PERIOD < DURATION, and
DIR/manifest.json: per job its name, its planted profile and per snapshot the file and the
covered interval [first event start, last event end) in epoch ns (what `produce` sends as the
observation). Job j's snapshot k starts at START + k x PERIOD + the job's offset, an offset
chosen so that the snapshot lies inside one WINDOW when PERIOD is a multiple of it (the
default 60 s in 10 s windows).

Each snapshot is a training loop on device 0, stream 7, with correlated `cudaLaunchKernel`
calls on one CPU thread, and bubbles planted per job: job j's profile is j mod 6 (sync,
data loading, allocator, memcpy, GPU dependency, launch-bound; each job also gets some host
compute and, every other job, a sync), its magnitudes drawn per job and jittered per step, so
every job's windows differ. Times are integer ns written as exact decimal microseconds."""
import argparse
import json
import os
import random
import sys

PROFILES = ["sync", "data_loading", "allocator", "memcpy", "gpu_dependency", "launch"]
KERNELS = ["ampere_sgemm_128x64_tn", "ampere_sgemm_64x64_nn", "fmha_fwd_kernel",
           "vectorized_elementwise_kernel<add>", "layer_norm_kernel", "gelu_kernel",
           "reduce_kernel<sum>", "multi_tensor_apply_kernel<adam>"]
TINY = "elementwise_kernel<mul>"
DATALOADER = "enumerate(DataLoader)#_MultiProcessingDataLoaderIter.__next__"
US = 1000
MS = 1000 * US


def us_text(ns):
    """ns as the exact decimal microseconds a Kineto trace writes (3 fraction digits)."""
    sign = "-" if ns < 0 else ""
    ns = abs(ns)
    return "%s%d.%03d" % (sign, ns // 1000, ns % 1000)


class Snapshot:
    """The events of one snapshot, as Chrome trace JSON text pieces."""

    def __init__(self):
        self.events = []
        self.first = None
        self.last = None
        self.correlation = 0

    def _add(self, cat, name, pid, tid, start, end, args):
        self.first = start if self.first is None else min(self.first, start)
        self.last = end if self.last is None else max(self.last, end)
        self.events.append(
            '{"ph":"X","cat":"%s","name":%s,"pid":%d,"tid":%d,"ts":%s,"dur":%s,"args":%s}'
            % (cat, json.dumps(name), pid, tid, us_text(start), us_text(end - start),
               json.dumps(args, separators=(",", ":"))))

    def cpu(self, cat, name, start, end, correlation=None):
        args = {} if correlation is None else {"correlation": correlation}
        self._add(cat, name, 1000, 1000, start, end, args)

    def gpu(self, cat, name, start, end, correlation):
        self._add(cat, name, 0, 7, start, end,
                  {"device": 0, "stream": 7, "correlation": correlation})

    def launch(self, t, call_ns, api="cudaLaunchKernel"):
        """A CUDA runtime call on the thread at t; returns its correlation id."""
        self.correlation += 1
        self.cpu("cuda_runtime", api, t, t + call_ns, self.correlation)
        return self.correlation


def job_params(seed, j):
    """Job j's planted profile and magnitudes (ns), drawn once per job."""
    r = random.Random(seed * 1_000_003 + j)
    p = {
        "profile": PROFILES[j % len(PROFILES)],
        "kernels": r.randint(4, 8),
        "kernel_ns": r.randint(1000, 4000) * US,
        "launch_call_ns": r.randint(6, 15) * US,
        "host_compute_ns": r.randint(300, 3000) * US,
        "sync": j % 2 == 1,
        "sync_tail_ns": r.randint(5, 40) * US,
        "dataloader_ns": 0, "alloc_ns": 0, "memcpy_ns": 0, "dependency_ns": 0,
        "tiny_kernels": 0,
    }
    prof = p["profile"]
    if prof == "sync":
        p["sync"] = True
        p["host_compute_ns"] = r.randint(2000, 8000) * US
    elif prof == "data_loading":
        p["dataloader_ns"] = r.randint(3000, 25000) * US
    elif prof == "allocator":
        p["alloc_ns"] = r.randint(500, 5000) * US
    elif prof == "memcpy":
        p["memcpy_ns"] = r.randint(1000, 8000) * US
    elif prof == "gpu_dependency":
        p["dependency_ns"] = r.randint(200, 3000) * US
    elif prof == "launch":
        p["tiny_kernels"] = r.randint(10, 30)
    return p


def snapshot(p, rng, t0, length):
    """One snapshot's events from t0 on: steps until a step would start at or after t0 +
    length (a step started before it runs to its end, as a profiler's last step does)."""
    s = Snapshot()
    t = t0             # the CPU thread's clock
    gpu_free = t0      # when the GPU's stream 7 is free
    step = 0

    def jitter(ns):
        return int(ns * rng.uniform(0.8, 1.2)) if ns else 0

    while t < t0 + length:
        if not p["sync"]:
            # No sync in the loop: the CPU may run ahead of the GPU by one step at most
            # (the launch queue fills up); it starts the next step when the GPU drains.
            t = max(t, gpu_free)
        step_start = t
        if p["dataloader_ns"]:
            d = jitter(p["dataloader_ns"])
            s.cpu("user_annotation", DATALOADER, t, t + d)
            t += d
        if p["memcpy_ns"]:
            c = s.launch(t, 8 * US, api="cudaMemcpyAsync")
            start = max(t + 4 * US, gpu_free)
            end = start + jitter(p["memcpy_ns"])
            s.gpu("gpu_memcpy", "Memcpy HtoD (Pinned -> Device)", start, end, c)
            gpu_free = end
            t += 8 * US
        if p["alloc_ns"]:
            a = jitter(p["alloc_ns"])
            s.cpu("cuda_runtime", "cudaMalloc", t, t + a)
            t += a
        s.cpu("cpu_op", "aten::linear", t, t + 30 * US)
        t += 30 * US
        for i in range(p["kernels"]):
            call = jitter(p["launch_call_ns"])
            c = s.launch(t, call)
            start = max(t + 5 * US, gpu_free)
            if p["dependency_ns"] and i == p["kernels"] // 2:
                # Queued long before, held on the GPU side (an event wait).
                start = gpu_free + jitter(p["dependency_ns"])
            end = start + jitter(p["kernel_ns"])
            s.gpu("kernel", KERNELS[i % len(KERNELS)], start, end, c)
            gpu_free = end
            t += call
        if p["sync"]:
            end = max(t, gpu_free) + jitter(p["sync_tail_ns"])
            s.launch(t, end - t, api="cudaStreamSynchronize")
            t = end
        if p["tiny_kernels"]:
            # Launch-bound: tiny kernels issued once the GPU has drained, one per operator,
            # each waiting for its launch call (the GPU finishes each before the CPU issues
            # the next).
            t = max(t, gpu_free)
            for _ in range(p["tiny_kernels"]):
                op = jitter(12 * US)
                call = jitter(p["launch_call_ns"])
                c = s.launch(t + op, call)
                start = t + op + call + 3 * US
                end = start + 2 * US
                s.gpu("kernel", TINY, start, end, c)
                s.cpu("cpu_op", "aten::mul", t, t + op + call + 2 * US)
                gpu_free = end
                t += op + call + 2 * US
        h = jitter(p["host_compute_ns"])
        s.cpu("python_function", "train.py(88): log_metrics", t, t + h)
        t += h
        if p["alloc_ns"] and step % 4 == 3:
            s.cpu("cuda_runtime", "cudaFree", t, t + p["alloc_ns"] // 2)
            t += p["alloc_ns"] // 2
        s.cpu("user_annotation", "ProfilerStep#%d" % step, step_start, t)
        step += 1
    return s


def write_trace(path, s, job, host):
    doc_head = ('{"schemaVersion":1,"distributedInfo":{"backend":"nccl","rank":0,'
                '"world_size":1},"host_name":%s,"bubblewatch_job":%s,\n"traceEvents":[\n'
                % (json.dumps(host), json.dumps(job)))
    with open(path, "w") as f:
        f.write(doc_head)
        f.write(",\n".join(s.events))
        f.write("\n]}\n")


def generate(a):
    if a.snapshot_ns <= 0 or a.period_ns <= 0 or a.duration_ns <= 0 or a.window_ns <= 0:
        sys.exit("duty_cycle_traces: times must be positive")
    snapshots = (a.duration_ns + a.period_ns - 1) // a.period_ns
    # The room a snapshot has inside its window when the period is a multiple of it:
    # offsets from 0.5 s up to what keeps the snapshot (plus its last step, < 0.5 s) inside.
    room = a.window_ns - a.snapshot_ns - 1000 * MS
    manifest = {"start_ns": a.start_ns, "period_ns": a.period_ns,
                "snapshot_ns": a.snapshot_ns, "duration_ns": a.duration_ns,
                "window_ns": a.window_ns, "seed": a.seed, "jobs": []}
    for j in range(a.jobs):
        name = "duty-%03d" % j
        p = job_params(a.seed, j)
        r = random.Random(a.seed * 7919 + j)
        offset = 500 * MS + (r.randrange(room // MS) * MS if room > 0 else 0)
        os.makedirs(os.path.join(a.out, name), exist_ok=True)
        job = {"job": name, "params": p, "offset_ns": offset, "snapshots": []}
        for k in range(snapshots):
            rng = random.Random((a.seed * 1_000_003 + j) * 100_003 + k)
            t0 = a.start_ns + k * a.period_ns + offset
            s = snapshot(p, rng, t0, a.snapshot_ns)
            path = os.path.join(a.out, name, "snap-%03d.json" % k)
            write_trace(path, s, name, name + "-node-0")
            job["snapshots"].append({"k": k, "file": path, "first_ns": s.first,
                                     "last_ns": s.last, "events": len(s.events)})
        manifest["jobs"].append(job)
    with open(os.path.join(a.out, "manifest.json"), "w") as f:
        json.dump(manifest, f, indent=1)
    files = sum(len(j["snapshots"]) for j in manifest["jobs"])
    events = sum(s["events"] for j in manifest["jobs"] for s in j["snapshots"])
    print("%d files, %d events" % (files, events))


def tamper(path):
    """Lengthens the file's last kernel (the GPU's last busy time) by 1 us, in the file
    `analyze` reads after the topic got the original: the comparison must then report that
    window (span and compute 1 us longer)."""
    with open(path) as f:
        text = f.read()
    at = text.rindex('"cat":"kernel"')
    dur_at = text.index('"dur":', at) + len('"dur":')
    end = text.index(",", dur_at)
    dur = text[dur_at:end]
    whole, frac = dur.split(".")
    new = "%d.%s" % (int(whole) + 1, frac)
    with open(path, "w") as f:
        f.write(text[:dur_at] + new + text[end:])
    print("tampered %s: last kernel's dur %s -> %s us" % (path, dur, new))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    g = sub.add_parser("generate")
    g.add_argument("--out", required=True)
    g.add_argument("--jobs", type=int, default=50)
    g.add_argument("--snapshot-ns", type=int, required=True)
    g.add_argument("--period-ns", type=int, required=True)
    g.add_argument("--duration-ns", type=int, required=True)
    g.add_argument("--window-ns", type=int, default=10 * 1000 * MS)
    # 2025-01-01T00:00:00Z: a multiple of every window and period in whole seconds.
    g.add_argument("--start-ns", type=int, default=1_735_689_600 * 1000 * MS)
    g.add_argument("--seed", type=int, default=22)
    t = sub.add_parser("tamper")
    t.add_argument("file")
    a = ap.parse_args()
    if a.cmd == "generate":
        generate(a)
    else:
        tamper(a.file)


if __name__ == "__main__":
    main()
