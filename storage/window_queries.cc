#include "storage/window_queries.h"

#include <algorithm>
#include <limits>
#include <tuple>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"
#include "base/status_macros.h"
#include "base/text_escape.h"
#include "schemas/time_types.h"

namespace bubblewatch {
namespace {

absl::Status NoWindows(absl::string_view job) {
  return absl::NotFoundError(
      absl::StrCat("no windows for job ", EscapeForLog(job)));
}

// The job's latest window start, or kNotFound. The job record carries it, so
// this is one small point read.
absl::StatusOr<int64_t> LatestStart(const WindowStoreReader& store,
                                    absl::string_view job) {
  ASSIGN_OR_RETURN(std::optional<JobInfo> info, store.Job(job));
  if (!info.has_value() || info->window_count == 0) return NoWindows(job);
  return info->latest_window_start_ns;
}

absl::Time TimeOfNs(int64_t ns) {
  return ns == std::numeric_limits<int64_t>::max() ? absl::InfiniteFuture()
                                                   : absl::FromUnixNanos(ns);
}

// A scan of a job's windows as a report reads them: the job-level point of
// each window decoded, the rest left in place (`views`, into `encoded`) for
// the few top bubbles the report keeps. Per-device stats are never decoded.
struct ScannedPoints {
  EncodedWindows encoded;
  std::vector<WindowSummaryView> views;
  std::vector<WindowPoint> points;
};

absl::Status WindowError(absl::string_view job, int64_t start_ns,
                         const absl::Status& status) {
  return absl::DataLossError(absl::StrCat("window of job ", job, " at ",
                                          start_ns, ": ", status.message()));
}

// The job-level point of a window read in place.
absl::StatusOr<WindowPoint> PointOf(const WindowSummaryView& view) {
  ASSIGN_OR_RETURN(UtilizationStats stats, view.DecodeJobStats());
  return WindowPoint{.start_ns = view.start_ns(),
                     .end_ns = view.end_ns(),
                     .stats = std::move(stats),
                     .devices = view.device_count(),
                     .gpu_events = view.gpu_events(),
                     .cpu_events = view.cpu_events(),
                     .late_events = view.late_events(),
                     .closed_by = view.closed_by(),
                     .host_skew_ns = view.host_skew_ns(),
                     .observed_ns = view.observed_ns(),
                     .trimmed = view.trimmed()};
}

absl::StatusOr<ScannedPoints> ScanPoints(const WindowStoreReader& store,
                                         absl::string_view job,
                                         int64_t begin_ns, int64_t end_ns) {
  ScannedPoints out;
  ASSIGN_OR_RETURN(out.encoded, store.ScanEncoded(job, TimeOfNs(begin_ns),
                                                  TimeOfNs(end_ns)));
  out.views.reserve(out.encoded.size());
  out.points.reserve(out.encoded.size());
  for (size_t i = 0; i < out.encoded.size(); ++i) {
    absl::StatusOr<WindowSummaryView> view =
        WindowSummaryView::Open(out.encoded.bytes(i));
    if (!view.ok()) {
      return WindowError(job, out.encoded.start_ns(i), view.status());
    }
    absl::StatusOr<WindowPoint> point = PointOf(*view);
    if (!point.ok()) {
      return WindowError(job, out.encoded.start_ns(i), point.status());
    }
    // The collective part only here: a job's report shows it, the fleet's
    // ranking (PointOf alone) does not.
    // Hosts as the previous window's share its strings (most do).
    const WindowCollectives* previous =
        out.points.empty() || !out.points.back().collectives.has_value()
            ? nullptr
            : &*out.points.back().collectives;
    absl::StatusOr<std::optional<WindowCollectives>> collectives =
        view->DecodeCollectives(previous);
    if (!collectives.ok()) {
      return WindowError(job, out.encoded.start_ns(i), collectives.status());
    }
    point->collectives = *std::move(collectives);
    point->late_collectives = view->late_collectives();
    out.points.push_back(*std::move(point));
    out.views.push_back(*view);
  }
  return out;
}

// `a - b` without overflow: the period arithmetic runs near the ends of the
// int64 range for times given as epoch ns.
int64_t SaturatingSub(int64_t a, int64_t b) {
  int64_t r;
  if (__builtin_sub_overflow(a, b, &r)) {  // Clamped to the int64 range.
    return b > 0 ? std::numeric_limits<int64_t>::min()
                 : std::numeric_limits<int64_t>::max();
  }
  return r;
}

// Rolling figures ending at the last of `windows` (start order), over the
// windows that start at or after its end - range; at least the last one.
std::vector<RollingUtilization> Rolling(
    const std::vector<WindowPoint>& windows) {
  std::vector<RollingUtilization> out;
  if (windows.empty()) return out;
  const int64_t anchor = windows.back().end_ns;
  for (absl::Duration range : kRollingRanges) {
    RollingUtilization r{.range = range,
                         .stats = {},
                         .collective_windows = 0,
                         .comm_wait_ns = 0};
    const int64_t begin =
        SaturatingSub(anchor, absl::ToInt64Nanoseconds(range));
    for (auto it = windows.rbegin(); it != windows.rend(); ++it) {
      if (it != windows.rbegin() && it->start_ns < begin) break;
      r.stats.Add(it->stats);
      if (it->collectives.has_value()) {
        ++r.collective_windows;
        for (const RankWindow& rank : it->collectives->ranks) {
          r.comm_wait_ns += rank.comm_wait_ns;
        }
      }
    }
    out.push_back(r);
  }
  return out;
}

// Longest first; ties: earliest, then lower device.
bool LongerBubble(const BubbleReport& a, const BubbleReport& b) {
  return std::make_tuple(-a.duration_ns(), a.start_ns, a.device) <
         std::make_tuple(-b.duration_ns(), b.start_ns, b.device);
}

absl::Status CheckPeriod(const JobPeriod& period) {
  const absl::Duration max = kMaxQueryRange;
  if (period.last != absl::ZeroDuration()) {
    if (period.last < absl::ZeroDuration()) {
      return absl::InvalidArgumentError("the period must be positive");
    }
    if (period.last > max) {
      return absl::InvalidArgumentError(
          absl::StrCat("the period may be at most ", absl::FormatDuration(max),
                       ", not ", absl::FormatDuration(period.last)));
    }
    return absl::OkStatus();
  }
  if (period.from_ns >= period.to_ns) {
    return absl::InvalidArgumentError("'from' must be before 'to'");
  }
  if (absl::FromUnixNanos(period.to_ns) - absl::FromUnixNanos(period.from_ns) >
      max) {
    return absl::InvalidArgumentError(
        absl::StrCat("the period may be at most ", absl::FormatDuration(max)));
  }
  return absl::OkStatus();
}

}  // namespace

void PeriodStats::Add(const UtilizationStats& window) {
  ++windows;
  span_ns += window.span_ns;
  compute_ns += window.compute_ns;
  bubble_ns += window.bubble_ns;
  for (int c = 0; c < kNumBubbleCauses; ++c) {
    attribution[c] += window.attribution[c];
  }
}

void PeriodStats::Add(const PeriodStats& other) {
  windows += other.windows;
  span_ns += other.span_ns;
  compute_ns += other.compute_ns;
  bubble_ns += other.bubble_ns;
  for (int c = 0; c < kNumBubbleCauses; ++c) {
    attribution[c] += other.attribution[c];
  }
}

double PeriodStats::utilization() const {
  return span_ns > 0 ? static_cast<double>(compute_ns) / span_ns : 0.0;
}

double PeriodStats::bubble_ratio() const {
  return span_ns > 0 ? static_cast<double>(bubble_ns) / span_ns : 0.0;
}

double PeriodStats::cause_ratio(BubbleCause cause) const {
  return span_ns > 0
             ? static_cast<double>(attribution[static_cast<int>(cause)]) /
                   span_ns
             : 0.0;
}

WindowPoint ToWindowPoint(const WindowSummary& w, bool with_stats) {
  return WindowPoint{.start_ns = w.window.start_ns,
                     .end_ns = w.window.end_ns,
                     .stats = with_stats ? w.window.job : UtilizationStats{},
                     .devices = static_cast<int32_t>(w.window.devices.size()),
                     .gpu_events = w.gpu_events,
                     .cpu_events = w.cpu_events,
                     .late_events = w.late_events,
                     .closed_by = w.closed_by,
                     .host_skew_ns = w.host_skew_ns,
                     .collectives = w.collectives,
                     .late_collectives = w.late_collectives,
                     .observed_ns = w.observed_ns,
                     .trimmed = w.trimmed};
}

void AddWindowCollectives(const WindowCollectives& window,
                          WindowCollectives& period) {
  period.key = window.key;
  period.kernels += window.kernels;
  period.matched += window.matched;
  period.unmatched += window.unmatched;
  period.unsynchronized += window.unsynchronized;
  period.used += window.used;
  period.unattributed += window.unattributed;
  period.seq_backwards += window.seq_backwards;
  period.seq_jumps += window.seq_jumps;
  // Usually every window has the period's ranks, in the same order: then
  // rank i adds to rank i, without a search (a 64-rank job's hour is 23,040
  // of these per query).
  const bool aligned =
      window.ranks.size() == period.ranks.size() &&
      std::equal(window.ranks.begin(), window.ranks.end(), period.ranks.begin(),
                 [](const RankWindow& w, const RankWindow& p) {
                   return w.rank == p.rank;
                 });
  for (size_t i = 0; i < window.ranks.size(); ++i) {
    const RankWindow& r = window.ranks[i];
    auto it = period.ranks.begin() + static_cast<ptrdiff_t>(i);
    if (!aligned) {
      it = std::lower_bound(
          period.ranks.begin(), period.ranks.end(), r.rank,
          [](const RankWindow& a, int32_t rank) { return a.rank < rank; });
      if (it == period.ranks.end() || it->rank != r.rank) {
        it = period.ranks.insert(it, RankWindow{.rank = r.rank});
      }
    }
    if (it->host != r.host) it->host = r.host;
    if (r.pid >= 0) it->pid = r.pid;  // The latest known, as the host.
    it->device = r.device;
    it->span_ns += r.span_ns;
    it->compute_ns += r.compute_ns;
    it->comm_ns += r.comm_ns;
    it->comm_exposed_ns += r.comm_exposed_ns;
    it->comm_wait_ns += r.comm_wait_ns;
    it->wait_caused_ns += r.wait_caused_ns;
    it->arrived_last += r.arrived_last;
    // The clock of the latest window (a clock is per window).
    it->clock_offset_ns = r.clock_offset_ns;
    it->clock_drift_ns_per_s = r.clock_drift_ns_per_s;
    it->clock_instances = r.clock_instances;
    it->clock_residual_ns = r.clock_residual_ns;
    it->clock_connected = r.clock_connected;
    it->clock_corrected = r.clock_corrected;
  }
  if (window.job_ns >= 0) {
    period.job_ns = std::max<int64_t>(period.job_ns, 0) + window.job_ns;
    period.job_ns_without_stragglers =
        std::max<int64_t>(period.job_ns_without_stragglers, 0) +
        window.job_ns_without_stragglers;
  }
  for (const StragglerWindow& s : window.stragglers) {
    auto it = std::find_if(
        period.stragglers.begin(), period.stragglers.end(),
        [&](const StragglerWindow& p) { return p.rank == s.rank; });
    if (it == period.stragglers.end()) {
      period.stragglers.push_back(StragglerWindow{.rank = s.rank});
      it = period.stragglers.end() - 1;
    }
    it->wait_caused_ns += s.wait_caused_ns;
    it->arrived_last += s.arrived_last;
    it->compute_ns += s.compute_ns;
    it->comm_ns += s.comm_ns;
    for (int c = 0; c < kNumBubbleCauses; ++c) it->causes[c] += s.causes[c];
    it->unattributed_ns += s.unattributed_ns;
    if (!s.host.empty()) it->host = s.host;
    if (s.pid >= 0) it->pid = s.pid;
    it->direct_wait_caused_ns += s.direct_wait_caused_ns;
    if (s.saved_ns >= 0) {
      it->saved_ns = std::max<int64_t>(it->saved_ns, 0) + s.saved_ns;
    }
    for (const Straggler::Via& v : s.via) {
      auto via = std::find_if(
          it->via.begin(), it->via.end(),
          [&](const Straggler::Via& p) { return p.rank == v.rank; });
      if (via == it->via.end()) {
        it->via.push_back(Straggler::Via{.rank = v.rank});
        via = it->via.end() - 1;
      }
      via->wait_ns += v.wait_ns;
    }
    if (!s.via.empty()) {
      std::sort(it->via.begin(), it->via.end(),
                [](const Straggler::Via& a, const Straggler::Via& b) {
                  return std::tie(b.wait_ns, a.rank) <
                         std::tie(a.wait_ns, b.rank);
                });
    }
  }
  const auto more_wait = [](const StragglerWindow& a,
                            const StragglerWindow& b) {
    return std::tie(b.wait_caused_ns, a.rank) <
           std::tie(a.wait_caused_ns, b.rank);
  };
  // Most windows leave the order as it was.
  if (!std::is_sorted(period.stragglers.begin(), period.stragglers.end(),
                      more_wait)) {
    std::sort(period.stragglers.begin(), period.stragglers.end(), more_wait);
  }
}

absl::StatusOr<JobReport> QueryJob(const WindowStoreReader& store,
                                   absl::string_view job,
                                   const JobPeriod& period, int top_bubbles) {
  RETURN_IF_ERROR(CheckPeriod(period));
  ASSIGN_OR_RETURN(int64_t latest_start, LatestStart(store, job));

  JobReport report;
  report.job = std::string(job);
  // `context` holds the points of the period's windows plus, before them,
  // whatever else the 1 h rolling figure needs: at most two scans. `scan` is
  // the one holding the period; its window i is context[i + scan_offset].
  std::vector<WindowPoint> context;
  ScannedPoints scan;
  size_t scan_offset = 0;
  const int64_t hour_ns = absl::ToInt64Nanoseconds(kRollingRanges.back());
  size_t first_in_period = 0;
  if (period.last > absl::ZeroDuration()) {
    const int64_t last_ns = absl::ToInt64Nanoseconds(period.last);
    ASSIGN_OR_RETURN(scan, ScanPoints(store, job,
                                      SaturatingSub(latest_start,
                                                    std::max(last_ns, hour_ns)),
                                      std::numeric_limits<int64_t>::max()));
    context = std::move(scan.points);
    if (context.empty()) return NoWindows(job);  // Trimmed since Job().
    report.to_ns = context.back().end_ns;
    report.from_ns = SaturatingSub(report.to_ns, last_ns);
    while (first_in_period < context.size() &&
           context[first_in_period].start_ns < report.from_ns) {
      ++first_in_period;
    }
  } else {
    report.from_ns = period.from_ns;
    report.to_ns = period.to_ns;
    ASSIGN_OR_RETURN(scan,
                     ScanPoints(store, job, period.from_ns, period.to_ns));
    context = std::move(scan.points);
    if (!context.empty()) {
      const int64_t rolling_begin =
          SaturatingSub(context.back().end_ns, hour_ns);
      if (rolling_begin < period.from_ns) {
        ASSIGN_OR_RETURN(ScannedPoints before,
                         ScanPoints(store, job, rolling_begin, period.from_ns));
        first_in_period = before.points.size();
        scan_offset = first_in_period;
        before.points.insert(before.points.end(),
                             std::make_move_iterator(context.begin()),
                             std::make_move_iterator(context.end()));
        context = std::move(before.points);
      }
    }
  }

  report.rolling = Rolling(context);
  if (!context.empty()) report.anchor_ns = context.back().end_ns;
  report.windows.reserve(context.size() - first_in_period);
  // Bubble candidates by extent only; the kept ones are decoded whole at the
  // end (each carries three strings).
  struct Candidate {
    BubbleReport extent;  // Device and times only.
    size_t window;        // In `scan`.
    int32_t bubble;
  };
  std::vector<Candidate> bubbles;
  for (size_t i = first_in_period; i < context.size(); ++i) {
    const WindowPoint& w = context[i];
    report.summary.Add(w.stats);
    if (w.observed_ns.has_value()) {
      if (!report.observed.has_value()) report.observed.emplace();
      report.observed->Add(w);
    }
    report.late_collectives += w.late_collectives;
    if (w.collectives.has_value()) {
      if (!report.collectives.has_value()) report.collectives.emplace();
      AddWindowCollectives(*w.collectives, *report.collectives);
    }
    if (w.stats.span_ns > 0) {
      const double u = w.stats.utilization();
      if (!report.worst_utilization.has_value() ||
          u < *report.worst_utilization) {
        report.worst_utilization = u;
        report.worst_window_start_ns = w.start_ns;
      }
    }
    const size_t in_scan = i - scan_offset;
    const WindowSummaryView& view = scan.views[in_scan];
    for (int32_t b = 0; b < view.top_bubble_count(); ++b) {
      bubbles.push_back(Candidate{
          .extent = view.TopBubbleExtent(b), .window = in_scan, .bubble = b});
    }
  }
  report.windows.assign(
      std::make_move_iterator(context.begin() + first_in_period),
      std::make_move_iterator(context.end()));
  const size_t keep =
      std::min(bubbles.size(), static_cast<size_t>(std::max(0, top_bubbles)));
  std::partial_sort(bubbles.begin(), bubbles.begin() + keep, bubbles.end(),
                    [](const Candidate& a, const Candidate& b) {
                      return LongerBubble(a.extent, b.extent);
                    });
  report.top_bubbles.reserve(keep);
  for (size_t i = 0; i < keep; ++i) {
    const Candidate& c = bubbles[i];
    absl::StatusOr<BubbleReport> b =
        scan.views[c.window].DecodeTopBubble(c.bubble);
    if (!b.ok()) {
      return WindowError(job, scan.encoded.start_ns(c.window), b.status());
    }
    report.top_bubbles.push_back(*std::move(b));
  }
  return report;
}

absl::StatusOr<std::vector<RollingUtilization>> QueryRolling(
    const WindowStoreReader& store, absl::string_view job) {
  ASSIGN_OR_RETURN(int64_t latest_start, LatestStart(store, job));
  ASSIGN_OR_RETURN(
      ScannedPoints scan,
      ScanPoints(store, job,
                 SaturatingSub(latest_start,
                               absl::ToInt64Nanoseconds(kRollingRanges.back())),
                 std::numeric_limits<int64_t>::max()));
  if (scan.points.empty()) return NoWindows(job);
  return Rolling(scan.points);
}

double RollingUtilization::comm_wait_ratio() const {
  return stats.span_ns > 0 ? static_cast<double>(comm_wait_ns) /
                                 static_cast<double>(stats.span_ns)
                           : 0.0;
}

std::string FleetOrder::Name() const {
  switch (metric) {
    case Metric::kBubbleRatio:
      return "bubble_ratio";
    case Metric::kBubbleTime:
      return "bubble_time";
    case Metric::kCause:
      return absl::StrCat("cause:", BubbleCauseName(cause));
    case Metric::kCommWait:
      return "comm_wait";
    case Metric::kStragglerWait:
      return "straggler_wait";
    case Metric::kStragglerCost:
      return "straggler_cost";
  }
  return "";
}

double FleetOrder::Score(const FleetJobPeriod& period) const {
  const PeriodStats& p = period.stats;
  switch (metric) {
    case Metric::kBubbleRatio:
      return p.bubble_ratio();
    case Metric::kBubbleTime:
      return static_cast<double>(p.bubble_ns);
    case Metric::kCause:
      return static_cast<double>(p.attribution[static_cast<int>(cause)]);
    case Metric::kCommWait:
      return static_cast<double>(period.comm_wait_ns);
    case Metric::kStragglerWait:
      return static_cast<double>(period.straggler_wait_ns);
    case Metric::kStragglerCost:
      return static_cast<double>(period.straggler_cost_ns);
  }
  return 0;
}

absl::StatusOr<FleetOrder> ParseFleetOrder(absl::string_view text) {
  if (text == "bubble_ratio") {
    return FleetOrder{.metric = FleetOrder::Metric::kBubbleRatio};
  }
  if (text == "bubble_time") {
    return FleetOrder{.metric = FleetOrder::Metric::kBubbleTime};
  }
  if (text == "comm_wait") {
    return FleetOrder{.metric = FleetOrder::Metric::kCommWait};
  }
  if (text == "straggler_wait") {
    return FleetOrder{.metric = FleetOrder::Metric::kStragglerWait};
  }
  if (text == "straggler_cost") {
    return FleetOrder{.metric = FleetOrder::Metric::kStragglerCost};
  }
  if (absl::ConsumePrefix(&text, "cause:")) {
    if (std::optional<BubbleCause> cause = ParseBubbleCause(text)) {
      return FleetOrder{.metric = FleetOrder::Metric::kCause, .cause = *cause};
    }
    std::vector<std::string> names;
    for (BubbleCause c : kAllBubbleCauses) {
      names.emplace_back(BubbleCauseName(c));
    }
    return absl::InvalidArgumentError(absl::StrCat("unknown cause '", text,
                                                   "': want one of ",
                                                   absl::StrJoin(names, ", ")));
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unknown order '", text,
                   "': want bubble_ratio, bubble_time, cause:<cause>, "
                   "comm_wait, straggler_wait or straggler_cost"));
}

