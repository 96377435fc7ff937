// WindowSummary: one finalized event-time window of one job — what the
// processor stores (storage/) and publishes (topic bubblewatch.windows), and
// what queries and alerts read back. The wire and disk form is the
// FlatBuffers table of schemas/window_summary.fbs; window_summary_codec.h
// converts.
#ifndef BUBBLEWATCH_SCHEMAS_WINDOW_SUMMARY_H_
#define BUBBLEWATCH_SCHEMAS_WINDOW_SUMMARY_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "base/shared_string.h"
#include "schemas/analysis.h"

namespace bubblewatch {

// Units: every `*_ns` field is integer nanoseconds on the events' clock
// (ns since the Unix epoch, or the trace's own clock without one).

// One rank of a multi-rank job in one window: the per-rank figures of
// docs/semantics.md#collectives over the rank's events that start in the
// window (docs/semantics.md#streaming-collectives).
struct RankWindow {
  int32_t rank = 0;
  // Shared: a period repeats it in every window (base/shared_string.h).
  SharedString host;
  // Its OS process id (EventBatch.pid), when its batches named it; -1.
  int64_t pid = -1;
  int32_t device = 0;
  int64_t span_ns = 0;     // The rank's device span in its window trace.
  int64_t compute_ns = 0;  // Its busy time (every kernel).
  int64_t comm_ns = 0;     // Union of its collective kernels.
  int64_t comm_exposed_ns = 0;
  int64_t comm_wait_ns = 0;
  int64_t wait_caused_ns = 0;  // Others' waits blamed on this rank.
  int64_t arrived_last = 0;
  int64_t clock_offset_ns = 0;  // Its clock domain's offset in the window.
  // The rest of its clock (RankCollectiveStats in analysis/collectives.h,
  // docs/semantics.md#clocks); windows stored before read these defaults.
  double clock_drift_ns_per_s = 0;
  int64_t clock_instances = 0;
  int64_t clock_residual_ns = 0;
  bool clock_connected = false;
  bool clock_corrected = false;
  // (compute - comm_wait) / span; 0 when the span is 0.
  double busy_useful_utilization() const;
};

// A rank that made others wait in the window, with what made it late.
using StragglerWindow = Straggler;

// What a rank's device was doing during one segment of its timeline
// (docs/state.md#rank-timelines). The values are stored: only appended.
enum class TimelineState : uint8_t {
  kCompute = 0,   // Busy with a non-collective kernel.
  kWait = 1,      // In a collective, waiting for the last rank to arrive.
  kTransfer = 2,  // In a collective, past the arrival (or not measured).
  // Idle: a bubble, kBubble + its cause (schemas/bubble_cause.h, 0..7).
  kBubble = 3,
  kUnobserved = 11,  // Inside the span, outside the observed time.
};
inline constexpr int kTimelineStates = 12;

// The state of a bubble of `cause`.
inline TimelineState BubbleState(BubbleCause cause) {
  return static_cast<TimelineState>(
      static_cast<uint8_t>(TimelineState::kBubble) +
      static_cast<uint8_t>(cause));
}

// The name of a state for reports and JSON: "compute", "wait", "transfer",
// a cause's name (BubbleCauseName), "unobserved"; "unknown" otherwise.
std::string TimelineStateName(uint8_t state);

// A run of one state, in whole microseconds (the timeline's resolution).
struct TimelineSegment {
  uint8_t state = 0;  // A TimelineState.
  uint32_t us = 0;
  bool operator==(const TimelineSegment&) const = default;
};

// One rank's timeline in a window (docs/state.md#rank-timelines): from
// its device's first kernel start to its last kernel end (its span), on the
// job's reference clock (its clock offset subtracted), as segments laid end
// to end. Exact (bin_us 0) when its run of states has at most
// kExactTimelineSegments segments of at least 1 us (shorter ones merged into
// their longer neighbour); else binned: kTimelineBins bins of bin_us, each
// its time per state in the order the states first occur in it, at most
// kStatesPerBin (a bin's other states counted as its largest one). merged_us
// is the time shown as another state than its own (so the segments' totals
// per state agree with the rank's figures within it, plus 1 us of rounding
// per segment).
struct RankTimeline {
  int32_t start_us = 0;  // us from the window start (may be < 0).
  uint32_t merged_us = 0;
  uint32_t bin_us = 0;  // 0: exact; else the bins' length.
  std::vector<TimelineSegment> segments;
  bool operator==(const RankTimeline&) const = default;
};
inline constexpr int kExactTimelineSegments = 64;
inline constexpr int kTimelineBins = 32;
inline constexpr int kStatesPerBin = 4;
// The most segments a stored timeline has: a binned one's bins full.
inline constexpr int kMaxTimelineSegments = kTimelineBins * kStatesPerBin;

// The collective analysis of a window of a job whose collective kernels ran
// on at least two ranks in it (analysis/collective_windows.h).
struct WindowCollectives {
  uint8_t key = 0;  // analysis/collectives.h CollectiveKey (0, 1, 2).
  int64_t kernels = 0;
  int64_t matched = 0;
  int64_t unmatched = 0;
  int64_t unsynchronized = 0;
  int64_t used = 0;
  int64_t unattributed = 0;
  int64_t seq_backwards = 0;
  int64_t seq_jumps = 0;  // 0 in windows stored before the field.
  // The what-if replay of the window's used instances
  // (docs/semantics.md#what-it-cost): the window's job as run, and without
  // its stragglers' lateness; -1 without a used instance (and in windows
  // stored before the fields).
  int64_t job_ns = -1;
  int64_t job_ns_without_stragglers = -1;
  std::vector<RankWindow> ranks;            // By rank.
  std::vector<StragglerWindow> stragglers;  // By wait caused, descending.
  // Empty (windows stored before, and windows whose timelines were trimmed
  // to fit: WindowTrim::timelines), or one per entry of `ranks`, same order.
  std::vector<RankTimeline> timelines;
};

// What made straggler `s` late: the largest part of its split ("compute",
// "comm", then the bubble causes' names; the first of equals), "" when all
// are 0. Wait with no sync point (unattributed_ns) counts as the
// unattributed cause.
std::string StragglerCauseName(const Straggler& s);

// The GPU time the window's stragglers cost their job
// (docs/semantics.md#what-it-cost): the what-if's saving (job_ns −
// job_ns_without_stragglers, never below 0) times the window's ranks (one GPU
// each), `ranks_left_out` (WindowTrim::ranks) included. 0 without a what-if.
int64_t StragglerCostNs(const WindowCollectives& c, int64_t ranks_left_out);

// What was left out of a window larger than the windows topic accepts, so
// that the store and the topic hold the same window and a reader sees
// which lists are partial (docs/semantics.md#windows-that-do-not-fit). The
// job's figures (job stats, counts, collectives' counts) are always whole;
// only lists and names are cut.
struct WindowTrim {
  int64_t limit_bytes = 0;     // The encoded size it was fitted to.
  int64_t original_bytes = 0;  // Its encoded size before the first trim.
  int64_t names_cut = 0;       // Names cut to their first bytes.
  int64_t devices = 0;         // Entries left out of window.devices.
  int64_t top_bubbles = 0;     // ... of window.top_bubbles.
  int64_t ranks = 0;           // ... of collectives->ranks.
  int64_t stragglers = 0;      // ... of collectives->stragglers.
  int64_t via = 0;             // ... of the kept stragglers' via lists.
  int64_t timelines = 0;       // Rank timelines left out (all of them).

