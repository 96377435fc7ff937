// The figures `bubblewatch diff` compares and `--fail-if` conditions name:
// job-level utilization, bubble time and its causes, the largest bubble,
// launch lead percentiles, exposed communication and per-kernel GPU time.
#ifndef BUBBLEWATCH_DIFF_DIFF_METRICS_H_
#define BUBBLEWATCH_DIFF_DIFF_METRICS_H_

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "diff/diff_side.h"

namespace bubblewatch {

enum class MetricKind {
  kRatio,  // A fraction: utilization, bubble_ratio.
  kTime,   // Nanoseconds.
};

// How a total is normalized before comparing two traces of different
// lengths.
enum class Normalization {
  kNone,
  kPerStep,    // Divided by the trace's ProfilerStep count.
  kPerSecond,  // Divided by the trace's wall-clock span in seconds.
};

// A metric a condition can name:
//   utilization, bubble_ratio            ratios (fractions)
//   span, compute, bubble                job totals (GPU-time over devices)
//   cause:<cause>                        bubble time of one cause
//                                        (host_sync, launch_overhead, ...)
//   comm_exposed                         NCCL time not overlapped by compute
//   kernel:<substring>                   GPU time of kernels whose name
//                                        contains <substring>
//   largest_bubble                       the longest single bubble
//   lead_p50, lead_p90                   launch lead percentiles
//   comm_wait                            time GPUs waited inside collectives
//                                        for a later rank, over all ranks
//   busy_useful_utilization              (busy - comm_wait) / span
//   straggler_wait                       the waits the worst straggler caused
// (the last three need every rank in the trace: docs/semantics.md#collectives)
// The totals (span ... kernel:) may be normalized per step or per second.
struct Metric {
  std::string name;      // "cause", "kernel", "utilization", ...
  std::string argument;  // The cause or kernel substring; else empty.
  MetricKind kind = MetricKind::kTime;
  bool total = false;  // Normalizable.

  // "cause:host_sync", "utilization".
  std::string Label() const;
};

// Parses a metric name as listed above.
// Errors: kInvalidArgument naming the valid metrics or causes.
absl::StatusOr<Metric> ParseMetric(absl::string_view text);

// The value of `metric` on `side` (a fraction, or nanoseconds), normalized by
// `per`. Errors: kFailedPrecondition when the trace cannot give it: per step
// without ProfilerStep annotations, per second with an empty span, launch
// lead without any kernel matched to its launch call.
absl::StatusOr<double> MetricValue(const Metric& metric, Normalization per,
                                   const DiffSide& side);

// "/step", "/s" or "".
absl::string_view NormalizationSuffix(Normalization per);

}  // namespace bubblewatch

#endif  // BUBBLEWATCH_DIFF_DIFF_METRICS_H_
