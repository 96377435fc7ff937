#include "analysis/window_merge.h"

#include <algorithm>
#include <limits>
#include <tuple>
#include <utility>

#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "analysis/collective_windows.h"
#include "analysis/varint_codec.h"
#include "analysis/window_accumulator.h"
#include "schemas/window_summary_codec.h"

namespace bubblewatch {

absl::StatusOr<WindowAnalysis> MergeWindowAnalyses(
    absl::Span<const WindowAnalysis> parts, int top_bubbles_per_window) {
  if (parts.empty()) {
    return absl::InvalidArgumentError("no part of a window to merge");
  }
  WindowAnalysis out;
  out.start_ns = parts.front().start_ns;
  out.end_ns = parts.front().end_ns;
  absl::flat_hash_set<int32_t> devices;
  for (const WindowAnalysis& part : parts) {
    if (part.start_ns != out.start_ns || part.end_ns != out.end_ns) {
      return absl::InvalidArgumentError(absl::StrCat(
          "parts of different windows: [", out.start_ns, ", ", out.end_ns,
          ") and [", part.start_ns, ", ", part.end_ns, ")"));
    }
    for (const DeviceWindow& d : part.devices) {
      if (!devices.insert(d.device).second) {
        return absl::InvalidArgumentError(
            absl::StrCat("device ", d.device, " is in two parts of window [",
                         out.start_ns, ", ", out.end_ns, ")"));
      }
      out.devices.push_back(d);
    }
    out.top_bubbles.insert(out.top_bubbles.end(), part.top_bubbles.begin(),
                           part.top_bubbles.end());
  }
  // The job's figures as the analyzer sums them: in device order.
  std::sort(out.devices.begin(), out.devices.end(),
            [](const DeviceWindow& a, const DeviceWindow& b) {
              return a.device < b.device;
            });
  for (const DeviceWindow& d : out.devices) AddDeviceStats(d.stats, out.job);
  const size_t top =
      std::min(out.top_bubbles.size(),
               static_cast<size_t>(std::max(0, top_bubbles_per_window)));
  std::partial_sort(
      out.top_bubbles.begin(), out.top_bubbles.begin() + top,
      out.top_bubbles.end(), [](const BubbleReport& a, const BubbleReport& b) {
        return LongerBubble(a.duration_ns(), a.start_ns, a.device,
                            b.duration_ns(), b.start_ns, b.device);
      });
  out.top_bubbles.resize(top);
  return out;
}

absl::Status DigestRanksInto(absl::Span<const RankInput> ranks,
                             const AnalyzerOptions& analyzer,
                             HostWindowPart& part) {
  // The gaps kept, for the timelines (as AnalyzeCollectives keeps them).
  AnalyzerOptions with_gaps = analyzer;
  with_gaps.keep_gaps = true;
  absl::StatusOr<TraceDigests> d = DigestTrace(ranks, with_gaps);
  if (!d.ok()) return d.status();
  absl::StatusOr<std::vector<TimelinePart>> t =
      TimelineParts(ranks, *d, analyzer);
  const bool parallel = part.timelines.size() == part.digests.size();
  for (RankDigest& r : d->digests) part.digests.push_back(std::move(r));
  if (t.ok() && parallel) {
    for (TimelinePart& p : *t) part.timelines.push_back(std::move(p));
  } else {
    part.timelines.clear();
  }
  return absl::OkStatus();
}

absl::StatusOr<WindowSummary> MergeHostWindowParts(
    absl::Span<const HostWindowPart> parts, int top_bubbles_per_window,
    const CollectiveOptions& options) {
  std::vector<WindowAnalysis> windows;
  windows.reserve(parts.size());
  absl::flat_hash_set<absl::string_view> hosts;
  for (const HostWindowPart& part : parts) {
    if (part.kind != HostWindowPart::Kind::kWindow) {
      return absl::InvalidArgumentError(absl::StrCat(
          "host \"", part.host, "\" sent an end or late part, not a window"));
    }
    if (part.job != parts.front().job) {
      return absl::InvalidArgumentError(
          absl::StrCat("parts of different jobs: \"", parts.front().job,
                       "\" and \"", part.job, "\""));
    }
    if (!hosts.insert(part.host).second) {
      return absl::InvalidArgumentError(
          absl::StrCat("two parts of host \"", part.host, "\" in one window"));
    }
    windows.push_back(part.window);
  }
  absl::StatusOr<WindowAnalysis> window =
      MergeWindowAnalyses(windows, top_bubbles_per_window);
  if (!window.ok()) return window.status();
  WindowSummary out;
  out.job = parts.front().job;
  out.window = *std::move(window);
  // Each digest with its timeline part, when every part sent them.
  std::vector<std::pair<const RankDigest*, const TimelinePart*>> digests;
  bool timelines = true;
  int with_collectives = 0;
  bool all_observed = true;
  std::vector<Interval> observed;
  // The split's host skew (docs/semantics.md#split-jobs): how far apart the
  // hosts' newest events were when each made its part.
  std::optional<int64_t> newest_lo, newest_hi;
  for (const HostWindowPart& part : parts) {
    if (part.newest_start_ns) {
      newest_lo = std::min(newest_lo.value_or(*part.newest_start_ns),
                           *part.newest_start_ns);
      newest_hi = std::max(newest_hi.value_or(*part.newest_start_ns),
                           *part.newest_start_ns);
    }
    if (!part.observed) {
      all_observed = false;
    } else {
      observed.insert(observed.end(), part.observed->intervals().begin(),
                      part.observed->intervals().end());
    }
    out.gpu_events += part.gpu_events;
    out.cpu_events += part.cpu_events;
    timelines &= part.timelines.size() == part.digests.size();
    for (size_t i = 0; i < part.digests.size(); ++i) {
      const RankDigest& d = part.digests[i];
      digests.push_back(
          {&d, i < part.timelines.size() ? &part.timelines[i] : nullptr});
      if (!d.kernels.empty()) ++with_collectives;
    }
  }
  if (newest_lo) out.host_skew_ns = *newest_hi - *newest_lo;
  if (all_observed) {
    out.observed_ns =
        IntervalSet::FromIntervals(std::move(observed))
            .CoveredLength(out.window.start_ns, out.window.end_ns);
  }
  // As the single-stage window: analyzed when two ranks ran collectives.
  if (with_collectives < 2) return out;
  std::sort(digests.begin(), digests.end(), [](const auto& a, const auto& b) {
    return std::tie(a.first->rank, a.first->host) <
           std::tie(b.first->rank, b.first->host);
  });
  std::vector<RankDigest> ordered;
  ordered.reserve(digests.size());
  for (const auto& [d, timeline] : digests) ordered.push_back(*d);
  // The waits measured, for the timelines.
  CollectiveOptions with_time = options;
  with_time.keep_rank_time = timelines;
  absl::StatusOr<CollectiveAnalysis> analysis =
      AnalyzeDigests(ordered, with_time);
  if (!analysis.ok()) return analysis.status();
  out.collectives = SummarizeWindowCollectives(*analysis);
  if (timelines && analysis->rank_time.size() == ordered.size()) {
    // Each rank's slot is its digest's (AnalyzeDigests keeps their order).
    out.collectives->timelines.reserve(ordered.size());
    for (size_t i = 0; i < ordered.size(); ++i) {
      if (analysis->ranks[i].rank != ordered[i].rank) {
        return absl::InternalError("the analysis reordered the ranks");
      }
      out.collectives->timelines.push_back(MergedTimeline(
          *digests[i].second, ordered[i], analysis->rank_time[i].waits,
          out.window.start_ns, out.collectives->ranks[i].clock_offset_ns));
    }
  }
  return out;
}

namespace {
// Version 1: up to the last flag; version 2 adds the kind, the newest
// start, the late counts and the timeline parts.
constexpr uint8_t kWindowPartVersion = 2;
}  // namespace

std::string EncodeHostWindowPart(const HostWindowPart& part) {
  VarintWriter w;
  w.Byte(kWindowPartVersion);
  w.String(part.job);
  w.String(part.host);
  WindowSummary summary;
  summary.job = part.job;
  summary.window = part.window;
  summary.gpu_events = part.gpu_events;
  summary.cpu_events = part.cpu_events;
  w.String(EncodeWindowSummary(summary));
  w.Byte(part.observed.has_value() ? 1 : 0);
  if (part.observed) {
    w.Unsigned(part.observed->size());
    int64_t previous_end = 0;
    for (const Interval& i : part.observed->intervals()) {
      w.Delta(i.start, previous_end);
      w.Delta(i.end, i.start);
      previous_end = i.end;
    }
  }
  w.Unsigned(part.digests.size());
  for (const RankDigest& d : part.digests) w.String(EncodeRankDigest(d));
  w.Signed(part.world_size);
  w.Unsigned(part.ranks.size());
  int64_t previous_rank = -1;
  for (int32_t rank : part.ranks) {
    w.Unsigned(static_cast<uint64_t>(rank - previous_rank));
    previous_rank = rank;
  }
  w.Byte(part.last ? 1 : 0);
  w.Byte(static_cast<uint8_t>(part.kind));
  w.Byte(part.newest_start_ns.has_value() ? 1 : 0);
  if (part.newest_start_ns) w.Signed(*part.newest_start_ns);
  w.Signed(part.late_offset);
  w.Unsigned(part.late.size());
  int64_t previous_start = 0;
  for (const HostWindowPart::Late& l : part.late) {
    w.Delta(l.window_start_ns, previous_start);
    w.Unsigned(static_cast<uint64_t>(l.events));
    w.Unsigned(static_cast<uint64_t>(l.collectives));
    previous_start = l.window_start_ns;
  }
  w.Unsigned(part.timelines.size());
  for (const TimelinePart& t : part.timelines) WriteTimelinePart(t, w);
  return w.Take();
}

absl::StatusOr<HostWindowPart> DecodeHostWindowPart(absl::string_view bytes) {
  VarintReader r(bytes);
  const uint8_t version = r.Byte();
  if (r.ok() && (version == 0 || version > kWindowPartVersion)) {
    return absl::InvalidArgumentError(
        absl::StrCat("window part of unknown version ", version));
  }
  HostWindowPart part;
  part.job = r.String();
  part.host = r.String();
  const std::string window = r.String();
  if (r.ok()) {
    absl::StatusOr<WindowSummary> summary = DecodeWindowSummary(window);
    if (!summary.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("window part's window: ", summary.status().message()));
    }
    part.window = std::move(summary->window);
    part.gpu_events = summary->gpu_events;
    part.cpu_events = summary->cpu_events;
  }
  const uint8_t observed = r.Byte();
  if (observed > 1) r.Fail();
  if (r.ok() && observed == 1) {
    // Each interval takes at least two bytes.
    const size_t n = r.Count();
    std::vector<Interval> intervals;
    intervals.reserve(n);
    int64_t previous_end = 0;
    for (size_t i = 0; r.ok() && i < n; ++i) {
      Interval v;
      v.start = r.Delta(previous_end);
      v.end = r.Delta(v.start);
      if (v.end <= v.start || (i > 0 && v.start < previous_end)) r.Fail();
      previous_end = v.end;
      intervals.push_back(v);
    }
    part.observed = IntervalSet::FromIntervals(std::move(intervals));
  }
  const size_t digests = r.Count();
  for (size_t i = 0; r.ok() && i < digests; ++i) {
    const std::string d = r.String();
    if (!r.ok()) break;
    absl::StatusOr<RankDigest> digest = DecodeRankDigest(d);
    if (!digest.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "window part's digest ", i, ": ", digest.status().message()));
    }
    part.digests.push_back(*std::move(digest));
  }
  const int64_t world_size = r.Signed();
  if (world_size < -1 || world_size > std::numeric_limits<int32_t>::max()) {
    r.Fail();
  }
  part.world_size = static_cast<int32_t>(world_size);
  // Ranks as increasing steps from -1: each step at least 1.
  const size_t ranks = r.Count();
  int64_t rank = -1;
  for (size_t i = 0; r.ok() && i < ranks; ++i) {
    const uint64_t step = r.Unsigned();
    if (step == 0 || step > static_cast<uint64_t>(
                                std::numeric_limits<int32_t>::max() - rank)) {
      r.Fail();
      break;
    }
    rank += static_cast<int64_t>(step);
    part.ranks.push_back(static_cast<int32_t>(rank));
  }
  const uint8_t last = r.Byte();
  if (last > 1) r.Fail();
  part.last = last == 1;
  if (version >= 2) {
    const uint8_t kind = r.Byte();
    if (kind > static_cast<uint8_t>(HostWindowPart::Kind::kLate)) r.Fail();
    part.kind = static_cast<HostWindowPart::Kind>(kind);
    const uint8_t newest = r.Byte();
    if (newest > 1) r.Fail();
    if (r.ok() && newest == 1) part.newest_start_ns = r.Signed();
    part.late_offset = r.Signed();
    if (part.late_offset < -1) r.Fail();
    // Each window takes at least three bytes; starts strictly ascending.
    const size_t late = r.Count();
    int64_t previous_start = 0;
    for (size_t i = 0; r.ok() && i < late; ++i) {
      HostWindowPart::Late l;
      l.window_start_ns = r.Delta(previous_start);
      const uint64_t events = r.Unsigned();
      const uint64_t collectives = r.Unsigned();
      if ((i > 0 && l.window_start_ns <= previous_start) ||
          events > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) ||
          collectives >
              static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
        r.Fail();
        break;
      }
      l.events = static_cast<int64_t>(events);
      l.collectives = static_cast<int64_t>(collectives);
      previous_start = l.window_start_ns;
      part.late.push_back(l);
    }
    const size_t timelines = r.Count();
    if (timelines != 0 && timelines != part.digests.size()) r.Fail();
    for (size_t i = 0; r.ok() && i < timelines; ++i) {
      part.timelines.push_back(ReadTimelinePart(r));
    }
  }
  if (!r.ok() || !r.done()) {
    return absl::InvalidArgumentError("window part truncated or malformed");
  }
  return part;
}

}  // namespace bubblewatch
