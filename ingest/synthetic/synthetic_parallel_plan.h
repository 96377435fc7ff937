// The shape of a synthetic parallel job (synthetic_parallel_job.h): its
// process groups, its collective calls and each rank's program, an ordered
// list of what the rank does (loader, kernels, syncs, collectives), before
// any timing. Internal to ingest/synthetic: MakeParallelJob simulates these
// programs, once with the planted roots and once without each.
#ifndef BUBBLEWATCH_INGEST_SYNTHETIC_SYNTHETIC_PARALLEL_PLAN_H_
#define BUBBLEWATCH_INGEST_SYNTHETIC_SYNTHETIC_PARALLEL_PLAN_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "ingest/synthetic/synthetic_parallel_job.h"
#include "ingest/synthetic/synthetic_step.h"

namespace bubblewatch {

// Host-side costs, as in synthetic_straggler.cc: a launch call lasts 4 us, a
// kernel can start 7 us after its launch began, launches are 6 us apart.
inline constexpr int64_t kParallelLaunchCallNs = 4 * kNsPerUs;
inline constexpr int64_t kParallelLaunchToKernelNs = 7 * kNsPerUs;
inline constexpr int64_t kParallelLaunchGapNs = 6 * kNsPerUs;

enum class ParallelGroupKind : uint8_t { kTensor, kData, kPipe };

// A process group: TP (a host's ranks), DP (one tensor index of a stage) or
// a pipe pair (one rank of two consecutive stages).
struct ParallelGroup {
  ParallelGroupKind kind = ParallelGroupKind::kTensor;
  std::string name;        // "1", "2", ...
  std::string ranks_text;  // "[0, 1, 2, 3]"
  std::vector<int> ranks;  // Ascending.
  // What its kernels' args say: the group itself, or for a pipe pair with
  // ParallelJobOptions::pipeline_groups the stage-spanning group it is in.
  std::string shown_name;
  std::string shown_ranks_text;
  int shown_size = 0;
};

// One collective call of the plan.
struct PlannedCollective {
  int group = 0;
  int64_t seq = 0;
  int step = 0;
  int64_t transfer_ns = 0;
};

enum class ParallelOpKind : uint8_t {
  kStepBegin,
  kLoader,
  kCompute,
  kSync,
  kCollective,
  kStepEnd
};

// One thing a rank does, in program order.
struct ParallelOp {
  ParallelOpKind kind = ParallelOpKind::kCompute;
  int64_t ns = 0;      // Loader or kernel length; a sync's hold.
  bool active = true;  // kSync only: planted or not.
  int instance = -1;   // kCollective.
  bool send = false;   // kCollective of a pipe group: send, else recv.
  int step = 0;
};

// Where each root applies in a rank's program.
struct ParallelStepOps {
  size_t loader = 0;
  size_t first_kernel = 0;
  size_t sync = 0;
};

struct ParallelPlan {
  int tp = 1, dp = 1, pp = 1;
  std::vector<ParallelGroup> groups;
  std::vector<PlannedCollective> instances;            // One per (group, Seq).
  std::vector<std::vector<ParallelOp>> programs;       // Per rank.
  std::vector<std::vector<ParallelStepOps>> step_ops;  // Per rank, per step.
  // Per rank: its TP and DP group, and its pipe pair with the previous and
  // the next stage (indices into groups; -1 if none).
  std::vector<int> tensor_group, data_group, prev_group, next_group;
};

// The plan of a job: groups in PyTorch's creation order, then each step of
// each rank. Kernel and loader lengths are drawn from options.seed here, in
// a fixed order, so that they do not depend on the roots.
// REQUIRES: options.tp, dp, pp, steps >= 1.
ParallelPlan MakeParallelPlan(const ParallelJobOptions& options);

// Every rank's program with `roots` applied (lengthened kernel or loader,
// an active sync). REQUIRES: the roots name ranks and steps of the plan.
std::vector<std::vector<ParallelOp>> ProgramsWithRoots(
    const ParallelPlan& plan, const std::vector<PlantedRoot>& roots);

}  // namespace bubblewatch

#endif  // BUBBLEWATCH_INGEST_SYNTHETIC_SYNTHETIC_PARALLEL_PLAN_H_
