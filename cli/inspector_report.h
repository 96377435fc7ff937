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

// The default of `analyze --max-inspector-records`: the records a job's
// logs may hold together. The offline analysis keeps every record (and a
// kernel and collective record per record) until the report is written,
// about 0.6 KB a record (docs/analyze.md#inspector-logs), so this is about
// 5 GB of memory: what a shared machine can spare; more takes the flag.
inline constexpr int64_t kDefaultInspectorMaxRecords = 8'000'000;

struct InspectorReportOptions {
  bool json = false;
  bool pretty = false;
  bool color = false;
  AnalyzerOptions analyzer;
  // The most records all logs may hold together (-1: no limit); more is
  // an error naming the log that went past it.
  int64_t max_records = kDefaultInspectorMaxRecords;
};

// The report for the Inspector logs at `paths` (one job). Errors:
// kInvalidArgument and the file system's, messages naming the file where
// one is at fault; kResourceExhausted when the logs hold more than
// options.max_records records (read no further than that); content
// problems inside a log are counted in the report, not errors.
absl::StatusOr<std::string> AnalyzeInspectorLogs(
    const std::vector<std::string>& paths,
    const InspectorReportOptions& options);

// The job id of a dump directory the plugin named (`nccl-inspector-<id>`,
// the id a Slurm job id or "unknown-jobid"), from any of the paths' parent
// directories; "" when none is so named.
std::string InspectorJobFromPaths(const std::vector<std::string>& paths);

}  // namespace bubblewatch

#endif  // BUBBLEWATCH_CLI_INSPECTOR_REPORT_H_
