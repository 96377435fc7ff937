// The synthetic fleet's workload: one training step of a small transformer
// (data loader, host-to-device copy, forward, loss, backward with NCCL
// all-reduce buckets, AdamW), written as a list of host operations, plus the
// incidents each scenario plants into it.
//
// A StepPlan says *what* the launching thread does, in order; the
// RankSimulator (synthetic_rank.h) decides *when* things happen on the host
// and the GPU, and what the resulting gaps are made of.
#ifndef BUBBLEWATCH_INGEST_SYNTHETIC_SYNTHETIC_STEP_H_
#define BUBBLEWATCH_INGEST_SYNTHETIC_SYNTHETIC_STEP_H_

#include <cstdint>
#include <vector>

#include "ingest/synthetic/synthetic_fleet.h"
#include "ingest/synthetic/synthetic_rng.h"
#include "schemas/trace.h"

namespace bubblewatch {

enum class StepOpKind : uint8_t {
  kPython,        // Host time no explaining event covers: `ns`.
  kOpen,          // A context range (`name`, `category`) begins.
  kClose,         // The innermost open range ends.
  kKernel,        // cudaLaunchKernel; the kernel runs in stream order.
  kSideKernel,    // cudaLaunchKernel; the kernel overlaps the running one
                  // (NCCL on its own stream).
  kCopyToDevice,  // cudaMemcpyAsync of pinned memory to the device.
  kItem,          // aten::item: a 4-byte pageable copy back, then a sync.
  kDeviceSync,    // cudaDeviceSynchronize.
  kDataLoader,    // The DataLoader's __next__ range.
  kFree,          // cudaFree: waits for the device to drain, then `ns`.
  kMalloc,        // cudaMalloc lasting `ns`.
};

// One host operation. Durations come from one of three fields:
//   weight         kernels scaled to the requested event rate;
//   ns             fixed nanoseconds;
//   step_fraction  a fraction of the step's nominal length (incidents, so
//                  that they keep their share whatever the rate).
struct StepOp {
  StepOpKind kind = StepOpKind::kPython;
  NameId name = 0;
  CpuEventCategory category = CpuEventCategory::kCpuOp;
  int32_t stream = 0;
  bool on_compute_stream = false;  // kCopyToDevice: the next kernel waits.
  double weight = 0;
  int64_t ns = 0;
  double step_fraction = 0;
  int64_t bytes = 0;  // kCopyToDevice with fixed size.
};

struct StepPlan {
  std::vector<StepOp> ops;
  double total_weight = 0;       // Sum of kernel weights.
  double incident_fraction = 0;  // Sum of step_fraction.
  int64_t events = 0;            // Trace events the plan will emit.
};

// Nanoseconds per microsecond: plans are drawn in µs.
inline constexpr int64_t kNsPerUs = 1000;

// The streams the synthetic ranks use, as a Kineto trace numbers them.
inline constexpr int32_t kComputeStream = 7;
inline constexpr int32_t kCopyStream = 13;
inline constexpr int32_t kNcclStream = 24;

// The plan of step `step` (0-based) of a rank running `scenario` (not kMix).
StepPlan BuildStepPlan(SyntheticScenario scenario, int64_t step,
                       SyntheticRng& rng);

}  // namespace bubblewatch

#endif  // BUBBLEWATCH_INGEST_SYNTHETIC_SYNTHETIC_STEP_H_
