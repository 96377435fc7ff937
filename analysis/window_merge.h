// Stage 2 of a job split across processors
// (docs/architecture.md#one-job-across-processors): each host's stage 1
// analyzes its own devices' events of a window and sends its part; stage 2
// merges the parts into the window one processor holding every host's
// events would have made.
//
// Why merging is exact: a window's per-device figures depend on that
// device's events and its host's CPU events only (the processor tags each
// rank's threads and correlation ids, so no CPU event of one rank explains
// another rank's bubble); the job's figures are sums over devices, its
// largest bubble the largest over devices (ties: the earlier, then the
// lower device), and its top bubbles the top of all devices' gap parts by
// (length, start, device), which is the top of the hosts' own tops when each
// host keeps as many as the window does. The cross-rank figures come from
// the ranks' digests (analysis/rank_digest.h), which AnalyzeCollectives
// itself is built on. The ranks' timelines are all their own devices' but
// for the wait in their collective time, which the cross-rank analysis
// measures: each part carries its ranks' share (analysis/rank_timeline.h
// TimelinePart), and stage 2 splits their collective time by the waits.
// Tested against the single-stage window (tests/analysis/
// window_merge_test.cc).
#ifndef BUBBLEWATCH_ANALYSIS_WINDOW_MERGE_H_
#define BUBBLEWATCH_ANALYSIS_WINDOW_MERGE_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "analysis/collective_windows.h"
#include "analysis/collectives.h"
#include "analysis/interval_set.h"
#include "analysis/rank_digest.h"
#include "analysis/rank_timeline.h"
#include "schemas/analysis.h"
#include "schemas/window_summary.h"

namespace bubblewatch {

// What one host's stage 1 knows of a job's window.
struct HostWindowPart {
  // Whose part: the job, and the host (`rank-R` for a rank that names
  // none), the key stage 1 publishes it under with the window's start.
  std::string job;
  std::string host;
  // AnalyzeTrace's window of the host's events: its devices only, numbered
  // as the job numbers them (a ranked one-GPU trace's device is its rank),
  // with its own top bubbles (as many as the merged window keeps).
  WindowAnalysis window;
  int64_t gpu_events = 0;
  int64_t cpu_events = 0;
  // The host's observations as its windower knows them
  // (docs/semantics.md#observations; JobWindower's observed set): nullopt
  // when none is known or a batch without one is. The job's observed time
  // is the union's: hosts observed the same seconds, which a sum would count
  // twice.
  std::optional<IntervalSet> observed;
  // The digests of the host's ranks' events that start in the window
  // (DigestTrace of each rank's window trace); empty without collectives.
  std::vector<RankDigest> digests;
  // Stage 1's share of each digest's rank's timeline (analysis/
  // rank_timeline.h TimelineParts; same order as `digests`), or none at all
  // (a part of a stage 1 that sent none: the window then has no timeline).
  std::vector<TimelinePart> timelines;

  // What stage 2 needs to know when the job's window is complete
  // (docs/architecture.md#one-job-across-processors): the job's world size
  // as the host's batches declare it (-1: none declares one), the host's
  // ranks with events in its stage 1's buffer when the part was made
  // (sorted, distinct, each >= 0; what a replay buffers again, so a
  // republished part has the same bytes; stage 2 holds the union of a
  // host's parts' ranks; a host whose batches state no rank has none), and
  // whether the host's stream ended with this window (its end marker, or
  // its idle timeout): the host sends no later part until it starts a new
  // run. A host's parts come in window order, so a part of a window also
  // says the host finalized every earlier window.
  int32_t world_size = -1;
  std::vector<int32_t> ranks;
  bool last = false;

