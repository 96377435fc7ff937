// Rank timelines (analysis/rank_timeline.h): built from the sets the rank's
// figures are measured on, their totals per state are those figures, to the
// nanosecond before compaction; compaction keeps the length and counts
// what changed state; the stored form is on the reference clock in us.
#include "analysis/rank_timeline.h"

#include <array>
#include <cstdint>
#include <numeric>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "analysis/collective_windows.h"
#include "analysis/collectives.h"
#include "gtest/gtest.h"
#include "ingest/synthetic/synthetic_straggler.h"
#include "tests/analysis/trace_builder.h"

namespace bubblewatch {
namespace {

using ::bubblewatch::testing::TraceBuilder;

constexpr uint8_t kCompute = static_cast<uint8_t>(TimelineState::kCompute);
constexpr uint8_t kWait = static_cast<uint8_t>(TimelineState::kWait);
constexpr uint8_t kTransfer = static_cast<uint8_t>(TimelineState::kTransfer);

// Total ns per state of `runs`.
std::array<int64_t, kTimelineStates> Totals(
    const std::vector<TimelineRun>& runs) {
  std::array<int64_t, kTimelineStates> t{};
  for (const TimelineRun& r : runs) t[r.state] += r.end_ns - r.start_ns;
  return t;
}

CollectiveAnalysis Analyze(const std::vector<RankInput>& inputs) {
  CollectiveOptions options;
  options.keep_rank_time = true;
  absl::StatusOr<CollectiveAnalysis> c = AnalyzeCollectives(inputs, options);
  EXPECT_TRUE(c.ok()) << c.status();
  return c.ok() ? *std::move(c) : CollectiveAnalysis{};
}

TEST(RankTimeline, TwoRanksShowTheWaitForTheLateOne) {
  // Rank 0 computes 100 us and enters the all-reduce at 100; rank 1
  // computes until 200 and enters then; both end at 300 (one clock).
  std::vector<Trace> traces;
  for (int rank = 0; rank < 2; ++rank) {
    TraceBuilder b;
    for (int step = 0; step < 3; ++step) {
      const double t = step * 1000.0;
      b.Kernel("gemm", t, t + 100 + 100 * rank);
      b.Collective("AllReduce_Sum_f32", t + 100 + 100 * rank, t + 300, "pg",
                   step);
    }
    traces.push_back(b.Build());
  }
  std::vector<RankInput> inputs;
  for (int rank = 0; rank < 2; ++rank) {
    inputs.push_back({.trace = &traces[rank],
                      .device = 0,
                      .rank = rank,
                      .clock_domain = "host"});
  }
  const CollectiveAnalysis c = Analyze(inputs);
  ASSERT_EQ(c.ranks.size(), 2u);
  absl::StatusOr<std::vector<std::vector<TimelineRun>>> runs =
      RankTimelineRuns(c);
  ASSERT_TRUE(runs.ok()) << runs.status();
  ASSERT_EQ(runs->size(), 2u);
  // Rank 0, first step: compute, then the wait for rank 1, then transfer.
  const std::vector<TimelineRun>& r0 = (*runs)[0];
  ASSERT_GE(r0.size(), 4u);
  EXPECT_EQ(r0[0].state, kCompute);
  EXPECT_EQ(r0[0].end_ns - r0[0].start_ns, 100'000);
  EXPECT_EQ(r0[1].state, kWait);
  EXPECT_EQ(r0[1].end_ns - r0[1].start_ns, 100'000);
  EXPECT_EQ(r0[2].state, kTransfer);
  EXPECT_EQ(r0[2].end_ns - r0[2].start_ns, 100'000);
  // Then a bubble of 700 us until the next step.
  EXPECT_GE(r0[3].state, static_cast<uint8_t>(TimelineState::kBubble));
  EXPECT_EQ(r0[3].end_ns - r0[3].start_ns, 700'000);
  // Rank 1 waits for no one.
  EXPECT_EQ(Totals((*runs)[1])[kWait], 0);
  EXPECT_EQ(Totals(r0)[kWait], c.ranks[0].comm_wait_ns);
  EXPECT_GT(c.ranks[0].comm_wait_ns, 0);
}

// Every rank's run covers its span without holes, and its totals per state
// are its figures, exactly.
void ExpectRunsAreTheFigures(
    const CollectiveAnalysis& c,
    const std::vector<std::vector<TimelineRun>>& runs) {
  ASSERT_EQ(runs.size(), c.ranks.size());
  for (size_t i = 0; i < runs.size(); ++i) {
    const RankCollectiveStats& r = c.ranks[i];
    SCOPED_TRACE(absl::StrCat("rank ", r.rank));
    const std::vector<TimelineRun>& run = runs[i];
    ASSERT_FALSE(run.empty());
    for (size_t k = 1; k < run.size(); ++k) {
      EXPECT_EQ(run[k].start_ns, run[k - 1].end_ns);
      EXPECT_NE(run[k].state, run[k - 1].state);
    }
    EXPECT_EQ(run.back().end_ns - run.front().start_ns, r.stats.span_ns);
    const auto t = Totals(run);
    EXPECT_EQ(t[kWait], r.comm_wait_ns);
    EXPECT_EQ(t[kWait] + t[kTransfer], r.comm_exposed_ns);
    EXPECT_EQ(t[kCompute] + t[kWait] + t[kTransfer], r.stats.compute_ns);
    int64_t bubble = 0;
    for (BubbleCause cause : kAllBubbleCauses) {
      const int64_t ns = t[static_cast<int>(BubbleState(cause))];
      EXPECT_EQ(ns, r.stats.attribution[static_cast<int>(cause)])
          << BubbleCauseName(cause);
      bubble += ns;
    }
    EXPECT_EQ(bubble, r.stats.bubble_ns);
    EXPECT_EQ(t[static_cast<int>(TimelineState::kUnobserved)], 0);
  }
}

class PlantedTimeline : public ::testing::TestWithParam<StragglerCause> {};

TEST_P(PlantedTimeline, TotalsAreTheRanksFigures) {
  StragglerJobOptions options;
  options.ranks = 8;
  options.ranks_per_host = 2;
  options.steps = 12;
  options.late_rank = 5;
  options.cause = GetParam();
  options.host_skew_ns = {0, 5'000'000, -5'000'000, 1'234'567};
  StragglerJob job = MakeStragglerJob(options);
  std::vector<RankInput> inputs;
  for (int r = 0; r < options.ranks; ++r) {
    inputs.push_back({.trace = &job.ranks[r],
                      .device = r % options.ranks_per_host,
                      .rank = r,
                      .clock_domain = job.ranks[r].host,
                      .host = job.ranks[r].host});
  }
  const CollectiveAnalysis c = Analyze(inputs);
  ASSERT_FALSE(c.stragglers.empty());
  EXPECT_EQ(c.stragglers[0].rank, options.late_rank);
  absl::StatusOr<std::vector<std::vector<TimelineRun>>> runs =
      RankTimelineRuns(c);
  ASSERT_TRUE(runs.ok()) << runs.status();
  ExpectRunsAreTheFigures(c, *runs);
  // The late rank waits least; another rank waits for it every step.
  const auto late = Totals((*runs)[options.late_rank]);
  const auto other = Totals((*runs)[0]);
  EXPECT_LT(late[kWait], other[kWait]);
  EXPECT_GE(other[kWait], options.steps * options.delay_ns / 2);

  // Stored: at most 64 segments of >= 1 us, on the reference clock; their
  // totals are the figures within what merging changed plus 1 us per
  // segment.
  const int64_t window_start = options.start_time_ns;
  for (size_t i = 0; i < runs->size(); ++i) {
    SCOPED_TRACE(absl::StrCat("rank ", i));
    const RankTimeline stored =
        StoredTimeline((*runs)[i], window_start, c.ranks[i].clock_offset_ns);
    ASSERT_FALSE(stored.segments.empty());
    EXPECT_LE(stored.segments.size(),
              static_cast<size_t>(kMaxTimelineSegments));
    std::array<int64_t, kTimelineStates> us{};
    std::array<int64_t, kTimelineStates> count{};
    int64_t total_us = 0;
    for (const TimelineSegment& s : stored.segments) {
      EXPECT_GE(s.us, 1u);
      us[s.state] += s.us;
      ++count[s.state];
      total_us += s.us;
    }
    const auto exact = Totals((*runs)[i]);
    for (int s = 0; s < kTimelineStates; ++s) {
      EXPECT_LE(std::abs(us[s] * 1000 - exact[s]),
                int64_t{stored.merged_us} * 1000 + count[s] * 1000 + 1000)
          << TimelineStateName(s);
    }
    EXPECT_NEAR(total_us * 1000.0, c.ranks[i].stats.span_ns, 1000.0);
    // What the picture shows as another state is a sliver of the span: a
    // greedy merge down to 64 segments once showed 46 % of a real window's
    // time as compute, its waits gone.
    EXPECT_LT(int64_t{stored.merged_us} * 1000, c.ranks[i].stats.span_ns / 20)
        << "bin_us " << stored.bin_us;
    // The start: the first kernel, less the clock offset, in us.
    const int64_t first = (*runs)[i].front().start_ns;
    EXPECT_NEAR(stored.start_us,
                (first - c.ranks[i].clock_offset_ns - window_start) / 1000.0,
                1.0);
  }
}

INSTANTIATE_TEST_SUITE_P(Causes, PlantedTimeline,
                         ::testing::Values(StragglerCause::kDataLoading,
                                           StragglerCause::kHostSync,
                                           StragglerCause::kCompute),
                         [](const auto& info) {
                           return std::string(StragglerCauseName(info.param));
                         });

TEST(RankTimeline, CompactionKeepsTheLengthAndCountsWhatChanged) {
  // 301 runs alternating compute 50 ns .. and bubbles of growing length.
  std::vector<TimelineRun> runs;
  int64_t t = 0;
  for (int i = 0; i < 301; ++i) {
    const int64_t len = i % 2 == 0 ? 5'000 + 10 * i : 200 + 37 * i;
    runs.push_back(
        {static_cast<uint8_t>(i % 2 == 0 ? kCompute : 3 + i % 8), t, t + len});
    t += len;
  }
  const auto before = Totals(runs);
  int64_t merged = 0;
  const std::vector<TimelineRun> out =
      CompactTimeline(runs, kMaxTimelineSegments, 1000, &merged);
  ASSERT_LE(out.size(), static_cast<size_t>(kMaxTimelineSegments));
  ASSERT_GE(out.size(), 2u);
  EXPECT_EQ(out.front().start_ns, 0);
  EXPECT_EQ(out.back().end_ns, t);
  for (size_t k = 1; k < out.size(); ++k) {
    EXPECT_EQ(out[k].start_ns, out[k - 1].end_ns);
    EXPECT_NE(out[k].state, out[k - 1].state);
    EXPECT_GE(out[k].end_ns - out[k].start_ns, 1000);
  }
  // Each state's total moved by at most what was merged, and the moves add
  // up to twice it at most (taken from one state, given to another).
  const auto after = Totals(out);
  int64_t moved = 0;
  for (int s = 0; s < kTimelineStates; ++s) {
    EXPECT_LE(std::abs(after[s] - before[s]), merged) << s;
    moved += std::abs(after[s] - before[s]);
  }
  EXPECT_GT(merged, 0);
  EXPECT_LE(moved, 2 * merged);
  // Already compact: nothing changes.
  int64_t none = -1;
  EXPECT_EQ(CompactTimeline(out, kMaxTimelineSegments, 1000, &none).size(),
            out.size());
  EXPECT_EQ(none, 0);
}

TEST(RankTimeline, BinsKeepEachStatesTimeAndItsOrderInTheBin) {
  // 400 steps of compute 20 us, wait 7 us, transfer 3 us, host_sync 2 us
  // and, every 4th step, data_loading 1 us: far more than 64 segments.
  std::vector<TimelineRun> runs;
  int64_t t = 0;
  const uint8_t host_sync =
      static_cast<uint8_t>(BubbleState(BubbleCause::kHostSync));
  const uint8_t loading =
      static_cast<uint8_t>(BubbleState(BubbleCause::kDataLoading));
  for (int step = 0; step < 400; ++step) {
    for (auto [state, ns] :
         std::vector<std::pair<uint8_t, int64_t>>{{kCompute, 20'000},
                                                  {kWait, 7'000},
                                                  {kTransfer, 3'000},
                                                  {host_sync, 2'000}}) {
      runs.push_back({state, t, t + ns});
      t += ns;
    }
    if (step % 4 == 3) {
      runs.push_back({loading, t, t + 1'000});
      t += 1'000;
    }
  }
  const auto exact = Totals(runs);
  int64_t bin_ns = 0, merged = 0;
  const std::vector<TimelineRun> bins =
      BinTimeline(runs, kTimelineBins, kStatesPerBin, &bin_ns, &merged);
  EXPECT_EQ(bin_ns, (t + kTimelineBins - 1) / kTimelineBins);
  EXPECT_LE(bins.size(), static_cast<size_t>(kMaxTimelineSegments));
  EXPECT_EQ(bins.front().start_ns, 0);
  EXPECT_EQ(bins.back().end_ns, t);
  // Five states, four per bin: data_loading (the smallest) counts as
  // compute (the largest), and nothing else moves.
  const auto binned = Totals(bins);
  EXPECT_EQ(merged, exact[loading]);
  EXPECT_EQ(binned[loading], 0);
  EXPECT_EQ(binned[kCompute], exact[kCompute] + exact[loading]);
  EXPECT_EQ(binned[kWait], exact[kWait]);
  EXPECT_EQ(binned[kTransfer], exact[kTransfer]);
  EXPECT_EQ(binned[host_sync], exact[host_sync]);
  // In each bin the states come in the order they first occur in it.
  EXPECT_EQ(bins[0].state, kCompute);
  EXPECT_EQ(bins[1].state, kWait);
  EXPECT_EQ(bins[2].state, kTransfer);
  EXPECT_EQ(bins[3].state, host_sync);

  // Stored: binned, as many as 4 segments a bin, the same totals in us.
  const RankTimeline stored = StoredTimeline(runs, 0, 0);
  EXPECT_EQ(stored.bin_us, static_cast<uint32_t>((bin_ns + 500) / 1000));
  EXPECT_GT(stored.bin_us, 0u);
  EXPECT_LE(stored.segments.size(), static_cast<size_t>(kMaxTimelineSegments));
  EXPECT_EQ(stored.merged_us, static_cast<uint32_t>((merged + 999) / 1000));
  std::array<int64_t, kTimelineStates> us{};
  for (const TimelineSegment& seg : stored.segments) us[seg.state] += seg.us;
  const int64_t slack = static_cast<int64_t>(stored.segments.size());
  EXPECT_NEAR(us[kWait], exact[kWait] / 1000, slack);
  EXPECT_NEAR(us[kTransfer], exact[kTransfer] / 1000, slack);
  EXPECT_NEAR(us[kCompute], (exact[kCompute] + exact[loading]) / 1000, slack);

  // Few enough segments: exact, no bins.
  const std::vector<TimelineRun> few(runs.begin(), runs.begin() + 12);
  const RankTimeline exact_stored = StoredTimeline(few, 0, 0);
  EXPECT_EQ(exact_stored.bin_us, 0u);
  EXPECT_EQ(exact_stored.segments.size(), 12u);
  EXPECT_EQ(exact_stored.merged_us, 0u);
}

TEST(RankTimeline, StoredBoundariesRoundDownWithoutDrift) {
  // Three runs of 1.6 us each, from 0.5 us after the window's start, on a
  // clock 2 us ahead: boundaries at -1.5, 0.1, 1.7, 3.3 us.
  const std::vector<TimelineRun> runs = {
      {kCompute, 500, 2'100}, {kWait, 2'100, 3'700}, {kTransfer, 3'700, 5'300}};
  const RankTimeline t = StoredTimeline(runs, 0, 2'000);
  EXPECT_EQ(t.start_us, -2);
  ASSERT_EQ(t.segments.size(), 3u);
  EXPECT_EQ(t.segments[0].us, 2u);  // -2 .. 0
  EXPECT_EQ(t.segments[1].us, 1u);  // 0 .. 1
  EXPECT_EQ(t.segments[2].us, 2u);  // 1 .. 3
  EXPECT_EQ(t.merged_us, 0u);
}

}  // namespace
}  // namespace bubblewatch
