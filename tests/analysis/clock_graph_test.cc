// ClockGraph (docs/semantics.md#clocks): offsets through chains of domains,
// exact for constant offsets, linear drift followed, outliers rejected,
// disconnected domains reported.
#include "analysis/clock_graph.h"

#include <cstdint>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "tests/testing/units.h"

namespace bubblewatch {
namespace {

using testing::kMs;
using testing::kS;
using testing::kUs;

// A domain's true clock: local = true + offset_ns + drift_ns_per_s × true/1 s.
struct TrueClock {
  int64_t offset_ns = 0;
  double drift_ns_per_s = 0;
  int64_t Local(int64_t true_ns) const {
    return true_ns + offset_ns +
           static_cast<int64_t>(drift_ns_per_s * static_cast<double>(true_ns) /
                                kS);
  }
};

// Adds an instance ending at `true_ns` on `domains` (the first is the
// anchor), each end shifted by `jitter` ns at most.
void AddEnding(ClockGraph& g, const std::vector<TrueClock>& clocks,
               const std::vector<int>& domains, int64_t true_ns,
               std::mt19937_64* rng = nullptr, int64_t jitter = 0) {
  std::vector<DomainEnd> ends;
  for (int d : domains) {
    int64_t e = clocks[d].Local(true_ns);
    if (rng != nullptr && jitter > 0) {
      e += std::uniform_int_distribution<int64_t>(-jitter, jitter)(*rng);
    }
    ends.push_back({d, e});
  }
  g.AddInstance(ends);
}

TEST(ClockGraph, ChainWithoutASharedInstanceIsSolvedExactly) {
  // 0–1 and 1–2 share instances; 0 and 2 never do.
  const std::vector<TrueClock> clocks = {{0}, {2 * kMs}, {-3 * kMs}};
  ClockGraph g(3, 0);
  for (int i = 0; i < 20; ++i) {
    AddEnding(g, clocks, {0, 1}, (10 + i) * kMs);
    AddEnding(g, clocks, {1, 2}, (10 + i) * kMs + 300 * kUs);
  }
  const ClockSolution s = g.Solve();
  ASSERT_EQ(s.domains.size(), 3u);
  for (int d = 0; d < 3; ++d) {
    EXPECT_TRUE(s.domains[d].connected) << d;
    EXPECT_EQ(s.domains[d].offset_ns, clocks[d].offset_ns) << d;
    EXPECT_EQ(s.domains[d].drift_ns_per_s, 0.0) << d;
    EXPECT_EQ(s.domains[d].residual_ns, 0) << d;
  }
  EXPECT_EQ(s.domains[0].instances, 20);
  EXPECT_EQ(s.domains[1].instances, 40);
  EXPECT_EQ(s.domains[2].instances, 20);
  EXPECT_EQ(s.outliers, 0);
  EXPECT_EQ(s.ToReference(2, clocks[2].Local(15 * kMs)), 15 * kMs);
}

TEST(ClockGraph, ConstantOffsetsAreExactOverALongTrace) {
  // A long trace (drift is fitted, and must come out 0) with instances over
  // random subsets of 6 domains.
  std::mt19937_64 rng(5);
  std::vector<TrueClock> clocks = {{0},       {1234567}, {-7654321},
                                   {5 * kMs}, {-1},      {999}};
  ClockGraph g(6, 0);
  for (int i = 0; i < 400; ++i) {
    std::vector<int> domains;
    for (int d = 0; d < 6; ++d) {
      if (rng() % 2 == 0) domains.push_back(d);
    }
    AddEnding(g, clocks, domains, i * 5 * kS + 17);
  }
  const ClockSolution s = g.Solve();
  for (int d = 0; d < 6; ++d) {
    EXPECT_TRUE(s.domains[d].connected) << d;
    EXPECT_EQ(s.domains[d].offset_ns, clocks[d].offset_ns) << d;
    EXPECT_EQ(s.OffsetAt(d, clocks[d].Local(1000 * kS)), clocks[d].offset_ns)
        << d;
    EXPECT_EQ(s.domains[d].residual_ns, 0) << d;
  }
  EXPECT_EQ(s.outliers, 0);
}

TEST(ClockGraph, LinearDriftIsRecoveredWithin1Us) {
  // 35 minutes; host clocks drift 1.5 ms apart over it, ends jitter by
  // ±10 us. Hosts 2 and 3 share no instance with the reference.
  std::mt19937_64 rng(9);
  const int64_t kLength = 35 * 60 * kS;
  const std::vector<TrueClock> clocks = {
      {0}, {-840 * kUs, 730}, {2 * kMs, -400}, {-5 * kMs, 1100}};
  ClockGraph g(4, 0);
  for (int64_t t = 0; t < kLength; t += 700 * kMs) {
    AddEnding(g, clocks, {0, 1}, t, &rng, 10 * kUs);
    AddEnding(g, clocks, {1, 2, 3}, t + 100 * kMs, &rng, 10 * kUs);
  }
  const ClockSolution s = g.Solve();
  for (int d = 0; d < 4; ++d) {
    ASSERT_TRUE(s.domains[d].connected) << d;
    for (int64_t t = 0; t <= kLength; t += kLength / 7) {
      const int64_t local = clocks[d].Local(t);
      EXPECT_NEAR(s.ToReference(d, local), t, 1 * kUs) << d << " at " << t;
      EXPECT_NEAR(s.FromReference(d, t), local, 1 * kUs) << d;
    }
    EXPECT_NEAR(s.domains[d].drift_ns_per_s, clocks[d].drift_ns_per_s, 1.0);
    // Uniform ±10 us jitter on both ends: about 8 us RMS.
    if (d != 0) {
      EXPECT_LT(s.domains[d].residual_ns, 12 * kUs) << d;
    }
  }
  EXPECT_EQ(s.outliers, 0);
}

TEST(ClockGraph, OutlierEdgesDoNotPullTheSolution) {
  const std::vector<TrueClock> clocks = {{0}, {3 * kMs}, {-2 * kMs}};
  ClockGraph g(3, 0);
  for (int i = 0; i < 20; ++i) AddEnding(g, clocks, {0, 1, 2}, i * kMs);
  // Ends that did not coincide: 400 us late on 1, a wrong match 10 s off
  // on 2, 70 us early on 1.
  g.AddInstance(
      std::vector<DomainEnd>{{0, 50 * kMs}, {1, 53 * kMs + 400 * kUs}});
  g.AddInstance(std::vector<DomainEnd>{{0, 60 * kMs}, {2, 10 * kS}});
  g.AddInstance(
      std::vector<DomainEnd>{{1, 73 * kMs}, {0, 70 * kMs + 70 * kUs}});
  const ClockSolution s = g.Solve();
  for (int d = 0; d < 3; ++d) {
    EXPECT_EQ(s.domains[d].offset_ns, clocks[d].offset_ns) << d;
    EXPECT_EQ(s.domains[d].residual_ns, 0) << d;
  }
  EXPECT_EQ(s.outliers, 3);
  EXPECT_EQ(s.domains[1].instances, 20);
}

TEST(ClockGraph, MostEdgesWrongStillLeaveTheRightOnesTheSolution) {
  // 4 instances ended together; 6 wrong matches milliseconds to seconds off.
  const std::vector<TrueClock> clocks = {{0}, {2 * kMs}};
  ClockGraph g(2, 0);
  for (int i = 0; i < 4; ++i) AddEnding(g, clocks, {0, 1}, i * 10 * kMs);
  for (int64_t off :
       {3 * kMs, -7 * kMs, 40 * kMs, 900 * kMs, -2 * kS, 5 * kS}) {
    g.AddInstance(std::vector<DomainEnd>{{0, kS}, {1, kS + 2 * kMs + off}});
  }
  const ClockSolution s = g.Solve();
  EXPECT_TRUE(s.domains[1].connected);
  EXPECT_EQ(s.domains[1].offset_ns, 2 * kMs);
  EXPECT_EQ(s.domains[1].instances, 4);
  EXPECT_EQ(s.outliers, 6);
  // With no 3 of them agreeing, no clock: the wrong ones would set it.
  ClockGraph few(2, 0);
  for (int i = 0; i < 2; ++i) AddEnding(few, clocks, {0, 1}, i * 10 * kMs);
  for (int64_t off : {3 * kMs, -7 * kMs, 40 * kMs, 900 * kMs}) {
    few.AddInstance(std::vector<DomainEnd>{{0, kS}, {1, kS + off}});
  }
  EXPECT_FALSE(few.Solve().domains[1].connected);
}

TEST(ClockGraph, DisconnectedDomainsAreReportedAndNotCorrected) {
  // 3 shares two instances with 0 (fewer than 3: no link); 4 and 5 share
  // many with each other but none with 0..3.
  const std::vector<TrueClock> clocks = {{0},       {1 * kMs}, {0},
                                         {2 * kMs}, {4 * kMs}, {6 * kMs}};
  ClockGraph g(6, 0);
  for (int i = 0; i < 10; ++i) {
    AddEnding(g, clocks, {0, 1}, i * kMs);
    AddEnding(g, clocks, {4, 5}, i * kMs);
  }
  AddEnding(g, clocks, {0, 3}, 20 * kMs);
  AddEnding(g, clocks, {3, 0}, 21 * kMs);
  const ClockSolution s = g.Solve();
  EXPECT_TRUE(s.domains[0].connected);
  EXPECT_TRUE(s.domains[1].connected);
  EXPECT_EQ(s.domains[1].offset_ns, 1 * kMs);
  for (int d : {2, 3, 4, 5}) {
    EXPECT_FALSE(s.domains[d].connected) << d;
    EXPECT_EQ(s.domains[d].offset_ns, 0) << d;
    EXPECT_EQ(s.domains[d].instances, 0) << d;
    EXPECT_EQ(s.OffsetAt(d, 123 * kMs), 0) << d;
  }
  // With 2 instances enough, 3 is linked.
  ClockGraphOptions two;
  two.min_link_instances = 2;
  const ClockSolution s2 = g.Solve(two);
  EXPECT_TRUE(s2.domains[3].connected);
  EXPECT_EQ(s2.domains[3].offset_ns, 2 * kMs);
}

TEST(ClockGraph, NoEdgesLeaveOnlyTheReference) {
  ClockGraph g(2, 1);
  g.AddInstance(std::vector<DomainEnd>{{0, 5}});
  const ClockSolution s = g.Solve();
  EXPECT_EQ(s.edges, 0);
  EXPECT_FALSE(s.domains[0].connected);
  EXPECT_TRUE(s.domains[1].connected);
}

}  // namespace
}  // namespace bubblewatch
