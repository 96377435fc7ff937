// The questions people ask the window store, answered from stored windows:
//   - QueryJob: "what happened to job J in the last hour" — the window
//     series, rolling utilization over the last 1 min / 5 min / 1 h, a
//     summary and the top bubbles of the period;
//   - QueryFleet: "which jobs wasted the most GPU time over the last hour"
//     — every job's windows of a period, summed and ranked, with what the
//     whole fleet lost by cause; QueryFleetLatest ranks each job's latest
//     window (what /metrics exports);
//   - the job list is WindowStoreReader::ListJobs as is.
// `bubblewatch query`, the HTTP API and the metrics endpoint all call these,
// so the CLI, JSON and Prometheus figures agree.
//
// Time: "now" for a job is the end of its latest stored window (event time),
// not the wall clock: a trace replayed from last week, or a job whose clock
// is off, still has a "last hour". For a live job the two coincide.
//
// Errors: kNotFound ("no windows for job J") for a job the store does not
// know or that has no window left; kInvalidArgument for an empty period or
// one longer than kMaxQueryRange; store errors as in window_store.h.
#ifndef BUBBLEWATCH_STORAGE_WINDOW_QUERIES_H_
#define BUBBLEWATCH_STORAGE_WINDOW_QUERIES_H_

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "schemas/analysis.h"
#include "schemas/bubble_cause.h"
#include "schemas/window_summary.h"
#include "storage/window_store.h"

namespace bubblewatch {

// The longest period one job query may cover: 8,640 windows of 10 s, a few
// MB of JSON. Longer periods would let one request pin a core and memory.
inline constexpr absl::Duration kMaxQueryRange = absl::Hours(24);

// The rolling ranges of a job report and of the per-job metrics.
inline constexpr std::array<absl::Duration, 3> kRollingRanges = {
    absl::Minutes(1), absl::Minutes(5), absl::Hours(1)};

// GPU-time totals over a set of windows (sums over windows and devices).
struct PeriodStats {
  int64_t windows = 0;
  int64_t span_ns = 0;
  int64_t compute_ns = 0;
  int64_t bubble_ns = 0;
  Attribution attribution{};

  void Add(const UtilizationStats& window);
  void Add(const PeriodStats& other);
  // compute / span; 0 when the span is 0.
  double utilization() const;
  // bubble / span; 0 when the span is 0.
  double bubble_ratio() const;
  // The time attributed to `cause` / span; 0 when the span is 0. These add
  // up to bubble_ratio().
  double cause_ratio(BubbleCause cause) const;
};

// One point of a job's window series: the job-level figures of one window
// (devices summed), without its per-device detail.
struct WindowPoint {
  WindowStartNs start_ns = 0;
  EventNs end_ns = 0;
  UtilizationStats stats;  // Job level; attribution adds up to bubble_ns.
  int32_t devices = 0;
  int64_t gpu_events = 0;
  int64_t cpu_events = 0;
  int64_t late_events = 0;
  WindowSummary::ClosedBy closed_by = WindowSummary::ClosedBy::kWatermark;
  int64_t host_skew_ns = 0;  // WindowSummary::host_skew_ns.
  // Multi-rank windows: the collective analysis (per rank, stragglers,
  // counts; docs/semantics.md#streaming-collectives); nullopt otherwise.
  std::optional<WindowCollectives> collectives;
  int64_t late_collectives = 0;  // WindowSummary::late_collectives.
  // WindowSummary::observed_ns: how much of the window was observed
  // (docs/semantics.md#observations); nullopt when unknown.
  std::optional<int64_t> observed_ns;
  // WindowSummary::trimmed: what was left out of a window too large for the
  // windows topic (docs/semantics.md#windows-that-do-not-fit); nullopt
  // when nothing was.
  std::optional<WindowTrim> trimmed;
};

// The point of `window`; without its stats (left default) unless
// `with_stats`, for callers that move them in.
WindowPoint ToWindowPoint(const WindowSummary& window, bool with_stats = true);

// Utilization over the windows that end at `anchor_ns` and start at or after
// anchor_ns - range; at least the last window, so a range shorter than one
// window still has a figure (it then covers that whole window).
struct RollingUtilization {
  absl::Duration range;
  PeriodStats stats;
  // Of those windows, the ones with a collective part (multi-rank), and the
  // GPU time the ranks waited in collectives in them (comm_wait summed over
  // ranks; docs/semantics.md#streaming-collectives).
  int64_t collective_windows = 0;
  int64_t comm_wait_ns = 0;

  // comm_wait / span (the job's GPU time in the range); 0 when the span is 0.
  double comm_wait_ratio() const;
};

// How much of a job's windows was observed (docs/semantics.md#observations),
// over those of its windows whose observed time is known
// (WindowPoint::observed_ns): windows of legacy producers, whose observed
// time is unknown, are in no figure, nor is time in no window.
struct ObservedPeriod {
  int64_t windows = 0;      // Windows whose observed time is known.
  int64_t length_ns = 0;    // Their lengths (end - start) summed.
  int64_t observed_ns = 0;  // Their observed time summed.
  // Of them, those observed for less than their whole length (the edge of
  // an observation, a job's tail): partly observed windows.
  int64_t partial_windows = 0;

