#include "analysis/rank_timeline.h"

#include <algorithm>
#include <array>
#include <cstdint>
#include <limits>
#include <set>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace bubblewatch {
namespace {

// Whether `t` lies in `set`, walking `*i` forward (t only grows).
bool Covers(const std::vector<Interval>& set, size_t* i, int64_t t) {
  while (*i < set.size() && set[*i].end <= t) ++*i;
  return *i < set.size() && set[*i].start <= t;
}

void Append(std::vector<TimelineRun>& runs, uint8_t state, int64_t start,
            int64_t end) {
  if (end <= start) return;
  if (!runs.empty() && runs.back().state == state &&
      runs.back().end_ns == start) {
    runs.back().end_ns = end;
    return;
  }
  runs.push_back({state, start, end});
}

int64_t FloorDiv(int64_t a, int64_t b) {
  const int64_t q = a / b;
  return (a % b != 0 && (a < 0) != (b < 0)) ? q - 1 : q;
}

}  // namespace

absl::StatusOr<std::vector<std::vector<TimelineRun>>> RankTimelineRuns(
    const CollectiveAnalysis& analysis, const AnalyzerOptions& analyzer) {
  const size_t n = analysis.ranks.size();
  if (analysis.rank_time.size() != n) {
    return absl::FailedPreconditionError(
        "the collective analysis kept no rank time (keep_rank_time)");
  }
  // Per rank: its span and the elementary pieces of its busy time; its
  // gaps become breakdown queries of its trace.
  struct Piece {
    int8_t state;  // -1: a gap, answered by breakdown `query`.
    int64_t start, end;
    int query = -1;
    const Attribution* known = nullptr;  // The analysis's, when it has it.
  };
  std::vector<std::vector<Piece>> pieces(n);
  std::vector<std::vector<DeviceInterval>> queries(analysis.traces.size());
  for (size_t slot = 0; slot < n; ++slot) {
    const CollectiveAnalysis::RankTime& rt = analysis.rank_time[slot];
    const RankCollectiveStats& rank = analysis.ranks[slot];
    const DeviceAnalysis* device = nullptr;
    for (const DeviceAnalysis& d : analysis.analyses[rt.trace].devices) {
      if (d.device == rank.device) device = &d;
    }
    if (device == nullptr || device->stats.span_ns == 0) continue;
    const int64_t from = device->first_kernel_start_ns;
    const int64_t to = device->last_kernel_end_ns;
    std::vector<int64_t> cuts = {from, to};
    for (const IntervalSet* s : {&rt.compute, &rt.collective, &rt.waits}) {
      for (const Interval& i : s->intervals()) {
        if (i.start > from && i.start < to) cuts.push_back(i.start);
        if (i.end > from && i.end < to) cuts.push_back(i.end);
      }
    }
    std::sort(cuts.begin(), cuts.end());
    cuts.erase(std::unique(cuts.begin(), cuts.end()), cuts.end());
    size_t ik = 0, ic = 0, iw = 0;
    std::vector<Piece>& out = pieces[slot];
    for (size_t k = 0; k + 1 < cuts.size(); ++k) {
      const int64_t a = cuts[k], b = cuts[k + 1];
      int8_t state = -1;
      if (Covers(rt.compute.intervals(), &ik, a)) {
        state = static_cast<int8_t>(TimelineState::kCompute);
      } else if (Covers(rt.collective.intervals(), &ic, a)) {
        state = Covers(rt.waits.intervals(), &iw, a)
                    ? static_cast<int8_t>(TimelineState::kWait)
                    : static_cast<int8_t>(TimelineState::kTransfer);
      }
      if (!out.empty() && out.back().state == state && out.back().end == a) {
        out.back().end = b;
      } else {
        out.push_back({state, a, b});
      }
    }
    // A gap the analysis kept (CollectiveOptions::keep_rank_time asks for
    // them) is coloured by its attribution; any other (none, unless the
    // analysis had other options) is asked of the analyzer again.
    const std::vector<GapAttribution>& gaps = analysis.analyses[rt.trace].gaps;
    auto first = std::lower_bound(
        gaps.begin(), gaps.end(), std::pair(rank.device, from),
        [](const GapAttribution& g, const std::pair<int32_t, int64_t>& k) {
          return std::pair(g.device, g.start_ns) < k;
        });
    const bool sorted =
        std::is_sorted(gaps.begin(), gaps.end(),
                       [](const GapAttribution& a, const GapAttribution& b) {
                         return std::pair(a.device, a.start_ns) <
                                std::pair(b.device, b.start_ns);
                       });
    std::vector<DeviceInterval>& mine = queries[rt.trace];
    for (Piece& p : out) {
      if (p.state != -1) continue;
      if (sorted) {
        while (first != gaps.end() && first->device == rank.device &&
               first->start_ns < p.start) {
          ++first;
        }
        if (first != gaps.end() && first->device == rank.device &&
            first->start_ns == p.start && first->end_ns == p.end) {
          p.known = &first->attribution;
          continue;
        }
      }
      p.query = static_cast<int>(mine.size());
      mine.push_back({rank.device, p.start, p.end});
    }
  }
  // The gaps' attribution, by the analyzer's own rules.
  std::vector<std::vector<IntervalBreakdown>> answers(analysis.traces.size());
  for (size_t t = 0; t < analysis.traces.size(); ++t) {
    if (queries[t].empty()) continue;
    AnalyzerOptions options = analyzer;
    options.top_bubbles = 0;
    options.window_ns = 0;
    options.breakdown_intervals = queries[t];
    absl::StatusOr<Analysis> a = AnalyzeTrace(*analysis.traces[t], options);
    if (!a.ok()) return a.status();
    answers[t] = std::move(a->breakdowns);
  }
  std::vector<std::vector<TimelineRun>> runs(n);
  for (size_t slot = 0; slot < n; ++slot) {
    const std::vector<IntervalBreakdown>& answer =
        answers[analysis.rank_time[slot].trace];
    std::vector<TimelineRun>& out = runs[slot];
    for (const Piece& p : pieces[slot]) {
      if (p.state != -1) {
        Append(out, static_cast<uint8_t>(p.state), p.start, p.end);
        continue;
      }
      const Attribution& bubble =
          p.known != nullptr ? *p.known : answer[p.query].bubble;
      int64_t at = p.start;
      for (BubbleCause c : kAllBubbleCauses) {
        const int64_t ns = bubble[static_cast<int>(c)];
        Append(out, static_cast<uint8_t>(BubbleState(c)), at, at + ns);
        at += ns;
      }
      // Busy time inside a gap cannot be; unobserved time can (an analyzer
      // given observed time): either way the gap's rest keeps its length.
      Append(out, static_cast<uint8_t>(TimelineState::kUnobserved), at, p.end);
    }
  }
  return runs;
}

