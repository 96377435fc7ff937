// `--fail-if` conditions of `bubblewatch diff`: a small grammar that turns a
// before/after comparison into a CI gate. A condition describes a
// regression; the gate fails when any condition holds.
//
//   condition := metric op value
//   metric    := a metric of diff/diff_metrics.h, optionally suffixed with
//                _drop (BEFORE - AFTER) or _rise (AFTER - BEFORE)
//   op        := > | >= | < | <=
//   value     := [+|-] number [unit] [/step | /s]
//   unit      := % | ns | us | ms | s
//
// What is compared:
//   - an unsigned value: AFTER's figure       bubble_ratio>0.3
//   - a signed value: the change AFTER-BEFORE  bubble_ratio>+0.05
//                                             lead_p50<-20us
//   - metric_drop / metric_rise with an unsigned value: the change in that
//     direction                               utilization_drop>2%
// Units: ratios (utilization, bubble_ratio) take a plain fraction or % (2% =
// 0.02, i.e. percentage points); times need ns/us/ms/s, or % for a change
// relative to BEFORE (cause:host_sync>+10%, compute_rise>5%). /step and /s
// divide totals (span, compute, bubble, cause:, comm_exposed, kernel:) by
// each trace's ProfilerStep count or wall-clock seconds before comparing
// (cause:host_sync>+5ms/step).
// Whitespace around the operator is allowed.
#ifndef BUBBLEWATCH_DIFF_DIFF_CONDITION_H_
#define BUBBLEWATCH_DIFF_DIFF_CONDITION_H_

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "diff/diff_metrics.h"
#include "diff/diff_side.h"

namespace bubblewatch {

enum class Comparison { kGreater, kGreaterOrEqual, kLess, kLessOrEqual };

struct FailCondition {
  std::string text;  // As written.
  Metric metric;
  Normalization per = Normalization::kNone;
  Comparison op = Comparison::kGreater;
  enum class Form {
    kAfter,   // AFTER's value (an unsigned threshold).
    kChange,  // AFTER - BEFORE (a signed threshold).
    kDrop,    // BEFORE - AFTER (metric_drop).
    kRise,    // AFTER - BEFORE (metric_rise).
  };
  Form form = Form::kAfter;
  bool relative = false;  // The change divided by BEFORE's value.
  // In the metric's unit (fraction or ns); a fraction when relative.
  double threshold = 0.0;
};

// Parses one condition. Errors: kInvalidArgument with a message saying what
// is wrong and what was expected.
absl::StatusOr<FailCondition> ParseFailCondition(absl::string_view text);

struct ConditionOutcome {
  bool failed = false;  // The condition holds: a regression.
  double before = 0.0;  // The metric on each side (normalized).
  double after = 0.0;
  double observed = 0.0;  // What was compared with the threshold.
  // "utilization 89.4% -> 81.7%: drop 7.7 pts > 2.0 pts".
  std::string summary;
};

// Evaluates `condition` on the two traces. Errors: kFailedPrecondition when
// a trace cannot give the metric (MetricValue).
absl::StatusOr<ConditionOutcome> EvaluateFailCondition(
    const FailCondition& condition, const DiffSide& before,
    const DiffSide& after);

// A figure of `kind` for reports: "81.7%" for ratios, "1.234 ms" for times;
// `sign` adds a leading + to non-negative numbers, and ratio changes are
// percentage points ("+7.7 pts").
std::string FormatMetric(MetricKind kind, double value, bool sign);

}  // namespace bubblewatch

#endif  // BUBBLEWATCH_DIFF_DIFF_CONDITION_H_