  // Adds `window` if its observed time is known.
  void Add(const WindowPoint& window);
  // length - observed: the time of those windows nobody observed.
  int64_t unobserved_ns() const { return length_ns - observed_ns; }
  // observed / length; 0 when the length is 0.
  double coverage() const;
};

// Which period of a job to report: the last `last` of its windows (ending at
// its latest window), or the windows starting in [from_ns, to_ns).
struct JobPeriod {
  absl::Duration last = absl::ZeroDuration();  // > 0 selects "last".
  EventNs from_ns = 0;
  EventNs to_ns = 0;

  static JobPeriod Last(absl::Duration d) { return JobPeriod{.last = d}; }
  static JobPeriod Between(EventNs from_ns, EventNs to_ns) {
    return JobPeriod{.from_ns = from_ns, .to_ns = to_ns};
  }
};

struct JobReport {
  std::string job;
  // The period reported: windows starting in [from_ns, to_ns). For "last D"
  // it is [anchor - D, anchor].
  EventNs from_ns = 0;
  EventNs to_ns = 0;
  // End of the period's last window; the rolling figures end there. 0 when
  // the period holds no window.
  EventNs anchor_ns = 0;
  std::vector<WindowPoint> windows;  // Start order.
  // One entry per kRollingRanges, in that order; empty without windows.
  std::vector<RollingUtilization> rolling;
  PeriodStats summary;  // Over `windows`; its utilization is the mean.
  // The observed time of `windows`; nullopt when no window's is known, so a
  // legacy job's report is what it was.
  std::optional<ObservedPeriod> observed;
  // The lowest utilization of a window with a span, and that window's start;
  // nullopt when no window has a span.
  std::optional<double> worst_utilization;
  WindowStartNs worst_window_start_ns = 0;
  // The longest bubbles of the period (from each window's top bubbles),
  // longest first; ties: earliest. The kernels around each and the CPU call
  // blamed come with it.
  std::vector<BubbleReport> top_bubbles;
  // The collective figures of the period's multi-rank windows summed
  // (AddWindowCollectives); nullopt when no window of the period has any,
  // so a single-rank job's report is what it was.
  std::optional<WindowCollectives> collectives;
  int64_t late_collectives = 0;  // Summed over the period's windows.
};

// Adds one window's collective figures to a period's: counts summed; per
// rank (by rank) span, busy, comm, comm_exposed, comm_wait, wait caused and
// arrived_last summed, host, device and clock of the latest window (a clock
// is per window); stragglers per rank summed (wait caused, direct wait,
// split, via per rank; saved_ns over the windows that computed it, -1 when
// none did; host of the latest window naming one), then ordered by wait
// caused (descending; ties: lower rank), so the root comes first; the
// what-if job times summed over the windows that have them (-1 when none
// has). The key is the latest window's.
void AddWindowCollectives(const WindowCollectives& window,
                          WindowCollectives& period);

// Reports `job` over `period`, with at most `top_bubbles` bubbles.
// Errors: kNotFound when the store has no window of `job`;
// kInvalidArgument when `period` is empty (last <= 0, from >= to) or longer
// than kMaxQueryRange. A known job with no window in [from, to) is not an
// error: the report has no windows.
absl::StatusOr<JobReport> QueryJob(const WindowStoreReader& store,
                                   absl::string_view job,
                                   const JobPeriod& period,
                                   int top_bubbles = 10);

// The rolling utilization of `job` ending at its latest window, one entry
// per kRollingRanges (what the per-job metrics export). Reads the job's last
// hour. Errors: as QueryJob.
absl::StatusOr<std::vector<RollingUtilization>> QueryRolling(
    const WindowStoreReader& store, absl::string_view job);

struct FleetJobPeriod;

// How to rank the fleet; every order puts the most waste first.
struct FleetOrder {
  enum class Metric {
    kBubbleRatio,  // bubble / span of the job's windows in the period.
    kBubbleTime,   // Bubble GPU-time of the job's windows in the period.
    kCause,        // GPU-time attributed to `cause` in the period.
    // Multi-rank jobs (docs/semantics.md#streaming-collectives): the GPU
    // time its ranks waited in collectives (comm_wait summed over ranks and
    // windows), and the wait its stragglers caused (wait caused summed over
    // the windows' stragglers). 0 for a job without collective windows.
    kCommWait,
    kStragglerWait,
    // The GPU time its stragglers cost it (docs/semantics.md#what-it-cost):
    // StragglerCostNs (schemas/window_summary.h) summed over its windows.
    kStragglerCost,
  };
  Metric metric = Metric::kBubbleTime;
  BubbleCause cause = BubbleCause::kHostSync;  // For kCause only.

