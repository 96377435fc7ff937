// Renders the comparison of two traces by `bubblewatch diff`: side-by-side
// figures with their change, bubble time per cause (absolute and per step or
// per second), the largest bubbles, launch lead, top kernels, and the
// outcome of each --fail-if condition; as text or as one JSON object.
#ifndef BUBBLEWATCH_DIFF_DIFF_REPORT_H_
#define BUBBLEWATCH_DIFF_DIFF_REPORT_H_

#include <string>
#include <vector>

#include "diff/diff_condition.h"
#include "diff/diff_metrics.h"
#include "diff/diff_side.h"

namespace bubblewatch {

struct EvaluatedCondition {
  FailCondition condition;
  ConditionOutcome outcome;
};

// How per-trace totals are normalized in the report: per step when both
// traces have ProfilerStep annotations, else per second of wall-clock span
// when both spans are non-empty, else not at all.
Normalization ReportNormalization(const DiffSide& before,
                                  const DiffSide& after);

// One kernel name's GPU time in both traces.
struct KernelChange {
  std::string name;
  bool communication = false;  // NCCL.
  int64_t before_ns = 0;
  int64_t after_ns = 0;
};

// The union of both traces' top compute and communication kernels, ordered
// by the larger of the two totals (ties: name); at most `top` entries.
std::vector<KernelChange> TopKernelChanges(const DiffSide& before,
                                           const DiffSide& after, int top);

// `top` bounds the bubble and kernel lists. `color` adds ANSI bold.
std::string RenderDiffText(const DiffSide& before, const DiffSide& after,
                           const std::vector<EvaluatedCondition>& conditions,
                           int top, bool color);

// One JSON object (indented when `pretty`), newline-terminated. docs/diff.md
// documents the keys.
std::string RenderDiffJson(const DiffSide& before, const DiffSide& after,
                           const std::vector<EvaluatedCondition>& conditions,
                           int top, bool pretty);

}  // namespace bubblewatch

#endif  // BUBBLEWATCH_DIFF_DIFF_REPORT_H_
