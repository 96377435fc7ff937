#include "processor/interval_set.h"

#include "gtest/gtest.h"

namespace bubblewatch {
namespace {

TEST(IntervalSet, MergesOverlapsAndDropsEmptyIntervals) {
  IntervalSet s = IntervalSet::FromIntervals(
      {{10, 20}, {0, 5}, {15, 30}, {40, 40}, {30, 35}});
  ASSERT_EQ(s.size(), 2u);
  EXPECT_EQ(s.intervals()[0].start, 0);
  EXPECT_EQ(s.intervals()[1].start, 10);
  EXPECT_EQ(s.intervals()[1].end, 35);
  EXPECT_EQ(s.TotalLength(), 30);
}

TEST(IntervalSet, CoveredLengthClipsToTheQuery) {
  IntervalSet s = IntervalSet::FromIntervals({{0, 10}, {20, 30}, {40, 50}});
  EXPECT_EQ(s.CoveredLength(5, 45), 5 + 10 + 5);
  EXPECT_EQ(s.CoveredLength(10, 20), 0);
  EXPECT_EQ(s.CoveredLength(22, 28), 6);
  EXPECT_EQ(s.CoveredLength(-100, 100), 30);
  EXPECT_EQ(s.CoveredLength(30, 30), 0);
  EXPECT_EQ(s.CoveredLength(50, 40), 0);
}

TEST(IntervalSet, UnionOfTwoSets) {
  IntervalSet a = IntervalSet::FromIntervals({{0, 10}, {20, 30}});
  IntervalSet b = IntervalSet::FromIntervals({{5, 25}, {40, 41}});
  IntervalSet u = IntervalSet::Union(a, b);
  ASSERT_EQ(u.size(), 2u);
  EXPECT_EQ(u.TotalLength(), 31);
}

TEST(IntervalSet, ForEachCoveredVisitsClippedPiecesInOrder) {
  IntervalSet s = IntervalSet::FromIntervals({{0, 10}, {20, 30}});
  std::vector<Interval> seen;
  s.ForEachCovered(5, 25, [&](int64_t a, int64_t b) {
    seen.push_back({a, b});
  });
  ASSERT_EQ(seen.size(), 2u);
  EXPECT_EQ(seen[0].start, 5);
  EXPECT_EQ(seen[0].end, 10);
  EXPECT_EQ(seen[1].start, 20);
  EXPECT_EQ(seen[1].end, 25);
}

}  // namespace
}  // namespace bubblewatch