  bool operator==(const WindowTrim&) const = default;
};

struct WindowSummary {
  // Why the window became final (docs/semantics.md#closing-windows).
  // The values of the FlatBuffers enum ClosedBy (window_summary.fbs), which
  // only ever gets new ones appended.
  enum class ClosedBy : uint8_t {
    kWatermark = 0,    // The job's watermark passed the window's end.
    kIdleTimeout = 1,  // The job sent nothing for the idle timeout.
    // The batch whose end marker ended the job
    // (docs/semantics.md#job-lifecycle).
    kEndMarker = 2,
    // A batch of a new observation that starts past the job's buffered data
    // (docs/semantics.md#observations).
    kObservationEnd = 3,
    // A batch that would take the job's buffer past its bound
    // (docs/semantics.md#buffer-bound).
    kBufferFull = 4,
  };

  std::string job;
  // [window.start_ns, window.end_ns), the job's stats (sums over devices),
  // per-device stats and the top bubbles (gap parts inside the window).
  WindowAnalysis window;
  int64_t gpu_events = 0;   // GPU activities starting in the window.
  int64_t cpu_events = 0;   // CPU events starting in the window.
  int64_t late_events = 0;  // Arrived after the window was final.
  ClosedBy closed_by = ClosedBy::kWatermark;
  // Spread between the newest event starts of the job's hosts when the
  // window closed: clock skew between them plus differences in how late they
  // deliver (0 with one host; windows stored before this field read 0).
  int64_t host_skew_ns = 0;
  // Multi-rank jobs only: the window's collective analysis; absent for
  // windows where fewer than two ranks ran collective kernels (and in
  // windows stored before the field).
  std::optional<WindowCollectives> collectives;
  // Collective kernels that arrived after the window was final (their
  // instance could not be matched in it); counted, never silently dropped.
  int64_t late_collectives = 0;
  // How much of the window a producer observed: its overlap with the
  // job's observations (docs/semantics.md#observations); absent when the
  // job's batches carry no observation (and in windows stored before).
  std::optional<int64_t> observed_ns;
  // Set when the window was trimmed to fit the windows topic's message
  // limit (processor/window_fit.h); absent otherwise (and in windows
  // stored before the field).
  std::optional<WindowTrim> trimmed;
};

// Compares two summaries field by field (every field of WindowAnalysis, the
// counts, closed_by and the collectives). Returns true when they are equal.
// Otherwise, when `diff` is not null, sets it to a description of the first
// difference, e.g. "window.devices[1].stats.attribution[host_sync]: 79 vs 80".
bool SameWindow(const WindowSummary& a, const WindowSummary& b,
                std::string* diff = nullptr);

// The name of a WindowCollectives::key, as analysis/collectives.h
// CollectiveKeyName gives it: "pg_seq", "pg_order", "stream_order" ("?" for
// another value).
absl::string_view WindowCollectiveKeyName(uint8_t key);

// Every ClosedBy value, in the enum's order.
inline constexpr WindowSummary::ClosedBy kAllClosedBy[] = {
    WindowSummary::ClosedBy::kWatermark,
    WindowSummary::ClosedBy::kIdleTimeout,
    WindowSummary::ClosedBy::kEndMarker,
    WindowSummary::ClosedBy::kObservationEnd,
    WindowSummary::ClosedBy::kBufferFull,
};

// The name of `closed_by` for reports and JSON: "watermark", "idle_timeout",
// "end_marker", "observation_end", "buffer_full" ("unknown" for another
// value).
absl::string_view ClosedByName(WindowSummary::ClosedBy closed_by);

// The ClosedBy that ClosedByName names `name`; nullopt for any other name.
std::optional<WindowSummary::ClosedBy> ParseClosedBy(absl::string_view name);

}  // namespace bubblewatch

#endif  // BUBBLEWATCH_SCHEMAS_WINDOW_SUMMARY_H_
