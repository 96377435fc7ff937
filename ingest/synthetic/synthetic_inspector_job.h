// A synthetic TP × DP training job written as NCCL Inspector logs (one per
// process, as the plugin writes them: docs/analyze.md#inspector-logs), with
// the truth of its waits, for the Inspector reader's and the collective
// analysis's tests and benchmarks.
//
// Processes are job ranks r = d × tp + t (data-parallel replica d,
// tensor-parallel index t), `procs_per_host` to a host. Each belongs to
// three communicators: the whole job (one AllReduce at the start, the
// communicator that gives job ranks), its TP group {d × tp + t'} (AllGather)
// and its DP group {d' × tp + t} (AllReduce). A step is, on every process:
// `tp_per_step` times (compute, TP all-gather), then a short compute and
// the DP all-reduce. A collective starts on a process when its own time
// before it is done and ends on every member together, its transfer time
// after the last member arrived; a member's wait is the last arrival minus
// its own. Own times have seeded jitter; the planted process computes
// `plant_us` longer before the first all-gather of each step in
// [plant_from_step, plant_until_step).
//
// Hosts' clocks are apart (host h reads true time + skew_us[h % size]).
// Verbose logs carry each kernel's start and stop (two channels);
// exec-time-only logs carry exec times only. Every time is an integer
// microsecond, as the plugin writes them, so the truth is exact.
#ifndef BUBBLEWATCH_INGEST_SYNTHETIC_SYNTHETIC_INSPECTOR_JOB_H_
#define BUBBLEWATCH_INGEST_SYNTHETIC_SYNTHETIC_INSPECTOR_JOB_H_

#include <cstdint>
#include <limits>
#include <string>
#include <vector>

namespace bubblewatch {

struct InspectorJobSpec {
  int tp = 2;
  int dp = 2;
  int procs_per_host = 2;
  int steps = 40;
  int tp_per_step = 2;
  int64_t compute_us = 8'000;  // Before each all-gather, before jitter.
  int64_t dp_compute_us = 1'000;
  int64_t jitter_us = 100;  // Own times vary by [0, jitter_us].
  int64_t tp_transfer_us = 300;
  int64_t dp_transfer_us = 1'500;
  int plant = 1;  // The planted process (job rank); -1: none.
  int64_t plant_us = 3'000;
  int plant_from_step = 0;
  int plant_until_step = std::numeric_limits<int>::max();
  std::vector<int64_t> skew_us = {0, 41'000, -17'500};
  bool verbose = true;
  // "v4.3" (and later): a dump marker, then bare records; "v4.2": every
  // record with its own header and metadata, after a marker; "v4.0": no
  // markers.
  std::string version = "v4.3";
  int dump_every_steps = 5;
  // Ring drops: process `drop_process` loses its TP communicator's records
  // with coll_sn in [drop_from_sn, drop_from_sn + drop_count), overwritten
  // before a dump, as the plugin's ring does; its next dump marker reports
  // them (coll_dropped_total, coll_dropped_since_last_dump).
  int drop_process = -1;
  int64_t drop_from_sn = 0;
  int64_t drop_count = 0;
  int64_t start_us = 1'752'867'229'000'000;
  uint64_t seed = 1;
};

struct InspectorJobTruth {
  std::vector<std::string> hosts;  // Per job rank.
  std::vector<int64_t> pids;       // Per job rank.
  std::vector<int64_t> wait_us;    // Per job rank: its waits in all.
  // The waits the plant added: every process's waits minus those of the
  // same job without the plant (same jitter).
  int64_t planted_wait_us = 0;
  int64_t total_wait_us = 0;
  int64_t coll_records = 0;  // Written (without the dropped ones).
  int64_t dropped = 0;
};

struct InspectorJobFile {
  std::string name;  // "<host>-pid<PID>.log"
  std::string text;
};

struct InspectorJobLogs {
  std::vector<InspectorJobFile> files;  // Per job rank.
  InspectorJobTruth truth;
};

// Deterministic in the spec.
InspectorJobLogs GenerateInspectorJob(const InspectorJobSpec& spec);

}  // namespace bubblewatch

#endif  // BUBBLEWATCH_INGEST_SYNTHETIC_SYNTHETIC_INSPECTOR_JOB_H_
