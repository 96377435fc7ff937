// A synthetic multi-rank training job with a planted straggler: N ranks
// step in lockstep through an all-reduce, and one rank is made late by a
// known cause, so that the collective analysis (docs/semantics.md#stragglers)
// can be measured against the truth.
//
// Each rank runs, per step: a DataLoader fetch on its launching thread, the
// launches of its compute kernels (queued ahead), the kernels back to back
// on the compute stream, then an NCCL all-reduce on its own stream. The
// all-reduce of a step starts on each rank when its compute is done and ends
// on every rank together, a fixed transfer time after the last rank
// arrived (plus a few microseconds of jitter). Every rank has small random
// jitter in its loader and kernel times; the late rank additionally, in
// every step:
//   data_loading  its DataLoader fetch takes `delay` longer;
//   host_sync     a cudaStreamSynchronize in the middle of its step holds
//                 the host `delay` past its last queued kernel;
//   compute       its kernels run slower, `delay` in total.
// The late rank is late only in steps [late_from_step, late_until_step)
// (all steps by default), so a straggler can come and go.
// Ranks are grouped into hosts (`ranks_per_host`); each host's clock can be
// skewed, as the clocks of real hosts are.
//
// Collective kernels carry process group "0", Seq = step, type
// "allreduce", the group size and the group's ranks, as a PyTorch profiler
// trace would. The output depends only on the options.
#ifndef BUBBLEWATCH_INGEST_SYNTHETIC_SYNTHETIC_STRAGGLER_H_
#define BUBBLEWATCH_INGEST_SYNTHETIC_SYNTHETIC_STRAGGLER_H_

#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "schemas/bubble_cause.h"
#include "schemas/trace.h"

namespace bubblewatch {

enum class StragglerCause : uint8_t { kDataLoading, kHostSync, kCompute };

// "data_loading", "host_sync", "compute".
absl::string_view StragglerCauseName(StragglerCause cause);
std::optional<StragglerCause> ParseStragglerCause(absl::string_view name);

struct StragglerJobOptions {
  std::string job = "straggler-job";
  int ranks = 8;
  int ranks_per_host = 8;
  int steps = 40;
  int kernels_per_step = 12;
  int late_rank = 3;
  // The steps in which the late rank is late: [late_from_step,
  // late_until_step).
  int late_from_step = 0;
  int late_until_step = std::numeric_limits<int>::max();
  StragglerCause cause = StragglerCause::kDataLoading;
  int64_t delay_ns = 3'000'000;  // How late the late rank is, per step.
  int64_t kernel_ns = 400'000;   // A compute kernel, before jitter.
  int64_t loader_ns = 500'000;   // A DataLoader fetch, before jitter.
  int64_t transfer_ns = 800'000;
  // Host h's clock reads true time + skew_ns[h % size] (none if empty).
  std::vector<int64_t> host_skew_ns;
  int64_t start_time_ns = 1'700'000'000'000'000'000;
  uint64_t seed = 1;
};

// What was planted, by construction.
struct StragglerTruth {
  int late_rank = 0;
  StragglerCause cause = StragglerCause::kDataLoading;
  // The waits the late rank caused in the other ranks' all-reduce kernels
  // (true time) in its late steps, in those after the first (the first has no
  // earlier sync point to compare with), and in all steps.
  int64_t planted_wait_ns = 0;
  int64_t planted_wait_all_steps_ns = 0;
  std::vector<int64_t> host_skew_ns;  // Per host.
  // When the late rank was late (true time): from the start of its first
  // late step to the latest end of the all-reduce of its last; both 0 if no
  // step was late.
  int64_t late_start_ns = 0;
  int64_t late_end_ns = 0;
  // The last step's all-reduce end (true time): where the job's events end.
  int64_t end_ns = 0;
};

struct StragglerJob {
  std::vector<Trace> ranks;  // ranks[r] is rank r, on device r % per host.
  StragglerTruth truth;
};

StragglerJob MakeStragglerJob(const StragglerJobOptions& options);

}  // namespace bubblewatch

#endif  // BUBBLEWATCH_INGEST_SYNTHETIC_SYNTHETIC_STRAGGLER_H_
