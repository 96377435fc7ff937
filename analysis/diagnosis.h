// DiagnoseTrace reads three more things off a timeline than AnalyzeTrace
// does, the ones the seeds teach an engineer to look for in Nsight Systems:
//
//   - how far the CPU runs ahead of the GPU: the launch lead time of every
//     kernel (its start on the GPU minus the start of its launch call) and
//     the queue depth over time (kernels launched but not yet started);
//   - where the GPU time goes: the top kernels by total time, with NCCL
//     communication kernels apart and their overlap with compute;
//   - a verdict, per device and for the job: gpu_bound, cpu_bound,
//     sync_bound, input_bound, copy_bound or balanced, with the numbers
//     behind it.
//
// How the verdict is reached (thresholds below, as named constants):
//   1. The verdict speaks the attribution's vocabulary: the bubble time of
//      the device (or the job) is AnalyzeTrace's attribution
//      (docs/semantics.md#attribution), its causes grouped into idle
//      classes, so a verdict's share is a share of the attribution a report
//      shows beside it:
//        input    data_loading;
//        sync     host_sync + allocator (cudaFree and empty_cache
//                 synchronize the device);
//        launch   launch_overhead + host_compute: the GPU waited for the CPU
//                 to issue the next kernel, the CPU issuing it or busy with
//                 its own work first;
//        copy     memcpy: the GPU was copying, not computing;
//        gpu_side gpu_dependency: the next kernel was queued in time and the
//                 GPU waited on itself (stream/event dependencies,
//                 communication peers);
//        unknown  unattributed.
//   2. The verdict, first rule that applies:
//        unknown      the device ran no non-empty kernel;
//        gpu_bound    utilization >= kBusyMinUtilization and the CPU is ahead
//                     (launch lead p50 >= kCpuAheadMinLeadNs, or no lead
//                     known): kernels back to back, the queue never empties;
//        balanced     utilization >= kBusyMinUtilization but the CPU is not
//                     ahead: busy, but any host slowdown will show as bubbles;
//        input_bound / sync_bound / cpu_bound / copy_bound / gpu_bound
//                     the idle class holding the most bubble time (input,
//                     sync, launch, copy, gpu_side; ties to the earlier), if
//                     it holds at least kDominantIdleShare of it;
//        unknown      the unknown class holds at least kDominantIdleShare;
//        balanced     otherwise: idle time spread over several classes.
//   A copy_bound verdict's advice follows the copies inside the bubbles
//   (CopyKindBreakdown): host-to-device or device-to-host, pinned or
//   pageable host memory, device-to-device, memset.
//   The job's verdict applies the same rules to the job's figures (sums over
//   devices, percentiles over all kernels).
//
// Beside the shares, each gap is classed by what held up the kernel N that
// ended it and N's launch call L, for the lead figures only
// (IdleBreakdown::sync_gaps, launch_gaps and the post-sync and post-launch
// lead percentiles): a sync gap when a sync-class event on L's thread returned
// while the GPU was idle or just before (end in [gap start -
// kSyncReturnSlackNs, min(gap end, L start)]), a launch gap when L returned
// later than kQueuedAheadNs before the gap began. Gaps mostly covered by
// data loading (kInputGapCoverage) or by copies are neither.
#ifndef BUBBLEWATCH_ANALYSIS_DIAGNOSIS_H_
#define BUBBLEWATCH_ANALYSIS_DIAGNOSIS_H_

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "schemas/analysis.h"
#include "schemas/trace.h"

