// The result of analyzing one job's events: the numbers of docs/semantics.md
// (#device-metrics, #multi-device, #windows), per device, for the job, and
// optionally per event-time window. The analyzer (analysis/) produces these;
// the window store (storage/), queries and alerts consume them, so they live
// with the schemas.
#ifndef BUBBLEWATCH_SCHEMAS_ANALYSIS_H_
#define BUBBLEWATCH_SCHEMAS_ANALYSIS_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "schemas/bubble_cause.h"

namespace bubblewatch {

// A kernel named in a report (the culprit before a bubble, the one after).
struct KernelRef {
  std::string name;
  int64_t start_ns = 0;
  int64_t end_ns = 0;
  int32_t stream = 0;
};

// The utilization figures of one device, or of the job (sums over devices:
// GPU-time), over the whole trace or one window.
struct UtilizationStats {
  // First kernel start to last kernel end, less unobserved time
  // (AnalyzerOptions::observed): always compute + bubble.
  int64_t span_ns = 0;
  int64_t compute_ns = 0;  // Length of the union of kernel intervals.
  // span - compute: the (observed parts of the) gaps between busy intervals.
  int64_t bubble_ns = 0;
  int64_t largest_bubble_ns = 0;
  int64_t largest_bubble_start_ns = 0;  // Meaningful when largest > 0.
  // The kernel that finished just before the largest bubble.
  std::optional<KernelRef> culprit_before_bubble;
  Attribution attribution{};  // Adds up to bubble_ns.

  // bubble / span, 0 when the span is 0.
  double bubble_ratio() const {
    return span_ns > 0 ? static_cast<double>(bubble_ns) / span_ns : 0.0;
  }
  // compute / span, 0 when the span is 0.
  double utilization() const {
    return span_ns > 0 ? static_cast<double>(compute_ns) / span_ns : 0.0;
  }
};

struct DeviceAnalysis {
  int32_t device = 0;
  UtilizationStats stats;
  int64_t first_kernel_start_ns = 0;
  int64_t last_kernel_end_ns = 0;
  int64_t kernels = 0;              // Including zero-length ones.
  int64_t zero_length_kernels = 0;  // Counted, ignored for time.
  int64_t copies = 0;               // Memcpy and memset activities.
  int64_t kernels_with_launch = 0;  // Kernels whose launch call was found.
};

// One bubble (a gap between busy intervals of a device) as shown in reports.
struct BubbleReport {
  int32_t device = 0;
  int64_t start_ns = 0;
  int64_t end_ns = 0;
  std::optional<KernelRef> before;  // Finished at start_ns.
  std::optional<KernelRef> after;   // Started at end_ns.
  Attribution attribution{};
  BubbleCause cause = BubbleCause::kUnattributed;  // The dominant one.
  // The event blamed for the dominant cause: a CPU call (cudaStreamSynchronize,
  // aten::item, the launch of `after`) or, for memcpy, the copy.
  std::string blamed;
  int64_t duration_ns() const { return end_ns - start_ns; }
};

// An interval of one device's time, for AnalyzerOptions::breakdown_intervals.
// A rank that made other ranks wait in their collectives, with what made it
// late (docs/semantics.md#collectives): the wait it caused, the instances
// it arrived last in, and its excess time since the previous common sync
// point split into compute, collectives and bubble time by cause;
// unattributed_ns is the part of the wait no excess explains. The offline
// analysis (analysis/collectives.h) and a stored window
// (schemas/window_summary.h) keep the same record.
// A rank whose lateness made others wait, blamed at the root: the wait it
// caused directly (instances where it arrived last, for its own time) and
// the wait that reached it through other ranks (they arrived late because
// they waited for it earlier: docs/semantics.md#root-cause).
struct Straggler {
  int32_t rank = 0;
  std::string host;            // May be empty.
  int64_t pid = -1;            // The process (Inspector logs); -1: unknown.
  int64_t wait_caused_ns = 0;  // direct + every via.
  int64_t direct_wait_caused_ns = 0;
  int64_t arrived_last = 0;
  // The split of wait_caused_ns by what made this rank late.
  int64_t compute_ns = 0;
  int64_t comm_ns = 0;
  Attribution causes{};
  int64_t unattributed_ns = 0;
  // The ranks whose lateness this rank caused, with the wait that passed
  // through each (by wait, descending; ties: lower rank).
  struct Via {
    int32_t rank = 0;
    int64_t wait_ns = 0;
  };
  std::vector<Via> via;
  // How much earlier the job's last collective would have ended had this
  // rank not been late (docs/semantics.md#what-it-cost); -1: not computed.
  int64_t saved_ns = -1;
};

struct DeviceInterval {
  int32_t device = 0;
  int64_t start_ns = 0;
  int64_t end_ns = 0;
};

// Where one DeviceInterval's time went: busy (any kernel), bubble time by
// cause, and time outside the device's span (before its first kernel or
// after its last, a device with no kernels, or unobserved time inside a
// gap). Adds up to the interval's length (0 for an empty or reversed
// interval).
struct IntervalBreakdown {
  int64_t busy_ns = 0;
  Attribution bubble{};
  int64_t outside_ns = 0;
};

// One device's part of an event-time window [start_ns, start_ns + window).
struct DeviceWindow {
  int32_t device = 0;
  UtilizationStats stats;  // span = busy + bubble time inside the window.
  int64_t kernels = 0;     // Kernels starting inside the window.
};

struct WindowAnalysis {
  int64_t start_ns = 0;
  int64_t end_ns = 0;
  UtilizationStats job;                   // Sums over devices.
  std::vector<DeviceWindow> devices;      // By device id.
  std::vector<BubbleReport> top_bubbles;  // Gap parts inside the window.
};

// One gap of a device (between two busy intervals, or trailing to
// AnalyzerOptions::open_until_ns) and its bubble time by cause, for
// AnalyzerOptions::keep_gaps.
struct GapAttribution {
  int32_t device = 0;
  int64_t start_ns = 0;
  int64_t end_ns = 0;
  Attribution attribution{};  // Its observed time only.
};

struct Analysis {
  UtilizationStats job;                   // Sums over devices.
  std::vector<DeviceAnalysis> devices;    // By device id.
  std::vector<BubbleReport> top_bubbles;  // Longest first; ties: earliest.
  std::vector<WindowAnalysis> windows;    // Empty unless windowing was asked.
  // One per AnalyzerOptions::breakdown_intervals, in its order.
  std::vector<IntervalBreakdown> breakdowns;
  // If AnalyzerOptions::keep_gaps: every gap, by device (in
  // Analysis::devices order), then time.
  std::vector<GapAttribution> gaps;

  // What the input held.
  int64_t kernels = 0;
  int64_t copies = 0;
  int64_t cpu_events = 0;
  int64_t kernels_with_launch = 0;
  int64_t first_kernel_start_ns = 0;
  int64_t last_kernel_end_ns = 0;
};

}  // namespace bubblewatch

#endif  // BUBBLEWATCH_SCHEMAS_ANALYSIS_H_