bool IsPartialWindow(const WindowPoint& w) {
  return w.stats.span_ns <
         static_cast<int64_t>(w.devices) * (w.end_ns - w.start_ns);
}

void FleetJobPeriod::Add(const WindowPoint& w) {
  stats.Add(w.stats);
  if (IsPartialWindow(w)) ++partial_windows;
  capacity_ns += static_cast<int64_t>(w.devices) * (w.end_ns - w.start_ns);
  if (w.collectives.has_value()) {
    ++collective_windows;
    for (const RankWindow& r : w.collectives->ranks) {
      comm_wait_ns += r.comm_wait_ns;
    }
    for (const StragglerWindow& s : w.collectives->stragglers) {
      straggler_wait_ns += s.wait_caused_ns;
    }
    straggler_cost_ns += StragglerCostNs(
        *w.collectives, w.trimmed.has_value() ? w.trimmed->ranks : 0);
  }
}

void FleetJobPeriod::Add(const FleetJobPeriod& other) {
  stats.Add(other.stats);
  partial_windows += other.partial_windows;
  capacity_ns += other.capacity_ns;
  collective_windows += other.collective_windows;
  comm_wait_ns += other.comm_wait_ns;
  straggler_wait_ns += other.straggler_wait_ns;
  straggler_cost_ns += other.straggler_cost_ns;
}

