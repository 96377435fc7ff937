#include "analysis/interval_set.h"

#include <algorithm>

#include "base/check.h"

namespace bubblewatch {

IntervalSet::IntervalSet(std::vector<Interval> merged)
    : intervals_(std::move(merged)) {
  // reserve + push_back, not resize: one pass over fresh memory, not two.
  prefix_.reserve(intervals_.size());
  int64_t sum = 0;
  for (const Interval& iv : intervals_) {
    sum += iv.end - iv.start;
    prefix_.push_back(sum);
  }
}

namespace {

constexpr auto ByStart = [](const Interval& x, const Interval& y) {
  return x.start < y.start;
};

void SortByStart(std::vector<Interval>& intervals) {
  if (!std::is_sorted(intervals.begin(), intervals.end(), ByStart)) {
    std::sort(intervals.begin(), intervals.end(), ByStart);
  }
}

}  // namespace

IntervalSet IntervalSet::FromIntervals(std::vector<Interval> intervals) {
  SortByStart(intervals);
  return FromSorted(std::move(intervals));
}

IntervalSet IntervalSet::FromMerged(std::vector<Interval> merged) {
  BW_DCHECK(std::adjacent_find(merged.begin(), merged.end(),
                               [](const Interval& x, const Interval& y) {
                                 return x.end >= y.start;
                               }) == merged.end() &&
            std::all_of(merged.begin(), merged.end(),
                        [](const Interval& x) { return x.start < x.end; }));
  return IntervalSet(std::move(merged));
}

IntervalSet IntervalSet::FromSorted(std::vector<Interval> intervals) {
  // Merge in place.
  size_t out = 0;
  for (const Interval& iv : intervals) {
    if (iv.end <= iv.start) continue;
    if (out > 0 && iv.start <= intervals[out - 1].end) {
      intervals[out - 1].end = std::max(intervals[out - 1].end, iv.end);
    } else {
      intervals[out++] = iv;
    }
  }
  intervals.resize(out);
  return IntervalSet(std::move(intervals));
}

IntervalSet IntervalSet::Union(const IntervalSet& a, const IntervalSet& b) {
  std::vector<Interval> merged;
  merged.reserve(a.size() + b.size());
  std::merge(
      a.intervals_.begin(), a.intervals_.end(), b.intervals_.begin(),
      b.intervals_.end(), std::back_inserter(merged),
      [](const Interval& x, const Interval& y) { return x.start < y.start; });
  return FromIntervals(std::move(merged));
}

IntervalSet IntervalSet::Union(const IntervalSet& a,
                               std::vector<Interval> intervals) {
  SortByStart(intervals);
  // Merge a's intervals in from the back, so nothing is overwritten before
  // it is read.
  size_t i = intervals.size();
  size_t j = a.intervals_.size();
  intervals.resize(i + j);
  size_t k = intervals.size();
  while (j > 0) {
    if (i > 0 && intervals[i - 1].start > a.intervals_[j - 1].start) {
      intervals[--k] = intervals[--i];
    } else {
      intervals[--k] = a.intervals_[--j];
    }
  }
  return FromSorted(std::move(intervals));
}

size_t IntervalSet::FirstEndingAfter(int64_t t) const {
  return std::upper_bound(
             intervals_.begin(), intervals_.end(), t,
             [](int64_t v, const Interval& iv) { return v < iv.end; }) -
         intervals_.begin();
}

size_t IntervalSet::FirstEndingAfter(int64_t t, size_t hint) const {
  const size_t n = intervals_.size();
  auto ends_after = [&](size_t i) { return intervals_[i].end > t; };
  size_t lo = 0;
  size_t hi = n;  // The answer lies in [lo, hi].
  if (hint >= n) hint = n == 0 ? 0 : n - 1;
  if (n == 0) return 0;
  if (!ends_after(hint)) {
    // Gallop right.
    size_t step = 1;
    lo = hint + 1;
    while (lo + step - 1 < n && !ends_after(lo + step - 1)) {
      lo += step;
      step *= 2;
    }
    hi = std::min(n, lo + step - 1);
  } else {
    // Gallop left.
    size_t step = 1;
    hi = hint;
    while (hi >= step && ends_after(hi - step)) {
      hi -= step;
      step *= 2;
    }
    lo = hi >= step ? hi - step + 1 : 0;
  }
  return std::upper_bound(
             intervals_.begin() + lo, intervals_.begin() + hi, t,
             [](int64_t v, const Interval& iv) { return v < iv.end; }) -
         intervals_.begin();
}

size_t IntervalSet::FirstStartingAtOrAfter(int64_t t, size_t from) const {
  const size_t n = intervals_.size();
  size_t lo = from;
  size_t step = 1;
  while (lo + step - 1 < n && intervals_[lo + step - 1].start < t) {
    lo += step;
    step *= 2;
  }
  const size_t hi = std::min(n, lo + step - 1);
  return std::lower_bound(
             intervals_.begin() + lo, intervals_.begin() + hi, t,
             [](const Interval& iv, int64_t v) { return iv.start < v; }) -
         intervals_.begin();
}

int64_t IntervalSet::CoveredFrom(int64_t a, int64_t b, size_t first) const {
  // One past the last interval starting before b.
  const size_t last = FirstStartingAtOrAfter(b, first);
  if (first >= last) return 0;
  int64_t covered = prefix_[last - 1] - (first > 0 ? prefix_[first - 1] : 0);
  if (intervals_[first].start < a) covered -= a - intervals_[first].start;
  if (intervals_[last - 1].end > b) covered -= intervals_[last - 1].end - b;
  return covered;
}

int64_t IntervalSet::CoveredLength(int64_t a, int64_t b) const {
  if (b <= a || intervals_.empty()) return 0;
  return CoveredFrom(a, b, FirstEndingAfter(a));
}

int64_t IntervalSet::CoveredLength(int64_t a, int64_t b, size_t* cursor) const {
  if (b <= a || intervals_.empty()) return 0;
  const size_t first = FirstEndingAfter(a, *cursor);
  *cursor = first;
  return CoveredFrom(a, b, first);
}

}  // namespace bubblewatch
