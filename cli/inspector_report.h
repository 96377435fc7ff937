// `analyze DIR` of NCCL Inspector logs (docs/analyze.md#inspector-logs):
// reads one job's logs, builds its processes and communicators
// (ingest/inspector/inspector_job.h), runs the collective analysis over
// them and renders the multi-rank report: per process, per communicator,
// the instances, waits, stragglers (with host and pid) and the what-if.
#ifndef BUBBLEWATCH_CLI_INSPECTOR_REPORT_H_
#define BUBBLEWATCH_CLI_INSPECTOR_REPORT_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "analysis/bubble_analyzer.h"

namespace bubblewatch {

struct InspectorReportOptions {
  bool json = false;
  bool pretty = false;
  bool color = false;
  AnalyzerOptions analyzer;
};

// The report for the Inspector logs at `paths` (one job). Errors:
// kInvalidArgument and the file system's, messages naming the file where
// one is at fault; content problems inside a log are counted in the
// report, not errors.
absl::StatusOr<std::string> AnalyzeInspectorLogs(
    const std::vector<std::string>& paths,
    const InspectorReportOptions& options);

// The job id of a dump directory the plugin named (`nccl-inspector-<id>`,
// the id a Slurm job id or "unknown-jobid"), from any of the paths' parent
// directories; "" when none is so named.
std::string InspectorJobFromPaths(const std::vector<std::string>& paths);

}  // namespace bubblewatch

#endif  // BUBBLEWATCH_CLI_INSPECTOR_REPORT_H_
