// The /metrics page: Prometheus text exposition format 0.0.4, for
// `bubblewatch serve` and `bubblewatch process --http`.
//
// Families (docs/query.md, "Metrics", lists them all):
//   - store and fleet: jobs with windows; fleet utilization and bubble ratio
//     by cause over every job's latest complete window;
//   - per job, only for the `top_jobs` jobs that waste the most GPU time
//     (bubble time of their latest window, as `query fleet --by
//     bubble_time`): rolling 1m / 5m / 1h utilization and bubble ratio by
//     cause, and the end of the latest window; for multi-rank jobs also
//     the rolling comm-wait ratio and the top 3 stragglers of the latest
//     window by cause (compute, comm, the 8 causes). Label cardinality is
//     thus bounded by top_jobs x (3 + 3 x 8 + 1 + 3 + 3 x 10) series whatever
//     the fleet size;
//     the remaining jobs are one aggregate (`bubblewatch_other_jobs*`, over
//     their latest windows);
//   - processor counters and gauges, when `processor` is given: messages,
//     events, replays, duplicate batches, late events, late collectives,
//     collective errors, windows written,
//     dead-lettered messages by reason, open jobs, buffered events, lag per
//     partition;
//   - under `serve --brokers`, the materializer's: lag behind the windows
//     topic (bubblewatch_serve_lag_messages, absent until known), partitions
//     followed, windows applied and deleted, messages skipped.
// Cost: one point read per job, plus one last-hour scan per exported job.
#ifndef BUBBLEWATCH_SERVE_PROMETHEUS_METRICS_H_
#define BUBBLEWATCH_SERVE_PROMETHEUS_METRICS_H_

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "processor/processor_stats.h"
#include "serve/materializer_status.h"
#include "storage/window_store.h"

namespace bubblewatch {

// Default number of jobs with their own per-job series.
inline constexpr int kDefaultMetricsTopJobs = 100;

// The content type of the page.
inline constexpr absl::string_view kPrometheusContentType =
    "text/plain; version=0.0.4; charset=utf-8";

// Renders the page. `processor` may be null (`serve` has no processor);
// `materializer` is given under `serve --brokers` (its lag and counters).
// REQUIRES: top_jobs >= 0.
absl::StatusOr<std::string> RenderPrometheusMetrics(
    const WindowStoreReader& store, int top_jobs,
    const ProcessorStats* processor,
    const MaterializerStatus* materializer = nullptr);

// Escapes a label value: backslash, double quote and newline.
std::string EscapeLabelValue(absl::string_view value);

}  // namespace bubblewatch

#endif  // BUBBLEWATCH_SERVE_PROMETHEUS_METRICS_H_
