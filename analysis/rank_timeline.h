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
#include "absl/types/span.h"
#include "analysis/bubble_analyzer.h"
#include "analysis/collectives.h"
#include "analysis/rank_digest.h"
#include "analysis/varint_codec.h"
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

// A job split across processors (docs/architecture.md#one-job-across-
// processors) stores the very timelines one processor would: each host's
// stage 1 knows all of a rank's run but how its collective time splits into
// wait and transfer (the last rank's arrival is the cross-rank analysis's),
// so it sends its part of the timeline, TimelinePart, beside the rank's
// digest, and stage 2 splits the collective time by the waits it measured
// (MergedTimeline).

// A run's state before that split: wait or transfer (never stored).
inline constexpr uint8_t kCollectiveRun = kTimelineStates;

// Stage 1's share of a rank's timeline, in one of two forms:
//   exact: the rank's runs with wait and transfer as kCollectiveRun, when
//     they are at most kExactPartRuns, or when they might compact to
//     kExactTimelineSegments or fewer once split (StoredTimeline's choice);
//   binned: when they are sure not to (at least kExactTimelineSegments + 1
//     runs of 1 us or more whose states differ from their neighbours' stay
//     apart, whatever the split): per bin of StoredTimeline's bins, the
//     time and first moment of each state that may be shown, the others'
//     time, the collective time as one, with what stage 2 needs to split
//     it.
// Neither (`form` kNone): the rank has no run (no kernel on its device).
struct TimelinePart {
  enum Form : uint8_t { kNone = 0, kExact = 1, kBinned = 2 };
  Form form = kNone;
  // kExact: the runs, contiguous, adjacent ones of different states.
  std::vector<TimelineRun> runs;
  // kBinned: the runs' span, and one entry per bin BinTimeline cuts it into.
  int64_t start_ns = 0;
  int64_t end_ns = 0;
  struct State {
    uint8_t state = 0;     // A TimelineState other than wait and transfer.
    int64_t ns = 0;        // > 0.
    int64_t first_ns = 0;  // Where it first occurs in the bin.
  };
  struct Bin {
    // The other states that may be among the bin's kStatesPerBin once the
    // collective time is split (its kStatesPerBin largest), in the order
    // they first occur.
    std::vector<State> states;
    // The time of the states that cannot be (at least kStatesPerBin
    // others are larger): counted as the bin's largest state whatever the
    // split.
    int64_t dropped_ns = 0;
    // Wait and transfer: their time, and where their time outside the
    // rank's collective records (its digest's kernels) first occurs,
    // INT64_MAX if nowhere (the usual case).
    int64_t collective_ns = 0;
    int64_t outside_records_ns = INT64_MAX;
  };
  std::vector<Bin> bins;
  // kBinned: the records' time that is neither compute nor in a collective
  // kernel of the device's (records and kernels usually coincide: empty).
  std::vector<Interval> not_collective;
};

// At most this many runs go exact whatever they hold: the binned form
// costs about as many bytes (docs/architecture.md#one-job-across-processors).
inline constexpr int kExactPartRuns = 4 * kExactTimelineSegments;

// Stage 1: the TimelinePart of each of `ranks` (all of one trace, as
// DigestTrace takes them; same order as `digests.digests`), from
// `digests` = DigestTrace(ranks, analyzer) (with analyzer.keep_gaps, or the
// gaps are analyzed again). Errors: AnalyzeTrace's, for a gap asked again.
absl::StatusOr<std::vector<TimelinePart>> TimelineParts(
    absl::Span<const RankInput> ranks, const TraceDigests& digests,
    const AnalyzerOptions& analyzer = {});

// Stage 2: what StoredTimeline gives for the rank of `digest` whose waits
// the cross-rank analysis measured as `waits` (CollectiveAnalysis::
// rank_time, in its own clock) and whose stage 1 sent `part`: the same
// bytes as the single stage's.
RankTimeline MergedTimeline(const TimelinePart& part, const RankDigest& digest,
                            const IntervalSet& waits, int64_t window_start_ns,
                            int64_t clock_offset_ns);

// A TimelinePart's binary form (varints), within a window part's
// (analysis/window_merge.h): equal parts write equal bytes; Read fails
// `reader` on malformed bytes (a bin count that its span does not give, a
// state out of range, runs that are not contiguous or not increasing).
void WriteTimelinePart(const TimelinePart& part, VarintWriter& writer);
TimelinePart ReadTimelinePart(VarintReader& reader);

}  // namespace bubblewatch

#endif  // BUBBLEWATCH_ANALYSIS_RANK_TIMELINE_H_