std::vector<TimelineRun> CompactTimeline(std::vector<TimelineRun> runs,
                                         int max_segments, int64_t min_ns,
                                         int64_t* merged_ns) {
  *merged_ns = 0;
  const size_t n = runs.size();
  if (n <= 1) return runs;
  // A doubly linked list over `runs`, and the live runs by (length, index).
  std::vector<int> prev(n), next(n);
  std::vector<bool> live(n, true);
  std::set<std::pair<int64_t, int>> by_length;
  for (size_t i = 0; i < n; ++i) {
    prev[i] = static_cast<int>(i) - 1;
    next[i] = i + 1 < n ? static_cast<int>(i + 1) : -1;
    by_length.insert({runs[i].end_ns - runs[i].start_ns, static_cast<int>(i)});
  }
  auto length = [&](int i) { return runs[i].end_ns - runs[i].start_ns; };
  auto unlink = [&](int i) {
    by_length.erase({length(i), i});
    live[i] = false;
    if (prev[i] >= 0) next[prev[i]] = next[i];
    if (next[i] >= 0) prev[next[i]] = prev[i];
  };
  // Grows `into` by `from` (adjacent), which goes.
  auto absorb = [&](int into, int from) {
    by_length.erase({length(into), into});
    runs[into].start_ns = std::min(runs[into].start_ns, runs[from].start_ns);
    runs[into].end_ns = std::max(runs[into].end_ns, runs[from].end_ns);
    unlink(from);
    by_length.insert({length(into), into});
  };
  while (by_length.size() > 1 &&
         (by_length.size() > static_cast<size_t>(max_segments) ||
          by_length.begin()->first < min_ns)) {
    const int s = by_length.begin()->second;
    const int l = prev[s], r = next[s];
    const int into = l < 0 ? r : r < 0 ? l : (length(r) > length(l) ? r : l);
    *merged_ns += length(s);
    absorb(into, s);
    // Its other neighbour, now next to `into`, may be of the same state.
    const int other = into == l ? r : l;
    if (other >= 0 && runs[other].state == runs[into].state) {
      absorb(into, other);
    }
  }
  std::vector<TimelineRun> out;
  out.reserve(by_length.size());
  for (size_t i = 0; i < n; ++i) {
    if (live[i]) out.push_back(runs[i]);
  }
  return out;
}

