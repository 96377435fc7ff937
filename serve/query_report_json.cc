// The JSON objects of `bubblewatch query --json` and the HTTP API. The
// parser in query_report_json_parse.cc reads exactly these keys back; change
// both together (the round-trip test in tests/cli pins them).
#include <optional>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "base/json_writer.h"
#include "schemas/analysis_json.h"
#include "serve/query_report.h"

namespace bubblewatch {
namespace {

void WriteAttribution(JsonWriter& w, const Attribution& a) {
  w.Key("attribution_us").BeginObject();
  for (BubbleCause c : kAllBubbleCauses) {
    w.Key(BubbleCauseName(c)).Double(JsonUs(a[static_cast<int>(c)]));
  }
  w.EndObject();
}

void WritePeriod(JsonWriter& w, const PeriodStats& p) {
  w.Key("windows").Int(p.windows);
  w.Key("span_us").Double(JsonUs(p.span_ns));
  w.Key("compute_us").Double(JsonUs(p.compute_ns));
  w.Key("bubble_us").Double(JsonUs(p.bubble_ns));
  w.Key("utilization").Double(p.utilization());
  w.Key("bubble_ratio").Double(p.bubble_ratio());
  WriteAttribution(w, p.attribution);
}

// A fleet period: the PeriodStats keys, then how much of it is partial
// windows, the windows' capacity and the share of it covered, then the
// collective waits of its multi-rank windows.
void WriteFleetPeriod(JsonWriter& w, const FleetJobPeriod& p) {
  WritePeriod(w, p.stats);
  w.Key("partial_windows").Int(p.partial_windows);
  w.Key("capacity_us").Double(JsonUs(p.capacity_ns));
  w.Key("coverage").Double(p.coverage());
  // Only when a window had a collective part, so a single-rank job's entry
  // is what it was.
  if (p.collective_windows > 0) {
    w.Key("collective_windows").Int(p.collective_windows);
    w.Key("comm_wait_us").Double(JsonUs(p.comm_wait_ns));
    w.Key("straggler_wait_us").Double(JsonUs(p.straggler_wait_ns));
    w.Key("straggler_cost_us").Double(JsonUs(p.straggler_cost_ns));
  }
}

// The member "stragglers", by wait caused, descending: the first is the
// root (docs/semantics.md#root-cause).
void WriteStragglersJson(JsonWriter& w, const WindowCollectives& c) {
  w.Key("stragglers").BeginArray();
  for (size_t i = 0; i < c.stragglers.size(); ++i) {
    WriteStragglerJson(w, c.stragglers[i], /*root=*/i == 0);
  }
  w.EndArray();
}

double GpuHours(int64_t ns) { return static_cast<double>(ns) / 3.6e12; }

// A rank's rank, device, host (null when unknown) and, when its batches
// named it (Inspector logs), its process: absent otherwise, as in
// `analyze --json`.
void WriteRankIdentity(JsonWriter& w, const RankWindow& r) {
  w.Key("rank").Int(r.rank);
  w.Key("device").Int(r.device);
  w.Key("host");
  r.host.empty() ? w.Null() : w.String(r.host.str());
  if (r.pid >= 0) w.Key("pid").Int(r.pid);
}

// The members "ranks", "stragglers" and "collectives" of a multi-rank window
// or period, with the keys `analyze --json` uses (docs/query.md); a period's
// ranks carry the clock of its latest window (a clock is per window).
void WriteCollectives(JsonWriter& w, const WindowCollectives& c,
                      int64_t late_collectives, bool window) {
  w.Key("ranks").BeginArray();
  for (const RankWindow& r : c.ranks) {
    w.BeginObject();
    WriteRankIdentity(w, r);
    w.Key("span_us").Double(JsonUs(r.span_ns));
    w.Key("compute_us").Double(JsonUs(r.compute_ns));
    w.Key("utilization")
        .Double(r.span_ns > 0 ? static_cast<double>(r.compute_ns) / r.span_ns
                              : 0.0);
    w.Key("busy_useful_utilization").Double(r.busy_useful_utilization());
    w.Key("comm_us").Double(JsonUs(r.comm_ns));
    w.Key("comm_exposed_us").Double(JsonUs(r.comm_exposed_ns));
    w.Key("comm_wait_us").Double(JsonUs(r.comm_wait_ns));
    w.Key("wait_caused_us").Double(JsonUs(r.wait_caused_ns));
    w.Key("arrived_last").Int(r.arrived_last);
    // Its clock (docs/semantics.md#clocks): the window's, or over a period
    // the latest window's. Keys as `analyze --json`, but the offset is a
    // number (0) where the clock was not corrected.
    w.Key("clock_offset_us").Double(JsonUs(r.clock_offset_ns));
    w.Key("clock_instances").Int(r.clock_instances);
    w.Key("clock_drift_us_per_s");
    r.clock_corrected ? w.Double(r.clock_drift_ns_per_s / 1e3) : w.Null();
    w.Key("clock_residual_us");
    r.clock_connected&& r.clock_instances > 0
        ? w.Double(JsonUs(r.clock_residual_ns))
        : w.Null();
    w.Key("clock_connected").Bool(r.clock_connected);
    w.Key("clock_corrected").Bool(r.clock_corrected);
    w.EndObject();
  }
  w.EndArray();
  WriteStragglersJson(w, c);
  // The what-if replay (docs/semantics.md#what-it-cost), summed over a
  // period's windows; null without a used instance.
  w.Key("what_if");
  WriteWhatIfJson(w, c.job_ns, c.job_ns_without_stragglers);
  w.Key("collectives").BeginObject();
  w.Key("kernels").Int(c.kernels);
  w.Key("matched").Int(c.matched);
  w.Key("unmatched").Int(c.unmatched);
  w.Key("unsynchronized").Int(c.unsynchronized);
  w.Key("used").Int(c.used);
  w.Key("unattributed").Int(c.unattributed);
  w.Key("seq_backwards").Int(c.seq_backwards);
  w.Key("seq_jumps").Int(c.seq_jumps);
  w.Key("key").String(WindowCollectiveKeyName(c.key));
  w.Key("late").Int(late_collectives);
  w.EndObject();
}

void WriteWindow(JsonWriter& w, const WindowPoint& p) {
  const UtilizationStats& s = p.stats;
  w.BeginObject();
  w.Key("start_ns").Int(p.start_ns);
  w.Key("end_ns").Int(p.end_ns);
  w.Key("span_us").Double(JsonUs(s.span_ns));
  w.Key("compute_us").Double(JsonUs(s.compute_ns));
  w.Key("bubble_us").Double(JsonUs(s.bubble_ns));
  w.Key("utilization").Double(s.utilization());
  w.Key("bubble_ratio").Double(s.bubble_ratio());
  w.Key("largest_bubble_us").Double(JsonUs(s.largest_bubble_ns));
  w.Key("largest_bubble_start_ns").Int(s.largest_bubble_start_ns);
  w.Key("culprit_before_bubble");
  WriteKernelRefJson(w, s.culprit_before_bubble);
  WriteAttribution(w, s.attribution);
  w.Key("devices").Int(p.devices);
  w.Key("gpu_events").Int(p.gpu_events);
  w.Key("cpu_events").Int(p.cpu_events);
  w.Key("late_events").Int(p.late_events);
  w.Key("closed_by").String(ClosedByName(p.closed_by));
  w.Key("host_skew_us").Double(JsonUs(p.host_skew_ns));
  // Only when known (docs/semantics.md#observations): a window of a job
  // whose batches carry no observation is as it was.
  if (p.observed_ns.has_value()) {
    w.Key("observed_us").Double(JsonUs(*p.observed_ns));
    w.Key("coverage")
        .Double(p.end_ns > p.start_ns ? static_cast<double>(*p.observed_ns) /
                                            (p.end_ns - p.start_ns)
                                      : 0.0);
  }
  // Only for a window trimmed to fit the windows topic: the others' JSON
  // is as it was (docs/semantics.md#windows-that-do-not-fit).
  if (p.trimmed.has_value()) {
    const WindowTrim& t = *p.trimmed;
    w.Key("trimmed").BeginObject();
    w.Key("limit_bytes").Int(t.limit_bytes);
    w.Key("original_bytes").Int(t.original_bytes);
    w.Key("names_cut").Int(t.names_cut);
    w.Key("devices_left_out").Int(t.devices);
    w.Key("top_bubbles_left_out").Int(t.top_bubbles);
    w.Key("ranks_left_out").Int(t.ranks);
    w.Key("stragglers_left_out").Int(t.stragglers);
    // Only when a via list was cut, so other trimmed windows read as before.
    if (t.via > 0) w.Key("via_left_out").Int(t.via);
    w.EndObject();
  }
  // Multi-rank windows only: a single-rank job's JSON is as it was.
  if (p.collectives.has_value()) {
    WriteCollectives(w, *p.collectives, p.late_collectives, /*window=*/true);
  } else if (p.late_collectives > 0) {
    w.Key("late_collectives").Int(p.late_collectives);
  }
  w.EndObject();
}

void WriteBubble(JsonWriter& w, const BubbleReport& b) {
  w.BeginObject();
  w.Key("device").Int(b.device);
  w.Key("start_ns").Int(b.start_ns);
  w.Key("end_ns").Int(b.end_ns);
  w.Key("duration_us").Double(JsonUs(b.duration_ns()));
  w.Key("cause").String(BubbleCauseName(b.cause));
  w.Key("blamed").String(b.blamed);
  w.Key("before");
  WriteKernelRefJson(w, b.before);
  w.Key("after");
  WriteKernelRefJson(w, b.after);
  WriteAttribution(w, b.attribution);
  w.EndObject();
}

}  // namespace

std::string RangeLabel(absl::Duration range) {
  const int64_t s = absl::ToInt64Seconds(range);
  if (s > 0 && s % 3600 == 0) return absl::StrCat(s / 3600, "h");
  if (s > 0 && s % 60 == 0) return absl::StrCat(s / 60, "m");
  return absl::StrCat(s, "s");
}

std::string RenderWindowTimelineJson(const WindowSummary& window, bool pretty) {
  JsonWriter w(pretty ? 2 : 0);
  w.BeginObject();
  w.Key("job").String(window.job);
  w.Key("start_ns").Int(window.window.start_ns);
  w.Key("end_ns").Int(window.window.end_ns);
  w.Key("resolution_us").Int(1);
  w.Key("max_segments").Int(kMaxTimelineSegments);
  w.Key("states").BeginArray();
  for (int s = 0; s < kTimelineStates; ++s) {
    w.String(TimelineStateName(static_cast<uint8_t>(s)));
  }
  w.EndArray();
  const WindowCollectives empty;
  const WindowCollectives& c = window.collectives ? *window.collectives : empty;
  // The root (docs/semantics.md#root-cause): the first straggler, when it
  // caused any wait; the ranks it held up, its via.
  const StragglerWindow* root =
      !c.stragglers.empty() && c.stragglers[0].wait_caused_ns > 0
          ? &c.stragglers[0]
          : nullptr;
  w.Key("root");
  root ? w.Int(root->rank) : w.Null();
  w.Key("held_up").BeginArray();
  if (root) {
    for (const Straggler::Via& v : root->via) {
      if (v.rank != root->rank) w.Int(v.rank);
    }
  }
  w.EndArray();
  w.Key("timelines_left_out")
      .Int(window.trimmed ? window.trimmed->timelines : 0);
  // The ranks' figures a timeline is checked against, and its timeline.
  w.Key("ranks").BeginArray();
  for (size_t i = 0; i < c.ranks.size(); ++i) {
    const RankWindow& r = c.ranks[i];
    w.BeginObject();
    WriteRankIdentity(w, r);
    w.Key("span_us").Double(JsonUs(r.span_ns));
    w.Key("compute_us").Double(JsonUs(r.compute_ns));
    w.Key("comm_exposed_us").Double(JsonUs(r.comm_exposed_ns));
    w.Key("comm_wait_us").Double(JsonUs(r.comm_wait_ns));
    w.Key("wait_caused_us").Double(JsonUs(r.wait_caused_ns));
    w.Key("busy_useful_utilization").Double(r.busy_useful_utilization());
    w.Key("clock_offset_us").Double(JsonUs(r.clock_offset_ns));
    w.Key("timeline");
    if (i < c.timelines.size()) {
      const RankTimeline& t = c.timelines[i];
      w.BeginObject();
      w.Key("start_us").Int(t.start_us);
      w.Key("merged_us").Int(t.merged_us);
      w.Key("bin_us").Int(t.bin_us);
      w.Key("segments").BeginArray();
      for (const TimelineSegment& seg : t.segments) {
        w.BeginArray();
        w.Int(seg.state);
        w.Int(seg.us);
        w.EndArray();
      }
      w.EndArray();
      w.EndObject();
    } else {
      w.Null();
    }
    w.EndObject();
  }
  w.EndArray();
  WriteStragglersJson(w, c);
  w.EndObject();
  return std::move(w).Take();
}

std::string RenderJobReportJson(const JobReport& r, bool pretty) {
  JsonWriter w(pretty ? 2 : 0);
  w.BeginObject();
  w.Key("job").String(r.job);
  w.Key("from_ns").Int(r.from_ns);
  w.Key("to_ns").Int(r.to_ns);
  w.Key("anchor_ns").Int(r.anchor_ns);
  w.Key("windows").BeginArray();
  for (const WindowPoint& p : r.windows) WriteWindow(w, p);
  w.EndArray();
  w.Key("rolling").BeginArray();
  for (const RollingUtilization& roll : r.rolling) {
    w.BeginObject();
    w.Key("range").String(RangeLabel(roll.range));
    w.Key("range_s").Int(absl::ToInt64Seconds(roll.range));
    WritePeriod(w, roll.stats);
    w.EndObject();
  }
  w.EndArray();
  w.Key("summary").BeginObject();
  WritePeriod(w, r.summary);
  w.Key("worst_utilization");
  if (r.worst_utilization.has_value()) {
    w.Double(*r.worst_utilization);
  } else {
    w.Null();
  }
  w.Key("worst_window_start_ns").Int(r.worst_window_start_ns);
  std::optional<BubbleCause> dominant = DominantCause(r.summary.attribution);
  w.Key("dominant_cause");
  dominant ? w.String(BubbleCauseName(*dominant)) : w.Null();
  w.Key("advice");
  dominant ? w.String(BubbleCauseAdvice(*dominant)) : w.Null();
  // Only when some window's observed time is known
  // (docs/semantics.md#observations): a legacy job's summary is as it was.
  if (r.observed.has_value()) {
    const ObservedPeriod& o = *r.observed;
    w.Key("observed_windows").Int(o.windows);
    w.Key("observed_us").Double(JsonUs(o.observed_ns));
    w.Key("unobserved_us").Double(JsonUs(o.unobserved_ns()));
    w.Key("coverage").Double(o.coverage());
    w.Key("partly_observed_windows").Int(o.partial_windows);
  }
  w.EndObject();
  w.Key("top_bubbles").BeginArray();
  for (const BubbleReport& b : r.top_bubbles) WriteBubble(w, b);
  w.EndArray();
  if (r.collectives.has_value()) {
    WriteCollectives(w, *r.collectives, r.late_collectives, /*window=*/false);
  }
  w.EndObject();
  return std::move(w).Take();
}

std::string RenderFleetJson(const FleetReport& r, bool pretty) {
  JsonWriter w(pretty ? 2 : 0);
  w.BeginObject();
  w.Key("by").String(r.by.Name());
  w.Key("from_ns").Int(r.from_ns);
  w.Key("to_ns").Int(r.to_ns);
  w.Key("jobs").Int(r.jobs);
  w.Key("top").BeginArray();
  int rank = 0;
  for (const FleetEntry& e : r.entries) {
    w.BeginObject();
    w.Key("rank").Int(++rank);
    w.Key("job").String(e.job);
    // Ratios as they are; GPU-times in µs like every other duration.
    w.Key("score").Double(r.by.metric == FleetOrder::Metric::kBubbleRatio
                              ? e.score
                              : e.score / 1e3);
    if (!e.state.empty()) {
      w.Key("state").String(e.state);
      w.Key("last_seen")
          .String(absl::FormatTime(absl::RFC3339_full, e.last_seen_wall,
                                   absl::UTCTimeZone()));
    }
    w.Key("period").BeginObject();
    WriteFleetPeriod(w, e.period);
    w.EndObject();
    w.Key("window");
    WriteWindow(w, e.latest);
    w.EndObject();
  }
  w.EndArray();
  w.Key("fleet").BeginObject();
  WriteFleetPeriod(w, r.all);
  // What a fleet owner reports upward: GPU-hours lost, in all and by cause.
  w.Key("bubble_gpu_hours").Double(GpuHours(r.all.stats.bubble_ns));
  w.Key("gpu_hours_by_cause").BeginObject();
  for (BubbleCause c : kAllBubbleCauses) {
    w.Key(BubbleCauseName(c))
        .Double(GpuHours(r.all.stats.attribution[static_cast<int>(c)]));
  }
  w.EndObject();
  w.EndObject();
  w.EndObject();
  return std::move(w).Take();
}

std::string RenderJobsJson(const std::vector<JobInfo>& jobs, bool pretty,
                           absl::Time now) {
  JsonWriter w(pretty ? 2 : 0);
  w.BeginObject();
  w.Key("jobs").BeginArray();
  for (const JobInfo& j : jobs) {
    w.BeginObject();
    w.Key("job").String(j.job);
    w.Key("window_count").Int(j.window_count);
    if (!j.last_event_ns) {
      w.Key("last_event_ns").Null();
    } else {
      w.Key("last_event_ns").Int(*j.last_event_ns);
    }
    w.Key("latest_window_start_ns").Int(j.latest_window_start_ns);
    w.Key("last_seen")
        .String(absl::FormatTime(absl::RFC3339_full, j.last_seen_wall,
                                 absl::UTCTimeZone()));
    const JobPhase phase = PhaseAt(
        j.lifecycle, std::max(now - j.last_seen_wall, absl::ZeroDuration()));
    w.Key("state").String(JobPhaseName(phase));
    w.Key("ended").Bool(j.lifecycle.ended);
    w.Key("expired").Bool(j.lifecycle.expired);
    w.Key("cadence_s")
        .Double(static_cast<double>(j.lifecycle.cadence_ns()) / 1e9);
    w.Key("batches_after_end").Int(j.lifecycle.batches_after_end);
    w.Key("overlapping_observations").Int(j.lifecycle.overlapping_observations);
    w.Key("observations_backwards").Int(j.lifecycle.observations_backwards);
    // Multi-rank jobs only (docs/semantics.md#job-lifecycle): the ranks the
    // job declared and those whose streams ended.
    if (j.lifecycle.world_size > 1) {
      w.Key("world_size").Int(j.lifecycle.world_size);
      w.Key("ranks_ended")
          .Int(static_cast<int64_t>(j.lifecycle.ended_ranks.size()));
    }
    w.EndObject();
  }
  w.EndArray();
  w.EndObject();
  return std::move(w).Take();
}

std::string RenderErrorJson(const absl::Status& status) {
  JsonWriter w;
  w.BeginObject();
  w.Key("error").String(status.message());
  w.Key("code").String(
      absl::AsciiStrToLower(absl::StatusCodeToString(status.code())));
  w.EndObject();
  return std::move(w).Take();
}

}  // namespace bubblewatch
