// A synthetic tensor × data × pipeline parallel training job built like a
// real one, with planted root causes and the truth every multi-rank rule
// (docs/semantics.md#collectives) is checked against.
//
// Layout (Megatron's order, tensor-parallel fastest): rank
// r = t + TP·(d + DP·p) for tensor index t, data-parallel index d and
// pipeline stage p. A host holds the TP ranks of one (d, p): host
// h = r / TP, ranks h·TP .. h·TP+TP-1, on devices 0 .. TP-1. Process groups,
// as PyTorch names them in the kernel args (`Process Group Name` a number
// as a string, in creation order; "0" is the world group, which no kernel
// here uses):
//   - a TP group per host (all-gather), names "1" .. "DP·PP";
//   - a DP group per (t, p) (all-reduce), the next TP·PP names;
//   - if PP > 1, a 2-rank group per pair of consecutive stages and (t, d)
//     (send/recv), the next names. Each pair is its own group so that its
//     send/recv is an instance of exactly its two ranks
//     (docs/semantics.md#matching-instances); a PP-wide group would leave
//     every point-to-point instance unmatched when PP > 2.
// With `pipeline_groups`, send/recv kernels instead name the stage-spanning
// group of their (t, d) (Megatron's pipeline group: all PP stages), which
// lists more ranks than take part, and carry `Seq` as PyTorch records it
// for point-to-point calls (the group's next collective Seq, here always 1:
// no collective runs in that group), so only `Dst Rank`/`Src Rank` tell
// the pair (docs/semantics.md#point-to-point-pairs).
// `Process Group Ranks` as PyTorch prints them ("[0, 1, 2, 3]"), `Seq` per
// group from 1, `Group size`, `Collective name` ("_allgather_base",
// "allreduce", "send", "recv"), a send's `Dst Rank` and a recv's
// `Src Rank` (global ranks), and the kernel names NCCL 2.19+ uses.
//
// Each step, on each rank of stage p: a DataLoader fetch on the launching
// thread; if p > 0 the activations from p-1 (recv); K forward kernels; the
// TP all-gather (TP > 1); K more; if p < PP-1 the send to p+1 and the
// gradients back from it (recv); K backward kernels; if p > 0 the
// gradients to p-1 (send); the DP all-reduce (DP > 1); then the host waits
// for the GPU (cudaStreamSynchronize, as `loss.item()` does) before the
// next step. Every kernel, collective ones included, runs in order on the
// rank's GPU (the compute waits for the collective's result); the host
// launches ahead of the GPU.
//
// The simulation is causal: a collective starts on each member when that
// member's GPU reaches it (launched, and its earlier work done) and ends on
// every member at max(arrivals) + its transfer time. So a rank delayed
// before its TP all-gather delays its whole host's, which arrive late at
// their DP all-reduces, which delays every DP peer: the chain the blame
// rules must follow back to the root.
//
// Clocks: all times are generated in true time, then each host's clock is
// applied: local(t) = t + offset_h + drift_h·(t - start_time_ns), drift in
// ppm, rounded to ns. Ranks of one host share a clock. Host names are not
// set by default (each file its own clock domain, as real PyTorch traces);
// `host_names` sets "host-<h>".
//
// Planted roots: (rank, step, extra ns, cause): compute (the first forward
// kernel of that step runs `extra` longer), data_loading (the DataLoader
// fetch takes `extra` longer: a CPU gap before the step's kernels, covered
// by a DataLoader-like event, as synthetic_straggler.h plants it) or
// host_sync (a cudaStreamSynchronize after half the forward kernels holds
// the host `extra` past its last queued kernel).
//
// Randomness: kernel and loader jitter, and the clocks, come from `seed`
// alone, drawn the same whether or not roots are planted, so a job
// regenerated without a root differs only by that root.
//
// Truth definitions (ParallelJobTruth), all in true time:
//   - instance: a collective call, one per (group, Seq). start_ns[i] is
//     member i's kernel start (its arrival), arrival_ns the latest,
//     end_ns = arrival_ns + transfer. The late rank starts at arrival_ns
//     (ties: the lowest rank). wait_ns = Σ (arrival_ns - start_ns[i]).
//   - root of an instance: its spread is arrival_ns minus its earliest
//     start. The instance is rooted when the roots together widen its
//     spread by at least half the smallest root's extra (against the job
//     regenerated without any root, same seed); its root is then the root
//     without which its spread is narrowest (the first of equals), else
//     none (-1). For a compute root at rank 5, step 3 of a 4×2 job: the TP
//     all-gather of host 1 in step 3 (late rank 5) and the DP all-reduces
//     of step 3 (late rank: each group's host-1 member) have root 5;
//     nothing else does, as after them every rank is equally late. Roots
//     should exceed the jitter by far, or the counterfactual is blurred.
//   - a rank's comm_wait_ns: Σ over its instances of arrival_ns - its start
//     (its GPU runs nothing else meanwhile, so this is what
//     docs/semantics.md#waits-and-transfer calls its wait, uncorrected).
//   - end_ns: where the job's GPU work ends (the end of the last collective
//     when DP > 1); job_ns = end_ns - start_time_ns.
//   - a root's saved_ns: job_ns with every root − job_ns regenerated without
//     that one. job_ns_without_stragglers: job_ns with no root at all.
//     A root that fits in slack delays nothing (saved_ns 0, no instance
//     rooted): e.g. a later pipeline stage's DataLoader delay shorter than
//     the earlier stages' forward it waits for anyway.
//   - ClockOffsetAt(rank, t): local(t) - t for the rank's host.
#ifndef BUBBLEWATCH_INGEST_SYNTHETIC_SYNTHETIC_PARALLEL_JOB_H_
#define BUBBLEWATCH_INGEST_SYNTHETIC_SYNTHETIC_PARALLEL_JOB_H_

