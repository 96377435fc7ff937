// RankSimulator: runs StepPlans of one rank (one launching thread, one GPU)
// in simulated time, appending the events to the rank's Trace and the
// planted bubbles to the ground truth.
//
// The model, kept simple enough that the truth is exact:
//   - The launching thread's time is a sequence of touching HostBlocks, each
//     of one class (sync, allocator, data loading, launch, or uncovered
//     Python); an explaining range that is open (aten::item, the DataLoader
//     range, empty_cache) lends its class to everything inside it, the
//     higher class winning as in docs/semantics.md#step-3-host-side-time.
//   - Kernels run in launch order on the compute stream: a kernel starts at
//     max(previous end (+ a little queue jitter), launch start + launch
//     latency, copies it waits for), so the busy set is exactly the union of
//     these kernels and every gap is seen when the kernel after it is placed.
//   - NCCL kernels run on their own stream strictly inside the compute
//     kernel that is running, so they never change the busy set; when that
//     is impossible they run in stream order like any kernel.
//   - Copies run on the copy stream or, when asked, in compute-stream order;
//     they are not kernels, so they never end a gap, but a copy issued later
//     may run inside a gap seen earlier: gaps are painted only once the host
//     clock has passed them.
//   - The launch queue holds at most kLaunchQueueDepth kernels; beyond that
//     cudaLaunchKernel blocks, as CUDA's does.
#ifndef BUBBLEWATCH_INGEST_SYNTHETIC_SYNTHETIC_RANK_H_
#define BUBBLEWATCH_INGEST_SYNTHETIC_SYNTHETIC_RANK_H_

#include <cstdint>
#include <deque>
#include <vector>

#include "ingest/synthetic/synthetic_rng.h"
#include "ingest/synthetic/synthetic_step.h"
#include "ingest/synthetic/synthetic_truth.h"
#include "schemas/trace.h"

namespace bubblewatch {

inline constexpr int kLaunchQueueDepth = 1024;

class RankSimulator {
 public:
  // Appends to `trace` (which must hold the synthetic string table) and to
  // `truth`, and to `gaps` when not null; all must outlive the simulator.
  // `thread` and `correlation_base` make ids unique within the job.
  RankSimulator(int32_t device, uint64_t thread, CorrelationId correlation_base,
                int64_t start_ns, double events_per_second, uint64_t seed,
                Trace* trace, TruthAccumulator* truth,
                std::vector<PlantedGap>* gaps);

  SyntheticRng& rng() { return rng_; }
  // The launching thread's clock.
  int64_t host_now() const { return now_; }

  // Executes one step.
  void Run(const StepPlan& plan);

  // Records the gaps still pending. Call once, after the last step.
  void Finish();

 private:
  // Host side.
  void Host(int64_t ns, PlantedHostClass host_class);
  CpuEvent& Emit(NameId name, CpuEventCategory category, int64_t start_ns,
                 int64_t end_ns, CorrelationId correlation = kNoCorrelation);
  void Open(NameId name, CpuEventCategory category);
  void Close();
  // A CUDA runtime call from now lasting `ns`, of class `host_class`.
  CorrelationId Call(NameId name, int64_t ns, PlantedHostClass host_class);
  int64_t LaunchCallNs();
  int64_t LaunchLatencyNs() { return rng_.Uniform(3000, 5000); }

  // GPU side.
  void LaunchKernel(NameId name, int64_t duration_ns, int32_t stream);
  void LaunchSideKernel(NameId name, int64_t duration_ns, int32_t stream);
  void PlaceKernel(NameId name, int64_t duration_ns, int32_t stream,
                   CorrelationId correlation, int64_t launch_start_ns);
  void CopyToDevice(int64_t bytes, bool on_compute_stream);
  void Item();
  void WaitForDevice(NameId name, int64_t extra_ns,
                     PlantedHostClass host_class);

  // Truth. A gap is painted once the host clock has passed its end: only
  // then can no later copy still land in it (the copy stream runs copies as
  // soon as they are issued, which may be long before queued kernels run).
  struct PendingGap {
    int64_t start_ns;
    int64_t end_ns;
    int64_t launch_start_ns;
  };
  void PaintGapsBefore(int64_t time_ns);
  void Prune();

  int32_t device_;
  uint64_t thread_;
  CorrelationId next_correlation_;
  double events_per_second_;
  SyntheticRng rng_;
  Trace* trace_;
  TruthAccumulator* truth_;
  std::vector<PlantedGap>* gaps_;

  int64_t now_;
  std::deque<HostBlock> blocks_;  // From the last kernel end on.
  std::vector<size_t> open_;      // Indices into trace_->cpu.
  std::vector<PlantedHostClass> open_class_;

  bool has_kernel_ = false;
  int64_t last_kernel_start_ = 0;  // The latest compute-order kernel.
  int64_t last_kernel_end_ = 0;
  int64_t compute_free_ = 0;  // Compute stream, copies included.
  int64_t copy_free_ = 0;
  int64_t nccl_free_ = 0;
  int64_t device_idle_ = 0;          // When all queued GPU work is done.
  std::deque<TimeInterval> copies_;  // Those that may fall in a future gap.
  std::deque<int64_t> queued_kernel_ends_;
  std::deque<PendingGap> pending_gaps_;
};

}  // namespace bubblewatch

#endif  // BUBBLEWATCH_INGEST_SYNTHETIC_SYNTHETIC_RANK_H_
