// AnalyzeTrace computes the bubble semantics of docs/semantics.md (device
// metrics through windows) for the events of one job: per device and for the
// job, span, compute and bubble time, the largest bubble and its culprit, and
// the attribution of every bubble nanosecond to exactly one cause; optionally
// the same per event-time window.
//
// Input may be in any order, with overlapping streams and nested CPU events.
// Cost: O(n log n) in the number of events (O(n) for the common case of
// per-stream sorted input), plus O(log n) per bubble.
//
// Definitions worth repeating (see docs/semantics.md for all):
//   - busy set: union of non-empty kernel intervals of a device;
//   - bubbles: gaps between consecutive busy intervals;
//   - culprit: the kernel whose end is the gap's start (ties: started last,
//     then the smaller name, then the lower stream);
//   - the next kernel N of a gap: among kernels starting at the gap's end, the
//     one whose launch call started first (kernels without a found launch come
//     after those with one; then the smaller name, then the lower stream).
//     Its launch decides gpu_dependency vs launch_overhead vs host-side.
#ifndef BUBBLEWATCH_ANALYSIS_BUBBLE_ANALYZER_H_
#define BUBBLEWATCH_ANALYSIS_BUBBLE_ANALYZER_H_

#include <cstdint>
#include <optional>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "analysis/interval_set.h"
#include "schemas/analysis.h"
#include "schemas/time_types.h"
#include "schemas/trace.h"

namespace bubblewatch {

struct AnalyzerOptions {
  // How many of the longest bubbles Analysis::top_bubbles holds.
  int top_bubbles = 10;
  // Event-time tumbling window length in ns; 0 disables windows. Windows are
  // aligned to multiples of their length since the clock's epoch; kernels and
  // gaps crossing a boundary are split at it. Windows add up to the whole.
  int64_t window_ns = 0;
  // How many gap parts each window's top_bubbles holds.
  int top_bubbles_per_window = 3;
  // None, or a time after which nothing is known yet: a device whose last
  // kernel ends before it is idle until it (a trailing bubble with no next
  // kernel, attributed by the no-correlation rule), and spans extend to it.
  // The streaming processor closes windows this way when a gap outlasts the
  // allowed lateness (docs/semantics.md#closing-windows).
  std::optional<EventNs> open_until_ns;
  // The most windows one analysis may materialize, or 0 for no cap. Every
  // window between a device's first and last kernel exists (a gap covering a
  // window is a 0 % window), so one far-off timestamp would otherwise cost
  // memory for millions of windows. The default is 116 days of 10 s
  // windows. The streaming processor caps open windows per job itself
  // (ProcessorLimits::max_open_windows) and passes 0.
  int64_t max_windows = 1'000'000;
  // Intervals of one device each to break down (Analysis::breakdowns, in
  // the same order): how much of each is busy and how its bubble time is
  // attributed, by exactly the rules of the whole analysis (a gap cut by an
  // interval's edges is attributed as windows cut it). The collective
  // analysis asks where a rank's time went between two sync points.
  // Borrowed: must outlive the call.
  absl::Span<const DeviceInterval> breakdown_intervals;
  // The job's observed time (docs/semantics.md#observations), or null when
  // all of it is observed. A gap's part outside it is unobserved: no bubble,
  // in no span, no cause, no window. Each observed piece of a gap is a
  // bubble of its own for the span, the attribution (with the context of
  // the whole gap, as windows cut gaps), the largest and the top bubbles.
  // The streaming processor passes the union of its known observations, so
  // a short break between two traces analyzed together is not idle time.
  // Borrowed: must outlive the call.
  const IntervalSet* observed = nullptr;
  // Keep Analysis::gaps (each gap's attribution): a rank's timeline
  // (analysis/rank_timeline.h) colours its gaps by them.
  bool keep_gaps = false;

  // kInvalidArgument listing every field out of range (negative counts, a
  // window_ns outside 0..kMaxWindowNs); AnalyzeTrace calls it.
  absl::Status Validate() const;
};

// Analyzes `trace`.
// Errors: kInvalidArgument (the message names the event or the figure) if an
// event ends before it starts or lies outside the accepted times
// (CheckEventTimes), if the options are invalid (AnalyzerOptions::Validate),
// or if the trace spans more than max_windows windows. Zero-length kernels are
// counted and ignored for time.
absl::StatusOr<Analysis> AnalyzeTrace(const Trace& trace,
                                      const AnalyzerOptions& options = {});

// One device's busy time split by kind of kernel: the union of its
// collective kernels (IsCollectiveKernelName) and of all its other kernels.
// The collective analysis needs both (waits not overlapped by compute,
// comm_exposed); the analyzer has each device's kernels sorted already, so
// it splits them there rather than the caller sorting them again.
struct DeviceKernelSets {
  int32_t device = 0;
  IntervalSet compute;     // Non-empty non-collective kernels.
  IntervalSet collective;  // Non-empty collective kernels.
};

// AnalyzeTrace for a caller that has already checked `trace` with
// CheckEventTimes and got OK (AnalyzeCollectives checks every rank's trace
// before matching): the same result and errors otherwise, without a second
// pass over every event. REQUIRES: CheckEventTimes(trace).ok().
// When `kernel_sets` is not null, it receives one DeviceKernelSets per
// device of Analysis::devices, in the same order.
absl::StatusOr<Analysis> AnalyzeCheckedTrace(
    const Trace& trace, const AnalyzerOptions& options = {},
    std::vector<DeviceKernelSets>* kernel_sets = nullptr);

}  // namespace bubblewatch

#endif  // BUBBLEWATCH_ANALYSIS_BUBBLE_ANALYZER_H_
