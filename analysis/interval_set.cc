#include "analysis/interval_set.h"

#include <algorithm>

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

int64_t IntervalSet::CoveredLength(int64_t a, int64_t b) const {
  if (b <= a || intervals_.empty()) return 0;
  size_t first = FirstEndingAfter(a);
  // One past the last interval starting before b.
  size_t last =
      std::lower_bound(
          intervals_.begin() + first, intervals_.end(), b,
          [](const Interval& iv, int64_t v) { return iv.start < v; }) -
      intervals_.begin();
  if (first >= last) return 0;
  int64_t covered = prefix_[last - 1] - (first > 0 ? prefix_[first - 1] : 0);
  if (intervals_[first].start < a) covered -= a - intervals_[first].start;
  if (intervals_[last - 1].end > b) covered -= intervals_[last - 1].end - b;
  return covered;
}

}  // namespace bubblewatch
