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

// One rank's sets, what its runs are drawn from.
struct RankSets {
  size_t trace = 0;  // Index into the traces and their analyses.
  int32_t device = 0;
  const IntervalSet* compute = nullptr;
  const IntervalSet* collective = nullptr;
  // Its waits, or null: its collective time is one state, kCollectiveRun.
  const IntervalSet* waits = nullptr;
};

// The runs of each of `ranks` (RankTimelineRuns's rules).
absl::StatusOr<std::vector<std::vector<TimelineRun>>> RunsOf(
    absl::Span<const RankSets> ranks, absl::Span<const Trace* const> traces,
    absl::Span<const Analysis> analyses, const AnalyzerOptions& analyzer) {
  const size_t n = ranks.size();
  // Per rank: its span and the elementary pieces of its busy time; its
  // gaps become breakdown queries of its trace.
  struct Piece {
    int8_t state;  // -1: a gap, answered by breakdown `query`.
    int64_t start, end;
    int query = -1;
    const Attribution* known = nullptr;  // The analysis's, when it has it.
  };
  const IntervalSet no_waits;
  std::vector<std::vector<Piece>> pieces(n);
  std::vector<std::vector<DeviceInterval>> queries(traces.size());
  for (size_t slot = 0; slot < n; ++slot) {
    const RankSets& rt = ranks[slot];
    const DeviceAnalysis* device = nullptr;
    for (const DeviceAnalysis& d : analyses[rt.trace].devices) {
      if (d.device == rt.device) device = &d;
    }
    if (device == nullptr || device->stats.span_ns == 0) continue;
    const int64_t from = device->first_kernel_start_ns;
    const int64_t to = device->last_kernel_end_ns;
    const IntervalSet& waits = rt.waits != nullptr ? *rt.waits : no_waits;
    std::vector<int64_t> cuts = {from, to};
    for (const IntervalSet* s : {rt.compute, rt.collective, &waits}) {
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
      if (Covers(rt.compute->intervals(), &ik, a)) {
        state = static_cast<int8_t>(TimelineState::kCompute);
      } else if (Covers(rt.collective->intervals(), &ic, a)) {
        state = rt.waits == nullptr ? static_cast<int8_t>(kCollectiveRun)
                : Covers(waits.intervals(), &iw, a)
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
    const std::vector<GapAttribution>& gaps = analyses[rt.trace].gaps;
    auto first = std::lower_bound(
        gaps.begin(), gaps.end(), std::pair(rt.device, from),
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
        while (first != gaps.end() && first->device == rt.device &&
               first->start_ns < p.start) {
          ++first;
        }
        if (first != gaps.end() && first->device == rt.device &&
            first->start_ns == p.start && first->end_ns == p.end) {
          p.known = &first->attribution;
          continue;
        }
      }
      p.query = static_cast<int>(mine.size());
      mine.push_back({rt.device, p.start, p.end});
    }
  }
  // The gaps' attribution, by the analyzer's own rules.
  std::vector<std::vector<IntervalBreakdown>> answers(traces.size());
  for (size_t t = 0; t < traces.size(); ++t) {
    if (queries[t].empty()) continue;
    AnalyzerOptions options = analyzer;
    options.top_bubbles = 0;
    options.window_ns = 0;
    options.breakdown_intervals = queries[t];
    absl::StatusOr<Analysis> a = AnalyzeTrace(*traces[t], options);
    if (!a.ok()) return a.status();
    answers[t] = std::move(a->breakdowns);
  }
  std::vector<std::vector<TimelineRun>> runs(n);
  for (size_t slot = 0; slot < n; ++slot) {
    const std::vector<IntervalBreakdown>& answer = answers[ranks[slot].trace];
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

}  // namespace

absl::StatusOr<std::vector<std::vector<TimelineRun>>> RankTimelineRuns(
    const CollectiveAnalysis& analysis, const AnalyzerOptions& analyzer) {
  const size_t n = analysis.ranks.size();
  if (analysis.rank_time.size() != n) {
    return absl::FailedPreconditionError(
        "the collective analysis kept no rank time (keep_rank_time)");
  }
  std::vector<RankSets> ranks(n);
  for (size_t slot = 0; slot < n; ++slot) {
    const CollectiveAnalysis::RankTime& rt = analysis.rank_time[slot];
    ranks[slot] = {.trace = static_cast<size_t>(rt.trace),
                   .device = analysis.ranks[slot].device,
                   .compute = &rt.compute,
                   .collective = &rt.collective,
                   .waits = &rt.waits};
  }
  return RunsOf(ranks, analysis.traces, analysis.analyses, analyzer);
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

namespace {

// A bin's time per state (kCollectiveRun's too) and where each state first
// occurs in it (INT64_MAX: nowhere).
struct BinTotals {
  std::array<int64_t, kTimelineStates + 1> ns{};
  std::array<int64_t, kTimelineStates + 1> first{};
  BinTotals() { first.fill(INT64_MAX); }
};

// The length of each of `bins` bins over [from, to).
int64_t BinWidth(int64_t from, int64_t to, int bins) {
  return std::max<int64_t>(1, (to - from + bins - 1) / bins);
}

// Calls fn(bin_start, bin_end, totals) for each bin of `width` over the
// runs' span, in order.
template <typename Fn>
void ForEachBin(const std::vector<TimelineRun>& runs, int64_t width, Fn&& fn) {
  const int64_t from = runs.front().start_ns;
  const int64_t to = runs.back().end_ns;
  size_t r = 0;
  for (int64_t bin = from; bin < to; bin += width) {
    const int64_t bin_end = std::min(to, bin + width);
    BinTotals t;
    while (r < runs.size() && runs[r].end_ns <= bin) ++r;
    for (size_t k = r; k < runs.size() && runs[k].start_ns < bin_end; ++k) {
      const int64_t a = std::max(runs[k].start_ns, bin);
      const int64_t b = std::min(runs[k].end_ns, bin_end);
      if (b <= a || runs[k].state > kTimelineStates) continue;
      t.ns[runs[k].state] += b - a;
      t.first[runs[k].state] = std::min(t.first[runs[k].state], a);
    }
    fn(bin, bin_end, t);
  }
}

// One bin of BinTimeline from its totals (stored states only): at most
// `states_per_bin` states, laid end to end from `bin` in the order they
// first occur.
//
// `dropped_ns`: time of states already known to be among the others (not
// in `t`), which count as the largest too.
void AppendBin(BinTotals t, int64_t bin, int states_per_bin,
               std::vector<TimelineRun>& out, int64_t* merged_ns,
               int64_t dropped_ns = 0) {
  std::vector<int> present;
  for (int s = 0; s < kTimelineStates; ++s) {
    if (t.ns[s] > 0) present.push_back(s);
  }
  if (present.empty()) return;
  // Too many states: the smallest count as the largest (the earliest
  // state of equals stays).
  std::stable_sort(present.begin(), present.end(),
                   [&](int a, int b) { return t.ns[a] > t.ns[b]; });
  const size_t keep = static_cast<size_t>(std::max(states_per_bin, 1));
  for (size_t k = keep; k < present.size(); ++k) {
    t.ns[present[0]] += t.ns[present[k]];
    *merged_ns += t.ns[present[k]];
  }
  t.ns[present[0]] += dropped_ns;
  *merged_ns += dropped_ns;
  if (present.size() > keep) present.resize(keep);
  std::sort(present.begin(), present.end(),
            [&](int a, int b) { return t.first[a] < t.first[b]; });
  int64_t at = bin;
  for (int s : present) {
    Append(out, static_cast<uint8_t>(s), at, at + t.ns[s]);
    at += t.ns[s];
  }
}

// The stored form of `compact` (exact runs, or bins of `bin_ns`).
RankTimeline Store(const std::vector<TimelineRun>& compact, int64_t merged_ns,
                   int64_t bin_ns, int64_t window_start_ns,
                   int64_t clock_offset_ns) {
  RankTimeline out;
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

}  // namespace

std::vector<TimelineRun> BinTimeline(const std::vector<TimelineRun>& runs,
                                     int bins, int states_per_bin,
                                     int64_t* bin_ns, int64_t* merged_ns) {
  *merged_ns = 0;
  *bin_ns = 0;
  std::vector<TimelineRun> out;
  if (runs.empty() || bins <= 0) return out;
  const int64_t width =
      BinWidth(runs.front().start_ns, runs.back().end_ns, bins);
  *bin_ns = width;
  ForEachBin(runs, width, [&](int64_t bin, int64_t, const BinTotals& t) {
    AppendBin(t, bin, states_per_bin, out, merged_ns);
  });
  return out;
}

RankTimeline StoredTimeline(const std::vector<TimelineRun>& runs,
                            int64_t window_start_ns, int64_t clock_offset_ns) {
  // Exact when what is at least 1 us long fits; else binned.
  int64_t merged_ns = 0;
  int64_t bin_ns = 0;
  std::vector<TimelineRun> compact =
      CompactTimeline(runs, std::numeric_limits<int>::max(), 1000, &merged_ns);
  if (compact.size() > static_cast<size_t>(kExactTimelineSegments)) {
    compact =
        BinTimeline(runs, kTimelineBins, kStatesPerBin, &bin_ns, &merged_ns);
  }
  return Store(compact, merged_ns, bin_ns, window_start_ns, clock_offset_ns);
}

namespace {

// a \ b, both merged.
IntervalSet Minus(const IntervalSet& a, const IntervalSet& b) {
  std::vector<Interval> out;
  size_t j = 0;
  const std::vector<Interval>& bs = b.intervals();
  for (Interval i : a.intervals()) {
    while (j < bs.size() && bs[j].end <= i.start) ++j;
    for (size_t k = j; k < bs.size() && bs[k].start < i.end; ++k) {
      if (bs[k].start > i.start) out.push_back({i.start, bs[k].start});
      i.start = std::max(i.start, bs[k].end);
    }
    if (i.start < i.end) out.push_back(i);
  }
  return IntervalSet::FromMerged(std::move(out));
}

// The first moment of `set` in [a, b), INT64_MAX if none.
int64_t FirstIn(const IntervalSet& set, int64_t a, int64_t b) {
  int64_t first = INT64_MAX;
  set.ForEachCovered(a, b,
                     [&](int64_t s, int64_t) { first = std::min(first, s); });
  return first;
}

// The union of a digest's kernels' spans.
IntervalSet RecordSpans(const RankDigest& digest) {
  std::vector<Interval> spans;
  spans.reserve(digest.kernels.size());
  for (const DigestKernel& k : digest.kernels) {
    spans.push_back({k.start_ns, k.end_ns});
  }
  return IntervalSet::FromIntervals(std::move(spans));
}

// At least how many runs CompactTimeline(split, max, 1000) keeps, for
// every split of `runs`' collective runs by waits that are prefixes of
// the records (`starts`, sorted): a run of 1 us or more is never merged
// away, it only grows and keeps its state, so runs of 1 us or more that
// differ in state stay apart. A collective run of n records' starts
// inside splits into at most 2n + 3 runs, one of them 1 us long if it
// is (2n + 3) us: a wait or a transfer, which differs from any other
// state (but perhaps not from the next collective run's).
int64_t CompactRunsAtLeast(const std::vector<TimelineRun>& runs,
                           const std::vector<int64_t>& starts) {
  int64_t changes = 0;
  bool any = false;
  uint8_t last = 0;
  for (const TimelineRun& r : runs) {
    const int64_t length = r.end_ns - r.start_ns;
    if (r.state == kCollectiveRun) {
      const int64_t inside =
          std::lower_bound(starts.begin(), starts.end(), r.end_ns) -
          std::upper_bound(starts.begin(), starts.end(), r.start_ns);
      if (length / (2 * inside + 3) < 1000) continue;
    } else if (length < 1000) {
      continue;
    }
    // Two collective runs' long runs may both be waits, or transfers.
    if (any && last != r.state) ++changes;
    any = true;
    last = r.state;
  }
  return any ? changes + 1 : 0;
}

}  // namespace

absl::StatusOr<std::vector<TimelinePart>> TimelineParts(
    absl::Span<const RankInput> ranks, const TraceDigests& digests,
    const AnalyzerOptions& analyzer) {
  std::vector<TimelinePart> out(ranks.size());
  if (ranks.empty()) return out;
  const Trace* trace = ranks.front().trace;
  std::vector<RankSets> sets(ranks.size());
  const IntervalSet none;
  for (size_t i = 0; i < ranks.size(); ++i) {
    sets[i] = {.trace = 0,
               .device = ranks[i].device,
               .compute = &none,
               .collective = &none,
               .waits = nullptr};
    for (const DeviceKernelSets& k : digests.kernel_sets) {
      if (k.device != ranks[i].device) continue;
      sets[i].compute = &k.compute;
      sets[i].collective = &k.collective;
    }
  }
  absl::StatusOr<std::vector<std::vector<TimelineRun>>> runs =
      RunsOf(sets, absl::MakeConstSpan(&trace, 1),
             absl::MakeConstSpan(&digests.analysis, 1), analyzer);
  if (!runs.ok()) return runs.status();
  for (size_t i = 0; i < ranks.size(); ++i) {
    std::vector<TimelineRun>& mine = (*runs)[i];
    TimelinePart& part = out[i];
    if (mine.empty()) continue;
    const RankDigest& digest = digests.digests[i];
    std::vector<int64_t> starts;
    starts.reserve(digest.kernels.size());
    for (const DigestKernel& k : digest.kernels) starts.push_back(k.start_ns);
    std::sort(starts.begin(), starts.end());
    if (mine.size() <= static_cast<size_t>(kExactPartRuns) ||
        CompactRunsAtLeast(mine, starts) <= kExactTimelineSegments) {
      part.form = TimelinePart::kExact;
      part.runs = std::move(mine);
      continue;
    }
    // Binned for sure: each bin's totals, the collective time outside the
    // records first seen where, and the records' time in no collective
    // kernel.
    part.form = TimelinePart::kBinned;
    part.start_ns = mine.front().start_ns;
    part.end_ns = mine.back().end_ns;
    const IntervalSet spans = RecordSpans(digest);
    const IntervalSet* collective = sets[i].collective;
    part.not_collective =
        Minus(Minus(spans, digest.compute_in_kernels), *collective).intervals();
    size_t r = 0;
    ForEachBin(
        mine, BinWidth(part.start_ns, part.end_ns, kTimelineBins),
        [&](int64_t bin, int64_t bin_end, const BinTotals& t) {
          TimelinePart::Bin& out_bin = part.bins.emplace_back();
          // The other states by time (the earlier state of equals first,
          // as AppendBin ranks them): past the kStatesPerBin largest, a
          // state stays among the others whatever wait and transfer add.
          std::vector<int> present;
          for (int s = 0; s < kTimelineStates; ++s) {
            if (t.ns[s] > 0) present.push_back(s);
          }
          std::stable_sort(present.begin(), present.end(),
                           [&](int a, int b) { return t.ns[a] > t.ns[b]; });
          for (size_t k = 0; k < present.size(); ++k) {
            const int s = present[k];
            if (k >= static_cast<size_t>(kStatesPerBin)) {
              out_bin.dropped_ns += t.ns[s];
              continue;
            }
            out_bin.states.push_back({.state = static_cast<uint8_t>(s),
                                      .ns = t.ns[s],
                                      .first_ns = t.first[s]});
          }
          std::sort(
              out_bin.states.begin(), out_bin.states.end(),
              [](const TimelinePart::State& a, const TimelinePart::State& b) {
                return a.first_ns < b.first_ns;
              });
          out_bin.collective_ns = t.ns[kCollectiveRun];
          if (t.ns[kCollectiveRun] == 0) return;
          // The collective runs' first moment outside the records.
          int64_t outside = INT64_MAX;
          while (r < mine.size() && mine[r].end_ns <= bin) ++r;
          for (size_t k = r; k < mine.size() && mine[k].start_ns < bin_end &&
                             outside == INT64_MAX;
               ++k) {
            if (mine[k].state != kCollectiveRun) continue;
            int64_t at = std::max(mine[k].start_ns, bin);
            const int64_t to = std::min(mine[k].end_ns, bin_end);
            spans.ForEachCovered(at, to, [&](int64_t a, int64_t b) {
              if (a <= at) at = std::max(at, b);
            });
            if (at < to) outside = at;
          }
          out_bin.outside_records_ns = outside;
        });
  }
  return out;
}

RankTimeline MergedTimeline(const TimelinePart& part, const RankDigest& digest,
                            const IntervalSet& waits, int64_t window_start_ns,
                            int64_t clock_offset_ns) {
  if (part.form == TimelinePart::kNone) return RankTimeline{};
  if (part.form == TimelinePart::kExact) {
    // Each collective run split as the single stage splits it: waiting
    // where a wait covers it.
    std::vector<TimelineRun> runs;
    runs.reserve(part.runs.size());
    for (const TimelineRun& r : part.runs) {
      if (r.state != kCollectiveRun) {
        Append(runs, r.state, r.start_ns, r.end_ns);
        continue;
      }
      int64_t at = r.start_ns;
      waits.ForEachCovered(r.start_ns, r.end_ns, [&](int64_t a, int64_t b) {
        Append(runs, static_cast<uint8_t>(TimelineState::kTransfer), at, a);
        Append(runs, static_cast<uint8_t>(TimelineState::kWait), a, b);
        at = b;
      });
      Append(runs, static_cast<uint8_t>(TimelineState::kTransfer), at,
             r.end_ns);
    }
    return StoredTimeline(runs, window_start_ns, clock_offset_ns);
  }
  // Binned: the collective time inside the records is waiting where a
  // wait covers it, and the rest of the collective time transfer.
  const IntervalSet not_collective =
      IntervalSet::FromMerged(part.not_collective);
  const IntervalSet in_records = Minus(
      Minus(RecordSpans(digest), digest.compute_in_kernels), not_collective);
  const IntervalSet wait =
      Minus(Minus(waits, digest.compute_in_kernels), not_collective);
  const IntervalSet transfer = Minus(in_records, waits);
  const int64_t width = BinWidth(part.start_ns, part.end_ns, kTimelineBins);
  std::vector<TimelineRun> bins;
  int64_t merged_ns = 0;
  int64_t bin = part.start_ns;
  for (const TimelinePart::Bin& b : part.bins) {
    const int64_t bin_end = std::min(part.end_ns, bin + width);
    BinTotals t;
    for (const TimelinePart::State& s : b.states) {
      t.ns[s.state] = s.ns;
      t.first[s.state] = s.first_ns;
    }
    if (b.collective_ns > 0) {
      const int64_t w = wait.CoveredLength(bin, bin_end);
      const int kWait = static_cast<int>(TimelineState::kWait);
      const int kTransfer = static_cast<int>(TimelineState::kTransfer);
      t.ns[kWait] = w;
      t.first[kWait] = w > 0 ? FirstIn(wait, bin, bin_end) : INT64_MAX;
      t.ns[kTransfer] = b.collective_ns - w;
      t.first[kTransfer] =
          std::min(FirstIn(transfer, bin, bin_end), b.outside_records_ns);
    }
    AppendBin(t, bin, kStatesPerBin, bins, &merged_ns, b.dropped_ns);
    bin = bin_end;
  }
  return Store(bins, merged_ns, width, window_start_ns, clock_offset_ns);
}

void WriteTimelinePart(const TimelinePart& part, VarintWriter& w) {
  w.Byte(part.form);
  if (part.form == TimelinePart::kExact) {
    // The runs are contiguous: the first start, then each state and length.
    w.Unsigned(part.runs.size());
    w.Signed(part.runs.front().start_ns);
    for (const TimelineRun& r : part.runs) {
      w.Unsigned(static_cast<uint64_t>(r.end_ns - r.start_ns) << 4 | r.state);
    }
  } else if (part.form == TimelinePart::kBinned) {
    w.Signed(part.start_ns);
    w.Unsigned(static_cast<uint64_t>(part.end_ns - part.start_ns));
    const int64_t width = BinWidth(part.start_ns, part.end_ns, kTimelineBins);
    int64_t bin = part.start_ns;
    for (const TimelinePart::Bin& b : part.bins) {
      // Its states in the order they first occur, each first moment after
      // the previous one's; then whether collective time is there (0: no;
      // 1: yes, all in records; 2 + k: its time outside them first at bin
      // + k). The bin's time is its states' in all: the collective time
      // (or, without it, the dropped states') is the rest.
      w.Unsigned(b.states.size());
      int64_t previous = bin;
      for (const TimelinePart::State& s : b.states) {
        w.Unsigned(static_cast<uint64_t>(s.ns) << 4 | s.state);
        w.Unsigned(static_cast<uint64_t>(s.first_ns - previous));
        previous = s.first_ns;
      }
      if (b.collective_ns == 0) {
        w.Unsigned(0);
      } else {
        w.Unsigned(b.outside_records_ns == INT64_MAX
                       ? 1
                       : static_cast<uint64_t>(b.outside_records_ns - bin) + 2);
        w.Unsigned(static_cast<uint64_t>(b.dropped_ns));
      }
      bin += width;
    }
    w.Unsigned(part.not_collective.size());
    int64_t previous_end = 0;
    for (const Interval& i : part.not_collective) {
      w.Delta(i.start, previous_end);
      w.Delta(i.end, i.start);
      previous_end = i.end;
    }
  }
}

TimelinePart ReadTimelinePart(VarintReader& r) {
  TimelinePart part;
  const uint8_t form = r.Byte();
  if (form > TimelinePart::kBinned) r.Fail();
  part.form = static_cast<TimelinePart::Form>(form);
  // Lengths of at most 2^59 ns (18 years) with their state in 4 bits.
  const uint64_t kMaxLength = uint64_t{1} << 59;
  if (r.ok() && part.form == TimelinePart::kExact) {
    const size_t n = r.Count();
    if (n == 0) r.Fail();
    int64_t at = r.Signed();
    part.runs.reserve(n);
    for (size_t i = 0; r.ok() && i < n; ++i) {
      const uint64_t v = r.Unsigned();
      const uint8_t state = static_cast<uint8_t>(v & 15);
      const uint64_t length = v >> 4;
      if (state > kCollectiveRun || length == 0 || length > kMaxLength ||
          at > INT64_MAX - static_cast<int64_t>(length) ||
          (!part.runs.empty() && part.runs.back().state == state)) {
        r.Fail();
        break;
      }
      part.runs.push_back({state, at, at + static_cast<int64_t>(length)});
      at += static_cast<int64_t>(length);
    }
  } else if (r.ok() && part.form == TimelinePart::kBinned) {
    part.start_ns = r.Signed();
    const uint64_t span = r.Unsigned();
    if (span == 0 || span > kMaxLength ||
        part.start_ns > INT64_MAX - static_cast<int64_t>(span)) {
      r.Fail();
      return part;
    }
    part.end_ns = part.start_ns + static_cast<int64_t>(span);
    const int64_t width = BinWidth(part.start_ns, part.end_ns, kTimelineBins);
    for (int64_t bin = part.start_ns; r.ok() && bin < part.end_ns;
         bin += width) {
      const int64_t bin_end = std::min(part.end_ns, bin + width);
      const int64_t length = bin_end - bin;
      TimelinePart::Bin& b = part.bins.emplace_back();
      const size_t n = r.Count();
      if (n > static_cast<size_t>(kStatesPerBin)) r.Fail();
      int64_t previous = bin;
      int64_t total = 0;
      uint32_t seen = 0;
      for (size_t i = 0; r.ok() && i < n; ++i) {
        const uint64_t v = r.Unsigned();
        const uint64_t step = r.Unsigned();
        TimelinePart::State s{.state = static_cast<uint8_t>(v & 15),
                              .ns = static_cast<int64_t>(v >> 4)};
        const int kWait = static_cast<int>(TimelineState::kWait);
        const int kTransfer = static_cast<int>(TimelineState::kTransfer);
        if (s.state >= kTimelineStates || s.state == kWait ||
            s.state == kTransfer || (seen >> s.state & 1) != 0 || s.ns <= 0 ||
            s.ns > length - total || step >= static_cast<uint64_t>(length) ||
            (i > 0 && step == 0) ||
            static_cast<int64_t>(step) >= bin_end - previous) {
          r.Fail();
          break;
        }
        seen |= uint32_t{1} << s.state;
        total += s.ns;
        s.first_ns = previous + static_cast<int64_t>(step);
        previous = s.first_ns;
        b.states.push_back(s);
      }
      const uint64_t collective = r.Unsigned();
      if (!r.ok()) break;
      if (collective == 0) {
        b.dropped_ns = length - total;
      } else {
        if (collective - 2 >= static_cast<uint64_t>(length) &&
            collective != 1) {
          r.Fail();
          break;
        }
        b.outside_records_ns = collective == 1
                                   ? INT64_MAX
                                   : bin + static_cast<int64_t>(collective - 2);
        const uint64_t dropped = r.Unsigned();
        if (dropped >= static_cast<uint64_t>(length - total)) {
          r.Fail();  // The collective time would be none.
          break;
        }
        b.dropped_ns = static_cast<int64_t>(dropped);
        b.collective_ns = length - total - b.dropped_ns;
      }
      // Dropped time only past kStatesPerBin others.
      if (b.dropped_ns > 0 && n < static_cast<size_t>(kStatesPerBin)) {
        r.Fail();
      }
    }
    const size_t n = r.Count();
    int64_t previous_end = 0;
    for (size_t i = 0; r.ok() && i < n; ++i) {
      Interval v;
      v.start = r.Delta(previous_end);
      v.end = r.Delta(v.start);
      if (v.end <= v.start || (i > 0 && v.start <= previous_end)) r.Fail();
      previous_end = v.end;
      part.not_collective.push_back(v);
    }
  }
  return part;
}

}  // namespace bubblewatch
