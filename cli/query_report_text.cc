// The terminal reports of `bubblewatch query job|fleet|jobs`.
#include <algorithm>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/time/time.h"
#include "base/human_duration.h"
#include "cli/analysis_report.h"
#include "cli/text_style.h"
#include "schemas/job_lifecycle.h"
#include "serve/query_report.h"

namespace bubblewatch {
namespace {

std::string Bold(bool color, absl::string_view s) {
  return color ? absl::StrCat("\033[1m", s, "\033[0m") : std::string(s);
}

std::string KernelName(const std::optional<KernelRef>& k) {
  return k ? Shorten(k->name, 28) : "-";
}

// "host_sync 79%": the dominant cause and its share of the bubble.
std::string DominantText(int64_t bubble_ns, const Attribution& attribution) {
  std::optional<BubbleCause> c = DominantCause(attribution);
  if (!c.has_value() || bubble_ns <= 0) return "-";
  return absl::StrFormat("%s %.0f%%", BubbleCauseName(*c),
                         100.0 * attribution[static_cast<int>(*c)] / bubble_ns);
}

std::string DominantText(const UtilizationStats& s) {
  return DominantText(s.bubble_ns, s.attribution);
}

void AppendCauses(std::string& out, const PeriodStats& p) {
  for (BubbleCause c : kAllBubbleCauses) {
    const int64_t ns = p.attribution[static_cast<int>(c)];
    if (ns == 0) continue;
    const double share = p.bubble_ns > 0 ? double(ns) / p.bubble_ns : 0.0;
    absl::StrAppendFormat(&out, "  %-16s %12s  %6s  %s\n", BubbleCauseName(c),
                          HumanDuration(ns), Percent(share), Bar(share, 24));
  }
}

// The dominant part of a straggler's caused wait: compute, comm, a bubble
// cause or unattributed, with its share.
std::string StragglerCauseText(const StragglerWindow& s) {
  std::string name = "compute";
  int64_t most = s.compute_ns;
  if (s.comm_ns > most) {
    name = "comm";
    most = s.comm_ns;
  }
  for (BubbleCause c : kAllBubbleCauses) {
    if (s.causes[static_cast<int>(c)] > most) {
      name = std::string(BubbleCauseName(c));
      most = s.causes[static_cast<int>(c)];
    }
  }
  if (s.unattributed_ns > most) {
    name = "(no excess)";
    most = s.unattributed_ns;
  }
  return absl::StrCat(
      name, " ",
      Percent(s.wait_caused_ns > 0 ? double(most) / s.wait_caused_ns : 0.0));
}

// The per-rank table and the stragglers of a multi-rank job's period
// (docs/semantics.md#streaming-collectives).
void AppendRanks(std::string& out, const WindowCollectives& c, bool color) {
  absl::StrAppend(&out, "\n", Bold(color, "Ranks"), " (", c.used, " of ",
                  c.matched + c.unmatched,
                  " collective instances used; waits from the windows)\n");
  absl::StrAppendFormat(&out,
                        "  %5s %-20s %4s %7s %12s %12s %12s %12s %6s %10s\n",
                        "rank", "host", "dev", "useful", "comm wait",
                        "comm exposed", "comm", "wait caused", "last", "clock");
  for (const RankWindow& r : c.ranks) {
    // The clock of the latest window (docs/semantics.md#clocks): "-" where
    // it was not corrected (the reference clock, or not linked to it).
    const std::string clock =
        r.clock_corrected
            ? absl::StrFormat("%+.0f us",
                              static_cast<double>(r.clock_offset_ns) / 1e3)
            : "-";
    absl::StrAppendFormat(
        &out, "  %5d %-20s %4d %7s %12s %12s %12s %12s %6d %10s\n", r.rank,
        r.host.empty() ? "-" : r.host.str(), r.device,
        Percent(r.busy_useful_utilization()), HumanDuration(r.comm_wait_ns),
        HumanDuration(r.comm_exposed_ns), HumanDuration(r.comm_ns),
        HumanDuration(r.wait_caused_ns), r.arrived_last, clock);
  }
  if (c.stragglers.empty()) return;
  absl::StrAppend(&out, "\n", Bold(color, "Stragglers"),
                  " (root first: the wait each rank caused, what made it "
                  "late, what it cost)\n");
  absl::StrAppendFormat(&out, "  %5s %-20s %12s %12s %12s %6s  %s\n", "rank",
                        "host", "wait caused", "direct", "saved", "last",
                        "dominant cause");
  for (size_t i = 0; i < c.stragglers.size(); ++i) {
    const StragglerWindow& s = c.stragglers[i];
    absl::StrAppendFormat(
        &out, "  %5d %-20s %12s %12s %12s %6d  %s%s\n", s.rank,
        s.host.empty() ? "-" : s.host, HumanDuration(s.wait_caused_ns),
        HumanDuration(s.direct_wait_caused_ns),
        s.saved_ns >= 0 ? HumanDuration(s.saved_ns) : "-", s.arrived_last,
        StragglerCauseText(s), i == 0 ? "  (root)" : "");
    if (!s.via.empty()) {
      std::vector<std::string> via;
      for (const Straggler::Via& v : s.via) {
        via.push_back(
            absl::StrCat(v.rank, " (", HumanDuration(v.wait_ns), ")"));
      }
      absl::StrAppend(&out, "        held up ranks ", absl::StrJoin(via, ", "),
                      "\n");
    }
  }
  if (c.job_ns >= 0) {
    const int64_t saved = c.job_ns - c.job_ns_without_stragglers;
    absl::StrAppend(
        &out,
        "  What if (docs/semantics.md#what-it-cost): the collectives "
        "replayed take ",
        HumanDuration(c.job_ns), ", without the stragglers' lateness ",
        HumanDuration(c.job_ns_without_stragglers), " (", HumanDuration(saved),
        ", ", Percent(c.job_ns > 0 ? double(saved) / c.job_ns : 0.0),
        " less)\n");
  }
}

// "  bad input: 1 batch after end, 2 overlapping observations": the job's
// bad input (docs/semantics.md#observations, #job-lifecycle), or "" for
// none.
// "  (trimmed: 250 devices, 3 ranks left out; 510 names cut)" for a window
// trimmed to fit the windows topic
// (docs/semantics.md#windows-that-do-not-fit); "" for one that was not.
std::string TrimmedText(const std::optional<WindowTrim>& t) {
  if (!t) return "";
  std::vector<std::string> left;
  auto add = [&left](int64_t n, absl::string_view what) {
    if (n > 0) left.push_back(absl::StrCat(n, " ", what));
  };
  add(t->devices, "devices");
  add(t->top_bubbles, "top bubbles");
  add(t->ranks, "ranks");
  add(t->stragglers, "stragglers");
  add(t->via, "held-up ranks");
  std::vector<std::string> parts;
  if (!left.empty()) {
    parts.push_back(absl::StrCat(absl::StrJoin(left, ", "), " left out"));
  }
  if (t->names_cut > 0)
    parts.push_back(absl::StrCat(t->names_cut, " names cut"));
  return absl::StrCat("  (trimmed to fit: ", absl::StrJoin(parts, "; "), ")");
}

std::string BadInputText(const JobLifecycle& life) {
  std::vector<std::string> parts;
  auto add = [&](int64_t n, absl::string_view one, absl::string_view many) {
    if (n != 0) parts.push_back(absl::StrCat(n, " ", n == 1 ? one : many));
  };
  add(life.batches_after_end, "batch after end", "batches after end");
  add(life.overlapping_observations, "overlapping observation",
      "overlapping observations");
  add(life.observations_backwards, "observation backwards",
      "observations backwards");
  if (parts.empty()) return "";
  return absl::StrCat("  bad input: ", absl::StrJoin(parts, ", "));
}

// A multi-rank job waiting for its other ranks' files
// (docs/semantics.md#job-lifecycle): how many have ended.
std::string RanksText(const JobLifecycle& life) {
  if (!life.awaiting_ranks() || life.ended) return "";
  return absl::StrCat("  ", life.ended_ranks.size(), " of ", life.world_size,
                      " ranks ended");
}

}  // namespace

std::string RenderJobReportText(const JobReport& r, const JobTextOptions& o) {
  std::string out;
  absl::StrAppend(&out, Bold(o.color, "bubblewatch query job"), "  ", r.job,
                  "\n");
  int32_t devices = 0;
  for (const WindowPoint& w : r.windows) devices = std::max(devices, w.devices);
  absl::StrAppend(&out, "  period  ", EventTimeText(r.from_ns), " .. ",
                  EventTimeText(r.to_ns), " UTC  (", r.windows.size(),
                  " windows, ", devices, " device(s))\n");
  if (r.windows.empty()) {
    absl::StrAppend(&out, "\n  No windows in this period.\n");
    return out;
  }

  absl::StrAppend(
      &out, "\n", Bold(o.color, "Utilization over time"),
      " (GPU-time weighted; \u00b7 = no window)\n",
      RenderUtilizationChart(r.windows, o.chart_width, o.chart_height));

  absl::StrAppend(&out, "\n", Bold(o.color, "Rolling"), " (ending ",
                  EventTimeText(r.anchor_ns), ")\n");
  absl::StrAppendFormat(&out, "  %-8s %12s %10s %8s\n", "range", "utilization",
                        "bubble", "windows");
  for (const RollingUtilization& roll : r.rolling) {
    absl::StrAppendFormat(
        &out, "  %-8s %12s %10s %8d\n", "last " + RangeLabel(roll.range),
        Percent(roll.stats.utilization()), Percent(roll.stats.bubble_ratio()),
        roll.stats.windows);
  }

  const PeriodStats& s = r.summary;
  absl::StrAppend(&out, "\n", Bold(o.color, "Summary"), "\n");
  absl::StrAppendFormat(&out, "  %-18s %s (GPU-time weighted)\n",
                        "mean utilization", Percent(s.utilization()));
  if (r.worst_utilization.has_value()) {
    absl::StrAppendFormat(&out, "  %-18s %s in the window at %s\n",
                          "worst window", Percent(*r.worst_utilization),
                          EventTimeText(r.worst_window_start_ns));
  }
  absl::StrAppendFormat(&out, "  %-18s %s\n", "GPU span",
                        HumanDuration(s.span_ns));
  absl::StrAppendFormat(&out, "  %-18s %s\n", "compute",
                        HumanDuration(s.compute_ns));
  absl::StrAppendFormat(&out, "  %-18s %s  (%s of span)\n", "bubble",
                        HumanDuration(s.bubble_ns), Percent(s.bubble_ratio()));
  // Only when some window's observed time is known
  // (docs/semantics.md#observations); over those windows.
  if (r.observed.has_value()) {
    const ObservedPeriod& o = *r.observed;
    absl::StrAppendFormat(
        &out, "  %-18s %s  (%s of %d window(s), %d partly observed)\n",
        "observed", HumanDuration(o.observed_ns), Percent(o.coverage()),
        o.windows, o.partial_windows);
    absl::StrAppendFormat(&out, "  %-18s %s\n", "unobserved",
                          HumanDuration(o.unobserved_ns()));
  }

  absl::StrAppend(&out, "\n", Bold(o.color, "Bubble time by cause"), "\n");
  AppendCauses(out, s);

  if (!r.top_bubbles.empty()) {
    absl::StrAppend(&out, "\n", Bold(o.color, "Top bubbles"), "\n");
    absl::StrAppendFormat(&out, "  %12s %4s  %-19s  %-16s %-28s %-28s %s\n",
                          "duration", "dev", "start (UTC)", "cause",
                          "kernel before", "kernel after", "blamed");
    for (const BubbleReport& b : r.top_bubbles) {
      absl::StrAppendFormat(&out, "  %12s %4d  %-19s  %-16s %-28s %-28s %s\n",
                            HumanDuration(b.duration_ns()), b.device,
                            EventTimeText(b.start_ns), BubbleCauseName(b.cause),
                            KernelName(b.before), KernelName(b.after),
                            b.blamed.empty() ? "-" : b.blamed);
    }
  }

  if (r.collectives.has_value()) AppendRanks(out, *r.collectives, o.color);

  if (std::optional<BubbleCause> c = DominantCause(s.attribution)) {
    absl::StrAppend(
        &out, "\n", Bold(o.color, "Advice"),
        " (dominant cause: ", BubbleCauseName(*c), ", ",
        Percent(s.bubble_ns > 0
                    ? double(s.attribution[static_cast<int>(*c)]) / s.bubble_ns
                    : 0.0),
        " of bubble time)\n  ", BubbleCauseAdvice(*c), "\n");
  }

  const size_t n = r.windows.size();
  const size_t shown = o.table_windows > 0
                           ? std::min(n, static_cast<size_t>(o.table_windows))
                           : n;
  absl::StrAppend(&out, "\n", Bold(o.color, "Windows"));
  if (shown < n) {
    absl::StrAppend(&out, " (latest ", shown, " of ", n,
                    "; --windows 0 or --json for all)");
  }
  absl::StrAppendFormat(&out, "\n  %-19s %7s %12s %-22s %12s  %s\n",
                        "start (UTC)", "util", "bubble", "dominant cause",
                        "largest", "culprit before it");
  for (size_t i = n - shown; i < n; ++i) {
    const WindowPoint& w = r.windows[i];
    absl::StrAppendFormat(
        &out, "  %-19s %7s %12s %-22s %12s  %s%s\n", EventTimeText(w.start_ns),
        Percent(w.stats.utilization()), HumanDuration(w.stats.bubble_ns),
        DominantText(w.stats), HumanDuration(w.stats.largest_bubble_ns),
        KernelName(w.stats.culprit_before_bubble),
        absl::StrCat(
            w.late_events > 0 ? absl::StrCat("  (", w.late_events, " late)")
                              : "",
            // Only when known (docs/semantics.md#observations).
            w.observed_ns.has_value() && w.end_ns > w.start_ns
                ? absl::StrCat("  (observed ", HumanDuration(*w.observed_ns),
                               ", ",
                               Percent(static_cast<double>(*w.observed_ns) /
                                       (w.end_ns - w.start_ns)),
                               ")")
                : "",
            TrimmedText(w.trimmed)));
  }
  return out;
}

std::string RenderFleetText(const FleetReport& r, bool color) {
  std::string out;
  absl::StrAppend(&out, Bold(color, "bubblewatch query fleet"), "  by ",
                  r.by.Name(), "; top ", r.entries.size(), " of ", r.jobs,
                  " job(s)\n");
  if (r.to_ns > r.from_ns) {
    absl::StrAppend(&out, "  period  ", EventTimeText(r.from_ns), " .. ",
                    EventTimeText(r.to_ns), " UTC (",
                    HumanDurationWords(r.to_ns - r.from_ns), ")\n");
  }
  if (r.entries.empty()) {
    absl::StrAppend(&out, "\n  No windows in this period.\n");
    return out;
  }
  // Ranked by a collective wait: its two figures after the bubble time.
  const bool cost = r.by.metric == FleetOrder::Metric::kStragglerCost;
  const bool waits = r.by.metric == FleetOrder::Metric::kCommWait ||
                     r.by.metric == FleetOrder::Metric::kStragglerWait || cost;
  const std::string wait_header =
      waits ? absl::StrFormat(
                  " %12s %14s%s", "comm wait", "straggler wait",
                  cost ? absl::StrFormat(" %14s", "straggler cost") : "")
            : "";
  absl::StrAppendFormat(&out, "\n  %4s  %-24s %9s %7s %7s %12s%s  %-22s %s\n",
                        "#", "job", "windows", "util", "bubble", "bubble time",
                        wait_header, "dominant cause", "latest culprit");
  int rank = 0;
  bool any_partial = false;
  for (const FleetEntry& e : r.entries) {
    const PeriodStats& s = e.period.stats;
    std::string windows = absl::StrCat(s.windows);
    if (e.period.partial_windows > 0) {
      absl::StrAppend(&windows, "*");
      any_partial = true;
    }
    const std::string wait_cells =
        waits
            ? absl::StrFormat(
                  " %12s %14s%s", HumanDuration(e.period.comm_wait_ns),
                  HumanDuration(e.period.straggler_wait_ns),
                  cost ? absl::StrFormat(
                             " %14s", HumanDuration(e.period.straggler_cost_ns))
                       : "")
            : "";
    absl::StrAppendFormat(&out, "  %4d  %-24s %9s %7s %7s %12s%s  %-22s %s\n",
                          ++rank, Shorten(e.job, 24), windows,
                          Percent(s.utilization()), Percent(s.bubble_ratio()),
                          HumanDuration(s.bubble_ns), wait_cells,
                          DominantText(s.bubble_ns, s.attribution),
                          KernelName(e.latest.stats.culprit_before_bubble));
  }
  if (any_partial) {
    absl::StrAppend(&out,
                    "  * with partial windows (a device covered part of the "
                    "window, e.g. a job's\n    tail): they count by the "
                    "GPU-time they cover, not as whole windows\n");
  }
  const PeriodStats& all = r.all.stats;
  absl::StrAppendFormat(
      &out,
      "\n%s: %.3f GPU-hours lost to bubbles (%s of %.3f GPU-hours "
      "observed), utilization %s\n",
      Bold(color, "Fleet"), all.bubble_ns / 3.6e12, Percent(all.bubble_ratio()),
      all.span_ns / 3.6e12, Percent(all.utilization()));
  if (cost) {
    absl::StrAppendFormat(&out,
                          "  %.3f GPU-hours lost to stragglers (what-if "
                          "saving x the job's GPUs, "
                          "docs/semantics.md#what-it-cost)\n",
                          r.all.straggler_cost_ns / 3.6e12);
  }
  for (BubbleCause c : kAllBubbleCauses) {
    const int64_t ns = all.attribution[static_cast<int>(c)];
    if (ns == 0) continue;
    const double share = all.bubble_ns > 0 ? double(ns) / all.bubble_ns : 0.0;
    absl::StrAppendFormat(&out, "  %-16s %10.3f GPU-h  %6s  %s\n",
                          BubbleCauseName(c), ns / 3.6e12, Percent(share),
                          Bar(share, 24));
  }
  return out;
}

std::string RenderJobsText(const std::vector<JobInfo>& jobs, absl::Time now) {
  if (jobs.empty()) return "The store knows no jobs.\n";
  std::string out;
  absl::StrAppendFormat(&out, "%-32s %-7s %8s  %-19s  %s\n", "job", "state",
                        "windows", "latest window (UTC)", "last seen");
  for (const JobInfo& j : jobs) {
    std::string seen = "-";
    if (j.last_seen_wall > absl::UnixEpoch()) {
      const absl::Duration ago =
          absl::Trunc(std::max(now - j.last_seen_wall, absl::ZeroDuration()),
                      absl::Seconds(1));
      seen = absl::StrCat(
          absl::FormatTime("%Y-%m-%d %H:%M:%S", j.last_seen_wall,
                           absl::UTCTimeZone()),
          ago < absl::Seconds(1)
              ? " (just now)"
              : absl::StrCat(" (", absl::FormatDuration(ago), " ago)"));
    }
    const JobPhase phase = PhaseAt(
        j.lifecycle, std::max(now - j.last_seen_wall, absl::ZeroDuration()));
    absl::StrAppendFormat(
        &out, "%-32s %-7s %8d  %-19s  %s%s\n", j.job, JobPhaseName(phase),
        j.window_count,
        j.window_count > 0 ? EventTimeText(j.latest_window_start_ns) : "-",
        seen, absl::StrCat(RanksText(j.lifecycle), BadInputText(j.lifecycle)));
  }
  return out;
}

}  // namespace bubblewatch
