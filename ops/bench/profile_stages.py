#!/usr/bin/env python3
"""Maps a `perf script` call-graph dump of `bubblewatch process` to the
processor's stages and prints the stage table, the per-thread
split and the top self symbols.

usage: perf script -i perf.data -F comm,tid,ip,sym,dso | profile_stages.py

Each sample is one stack (leaf first). A sample under the store's open/close
or the dynamic loader counts as startup/shutdown; otherwise the first frame
from the leaf that matches a stage's pattern decides its stage, so a page
fault in a vector the windower grows counts as buffering, one in the
analyzer's launch table as analysis. librdkafka's own threads (rdk:*) count
as consume unless a frame says lz4. Python 3 standard library only.
"""

import collections
import re
import sys

# (stage, pattern), tried in this order on each frame from the leaf up.
STAGES = [
    ("lz4 decompress", r"^LZ4"),
    ("sort", r"SortKernelsByStart|SortByStart|__introsort_loop|"
     r"__insertion_sort|__merge_adaptive|__stable_sort"),
    ("window encoding", r"EncodeWindowSummary|WindowSummaryCodec|"
     r"EncodeWindowRecord"),
    ("snapshot and changelog", r"StateChangelog|JobState::Serialize|"
     r"EncodePartitionSnapshot|EncodeJobRecord|EncodeStoredPartition"),
    ("RocksDB write and fsync", r"rocksdb::|RocksDbWindowStore|fdatasync|"
     r"^fsync"),
    ("offsets", r"CommitOffsets|ResumeOffset|rd_kafka_commit"),
    ("FlatBuffer decode", r"DecodeEventBatch|fb::EventBatch|flatbuffers::"),
    ("batch validation and limits", r"ValidateBatch|CheckInterval|"
     r"EscapeUnprintableNames|IsPrintableUtf|OpenWindowsWith|CheckNewJob|"
     r"BatchAdmission|Admission::"),
    ("analysis", r"AnalyzeTrace|Analyzer::|LaunchIndex|HostActivityIndex|"
     r"DeviceTimeline|IntervalSet|WindowAccumulator|JobWindower::Finalize$"),
    ("per-job buffering", r"JobWindower::Add$|JobWindower::Evict$|"
     r"NameInterner|PartitionJobs::AddBatch$|JobWindower::JobWindower"),
    ("commit pipeline, other", r"CommitPipeline::"),
    ("consume (poll, main thread)", r"^rd_kafka|librdkafka"),
]
STARTUP = re.compile(r"OpenRocksDbWindowStore|RocksDbWindowStore::Open|"
                     r"DBImpl::Close|StreamProcessor::Create|^_dl_|^dl_main")
COMPILED = [(s, re.compile(p)) for s, p in STAGES]
FRAME = re.compile(r"^\s*([0-9a-f]+)\s+(.*?)\s+\((.*)\)\s*$")


def parse(lines):
    """Yields (comm, tid, [(sym, dso), ...] leaf first) per sample."""
    head = None
    frames = []
    for line in lines:
        line = line.rstrip("\n")
        if not line.strip():
            if head is not None:
                yield head[0], head[1], frames
            head, frames = None, []
            continue
        if head is None:
            parts = line.split()
            # comm may contain spaces; tid is the last field.
            head = (" ".join(parts[:-1]), parts[-1])
            continue
        m = FRAME.match(line)
        if m:
            sym = re.sub(r"\+0x[0-9a-f]+$", "", m.group(2))
            sym = sym.replace(" (inlined)", "")
            sym = sym.replace("(anonymous namespace)::", "")
            # Drop the argument list, keep the qualified name.
            sym = re.sub(r"\(.*$", "", sym) if not sym.startswith("(") else sym
            frames.append((sym, m.group(3)))
    if head is not None:
        yield head[0], head[1], frames


def stage_of(comm, frames):
    names = [s for s, _ in frames]
    if any(STARTUP.search(s) for s in names):
        return "startup and shutdown (store open/close, loader)"
    rdk = comm.startswith("rdk:")
    for sym, dso in frames:
        for stage, rx in COMPILED:
            if rx.search(sym) or (stage.startswith("consume") and
                                  "librdkafka" in dso):
                if rdk and stage.startswith("consume"):
                    break
                return stage
    if rdk:
        return "consume (librdkafka threads: fetch, sockets, produce acks)"
    if comm.startswith("rocksdb"):
        return "RocksDB write and fsync"
    return "other (main thread)"


def main():
    total = 0
    by_stage = collections.Counter()
    faults = collections.Counter()
    kernel = collections.Counter()
    by_comm = collections.Counter()
    by_comm_dso = collections.Counter()
    self_sym = collections.Counter()
    other_leaf = collections.Counter()
    for comm, _tid, frames in parse(sys.stdin):
        if not frames:
            continue
        total += 1
        st = stage_of(comm, frames)
        by_stage[st] += 1
        if any(s == "asm_exc_page_fault" for s, _ in frames):
            faults[st] += 1
        if frames[0][1] == "[kernel.kallsyms]":
            kernel[st] += 1
        thread = "main" if not comm.startswith(("rdk:", "rocksdb")) else comm
        by_comm[thread] += 1
        by_comm_dso[(thread, frames[0][1].rsplit("/", 1)[-1])] += 1
        leaf = frames[0][0]
        if frames[0][1] not in ("[kernel.kallsyms]", "inlined") and \
                leaf.startswith(("0x", "[unknown]")):
            leaf = "[%s]" % frames[0][1].rsplit("/", 1)[-1]
        self_sym[leaf] += 1
        if st.startswith("other"):
            # The first user-space frame names what the rest is.
            user = next((s for s, d in frames if d != "[kernel.kallsyms]"),
                        frames[0][0])
            other_leaf[user] += 1
    if total == 0:
        sys.exit("profile_stages.py: no samples")

    def pct(n):
        return "%5.1f%%" % (100.0 * n / total)

    print("samples: %d (cpu-clock; each is 1/F s of CPU time)" % total)
    print("\n| stage | share of CPU samples | of which kernel | "
          "of which page faults |")
    print("|---|---|---|---|")
    for st, n in by_stage.most_common():
        print("| %s | %s | %s | %s |" % (st, pct(n), pct(kernel[st]),
                                        pct(faults[st])))
    print("\n| thread | share |\n|---|---|")
    for c, n in by_comm.most_common():
        print("| %s | %s |" % (c, pct(n)))
    print("\n| thread, DSO of the leaf | share |\n|---|---|")
    for (c, d), n in by_comm_dso.most_common(12):
        print("| %s, %s | %s |" % (c, d, pct(n)))
    print("\n| self symbol (leaf) | share |\n|---|---|")
    for s, n in self_sym.most_common(20):
        print("| `%s` | %s |" % (s[:90], pct(n)))
    if other_leaf:
        print("\nother (main thread), by first user-space frame:")
        for s, n in other_leaf.most_common(8):
            print("  %s  %s" % (pct(n), s[:100]))


if __name__ == "__main__":
    main()