namespace bubblewatch {

// Verdict thresholds (see the file comment for how they are used).
//
// Utilization at or above which kernels count as back to back.
inline constexpr double kBusyMinUtilization = 0.90;
// Launch lead p50 at or above which the CPU counts as running ahead of the
// GPU: several empty-queue launch latencies (~5-20 us on current GPUs).
inline constexpr int64_t kCpuAheadMinLeadNs = 50'000;
// Share of bubble time an idle class needs to decide the verdict.
inline constexpr double kDominantIdleShare = 0.5;
// A launch call that returned at least this long before the GPU went idle
// had queued its kernel in time: the empty-queue latency from the call's
// return to the kernel's start is a few microseconds.
inline constexpr int64_t kQueuedAheadNs = 10'000;
// A sync call may return this long before the GPU is seen idle (clocks of
// host and device are aligned only to a few microseconds).
inline constexpr int64_t kSyncReturnSlackNs = 10'000;
// Share of a gap data-loading events must cover for the gap to be input.
inline constexpr double kInputGapCoverage = 0.5;
// Kernels shorter than this are "tiny": shorter than one launch call, so a
// stream of them cannot keep the GPU busy (the seed's tiny-kernel flood).
inline constexpr int64_t kTinyKernelNs = 10'000;
// At or above this share of tiny kernels, a cpu_bound verdict is reported
// as a tiny-kernel flood (advice: CUDA Graphs, fusion, torch.compile).
inline constexpr double kTinyKernelFloodShare = 0.5;

enum class Verdict : uint8_t {
  kUnknown = 0,
  kGpuBound = 1,
  kCpuBound = 2,
  kSyncBound = 3,
  kInputBound = 4,
  kBalanced = 5,
  kCopyBound = 6,
};

// "unknown", "gpu_bound", "cpu_bound", "sync_bound", "input_bound",
// "balanced", "copy_bound".
absl::string_view VerdictName(Verdict verdict);
std::optional<Verdict> ParseVerdict(absl::string_view name);

// Nearest-rank percentiles of a set of durations: pN is the smallest value
// with at least N% of the values at or below it. All 0 when count is 0.
struct DurationPercentiles {
  int64_t count = 0;
  int64_t p10_ns = 0;
  int64_t p50_ns = 0;
  int64_t p90_ns = 0;
};

// Launch lead time: kernel start minus the start of its launch call, over
// the non-empty kernels whose launch is in the trace (by correlation).
struct LaunchLeadStats {
  DurationPercentiles lead;
  // Kernels that start before their launch call (clock skew between host
  // and device); counted in `lead` with lead 0.
  int64_t negative = 0;
  // Kernels launched by cudaGraphLaunch (one call queues many kernels, so
  // their leads grow along the graph).
  int64_t graph_kernels = 0;
};

// Queue depth: at time t, the kernels whose launch call has started and
// which have not started on the GPU (HTA's queue length, per device).
struct QueueDepthStats {
  int64_t max = 0;    // Over the whole trace.
  double mean = 0.0;  // Time-weighted over the span.
  // The span cut into equal buckets from `series_start_ns`, each with its
  // time-weighted mean depth. Empty for the job (devices' spans differ) and
  // when no kernel's launch is known.
  int64_t series_start_ns = 0;
  int64_t bucket_ns = 0;
  std::vector<double> series;
};

// One kernel name's share of GPU time.
struct KernelStat {
  std::string name;
  int64_t count = 0;
  int64_t total_ns = 0;  // Sum of durations (streams may overlap).
  int64_t mean_ns = 0;
  int64_t p90_ns = 0;  // Nearest rank.
  // total / busy time of the device (job: summed over devices). Kernels on
  // overlapping streams can add up to more than 1.
  double busy_share = 0.0;
};

// NCCL kernels (names starting with "nccl", any case, after an optional
// "void ") versus the rest.
struct CommunicationStats {
  int64_t kernels = 0;
  int64_t total_ns = 0;    // Sum of durations.
  int64_t busy_ns = 0;     // Length of the union of their intervals.
  int64_t overlap_ns = 0;  // Part of busy_ns when compute kernels also ran.
  // busy - overlap: communication the GPU did not hide behind compute.
  int64_t exposed_ns() const { return busy_ns - overlap_ns; }
  // overlap / busy, 0 without communication.
  double overlap_ratio() const {
    return busy_ns > 0 ? static_cast<double>(overlap_ns) / busy_ns : 0.0;
  }
};

// Where the GPU time goes.
struct KernelBreakdown {
  std::vector<KernelStat> top_compute;        // By total time, then name.
  std::vector<KernelStat> top_communication;  // By total time, then name.
  CommunicationStats communication;
  int64_t kernels = 0;       // Non-empty kernels.
  int64_t tiny_kernels = 0;  // Shorter than kTinyKernelNs.
  int64_t median_kernel_ns = 0;
  double tiny_share() const {
    return kernels > 0 ? static_cast<double>(tiny_kernels) / kernels : 0.0;
  }
};

// Bubble time by idle class: the attribution's causes grouped (file
// comment, step 1). Adds up to the bubble time of AnalyzeTrace (for the same
// device set).
struct IdleBreakdown {
  int64_t copy_ns = 0;
  int64_t input_ns = 0;
  int64_t sync_ns = 0;
  int64_t launch_ns = 0;
  int64_t gpu_side_ns = 0;
  int64_t unknown_ns = 0;
  int64_t sync_gaps = 0;    // Gaps (rests after copies) following a sync.
  int64_t launch_gaps = 0;  // Gaps (rests after copies) waiting for L.
  int64_t total_ns() const {
    return copy_ns + input_ns + sync_ns + launch_ns + gpu_side_ns + unknown_ns;
  }
};

// What kind of copy a memcpy or memset is, for copy_bound advice. The
// direction is read from the copy's name, which both readers write in
// Kineto's spelling ("Memcpy HtoD (Pinned -> Device)"; the Nsight reader
// builds it from copyKind, srcKind and dstKind); pageable is
// GpuActivity::pageable.
enum class CopyKind : uint8_t {
  kHostToDevicePageable = 0,
  kHostToDevicePinned = 1,
  kDeviceToHostPageable = 2,
  kDeviceToHostPinned = 3,
  kDeviceToDevice = 4,  // DtoD and PtoP.
  kMemset = 5,
  kOther = 6,  // Any other or unknown direction.
};
inline constexpr int kNumCopyKinds = 7;

// "h2d_pageable", "h2d_pinned", "d2h_pageable", "d2h_pinned", "d2d",
// "memset", "other".
absl::string_view CopyKindName(CopyKind kind);

// The kind of a memcpy or memset activity named `name`.
CopyKind ClassifyCopy(GpuActivityKind kind, absl::string_view name,
                      bool pageable);

// The copies inside a device's bubbles, by kind.
struct CopyKindFigures {
  // Time of the bubbles the copies of this kind cover; copies of several
  // kinds (streams) overlapping the same instant each count it.
  int64_t bubble_ns = 0;
  int64_t count = 0;   // Copies overlapping a bubble.
  uint64_t bytes = 0;  // Their bytes (0 where the trace does not say).
};
using CopyKindBreakdown = std::array<CopyKindFigures, kNumCopyKinds>;

// The numbers a verdict was reached from.
struct VerdictEvidence {
  double utilization = 0.0;
  double bubble_ratio = 0.0;
  IdleBreakdown idle;
  // The attribution the idle classes group (per cause, adds up to the
  // bubble time).
  Attribution attribution{};
  CopyKindBreakdown copies{};
  // Launch lead p50 of all kernels, of the kernels ending a sync gap (the
  // lead "collapses" after a sync), and of those ending a launch gap;
  // nullopt when none is known.
  std::optional<int64_t> lead_p50_ns;
  std::optional<int64_t> post_sync_lead_p50_ns;
  std::optional<int64_t> post_launch_gap_lead_p50_ns;
  double queue_mean = 0.0;
  double tiny_kernel_share = 0.0;
};

struct BoundVerdict {
  Verdict verdict = Verdict::kUnknown;
  // One sentence with the deciding numbers, e.g. "97% of bubble time
  // (utilization 23%) is host_compute 91% + launch_overhead 6%: the GPU
  // waited for the CPU to issue kernels ...".
  std::string reason;
  // What to change, from the seeds; empty for unknown and balanced.
  std::string advice;
  VerdictEvidence evidence;
};

// Everything DiagnoseTrace says about one device or the job.
struct DiagnosisFigures {
  LaunchLeadStats launch;
  QueueDepthStats queue;
  KernelBreakdown kernels;
  BoundVerdict verdict;
};

struct DeviceDiagnosis {
  int32_t device = 0;
  DiagnosisFigures figures;
};

struct Diagnosis {
  DiagnosisFigures job;
  std::vector<DeviceDiagnosis> devices;  // Same order as Analysis::devices.
  // Training steps the trace covers: distinct "ProfilerStep#N" CPU ranges
  // (PyTorch profiler); 0 when it has none.
  int64_t steps = 0;
};

struct DiagnosisOptions {
  // How many kernels each top list holds.
  int top_kernels = 10;
  // How many buckets a device's queue-depth series has.
  int queue_series_buckets = 20;
};

// Diagnoses `trace`, whose analysis by AnalyzeTrace (whole trace, no
// open_until_ns) is `analysis`.
// Errors: kInvalidArgument if `analysis` does not list the trace's devices
// or options are negative.
absl::StatusOr<Diagnosis> DiagnoseTrace(const Trace& trace,
                                        const Analysis& analysis,
                                        const DiagnosisOptions& options = {});

}  // namespace bubblewatch

#endif  // BUBBLEWATCH_ANALYSIS_DIAGNOSIS_H_