#include <cstdint>
#include <string>
#include <vector>

#include "ingest/synthetic/synthetic_fleet.h"
#include "ingest/synthetic/synthetic_straggler.h"
#include "schemas/trace.h"

namespace bubblewatch {

// A planted root cause: `rank` is `extra_ns` late in `step` (and in each of
// the `steps` - 1 steps after it: a straggler that lasts), by `cause`.
struct PlantedRoot {
  int rank = 0;
  int step = 0;
  int64_t extra_ns = 0;
  StragglerCause cause = StragglerCause::kCompute;
  int steps = 1;
};

struct ParallelJobOptions {
  std::string job = "parallel-job";
  int tp = 4;  // Tensor-parallel size: ranks per host. >= 1.
  int dp = 2;  // Data-parallel size. >= 1.
  int pp = 1;  // Pipeline stages. >= 1.
  int steps = 8;
  int kernels_per_phase = 4;  // K: forward A, forward B and backward each.
  int64_t kernel_ns = 200'000;
  int64_t kernel_jitter_ns = 4'000;  // Each kernel ± uniform.
  int64_t loader_ns = 300'000;
  int64_t loader_jitter_ns = 10'000;
  // Transfer times: from the last arrival to the end.
  int64_t all_gather_ns = 150'000;
  int64_t all_reduce_ns = 600'000;
  int64_t send_recv_ns = 80'000;
  // Host h's clock offset: clock_offset_ns[h % size] if given, else uniform
  // in ±max_clock_offset_ns. Drift likewise, in ppm.
  std::vector<int64_t> clock_offset_ns;
  int64_t max_clock_offset_ns = 5'000'000;
  std::vector<double> drift_ppm;
  double max_drift_ppm = 0;
  bool host_names = false;  // Default: none, as PyTorch writes traces.
  // Send/recv kernels name the PP-wide group (see the header comment).
  bool pipeline_groups = false;
  int world_size = -1;  // distributedInfo's; -1: TP·DP·PP.
  std::vector<PlantedRoot> roots;
  int64_t start_time_ns = kDefaultSyntheticStartNs;
  uint64_t seed = 1;
};

// One collective call: see the header comment for the definitions.
struct ParallelInstanceTruth {
  std::string group;       // Process Group Name.
  int64_t seq = 0;         // Seq.
  std::string collective;  // "_allgather_base", "allreduce", "send/recv".
  int step = 0;
  std::vector<int32_t> members;   // Global ranks, ascending.
  std::vector<int64_t> start_ns;  // Per member, same order.
  int64_t arrival_ns = 0;
  int64_t end_ns = 0;
  int32_t late_rank = -1;
  int64_t wait_ns = 0;
  int root = -1;           // Index into ParallelJobTruth::roots, or -1.
  int32_t root_rank = -1;  // That root's rank, or -1.
};

struct ParallelRankTruth {
  int32_t rank = 0;
  int32_t host = 0;
  int32_t tp_index = 0;
  int32_t dp_index = 0;
  int32_t stage = 0;
  int64_t comm_wait_ns = 0;
};

struct ParallelRootTruth {
  PlantedRoot root;
  int64_t saved_ns = 0;
};

struct ParallelJobTruth {
  int tp = 1, dp = 1, pp = 1;
  int64_t start_time_ns = 0;             // The clocks' drift reference.
  std::vector<int64_t> host_offset_ns;   // Per host.
  std::vector<double> host_drift_ppm;    // Per host.
  std::vector<ParallelRankTruth> ranks;  // By rank.
  // By step; within a step, in the order rank 0, 1, ... first reach them.
  std::vector<ParallelInstanceTruth> instances;
  std::vector<ParallelRootTruth> roots;  // As planted.
  int64_t end_ns = 0;
  int64_t job_ns = 0;
  int64_t job_ns_without_stragglers = 0;

  // The rank's clock minus true time at true time `true_ns`.
  int64_t ClockOffsetAt(int rank, int64_t true_ns) const;
};

struct ParallelJob {
  std::vector<Trace> ranks;  // ranks[r]: rank r, device r % TP.
  ParallelJobTruth truth;
};

// REQUIRES: tp, dp, pp, steps >= 1; roots name existing ranks and steps.
ParallelJob MakeParallelJob(const ParallelJobOptions& options);

// The truth as one JSON document (truth.json of tests/testing/
// make_parallel_job): the fields above, times in ns.
std::string ParallelJobTruthJson(const ParallelJobTruth& truth);

}  // namespace bubblewatch

#endif  // BUBBLEWATCH_INGEST_SYNTHETIC_SYNTHETIC_PARALLEL_JOB_H_
