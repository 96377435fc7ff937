// Renders the results of the store queries (storage/window_queries.h) for
// people (terminal text with a chart of utilization over time) and for
// programs (the JSON objects of `bubblewatch query --json` and of the HTTP
// API, which are the same bytes), and parses that JSON back, so that
// `bubblewatch query --server URL` prints the same report as `--store DIR`.
//
// JSON conventions (docs/query.md, the HTTP API): durations are
// microseconds as doubles (`*_us`), as in `analyze --json`; event times are
// integer ns since the epoch (`*_ns`); wall times are RFC 3339 strings;
// ratios are fractions; `attribution_us` objects list all eight causes.
#ifndef BUBBLEWATCH_SERVE_QUERY_REPORT_H_
#define BUBBLEWATCH_SERVE_QUERY_REPORT_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "storage/window_queries.h"
#include "storage/window_store.h"

namespace bubblewatch {

// "1m", "5m", "1h", "90s": the label of a rolling range in JSON, text and
// metrics.
std::string RangeLabel(absl::Duration range);

// --- JSON (query_report_json.cc) ---

// {"job", "from_ns", "to_ns", "anchor_ns", "windows": [...], "rolling": [...],
//  "summary": {...}, "top_bubbles": [...]}
std::string RenderJobReportJson(const JobReport& report, bool pretty);
// {"by", "from_ns", "to_ns", "jobs",
//  "top": [{"rank", "job", "score", "period": {...}, "window": {...}}],
//  "fleet": {..., "bubble_gpu_hours", "gpu_hours_by_cause": {...}}}
std::string RenderFleetJson(const FleetReport& report, bool pretty);
// {"jobs": [{"job", "window_count", "last_event_ns",
//            "latest_window_start_ns", "last_seen", "state", "ended",
//            "expired", "cadence_s", "batches_after_end",
//            "overlapping_observations", "observations_backwards"}]}
// "state" is the phase at `now` (schemas/job_lifecycle.h, PhaseAt with the
// silence since last_seen).
std::string RenderJobsJson(const std::vector<JobInfo>& jobs, bool pretty,
                           absl::Time now);
// One stored window's per-rank timeline (GET /api/v1/jobs/J/timeline,
// docs/query.md#window-timeline): {"job", "start_ns", "end_ns",
//  "resolution_us", "max_segments", "states": [names by value], "root",
//  "held_up": [ranks], "timelines_left_out", "ranks": [the window's ranks
//  as in a report, each with "timeline": {"start_us", "merged_us",
//  "segments": [[state, us], ...]} or null], "stragglers": [...]}.
std::string RenderWindowTimelineJson(const WindowSummary& window, bool pretty);
// {"error": MESSAGE, "code": "not_found" | "invalid_argument" | ...}
std::string RenderErrorJson(const absl::Status& status);

// --- Parsing the JSON above (query_report_json_parse.cc) ---
// Errors: kDataLoss naming the first missing or mistyped field.

absl::StatusOr<JobReport> ParseJobReportJson(absl::string_view json);
absl::StatusOr<FleetReport> ParseFleetJson(absl::string_view json);
absl::StatusOr<std::vector<JobInfo>> ParseJobsJson(absl::string_view json);
// The status a RenderErrorJson body describes; kUnknown if it is not one.
absl::Status ParseErrorJson(absl::string_view json);

// --- Text (query_report_text.cc) ---

struct JobTextOptions {
  bool color = false;
  // Rows of the window table: the latest N windows; 0 = all.
  int table_windows = 30;
  int chart_width = 72;  // Columns of the utilization chart.
  int chart_height = 6;  // Rows; each row holds 8 levels.
};

std::string RenderJobReportText(const JobReport& report,
                                const JobTextOptions& options);
std::string RenderFleetText(const FleetReport& report, bool color);
// `now` is the wall time "last seen" is measured against. A job with bad
// input counted (batches after an end marker, overlapping or backwards
// observations) ends its row with "  bad input: ...".
std::string RenderJobsText(const std::vector<JobInfo>& jobs, absl::Time now);

// --- The terminal chart (query_report_chart.cc) ---

// Utilization over time of `windows` (start order) as `height` rows of
// Unicode block characters (U+2581..U+2588, 8 levels per row), `width`
// columns across [first start, last end), each column the GPU-time weighted
// utilization of the windows starting in it; a column without windows is
// blank. Rows are prefixed with a y axis ("100% ┤") and followed by an x
// axis with the start and end times (UTC). Empty for no windows.
std::string RenderUtilizationChart(const std::vector<WindowPoint>& windows,
                                   int width, int height);

// "2026-11-29 10:00:00" (UTC, whole seconds) for an event time in ns.
std::string EventTimeText(int64_t ns);

}  // namespace bubblewatch

#endif  // BUBBLEWATCH_SERVE_QUERY_REPORT_H_
