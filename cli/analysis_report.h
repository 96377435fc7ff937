// Renders an Analysis for people (a terminal report) and for programs (the
// `--json` object whose shape docs/analyze.md documents).
#ifndef BUBBLEWATCH_CLI_ANALYSIS_REPORT_H_
#define BUBBLEWATCH_CLI_ANALYSIS_REPORT_H_

#include <cstdint>
#include <string>

#include "base/human_duration.h"  // IWYU pragma: export
#include "schemas/analysis.h"
#include "schemas/trace.h"

namespace bubblewatch {

struct Diagnosis;           // analysis/diagnosis.h
struct CollectiveAnalysis;  // analysis/collectives.h

// What was read, for the report's header ("workload hints").
struct InputSummary {
  std::string path;
  std::string format;
  int32_t rank = -1;
  int32_t world_size = -1;
  int64_t memcpys = 0;
  int64_t memsets = 0;
  int64_t cpu_api_calls = 0;  // CUDA runtime/driver calls.
  int64_t cpu_context = 0;    // Other CPU ranges.
  int64_t min_time_ns = 0;    // Over all events; 0/0 when there are none.
  int64_t max_time_ns = 0;
  int64_t skipped = 0;  // Sum of Trace::skipped.
  SkipCounts skipped_by_reason;
};

// Summarizes `trace` as read from `path` in `format`.
InputSummary SummarizeInput(const Trace& trace, std::string path,
                            std::string format);

// The `--json` object (one line, or indented when `pretty`). With a
// `diagnosis`, it also holds a "diagnosis" object after "advice"; with
// `collectives` (one trace holding several ranks), "ranks", "collectives"
// and "stragglers" after "input".
std::string RenderAnalysisJson(const Analysis& analysis,
                               const InputSummary& input, bool pretty,
                               const Diagnosis* diagnosis = nullptr,
                               const CollectiveAnalysis* collectives = nullptr);

// The human-readable report. `color` adds ANSI colors for terminals.
std::string RenderAnalysisText(const Analysis& analysis,
                               const InputSummary& input, bool color);

}  // namespace bubblewatch

#endif  // BUBBLEWATCH_CLI_ANALYSIS_REPORT_H_
