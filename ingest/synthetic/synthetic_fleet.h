// The synthetic fleet: training jobs whose GPU bubbles have known causes and
// lengths, so that every later stage (the processor, alerts, queries) can be
// measured against ground truth without real GPUs.
//
// Each job has `gpus_per_job` ranks; rank r drives device r and has one
// launching thread. Every rank runs a step loop of a small transformer
// (synthetic_step.h): kernels on a compute stream, NCCL all-reduce kernels
// overlapping them on their own stream, copies on a copy stream, each kernel
// and copy launched by a correlation-matched cudaLaunchKernel /
// cudaMemcpyAsync on the launching thread, inside realistic framework ranges.
// Scenarios plant bubbles:
//   healthy     kernels are queued ahead; a loss.item() every 10 steps;
//   sync        .item() in the middle of the forward and a
//               cudaDeviceSynchronize + Python logging after each step;
//   launch      a flood of tiny kernels whose launches arrive slower than
//               they run, after each step's loss.item();
//   alloc       empty_cache() (cudaFree) after each step and cudaMalloc before
//               the first matmuls of the next one;
//   dataloader  the DataLoader's __next__ stalls at each step start;
//   memcpy      a large pinned host-to-device copy on the compute stream at
//               each step start, which the next kernel waits for;
//   straggler   multi-rank jobs in lockstep through an all-reduce
//               (synthetic_straggler.h), each with one straggler that comes
//               and goes: in job j a seeded rank is late by a seeded cause
//               (data_loading, host_sync or compute, 3 ms a step) in a
//               seeded run of steps (10-40 % in, 20-50 % of the steps). Its
//               steps take about 6 ms (9 ms while late) and emit about 30
//               events per rank, whatever the rate; the collective kernels
//               carry their identity (Trace::collectives). Needs at least 2
//               GPUs per job. Its truth is the straggler (StragglerTruth),
//               not bubble windows. Every third job (j mod 3 = 2) with an
//               even number of ranks, at least 4, is instead a tensor x
//               data parallel job of synthetic_parallel_job.h (TP 4 when
//               that leaves 2 DP groups or more, else TP 2; a host per TP
//               group, host clocks up to 5 ms apart; TP all-gathers and DP
//               all-reduces): its one root is drawn the same way, and its
//               truth's planted wait is that of the instances the root
//               caused (through the others' lateness too);
//   mix         job j runs the scenario healthy, sync, launch, alloc,
//               dataloader, memcpy in turn (j mod 6), except that with at
//               least 2 GPUs per job every 7th job (j mod 7 = 6: jobs 6,
//               13, 20, ...) is a straggler job as above. The other jobs are
//               the same, event for event, as before straggler jobs joined;
//   lockstep    the straggler scenario's multi-rank jobs with no rank late:
//               the same step loop, collective identities and natural
//               jitter (the same code, MakeStragglerJob with no late
//               rank), the healthy baseline a straggler detector must stay
//               silent on. Unlike the straggler scenario its steps follow
//               the rate: each rank emits about the rate's events per
//               second (27 events a step; at 4,426/s the straggler
//               scenario's 6.1 ms step, at the default 20,000/s 1.35 ms;
//               rates above 88,500/s are capped there, where kernels would
//               get shorter than their launches). Needs at least 2 GPUs per
//               job; its truth is a straggler line with rank -1. Its TP x DP
//               jobs (as in straggler) have no root, their times scaled to
//               the rate likewise (30 events a step).
// Every non-healthy scenario also reads the loss with .item() each step.
//
// Ground truth is by construction (synthetic_truth.h): per device and
// event-time window, busy time, bubble time and bubble time per cause.
//
// Times are epoch nanoseconds from `start_time_ns`. The output depends only
// on the options: the same seed gives the same fleet, event for event.
// The event rate is approximate: incidents take their share of each step.
// A launch-bound flood emits about 300k events/s while it lasts, so at low
// rates it can fill only a small share of the time (rate / 300k).
#ifndef BUBBLEWATCH_INGEST_SYNTHETIC_SYNTHETIC_FLEET_H_
#define BUBBLEWATCH_INGEST_SYNTHETIC_SYNTHETIC_FLEET_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "ingest/synthetic/synthetic_straggler.h"
#include "ingest/synthetic/synthetic_truth.h"
#include "schemas/trace.h"

