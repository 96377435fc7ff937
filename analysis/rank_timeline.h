// Each rank's timeline in a window (docs/state.md#rank-timelines): what its
// device was doing from its first kernel start to its last kernel end,
// built from the very sets its figures were measured on
// (CollectiveAnalysis::rank_time) and the bubble attribution of the
// analyzer, so that the timeline's totals per state are the rank's figures:
//   compute   = |compute kernels|           (compute_ns - comm_exposed_ns)
//   wait      = |waits \ compute|           (comm_wait_ns)
//   transfer  = |collective \ compute| - wait
//   bubble by cause = the device's attribution (span_ns - compute_ns in all)
// The dashboard draws it (serve/dashboard/app.js); the window stores it
// compacted (schemas/window_summary.h RankTimeline).
#ifndef BUBBLEWATCH_ANALYSIS_RANK_TIMELINE_H_
#define BUBBLEWATCH_ANALYSIS_RANK_TIMELINE_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "analysis/bubble_analyzer.h"
#include "analysis/collectives.h"
#include "schemas/window_summary.h"

namespace bubblewatch {

// One run of a state, [start_ns, end_ns) in the rank's own clock.
struct TimelineRun {
  uint8_t state = 0;  // A TimelineState.
  int64_t start_ns = 0;
  int64_t end_ns = 0;
};

// Every rank's exact run of states (one vector per analysis.ranks entry,
// same order; adjacent runs differ in state; a rank without kernels on its
// device has none). Within one bubble split among several causes, the
// causes' parts follow each other in the enum's order: their lengths are
// the analyzer's, their order inside the bubble is not (the analyzer
// attributes a gap's time, not its moments). The gaps' attribution is the
// analysis's own (Analysis::gaps, which keep_rank_time keeps); a gap it
// lacks is asked of AnalyzeTrace again, with `analyzer` as the collective
// analysis had it.
// REQUIRES: `analysis` came with CollectiveOptions::keep_rank_time.
absl::StatusOr<std::vector<std::vector<TimelineRun>>> RankTimelineRuns(
    const CollectiveAnalysis& analysis, const AnalyzerOptions& analyzer = {});

// A run compacted to at most `max_segments` runs of at least `min_ns` each
// (a lone run may stay shorter): while one is too short or there are too
// many, the shortest (the earliest of equals) joins its longer neighbour,
// taking that one's state, and equal neighbours fuse. `merged_ns` gets the
// time whose state changed that way.
std::vector<TimelineRun> CompactTimeline(std::vector<TimelineRun> runs,
                                         int max_segments, int64_t min_ns,
                                         int64_t* merged_ns);

// A run cut into `bins` bins of equal length (the last one shorter) over
// its span, each as its time per state laid end to end, the states in the
// order they first occur in the bin, at most `states_per_bin` of them (the
// others' time counted as the bin's largest state, and in `merged_ns`).
// Equal neighbours fuse. `bin_ns` gets the bins' length.
std::vector<TimelineRun> BinTimeline(const std::vector<TimelineRun>& runs,
                                     int bins, int states_per_bin,
                                     int64_t* bin_ns, int64_t* merged_ns);

// What a window stores of a rank's run (schemas/window_summary.h
// RankTimeline): exact when, its runs shorter than 1 us merged, it has at
// most kExactTimelineSegments; else binned (kTimelineBins,
// kStatesPerBin). Shifted to the reference clock by `clock_offset_ns` and
// cut to whole us from `window_start_ns` (each boundary rounded down, so no
// rounding error accumulates).
RankTimeline StoredTimeline(const std::vector<TimelineRun>& runs,
                            int64_t window_start_ns, int64_t clock_offset_ns);

}  // namespace bubblewatch

#endif  // BUBBLEWATCH_ANALYSIS_RANK_TIMELINE_H_