  // What the part says (docs/semantics.md#split-jobs). kWindow: the host's
  // part of `window`, as above. kEnd: the host's stream ended (its end
  // marker, or its idle timeout) when its watermark had closed every
  // window already: `window` is the host's last finalized window (it ends
  // at the host's finalized edge), `last` is set and nothing else is: stage
  // 2 reads it as the host having ended there, merges nothing. kLate: the
  // late events and late collective records one batch of the host brought
  // into windows its stage 1 had finalized (`late`, `late_offset`);
  // `window` is the first of them, nothing else is set.
  enum class Kind : uint8_t { kWindow = 0, kEnd = 1, kLate = 2 };
  Kind kind = Kind::kWindow;
  // kWindow: the newest start of the host's buffered events when its stage
  // 1 made the part (nullopt: none buffered); stage 2's host skew of the
  // window is the spread of its parts' values.
  std::optional<int64_t> newest_start_ns;
  // kLate: the stage-1 input offset of the batch that brought the late
  // events (what makes a republished late part a copy: a host's offsets
  // only grow), and per window (ascending starts, distinct) its counts.
  struct Late {
    int64_t window_start_ns = 0;
    int64_t events = 0;
    int64_t collectives = 0;
    bool operator==(const Late&) const = default;
  };
  int64_t late_offset = -1;
  std::vector<Late> late;
};

// Stage 1: appends to `part` the digests of `ranks` (all borrowing one
// trace, as DigestTrace takes them) and their ranks' TimelineParts,
// analyzing the trace once with `analyzer` (its gaps kept). Errors:
// DigestTrace's, and then nothing is appended. A timeline that cannot be
// made (an analysis of the trace's gaps refused; the trace's own analysis
// was not) leaves the part without any timeline: afterwards
// `part.timelines` is either empty or parallel to `part.digests`.
absl::Status DigestRanksInto(absl::Span<const RankInput> ranks,
                             const AnalyzerOptions& analyzer,
                             HostWindowPart& part);

// The window of `parts` (all of one window, none sharing a device): devices
// by id, the job's figures summed in that order, the top
// `top_bubbles_per_window` of the parts' top bubbles. Errors:
// kInvalidArgument for no part, parts of different windows, or a device in
// two parts.
absl::StatusOr<WindowAnalysis> MergeWindowAnalyses(
    absl::Span<const WindowAnalysis> parts, int top_bubbles_per_window);

// The job's window from its hosts' parts: the merged WindowAnalysis, the
// event counts summed, the observed time of the parts' observations'
// union (absent when a part has none) and, when at least two ranks ran a
// collective kernel,
// the collective analysis of every part's digests (ordered by rank, then
// host, as the processor orders its sources) reduced as a stored window
// keeps it, with the ranks' timelines (MergedTimeline of each digest's
// TimelinePart and the waits the analysis measured: the single stage's
// bytes) when every part sent them. host_skew_ns is the spread (largest
// minus smallest) of the parts' newest_start_ns (0 with fewer than two
// parts having one). What the merge cannot know is left as a default for
// the caller: closed_by and late counts (they come in kLate parts). Every
// part must be a kWindow part.
// Errors: MergeWindowAnalyses's, kInvalidArgument for parts of different
// jobs or two parts of one host, and AnalyzeDigests's.
absl::StatusOr<WindowSummary> MergeHostWindowParts(
    absl::Span<const HostWindowPart> parts, int top_bubbles_per_window,
    const CollectiveOptions& options = WindowCollectiveOptions());

// A part's compact binary form, what stage 1 publishes: a version byte (2),
// the job and host, the window as EncodeWindowSummary encodes a summary of
// it (the window and the event counts), the observations (a flag, then
// each interval's start and length as varints), each digest as
// EncodeRankDigest encodes it, then the world size, the ranks and the last
// flag; from version 2 on, then the kind (a byte), the newest start (a
// flag, then its value), the late offset, the late counts (each window
// start as a step from the previous one, its events and collectives) and
// the timeline parts (a count, 0 or the digests', then each as
// WriteTimelinePart writes it). Version 1 parts (written before version 2)
// decode with the defaults: a kWindow part without a newest start or
// timelines. Decode(Encode(p)) equals p; equal parts encode to equal bytes.
// Decode errors: kInvalidArgument for truncated or malformed bytes, an
// unknown version, or a window or digest its own decoder refuses.
std::string EncodeHostWindowPart(const HostWindowPart& part);
absl::StatusOr<HostWindowPart> DecodeHostWindowPart(absl::string_view bytes);

}  // namespace bubblewatch

#endif  // BUBBLEWATCH_ANALYSIS_WINDOW_MERGE_H_