  // "bubble_ratio", "bubble_time", "cause:<name>", "comm_wait",
  // "straggler_wait" or "straggler_cost", as ParseFleetOrder accepts.
  std::string Name() const;
  // The value an entry is ranked by: a ratio for kBubbleRatio, ns otherwise.
  // Sums over the period, so every window counts by its GPU-time: a short
  // tail window weighs what it covers, never as much as a whole window.
  double Score(const FleetJobPeriod& period) const;
};

// Parses "bubble_ratio", "bubble_time", "cause:<cause name>", "comm_wait",
// "straggler_wait" or "straggler_cost".
// Errors: kInvalidArgument naming what is accepted.
absl::StatusOr<FleetOrder> ParseFleetOrder(absl::string_view text);

// A window is *partial* when it covers less than its whole length on some
// device present in it: job span < devices x (end - start). A job's first
// and last windows usually are (the tail a finished or paused job leaves is
// often under a second of GPU time).
bool IsPartialWindow(const WindowPoint& window);

// One job's figures over a fleet period.
struct FleetJobPeriod {
  PeriodStats stats;            // Sums over the job's windows in the period.
  int64_t partial_windows = 0;  // Of those, how many are partial.
  // devices x (end - start) summed over the windows: the GPU-time the
  // windows would hold if every device covered each whole window. span /
  // capacity is the share of it the job's devices covered.
  int64_t capacity_ns = 0;
  // Of the windows, those with a collective part (multi-rank windows), and
  // over them the GPU time ranks waited in collectives (comm_wait summed
  // over ranks) and the wait stragglers caused (summed over stragglers).
  int64_t collective_windows = 0;
  int64_t comm_wait_ns = 0;
  int64_t straggler_wait_ns = 0;
  // The GPU time stragglers cost the job: StragglerCostNs
  // (schemas/window_summary.h) summed over the windows.
  int64_t straggler_cost_ns = 0;

  void Add(const WindowPoint& window);
  // Another job's (or the fleet's) period: every figure adds up.
  void Add(const FleetJobPeriod& other);
  // span / capacity; 0 when the capacity is 0.
  double coverage() const;
};

struct FleetEntry {
  std::string job;
  FleetJobPeriod period;  // What the entry is ranked by.
  WindowPoint latest;     // The job's latest window in the period.
  double score = 0;       // FleetOrder::Score of period.stats.
  // The job's lifecycle phase when queried ("active", "paused", "ended";
  // schemas/job_lifecycle.h) and when the processor last reported it.
  // Filled for the ranked entries by QueryFleet; empty / epoch otherwise.
  std::string state;
  absl::Time last_seen_wall = absl::UnixEpoch();
};

struct FleetReport {
  FleetOrder by;
  // The period: windows starting in [from_ns, to_ns). For "last D" it ends
  // at the end of the newest window of any job (fleet event time; 0..0 when
  // the store holds no window). QueryFleetLatest leaves both 0.
  EventNs from_ns = 0;
  EventNs to_ns = 0;
  int64_t jobs = 0;  // Jobs with at least one window in the period.
  // The `top` highest scores, highest first; ties: more bubble time first,
  // then job name.
  std::vector<FleetEntry> entries;
  // Over every job's windows in the period (all jobs, not only `entries`):
  // what the fleet lost, by cause.
  FleetJobPeriod all;
};

// Ranks every job by `by` over its windows that start in `period` and keeps
// `top` (REQUIRES: top >= 1). For JobPeriod::Last(D) the period is the D
// ending at the end of the newest window of any job, so a job that stopped
// more than D before the fleet's newest window is not in it.
// Costs one read of every job's latest window (job-level figures only) plus
// two seeks per job into the running sums the store keeps per window
// (WindowStoreReader::PeriodSumsOfEveryJob), whatever the period's length,
// and one window read per entry kept whose last window in the period is
// not its job's newest (docs/query.md#speed). A store without running sums
// (written before them, opened read-only) is answered as QueryFleetByScan
// answers it. Errors: kInvalidArgument for an empty period or one longer than
// kMaxQueryRange; store errors as in window_store.h.
absl::StatusOr<FleetReport> QueryFleet(const WindowStoreReader& store,
                                       const JobPeriod& period,
                                       const FleetOrder& by, int top);

// QueryFleet's reference: the same report, from every window of the period
// (each job's windows scanned and their job-level figures summed), never
// the running sums. About 4.6 us of CPU per window; tests and the query
// benchmark hold QueryFleet to it.
absl::StatusOr<FleetReport> QueryFleetByScan(const WindowStoreReader& store,
                                             const JobPeriod& period,
                                             const FleetOrder& by, int top);

// Ranks the latest complete window of every job by `by` and keeps `top`
// (REQUIRES: top >= 1): what the per-job gauges of /metrics export. Each
// entry's period is that one window. Costs one point read per job.
absl::StatusOr<FleetReport> QueryFleetLatest(const WindowStoreReader& store,
                                             const FleetOrder& by, int top);

}  // namespace bubblewatch

#endif  // BUBBLEWATCH_STORAGE_WINDOW_QUERIES_H_
