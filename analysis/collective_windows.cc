#include "analysis/collective_windows.h"

#include <optional>
#include <vector>

#include "analysis/rank_timeline.h"

namespace bubblewatch {

WindowCollectives SummarizeWindowCollectives(
    const CollectiveAnalysis& analysis) {
  WindowCollectives out;
  out.key = static_cast<uint8_t>(analysis.key);
  out.kernels = analysis.collective_kernels;
  out.matched = analysis.matched;
  out.unmatched = analysis.unmatched;
  out.unsynchronized = analysis.unsynchronized;
  out.used = analysis.used;
  out.unattributed = analysis.unattributed;
  out.seq_backwards = analysis.seq_backwards;
  out.seq_jumps = analysis.seq_jumps;
  out.ranks.reserve(analysis.ranks.size());
  for (const RankCollectiveStats& r : analysis.ranks) {
    out.ranks.push_back(
        RankWindow{.rank = r.rank,
                   .host = r.host,
                   .pid = r.pid,
                   .device = r.device,
                   .span_ns = r.stats.span_ns,
                   .compute_ns = r.stats.compute_ns,
                   .comm_ns = r.comm_ns,
                   .comm_exposed_ns = r.comm_exposed_ns,
                   .comm_wait_ns = r.comm_wait_ns,
                   .wait_caused_ns = r.wait_caused_ns,
                   .arrived_last = r.arrived_last,
                   .clock_offset_ns = r.clock_offset_ns,
                   .clock_drift_ns_per_s = r.clock_drift_ns_per_s,
                   .clock_instances = r.clock_instances,
                   .clock_residual_ns = r.clock_residual_ns,
                   .clock_connected = r.clock_connected,
                   .clock_corrected = r.clock_corrected});
  }
  out.stragglers = analysis.stragglers;
  out.job_ns = analysis.job_ns;
  out.job_ns_without_stragglers = analysis.job_ns_without_stragglers;
  return out;
}

CollectiveOptions WindowCollectiveOptions() {
  CollectiveOptions options;
  options.min_straggler_wait_ns = kWindowMinStragglerWaitNs;
  options.min_straggler_share = kWindowMinStragglerShare;
  return options;
}

absl::StatusOr<std::optional<WindowCollectives>> AnalyzeWindowCollectives(
    absl::Span<const Trace> traces, absl::Span<const std::string> labels,
    const CollectiveOptions& options,
    std::optional<int64_t> timeline_window_start_ns) {
  std::vector<RankInput> ranks = RanksOfTraces(traces, labels);
  int with_collectives = 0;
  for (const RankInput& r : ranks) {
    for (const CollectiveKernel& c : r.trace->collectives) {
      if (c.device == r.device) {
        ++with_collectives;
        break;
      }
    }
  }
  if (with_collectives < 2) return std::nullopt;
  AnalyzerOptions analyzer;
  analyzer.top_bubbles = 0;
  CollectiveOptions with_time = options;
  with_time.keep_rank_time = timeline_window_start_ns.has_value();
  absl::StatusOr<CollectiveAnalysis> analysis =
      AnalyzeCollectives(ranks, with_time, analyzer);
  if (!analysis.ok()) return analysis.status();
  WindowCollectives out = SummarizeWindowCollectives(*analysis);
  if (timeline_window_start_ns) {
    absl::StatusOr<std::vector<std::vector<TimelineRun>>> runs =
        RankTimelineRuns(*analysis, analyzer);
    if (!runs.ok()) return runs.status();
    out.timelines.reserve(runs->size());
    for (size_t i = 0; i < runs->size(); ++i) {
      out.timelines.push_back(StoredTimeline(
          (*runs)[i], *timeline_window_start_ns, out.ranks[i].clock_offset_ns));
    }
  }
  return out;
}

}  // namespace bubblewatch