namespace bubblewatch {

enum class SyntheticScenario : uint8_t {
  kHealthy,
  kSync,
  kLaunch,
  kAlloc,
  kDataloader,
  kMemcpy,
  kStraggler,
  kMix,
  kLockstep,  // After kMix: kMix never yields it.
};

// "healthy", "sync", "launch", "alloc", "dataloader", "memcpy", "straggler",
// "mix", "lockstep".
absl::string_view SyntheticScenarioName(SyntheticScenario scenario);
std::optional<SyntheticScenario> ParseSyntheticScenario(absl::string_view name);

// 2026-01-01T00:00:00Z: the default start, so runs are reproducible.
inline constexpr int64_t kDefaultSyntheticStartNs = 1767225600LL * 1000000000;

struct SyntheticFleetOptions {
  int jobs = 1;
  int gpus_per_job = 8;
  absl::Duration duration = absl::Seconds(60);
  // Approximate trace events (GPU activities + CPU events) per second and GPU.
  double events_per_second_per_gpu = 20000;
  SyntheticScenario scenario = SyntheticScenario::kMix;
  uint64_t seed = 1;
  int64_t start_time_ns = kDefaultSyntheticStartNs;
  // Jobs are named "<job_prefix>-000", "<job_prefix>-001", ...
  std::string job_prefix = "synthetic-job";
  // Truth windows; the processor's default window is 10 s
  // (docs/semantics.md#windows).
  int64_t truth_window_ns = 10'000'000'000;
  // Also keep every planted gap with its cause segments (memory: about
  // 100 bytes per gap; tests use it, big runs need not).
  bool keep_gaps = false;
};

struct SyntheticJob {
  std::string job;
  SyntheticScenario scenario = SyntheticScenario::kHealthy;  // Never kMix.
  // One trace per rank (rank r = device r; job, host, rank, world_size set).
  // All share the string table of synthetic_names.h.
  std::vector<Trace> ranks;
  // The truth per device and window (TruthAccumulator::Windows()).
  std::vector<TruthWindow> truth;
  int64_t truth_window_ns = 0;
  // Every gap, by device then time; empty unless keep_gaps.
  std::vector<PlantedGap> gaps;
  // The straggler scenario's truth (true time = the traces' time: its hosts
  // are not skewed); for a lockstep job late_rank -1 and nothing planted;
  // absent for the other scenarios. `truth` is empty for straggler and
  // lockstep jobs.
  std::optional<StragglerTruth> straggler;

  // All ranks in one Trace (what the processor assembles for the job), with
  // their collective records.
  Trace MergedTrace() const;
};

// Generates the fleet. Errors: kInvalidArgument for options out of range
// (jobs or GPUs < 1, non-positive duration or rate, a window < 1 ms, the
// straggler or lockstep scenario with one GPU per job).
absl::StatusOr<std::vector<SyntheticJob>> GenerateSyntheticFleet(
    const SyntheticFleetOptions& options);

// Writes the truth of `jobs` as JSON lines (WriteTruthJsonLines) to `path`;
// a straggler job writes one line instead (StragglerTruthJsonLine).
// Errors: kUnavailable when the file cannot be written.
// One JSON line for a straggler job's truth, times in trace nanoseconds:
//   {"job":"J","scenario":"straggler","scope":"straggler","ranks":8,
//    "rank":3,"host":"J-node-00","cause":"data_loading",
//    "start_ns":...,"end_ns":...,"planted_wait_ns":...}
// [start_ns, end_ns) is when the rank was late; planted_wait_ns the waits it
// caused in the other ranks' all-reduce kernels. A lockstep job's line says
// "scenario":"lockstep", "rank":-1, "host":"", "cause":"none" and 0 for the
// times and the wait: no straggler was planted.
std::string StragglerTruthJsonLine(const SyntheticJob& job);

absl::Status WriteSyntheticTruthFile(const std::vector<SyntheticJob>& jobs,
                                     absl::string_view path);

}  // namespace bubblewatch

#endif  // BUBBLEWATCH_INGEST_SYNTHETIC_SYNTHETIC_FLEET_H_
