// The collective analysis of one event-time window of a multi-rank job, for
// the processor (docs/semantics.md#streaming-collectives): each rank's
// events that start in the window, analyzed by AnalyzeCollectives
// (analysis/collectives.h) exactly as `analyze` analyzes the ranks' files,
// and reduced to what a stored window keeps (schemas/window_summary.h
// WindowCollectives).
//
// The window's result is therefore AnalyzeCollectives over the ranks'
// traces cut into that window: the test oracle of the streaming side
// (tests/processor/job_windower_collectives_test.cc). There is no second
// matcher here.
#ifndef BUBBLEWATCH_ANALYSIS_COLLECTIVE_WINDOWS_H_
#define BUBBLEWATCH_ANALYSIS_COLLECTIVE_WINDOWS_H_

#include <cstdint>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "analysis/collectives.h"
#include "schemas/trace.h"
#include "schemas/window_summary.h"

namespace bubblewatch {

// What a stored window keeps of `analysis`: the counts, per rank its figures
// (the device span and busy time of its window trace, comm, comm_exposed,
// comm_wait, wait caused, arrived last, its clock) and the stragglers with
// their cause split, root blame (host, direct wait, via) and saved time, and
// the what-if replay's job times, all in nanoseconds.
WindowCollectives SummarizeWindowCollectives(
    const CollectiveAnalysis& analysis);

// The options a window is analyzed with: the defaults, and the straggler
// threshold of docs/semantics.md#stragglers (kWindowMinStragglerWaitNs,
// kWindowMinStragglerShare), so that ranks that only jitter name no
// straggler in a window.
CollectiveOptions WindowCollectiveOptions();

// The ranks of `traces` (each one source's events that start in the
// window, unclipped; RanksOfTraces numbers them, `labels` stand in for file
// names), analyzed when at least two ranks ran a collective kernel on their
// device; nullopt otherwise, so windows of single-rank jobs stay as they were.
// With `timeline_window_start_ns`, the window's start, each rank's
// timeline is stored too (WindowCollectives::timelines, analysis/
// rank_timeline.h); without, none.
// Errors: as AnalyzeCollectives (e.g. two sources claiming one rank).
absl::StatusOr<std::optional<WindowCollectives>> AnalyzeWindowCollectives(
    absl::Span<const Trace> traces, absl::Span<const std::string> labels,
    const CollectiveOptions& options = WindowCollectiveOptions(),
    std::optional<int64_t> timeline_window_start_ns = std::nullopt);

}  // namespace bubblewatch

#endif  // BUBBLEWATCH_ANALYSIS_COLLECTIVE_WINDOWS_H_
