#include "analysis/interval_set.h"

#include <algorithm>
#include <random>
#include <vector>

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

TEST(IntervalSet, UnionWithAListMatchesTheUnionOfTwoSets) {
  std::mt19937_64 rng(3);
  std::uniform_int_distribution<int64_t> at(0, 1000), len(-5, 40);
  for (int round = 0; round < 200; ++round) {
    std::vector<Interval> xs, ys;
    for (int i = 0; i < 30; ++i) {
      int64_t s = at(rng);
      xs.push_back({s, s + len(rng)});
    }
    for (int i = 0; i < round % 50; ++i) {
      int64_t s = at(rng);
      ys.push_back({s, s + len(rng)});
    }
    // Sorted lists (the analyzer's usual case) and unsorted ones.
    if (round % 2 == 0) {
      std::sort(ys.begin(), ys.end(), [](const Interval& a, const Interval& b) {
        return a.start < b.start;
      });
    }
    IntervalSet a = IntervalSet::FromIntervals(xs);
    IntervalSet want = IntervalSet::Union(a, IntervalSet::FromIntervals(ys));
    IntervalSet got = IntervalSet::Union(a, ys);
    ASSERT_EQ(got.size(), want.size()) << "round " << round;
    for (size_t i = 0; i < want.size(); ++i) {
      EXPECT_EQ(got.intervals()[i].start, want.intervals()[i].start);
      EXPECT_EQ(got.intervals()[i].end, want.intervals()[i].end);
    }
    EXPECT_EQ(got.TotalLength(), want.TotalLength());
    EXPECT_EQ(got.CoveredLength(100, 700), want.CoveredLength(100, 700));
  }
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

TEST(IntervalSet, CoveredLengthWithACursorAgreesWhereverTheCursorIs) {
  std::mt19937_64 rng(5);
  for (int round = 0; round < 200; ++round) {
    std::vector<Interval> xs;
    const int n = static_cast<int>(rng() % 60);
    for (int i = 0; i < n; ++i) {
      int64_t a = static_cast<int64_t>(rng() % 1000);
      xs.push_back({a, a + static_cast<int64_t>(rng() % 40)});
    }
    IntervalSet set = IntervalSet::FromIntervals(xs);
    size_t cursor = static_cast<size_t>(rng() % 80);  // Even past the end.
    for (int q = 0; q < 50; ++q) {
      int64_t a = static_cast<int64_t>(rng() % 1100) - 50;
      int64_t b = a + static_cast<int64_t>(rng() % 300) - 20;
      EXPECT_EQ(set.CoveredLength(a, b, &cursor), set.CoveredLength(a, b))
          << "round " << round << " [" << a << ", " << b << ")";
    }
  }
}

// The union by a plain sort and merge: what FromIntervals must give
// whatever the input's order.
std::vector<Interval> ReferenceUnion(std::vector<Interval> v) {
  std::sort(v.begin(), v.end(), [](const Interval& a, const Interval& b) {
    return a.start < b.start;
  });
  std::vector<Interval> out;
  for (const Interval& iv : v) {
    if (iv.end <= iv.start) continue;
    if (!out.empty() && iv.start <= out.back().end) {
      out.back().end = std::max(out.back().end, iv.end);
    } else {
      out.push_back(iv);
    }
  }
  return out;
}

// Sorted, nearly sorted (events listed as they end: an enclosing one after
// what it encloses), a few far out of place, and shuffled inputs.
TEST(IntervalSet, FromIntervalsIsTheUnionWhateverTheOrder) {
  std::mt19937_64 rng(7);
  for (int round = 0; round < 200; ++round) {
    const int n = 1 + static_cast<int>(rng() % 400);
    std::vector<Interval> v;
    int64_t t = 0;
    for (int i = 0; i < n; ++i) {
      t += static_cast<int64_t>(rng() % 50);
      v.push_back({t, t + static_cast<int64_t>(rng() % 80)});
    }
    switch (round % 4) {
      case 0:
        break;  // By start.
      case 1:   // By end.
        std::stable_sort(
            v.begin(), v.end(),
            [](const Interval& a, const Interval& b) { return a.end < b.end; });
        break;
      case 2:  // A few swapped far apart.
        for (int k = 0; k < 3; ++k) {
          std::swap(v[rng() % v.size()], v[rng() % v.size()]);
        }
        break;
      case 3:
        std::shuffle(v.begin(), v.end(), rng);
        break;
    }
    const std::vector<Interval> want = ReferenceUnion(v);
    const IntervalSet got = IntervalSet::FromIntervals(v);
    ASSERT_EQ(got.intervals().size(), want.size()) << "round " << round;
    for (size_t i = 0; i < want.size(); ++i) {
      EXPECT_EQ(got.intervals()[i].start, want[i].start) << round << " " << i;
      EXPECT_EQ(got.intervals()[i].end, want[i].end) << round << " " << i;
    }
  }
}

TEST(IntervalSet, FromMergedKeepsAUnionAsItIs) {
  std::mt19937_64 rng(7);
  for (int round = 0; round < 100; ++round) {
    std::vector<Interval> xs;
    const int n = static_cast<int>(rng() % 40);
    for (int i = 0; i < n; ++i) {
      int64_t a = static_cast<int64_t>(rng() % 1000);
      xs.push_back({a, a + static_cast<int64_t>(rng() % 40)});
    }
    const IntervalSet from_any = IntervalSet::FromIntervals(xs);
    const IntervalSet merged = IntervalSet::FromMerged(from_any.intervals());
    ASSERT_EQ(merged.size(), from_any.size());
    EXPECT_EQ(merged.TotalLength(), from_any.TotalLength());
    for (int q = 0; q < 20; ++q) {
      int64_t a = static_cast<int64_t>(rng() % 1100) - 50;
      int64_t b = a + static_cast<int64_t>(rng() % 300);
      EXPECT_EQ(merged.CoveredLength(a, b), from_any.CoveredLength(a, b));
    }
  }
}

}  // namespace
}  // namespace bubblewatch