std::vector<TimelineRun> BinTimeline(const std::vector<TimelineRun>& runs,
                                     int bins, int states_per_bin,
                                     int64_t* bin_ns, int64_t* merged_ns) {
  *merged_ns = 0;
  *bin_ns = 0;
  std::vector<TimelineRun> out;
  if (runs.empty() || bins <= 0) return out;
  const int64_t from = runs.front().start_ns;
  const int64_t to = runs.back().end_ns;
  const int64_t width = std::max<int64_t>(1, (to - from + bins - 1) / bins);
  *bin_ns = width;
  size_t r = 0;
  for (int64_t bin = from; bin < to; bin += width) {
    const int64_t bin_end = std::min(to, bin + width);
    // Its time per state, and where each state first occurs in it.
    std::array<int64_t, kTimelineStates> ns{};
    std::array<int64_t, kTimelineStates> first{};
    first.fill(INT64_MAX);
    while (r < runs.size() && runs[r].end_ns <= bin) ++r;
    for (size_t k = r; k < runs.size() && runs[k].start_ns < bin_end; ++k) {
      const int64_t a = std::max(runs[k].start_ns, bin);
      const int64_t b = std::min(runs[k].end_ns, bin_end);
      if (b <= a || runs[k].state >= kTimelineStates) continue;
      ns[runs[k].state] += b - a;
      first[runs[k].state] = std::min(first[runs[k].state], a);
    }
    std::vector<int> present;
    for (int s = 0; s < kTimelineStates; ++s) {
      if (ns[s] > 0) present.push_back(s);
    }
    // Too many states: the smallest count as the largest (the earliest
    // state of equals stays).
    std::stable_sort(present.begin(), present.end(),
                     [&](int a, int b) { return ns[a] > ns[b]; });
    for (size_t k = static_cast<size_t>(std::max(states_per_bin, 1));
         k < present.size(); ++k) {
      ns[present[0]] += ns[present[k]];
      *merged_ns += ns[present[k]];
    }
    if (present.size() > static_cast<size_t>(std::max(states_per_bin, 1))) {
      present.resize(static_cast<size_t>(std::max(states_per_bin, 1)));
    }
    std::sort(present.begin(), present.end(),
              [&](int a, int b) { return first[a] < first[b]; });
    int64_t at = bin;
    for (int s : present) {
      Append(out, static_cast<uint8_t>(s), at, at + ns[s]);
      at += ns[s];
    }
  }
  return out;
}

RankTimeline StoredTimeline(const std::vector<TimelineRun>& runs,
                            int64_t window_start_ns, int64_t clock_offset_ns) {
  RankTimeline out;
  // Exact when what is at least 1 us long fits; else binned.
  int64_t merged_ns = 0;
  int64_t bin_ns = 0;
  std::vector<TimelineRun> compact =
      CompactTimeline(runs, std::numeric_limits<int>::max(), 1000, &merged_ns);
  if (compact.size() > static_cast<size_t>(kExactTimelineSegments)) {
    compact =
        BinTimeline(runs, kTimelineBins, kStatesPerBin, &bin_ns, &merged_ns);
  }
  out.merged_us = static_cast<uint32_t>((merged_ns + 999) / 1000);
  out.bin_us = static_cast<uint32_t>((bin_ns + 500) / 1000);
  if (compact.empty()) return out;
  auto us = [&](int64_t t) {
    return FloorDiv(t - clock_offset_ns - window_start_ns, 1000);
  };
  // Beyond what the stored widths hold (a rank 35 minutes off the window,
  // a run of 71 minutes): no segments, rather than wrong ones.
  const int64_t start = us(compact.front().start_ns);
  if (start < INT32_MIN || start > INT32_MAX) return out;
  out.start_us = static_cast<int32_t>(start);
  out.segments.reserve(compact.size());
  for (const TimelineRun& r : compact) {
    const int64_t length = us(r.end_ns) - us(r.start_ns);
    if (length > UINT32_MAX) {
      out.segments.clear();
      return out;
    }
    // A binned state shorter than 1 us after rounding: its time is in its
    // neighbours' rounding.
    if (length == 0) continue;
    if (!out.segments.empty() && out.segments.back().state == r.state) {
      out.segments.back().us += static_cast<uint32_t>(length);
      continue;
    }
    out.segments.push_back(
        {.state = r.state, .us = static_cast<uint32_t>(length)});
  }
  return out;
}

}  // namespace bubblewatch
