// DiffSide: one trace of `bubblewatch diff`, read, analyzed and diagnosed,
// plus the figures the comparison normalizes by (steps, wall-clock span) and
// the GPU time of every kernel name (for `kernel:` conditions).
#ifndef BUBBLEWATCH_DIFF_DIFF_SIDE_H_
#define BUBBLEWATCH_DIFF_DIFF_SIDE_H_

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "analysis/collectives.h"
#include "analysis/diagnosis.h"
#include "ingest/trace_reader.h"
#include "schemas/analysis.h"

namespace bubblewatch {

struct DiffSide {
  std::string path;
  std::string format;  // The format actually read ("chrome", "nsys", ...).
  Analysis analysis;
  Diagnosis diagnosis;
  // First kernel start to last kernel end over all devices; the "/s"
  // normalization divides by it.
  int64_t wall_span_ns = 0;
  // Total GPU time of each kernel name (non-empty kernels), any order.
  std::vector<std::pair<std::string, int64_t>> kernel_time;
  // When the trace holds several ranks (its collectives run on several
  // devices), their collective analysis; its `traces` are cleared.
  std::optional<CollectiveAnalysis> collectives;
};

// Reads `path` in `format`, analyzes it keeping `top_bubbles` bubbles, and
// diagnoses it keeping `top_kernels` kernels per list.
// Errors: those of ReadTraceFile, AnalyzeTrace and DiagnoseTrace; messages
// do not repeat the path.
absl::StatusOr<DiffSide> LoadDiffSide(absl::string_view path,
                                      TraceFormat format, int top_bubbles,
                                      int top_kernels);

}  // namespace bubblewatch

#endif  // BUBBLEWATCH_DIFF_DIFF_SIDE_H_
