// IntervalSet: a sorted union of half-open [start, end) nanosecond intervals
// that answers "how much of [a, b) is covered" in O(log n).
//
// The analyzer builds one per device for copies and per CPU thread for each
// class of host activity; attribution then asks many such questions per
// bubble, so the set keeps prefix sums of its interval lengths.
#ifndef BUBBLEWATCH_ANALYSIS_INTERVAL_SET_H_
#define BUBBLEWATCH_ANALYSIS_INTERVAL_SET_H_

#include <cstddef>
#include <cstdint>
#include <vector>

namespace bubblewatch {

struct Interval {
  int64_t start;
  int64_t end;
};

class IntervalSet {
 public:
  IntervalSet() = default;

  // Builds the union of `intervals` (any order, overlaps allowed). Empty
  // intervals (end <= start) are dropped. O(n) when already sorted by start,
  // O(n log n) otherwise.
  static IntervalSet FromIntervals(std::vector<Interval> intervals);

  // The set of `merged`, which must already be a union: sorted by start,
  // each interval non-empty and ending before the next one starts (as
  // intervals() gives them). For a caller that merged while collecting, so
  // nothing is sorted or merged again. REQUIRES (checked in debug builds):
  // that order.
  static IntervalSet FromMerged(std::vector<Interval> merged);

  // The union of two sets, in linear time.
  static IntervalSet Union(const IntervalSet& a, const IntervalSet& b);

  // The union of a set and `intervals` (as FromIntervals takes them), built
  // in the memory of `intervals`: give it a capacity of at least
  // intervals.size() + a.size() and no other allocation happens. Linear when
  // `intervals` is sorted by start.
  static IntervalSet Union(const IntervalSet& a,
                           std::vector<Interval> intervals);

  // Length of the part of [a, b) covered by the set; 0 when b <= a.
  int64_t CoveredLength(int64_t a, int64_t b) const;
  // The same, searching from `*cursor` (any value; start with 0) outwards
  // instead of bisecting the whole set, and leaving it at this query's
  // place: O(log d) for a query d intervals away from the previous one,
  // which makes a sweep of queries in time order about linear.
  int64_t CoveredLength(int64_t a, int64_t b, size_t* cursor) const;

  // Calls fn(start, end) for each maximal piece of the set inside [a, b), in
  // order.
  template <typename Fn>
  void ForEachCovered(int64_t a, int64_t b, Fn&& fn) const {
    for (size_t i = FirstEndingAfter(a);
         i < intervals_.size() && intervals_[i].start < b; ++i) {
      int64_t s = intervals_[i].start < a ? a : intervals_[i].start;
      int64_t e = intervals_[i].end > b ? b : intervals_[i].end;
      if (s < e) fn(s, e);
    }
  }

  bool empty() const { return intervals_.empty(); }
  size_t size() const { return intervals_.size(); }
  const std::vector<Interval>& intervals() const { return intervals_; }
  // Total covered length.
  int64_t TotalLength() const { return prefix_.empty() ? 0 : prefix_.back(); }

 private:
  // Takes sorted, disjoint, non-empty, non-adjacent intervals.
  explicit IntervalSet(std::vector<Interval> merged);
  // FromIntervals for input already sorted by start.
  static IntervalSet FromSorted(std::vector<Interval> intervals);
  // Index of the first interval whose end is after `t`.
  size_t FirstEndingAfter(int64_t t) const;
  // The same, galloping from `hint`.
  size_t FirstEndingAfter(int64_t t, size_t hint) const;
  // Index of the first interval at or after `from` that starts at or after
  // `t`, galloping from `from`.
  size_t FirstStartingAtOrAfter(int64_t t, size_t from) const;
  // Covered length of [a, b) given the first interval ending after a.
  int64_t CoveredFrom(int64_t a, int64_t b, size_t first) const;

  std::vector<Interval> intervals_;
  // prefix_[i] = total length of intervals_[0..i]; same size as intervals_.
  std::vector<int64_t> prefix_;
};

}  // namespace bubblewatch

#endif  // BUBBLEWATCH_ANALYSIS_INTERVAL_SET_H_