void ObservedPeriod::Add(const WindowPoint& window) {
  if (!window.observed_ns.has_value()) return;
  const int64_t length = window.end_ns - window.start_ns;
  ++windows;
  length_ns += length;
  observed_ns += *window.observed_ns;
  if (*window.observed_ns < length) ++partial_windows;
}

double ObservedPeriod::coverage() const {
  return length_ns > 0
             ? static_cast<double>(observed_ns) / static_cast<double>(length_ns)
             : 0.0;
}

double FleetJobPeriod::coverage() const {
  return capacity_ns > 0 ? static_cast<double>(stats.span_ns) / capacity_ns
                         : 0.0;
}

namespace {

// Keeps the `top` highest scores of `entries`, highest first; ties: more
// bubble time, then job name.
void RankEntries(std::vector<FleetEntry>& entries, int top) {
  const size_t keep =
      std::min(entries.size(), static_cast<size_t>(std::max(0, top)));
  std::partial_sort(
      entries.begin(), entries.begin() + keep, entries.end(),
      [](const FleetEntry& a, const FleetEntry& b) {
        if (a.score != b.score) return a.score > b.score;
        if (a.period.stats.bubble_ns != b.period.stats.bubble_ns) {
          return a.period.stats.bubble_ns > b.period.stats.bubble_ns;
        }
        return a.job < b.job;
      });
  entries.resize(keep);
}

// The lifecycle of the ranked jobs (docs/semantics.md#job-lifecycle): their
// state now and when they were last seen.
absl::Status AddLifecycle(const WindowStoreReader& store,
                          std::vector<FleetEntry>& entries) {
  const absl::Time now = absl::Now();
  for (FleetEntry& e : entries) {
    ASSIGN_OR_RETURN(std::optional<JobInfo> info, store.Job(e.job));
    if (!info) continue;
    e.last_seen_wall = info->last_seen_wall;
    e.state = std::string(JobPhaseName(
        PhaseAt(info->lifecycle,
                std::max(now - info->last_seen_wall, absl::ZeroDuration()))));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<FleetReport> QueryFleetByScan(const WindowStoreReader& store,
                                             const JobPeriod& period,
                                             const FleetOrder& by, int top) {
  RETURN_IF_ERROR(CheckPeriod(period));
  ASSIGN_OR_RETURN(std::vector<WindowSummary> latest, store.LatestOfEveryJob());
  FleetReport report;
  report.by = by;
  if (period.last > absl::ZeroDuration()) {
    if (latest.empty()) return report;
    EventNs anchor = latest.front().window.end_ns;
    for (const WindowSummary& w : latest) {
      anchor = std::max(anchor, w.window.end_ns);
    }
    report.to_ns = anchor;
    report.from_ns =
        SaturatingSub(anchor, absl::ToInt64Nanoseconds(period.last));
  } else {
    report.from_ns = period.from_ns;
    report.to_ns = period.to_ns;
  }
  std::vector<FleetEntry> entries;
  for (const WindowSummary& w : latest) {
    // The latest window has the job's latest start: a job whose latest
    // window starts before the period has nothing in it.
    if (w.window.start_ns < report.from_ns) continue;
    ASSIGN_OR_RETURN(ScannedPoints scan,
                     ScanPoints(store, w.job, report.from_ns, report.to_ns));
    if (scan.points.empty()) continue;
    FleetEntry e{.job = w.job};
    for (const WindowPoint& p : scan.points) e.period.Add(p);
    e.latest = std::move(scan.points.back());
    e.score = by.Score(e.period);
    report.all.Add(e.period);
    entries.push_back(std::move(e));
  }
  report.jobs = static_cast<int64_t>(entries.size());
  RankEntries(entries, top);
  RETURN_IF_ERROR(AddLifecycle(store, entries));
  report.entries = std::move(entries);
  return report;
}

absl::StatusOr<FleetReport> QueryFleet(const WindowStoreReader& store,
                                       const JobPeriod& period,
                                       const FleetOrder& by, int top) {
  RETURN_IF_ERROR(CheckPeriod(period));
  ASSIGN_OR_RETURN(EncodedLatestWindows latest,
                   store.LatestOfEveryJobEncoded());
  std::vector<WindowSummaryView> views;
  views.reserve(latest.jobs.size());
  for (size_t i = 0; i < latest.jobs.size(); ++i) {
    absl::StatusOr<WindowSummaryView> view =
        WindowSummaryView::Open(latest.windows.bytes(i));
    if (!view.ok()) {
      return absl::DataLossError(absl::StrCat("latest window of job ",
                                              latest.jobs[i], ": ",
                                              view.status().message()));
    }
    views.push_back(*view);
  }
  FleetReport report;
  report.by = by;
  if (period.last > absl::ZeroDuration()) {
    if (views.empty()) return report;
    EventNs anchor = views.front().end_ns();
    for (const WindowSummaryView& v : views) {
      anchor = std::max(anchor, v.end_ns());
    }
    report.to_ns = anchor;
    report.from_ns =
        SaturatingSub(anchor, absl::ToInt64Nanoseconds(period.last));
  } else {
    report.from_ns = period.from_ns;
    report.to_ns = period.to_ns;
  }
  ASSIGN_OR_RETURN(std::optional<std::vector<JobPeriodSums>> sums,
                   store.PeriodSumsOfEveryJob(TimeOfNs(report.from_ns),
                                              TimeOfNs(report.to_ns)));
  // A store without running sums (written before them, read-only).
  if (!sums.has_value()) return QueryFleetByScan(store, period, by, top);
  std::vector<FleetEntry> entries;
  entries.reserve(sums->size());
  for (JobPeriodSums& s : *sums) {
    FleetEntry e{.job = std::move(s.job)};
    PeriodStats& stats = e.period.stats;
    stats.windows = s.sums.windows;
    stats.span_ns = s.sums.span_ns;
    stats.compute_ns = s.sums.compute_ns;
    stats.bubble_ns = s.sums.bubble_ns;
    stats.attribution = s.sums.attribution;
    e.period.partial_windows = s.sums.partial_windows;
    e.period.capacity_ns = s.sums.capacity_ns;
    e.period.collective_windows = s.sums.collective_windows;
    e.period.comm_wait_ns = s.sums.comm_wait_ns;
    e.period.straggler_wait_ns = s.sums.straggler_wait_ns;
    e.period.straggler_cost_ns = s.sums.straggler_cost_ns;
    // Only the start until ranking is done: the rest of the point is read
    // for the entries kept.
    e.latest.start_ns = s.last_start_ns;
    e.score = by.Score(e.period);
    report.all.Add(e.period);
    entries.push_back(std::move(e));
  }
  report.jobs = static_cast<int64_t>(entries.size());
  RankEntries(entries, top);
  // Each kept entry shows the last window of the period: for "last D"
  // nearly always the job's newest, opened above; else one more read.
  for (FleetEntry& e : entries) {
    const int64_t last_start = e.latest.start_ns;
    const auto it =
        std::lower_bound(latest.jobs.begin(), latest.jobs.end(), e.job);
    const size_t li = static_cast<size_t>(it - latest.jobs.begin());
    absl::StatusOr<WindowPoint> point;
    if (it != latest.jobs.end() && *it == e.job &&
        views[li].start_ns() == last_start) {
      point = PointOf(views[li]);
    } else {
      ASSIGN_OR_RETURN(
          ScannedPoints last,
          ScanPoints(store, e.job, last_start, SaturatingSub(last_start, -1)));
      if (last.points.empty()) {
        return absl::AbortedError(absl::StrCat(
            "window of job ", e.job, " at ", last_start,
            " vanished during the query (retention ran); ask again"));
      }
      point = std::move(last.points.back());
    }
    if (!point.ok()) return WindowError(e.job, last_start, point.status());
    e.latest = *std::move(point);
  }
  RETURN_IF_ERROR(AddLifecycle(store, entries));
  report.entries = std::move(entries);
  return report;
}

absl::StatusOr<FleetReport> QueryFleetLatest(const WindowStoreReader& store,
                                             const FleetOrder& by, int top) {
  ASSIGN_OR_RETURN(std::vector<WindowSummary> latest, store.LatestOfEveryJob());
  FleetReport report;
  report.by = by;
  report.jobs = static_cast<int64_t>(latest.size());
  std::vector<FleetEntry> entries;
  entries.reserve(latest.size());
  for (const WindowSummary& w : latest) {
    FleetEntry e{.job = w.job, .latest = ToWindowPoint(w)};
    e.period.Add(e.latest);
    e.score = by.Score(e.period);
    report.all.Add(e.period);
    entries.push_back(std::move(e));
  }
  RankEntries(entries, top);
  report.entries = std::move(entries);
  return report;
}

}  // namespace bubblewatch
