// The store queries on hand-written windows: the numbers of a job report
// (series, rolling utilization, summary, cause totals, top bubbles), the
// fleet orders, and reads through a read-only instance beside a writer.
#include "storage/window_queries.h"

#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/storage/query_test_windows.h"
#include "tests/testing/temp_dir.h"

namespace bubblewatch {
namespace {

using ::bubblewatch::query_test::AlphaCompute;
using ::bubblewatch::query_test::kSecond;
using ::bubblewatch::query_test::kT0;
using ::bubblewatch::query_test::kWindow;
using ::bubblewatch::query_test::MakeWindow;
using ::bubblewatch::query_test::WriteFleet;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

constexpr int kHostSync = static_cast<int>(BubbleCause::kHostSync);
constexpr int kLaunch = static_cast<int>(BubbleCause::kLaunchOverhead);

class WindowQueriesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto store = OpenRocksDbWindowStore(dir_.path());
    ASSERT_TRUE(store.ok()) << store.status();
    store_ = *std::move(store);
    ASSERT_TRUE(WriteFleet(*store_).ok());
  }

  // Sum of AlphaCompute over windows [first, last].
  static int64_t AlphaComputeSum(int64_t first, int64_t last) {
    int64_t sum = 0;
    for (int64_t i = first; i <= last; ++i) sum += AlphaCompute(i);
    return sum;
  }

  testing::TempDir dir_;
  std::unique_ptr<WindowStore> store_;
};

TEST_F(WindowQueriesTest, LastHourHolds360WindowsEndingAtTheLatest) {
  auto r = QueryJob(*store_, "alpha", JobPeriod::Last(absl::Hours(1)));
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(r->windows.size(), 360u);
  EXPECT_EQ(r->windows.front().start_ns, kT0 + 40 * kWindow);
  EXPECT_EQ(r->windows.back().start_ns, kT0 + 399 * kWindow);
  EXPECT_EQ(r->to_ns, kT0 + 400 * kWindow);
  EXPECT_EQ(r->anchor_ns, kT0 + 400 * kWindow);
  EXPECT_EQ(r->from_ns, kT0 + 40 * kWindow);
}

TEST_F(WindowQueriesTest, RollingUtilizationOverOneFiveAndSixtyMinutes) {
  auto r = QueryJob(*store_, "alpha", JobPeriod::Last(absl::Minutes(5)));
  ASSERT_TRUE(r.ok()) << r.status();
  // The 1 h figure reaches before the 5 min period: it reads its own windows.
  ASSERT_EQ(r->rolling.size(), 3u);
  const int64_t expect_windows[] = {6, 30, 360};
  for (int k = 0; k < 3; ++k) {
    const RollingUtilization& roll = r->rolling[k];
    EXPECT_EQ(roll.range, kRollingRanges[k]);
    const int64_t n = expect_windows[k];
    EXPECT_EQ(roll.stats.windows, n);
    EXPECT_EQ(roll.stats.span_ns, n * kWindow);
    EXPECT_EQ(roll.stats.compute_ns, AlphaComputeSum(400 - n, 399));
    EXPECT_DOUBLE_EQ(roll.stats.utilization(),
                     double(AlphaComputeSum(400 - n, 399)) / (n * kWindow));
  }
  // Windows 394..399 have utilization 50..100 %: mean 75 %.
  EXPECT_DOUBLE_EQ(r->rolling[0].stats.utilization(), 0.75);
  // Any 10 consecutive windows average 55 %.
  EXPECT_DOUBLE_EQ(r->rolling[1].stats.utilization(), 0.55);
  EXPECT_DOUBLE_EQ(r->rolling[2].stats.utilization(), 0.55);
  EXPECT_DOUBLE_EQ(r->rolling[2].stats.bubble_ratio(), 0.45);
}

TEST_F(WindowQueriesTest, SummaryHasMeanWorstAndCauseTotals) {
  auto r = QueryJob(*store_, "alpha", JobPeriod::Last(absl::Hours(1)));
  ASSERT_TRUE(r.ok()) << r.status();
  const PeriodStats& s = r->summary;
  EXPECT_EQ(s.windows, 360);
  EXPECT_EQ(s.span_ns, 3600 * kSecond);
  EXPECT_EQ(s.compute_ns, AlphaComputeSum(40, 399));
  EXPECT_EQ(s.bubble_ns, s.span_ns - s.compute_ns);
  EXPECT_DOUBLE_EQ(s.utilization(), 0.55);
  // Worst: 10 % in window 40 (the earliest of the 36 at 10 %).
  ASSERT_TRUE(r->worst_utilization.has_value());
  EXPECT_DOUBLE_EQ(*r->worst_utilization, 0.1);
  EXPECT_EQ(r->worst_window_start_ns, kT0 + 40 * kWindow);
  // 1 ms of launch overhead in each window with a bubble (324 of 360), the
  // rest host_sync; together they are the whole bubble.
  EXPECT_EQ(s.attribution[kLaunch], 324 * 1'000'000);
  EXPECT_EQ(s.attribution[kHostSync], s.bubble_ns - 324 * 1'000'000);
  EXPECT_EQ(AttributionTotal(s.attribution), s.bubble_ns);
  EXPECT_EQ(DominantCause(s.attribution), BubbleCause::kHostSync);
}

TEST_F(WindowQueriesTest, TopBubblesAreTheLongestOfThePeriodEarliestFirst) {
  auto r = QueryJob(*store_, "alpha", JobPeriod::Last(absl::Hours(1)), 3);
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(r->top_bubbles.size(), 3u);
  // 9 s bubbles in windows 40, 50, 60, ... (10 % utilization).
  for (int k = 0; k < 3; ++k) {
    const BubbleReport& b = r->top_bubbles[k];
    EXPECT_EQ(b.duration_ns(), 9 * kSecond);
    EXPECT_EQ(b.start_ns, kT0 + (40 + 10 * k) * kWindow + kSecond);
    ASSERT_TRUE(b.before.has_value());
    EXPECT_EQ(b.before->name, "gemm_" + std::to_string(40 + 10 * k));
    EXPECT_EQ(b.blamed, "cudaStreamSynchronize");
    EXPECT_EQ(b.cause, BubbleCause::kHostSync);
  }
}

TEST_F(WindowQueriesTest, FromToSelectsStartsInTheHalfOpenRange) {
  auto r =
      QueryJob(*store_, "alpha",
               JobPeriod::Between(kT0 + 100 * kWindow, kT0 + 110 * kWindow));
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(r->windows.size(), 10u);
  EXPECT_EQ(r->windows.front().start_ns, kT0 + 100 * kWindow);
  EXPECT_EQ(r->anchor_ns, kT0 + 110 * kWindow);
  EXPECT_DOUBLE_EQ(r->summary.utilization(), 0.55);
  // Rolling figures end at the period's last window and look back from
  // there, before `from` too: 1 h would be 360 windows, the job has 110.
  ASSERT_EQ(r->rolling.size(), 3u);
  EXPECT_EQ(r->rolling[0].stats.windows, 6);
  EXPECT_EQ(r->rolling[1].stats.windows, 30);
  EXPECT_EQ(r->rolling[2].stats.windows, 110);
}

TEST_F(WindowQueriesTest, KnownJobWithoutWindowsInThePeriodIsAnEmptyReport) {
  auto r =
      QueryJob(*store_, "beta",
               JobPeriod::Between(kT0 + 100 * kWindow, kT0 + 200 * kWindow));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(r->windows.empty());
  EXPECT_TRUE(r->rolling.empty());
  EXPECT_FALSE(r->worst_utilization.has_value());
  EXPECT_EQ(r->anchor_ns, 0);
}

TEST_F(WindowQueriesTest, UnknownJobIsNotFound) {
  auto r = QueryJob(*store_, "nope", JobPeriod::Last(absl::Hours(1)));
  EXPECT_TRUE(absl::IsNotFound(r.status())) << r.status();
  EXPECT_EQ(r.status().message(), "no windows for job nope");
  EXPECT_TRUE(absl::IsNotFound(QueryRolling(*store_, "nope").status()));
}

TEST_F(WindowQueriesTest, PeriodsAreBounded) {
  EXPECT_TRUE(absl::IsInvalidArgument(
      QueryJob(*store_, "alpha", JobPeriod::Last(absl::Hours(25))).status()));
  EXPECT_TRUE(absl::IsInvalidArgument(
      QueryJob(*store_, "alpha", JobPeriod::Between(kT0, kT0)).status()));
  EXPECT_TRUE(absl::IsInvalidArgument(
      QueryJob(*store_, "alpha",
               JobPeriod::Between(kT0, kT0 + 25 * 3600 * kSecond))
          .status()));
}

TEST_F(WindowQueriesTest, RangeShorterThanAWindowStillCoversTheLastWindow) {
  // 5-minute windows: the 1-minute figure is the last window.
  StoreBatch batch;
  for (int i = 0; i < 3; ++i) {
    WindowSummary w = MakeWindow("slow", i, (i + 1) * kSecond);
    w.window.start_ns = kT0 + i * 300 * kSecond;
    w.window.end_ns = w.window.start_ns + 300 * kSecond;
    w.window.job.span_ns = 300 * kSecond;
    batch.windows.push_back(w);
  }
  ASSERT_TRUE(store_->Commit(batch).ok());
  auto rolling = QueryRolling(*store_, "slow");
  ASSERT_TRUE(rolling.ok()) << rolling.status();
  ASSERT_EQ(rolling->size(), 3u);
  EXPECT_EQ((*rolling)[0].stats.windows, 1);
  EXPECT_EQ((*rolling)[0].stats.compute_ns, 3 * kSecond);
  EXPECT_EQ((*rolling)[1].stats.windows, 1);
  EXPECT_EQ((*rolling)[2].stats.windows, 3);
}

// The report's points come from undecoded windows (WindowSummaryView):
// every per-window field still reaches them, the late field included.
TEST_F(WindowQueriesTest, PointsCarryEveryPerWindowField) {
  StoreBatch batch;
  WindowSummary w = MakeWindow("skewed", 0, 3 * kSecond);
  w.gpu_events = 11;
  w.cpu_events = 12;
  w.late_events = 13;
  w.closed_by = WindowSummary::ClosedBy::kIdleTimeout;
  w.host_skew_ns = 178 * kSecond;
  batch.windows.push_back(w);
  ASSERT_TRUE(store_->Commit(batch).ok());
  auto r = QueryJob(*store_, "skewed", JobPeriod::Last(absl::Hours(1)));
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(r->windows.size(), 1u);
  const WindowPoint& p = r->windows[0];
  EXPECT_EQ(p.start_ns, w.window.start_ns);
  EXPECT_EQ(p.end_ns, w.window.end_ns);
  EXPECT_EQ(p.stats.compute_ns, 3 * kSecond);
  EXPECT_EQ(p.devices, 1);
  EXPECT_EQ(p.gpu_events, 11);
  EXPECT_EQ(p.cpu_events, 12);
  EXPECT_EQ(p.late_events, 13);
  EXPECT_EQ(p.closed_by, WindowSummary::ClosedBy::kIdleTimeout);
  EXPECT_EQ(p.host_skew_ns, 178 * kSecond);
}

std::vector<std::string> Jobs(const FleetReport& r) {
  std::vector<std::string> out;
  for (const FleetEntry& e : r.entries) out.push_back(e.job);
  return out;
}

TEST_F(WindowQueriesTest, FleetLatestRanksTheLatestWindowOfEveryJob) {
  auto by = ParseFleetOrder("bubble_ratio");
  ASSERT_TRUE(by.ok());
  auto r = QueryFleetLatest(*store_, *by, 20);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->jobs, 4);
  EXPECT_THAT(Jobs(*r), ElementsAre("beta", "gamma", "odd/job \"x\"", "alpha"));
  EXPECT_DOUBLE_EQ(r->entries[0].score, 0.8);
  EXPECT_EQ(r->entries[0].latest.start_ns, kT0 + 29 * kWindow);
  EXPECT_EQ(r->entries[3].latest.start_ns, kT0 + 399 * kWindow);
  EXPECT_EQ(r->entries[0].period.stats.windows, 1);
  // The fleet aggregate: 4 latest windows, compute 2 + 6 + 9 + 10 s.
  EXPECT_EQ(r->all.stats.windows, 4);
  EXPECT_EQ(r->all.stats.compute_ns, 27 * kSecond);
  EXPECT_DOUBLE_EQ(r->all.stats.utilization(), 27.0 / 40.0);
}

TEST_F(WindowQueriesTest, FleetLatestOrdersByBubbleTimeAndByCause) {
  StoreBatch batch;  // More GPU-time, lower ratio: 4 devices at 50 %.
  WindowSummary big = MakeWindow("big", 399, 20 * kSecond);
  big.window.job.span_ns = 40 * kSecond;
  big.window.job.bubble_ns = 20 * kSecond;
  big.window.job.attribution = {};
  big.window.job.attribution[kHostSync] = 20 * kSecond;
  batch.windows.push_back(big);
  ASSERT_TRUE(store_->Commit(batch).ok());

  auto ratio = QueryFleetLatest(*store_, *ParseFleetOrder("bubble_ratio"), 2);
  ASSERT_TRUE(ratio.ok());
  EXPECT_THAT(Jobs(*ratio), ElementsAre("beta", "big"));
  auto time = QueryFleetLatest(*store_, *ParseFleetOrder("bubble_time"), 2);
  ASSERT_TRUE(time.ok());
  EXPECT_THAT(Jobs(*time), ElementsAre("big", "beta"));
  EXPECT_DOUBLE_EQ(time->entries[0].score, 20.0 * kSecond);
  auto alloc =
      QueryFleetLatest(*store_, *ParseFleetOrder("cause:allocator"), 20);
  ASSERT_TRUE(alloc.ok());
  // odd/job has allocator time; the rest tie at 0 and go by bubble time.
  EXPECT_THAT(Jobs(*alloc),
              ElementsAre("odd/job \"x\"", "big", "beta", "gamma", "alpha"));
  auto launch =
      QueryFleetLatest(*store_, *ParseFleetOrder("cause:launch_overhead"), 20);
  ASSERT_TRUE(launch.ok());
  // beta 8 s; gamma and odd/job 1 ms each (tie: more bubble first); big and
  // alpha none.
  EXPECT_THAT(Jobs(*launch),
              ElementsAre("beta", "gamma", "odd/job \"x\"", "big", "alpha"));
}

// Bubble time of alpha's windows [first, last].
int64_t AlphaBubbleSum(int64_t first, int64_t last) {
  int64_t sum = 0;
  for (int64_t i = first; i <= last; ++i) sum += kWindow - AlphaCompute(i);
  return sum;
}

TEST_F(WindowQueriesTest, FleetRanksTheBubbleTimeOfTheLastHour) {
  auto r =
      QueryFleet(*store_, JobPeriod::Last(absl::Hours(1)), FleetOrder{}, 20);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->by.Name(), "bubble_time");
  // The fleet's newest window ends at window 400; beta stopped at window 30,
  // more than an hour before: it lost nothing in this hour.
  EXPECT_EQ(r->to_ns, kT0 + 400 * kWindow);
  EXPECT_EQ(r->from_ns, kT0 + 40 * kWindow);
  EXPECT_EQ(r->jobs, 3);
  EXPECT_THAT(Jobs(*r), ElementsAre("alpha", "gamma", "odd/job \"x\""));
  const FleetEntry& alpha = r->entries[0];
  EXPECT_EQ(alpha.period.stats.windows, 360);
  EXPECT_EQ(alpha.period.stats.bubble_ns, AlphaBubbleSum(40, 399));
  EXPECT_DOUBLE_EQ(alpha.score, static_cast<double>(AlphaBubbleSum(40, 399)));
  EXPECT_EQ(alpha.period.partial_windows, 0);
  EXPECT_DOUBLE_EQ(alpha.period.coverage(), 1.0);
  EXPECT_EQ(alpha.latest.start_ns, kT0 + 399 * kWindow);
  EXPECT_EQ(r->entries[1].period.stats.bubble_ns, 20 * 4 * kSecond);
  EXPECT_EQ(r->entries[2].period.stats.bubble_ns, 3 * 1 * kSecond);
  // What the fleet lost: every job's windows of the hour.
  EXPECT_EQ(r->all.stats.windows, 360 + 20 + 3);
  EXPECT_EQ(r->all.stats.bubble_ns,
            AlphaBubbleSum(40, 399) + 80 * kSecond + 3 * kSecond);
  EXPECT_EQ(AttributionTotal(r->all.stats.attribution), r->all.stats.bubble_ns);
  EXPECT_EQ(
      r->all.stats.attribution[static_cast<int>(BubbleCause::kDataLoading)],
      20 * (4 * kSecond - 1'000'000));
}

TEST_F(WindowQueriesTest, FleetFromToIsAnAbsolutePeriod) {
  auto r = QueryFleet(*store_, JobPeriod::Between(kT0, kT0 + 30 * kWindow),
                      FleetOrder{}, 20);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->from_ns, kT0);
  EXPECT_EQ(r->to_ns, kT0 + 30 * kWindow);
  // beta: 30 windows x 8 s; alpha: windows 0..29, 4.5 s on average.
  EXPECT_THAT(Jobs(*r), ElementsAre("beta", "alpha"));
  EXPECT_EQ(r->entries[0].period.stats.bubble_ns, 240 * kSecond);
  EXPECT_EQ(r->entries[1].period.stats.bubble_ns, AlphaBubbleSum(0, 29));
  EXPECT_EQ(r->entries[1].latest.start_ns, kT0 + 29 * kWindow);

  auto none = QueryFleet(*store_, JobPeriod::Between(kT0 - 10 * kWindow, kT0),
                         FleetOrder{}, 20);
  ASSERT_TRUE(none.ok());
  EXPECT_EQ(none->jobs, 0);
  EXPECT_TRUE(none->entries.empty());
  EXPECT_EQ(none->all.stats.windows, 0);
}

TEST_F(WindowQueriesTest, FleetRanksByACausesGpuTimeOverThePeriod) {
  auto r = QueryFleet(*store_, JobPeriod::Last(absl::Hours(1)),
                      *ParseFleetOrder("cause:data_loading"), 20);
  ASSERT_TRUE(r.ok());
  // gamma has all the data loading; the rest tie at 0 and go by bubble time.
  EXPECT_THAT(Jobs(*r), ElementsAre("gamma", "alpha", "odd/job \"x\""));
  EXPECT_DOUBLE_EQ(r->entries[0].score,
                   static_cast<double>(20 * (4 * kSecond - 1'000'000)));
}

// A job that finished with a 0.3 s tail window, 97 % bubble: ranked by its
// latest window it tops the fleet; over the period the tail weighs 0.3 s.
TEST_F(WindowQueriesTest, FleetWeighsAPartialTailByItsSpan) {
  StoreBatch batch;
  for (int64_t i = 380; i < 399; ++i) {
    batch.windows.push_back(
        MakeWindow("tail", i, 5 * kSecond, BubbleCause::kDataLoading));
  }
  WindowSummary tail =
      MakeWindow("tail", 399, 10'000'000, BubbleCause::kDataLoading);
  tail.window.job.span_ns = 300'000'000;
  tail.window.job.bubble_ns = 290'000'000;
  tail.window.job.attribution = {};
  tail.window.job.attribution[static_cast<int>(BubbleCause::kDataLoading)] =
      290'000'000;
  tail.window.devices[0].stats = tail.window.job;
  tail.closed_by = WindowSummary::ClosedBy::kIdleTimeout;
  batch.windows.push_back(tail);
  ASSERT_TRUE(store_->Commit(batch).ok());

  auto latest = QueryFleetLatest(*store_, *ParseFleetOrder("bubble_ratio"), 1);
  ASSERT_TRUE(latest.ok());
  EXPECT_THAT(Jobs(*latest), ElementsAre("tail"));

  auto r = QueryFleet(*store_, JobPeriod::Last(absl::Hours(1)),
                      *ParseFleetOrder("bubble_ratio"), 20);
  ASSERT_TRUE(r.ok()) << r.status();
  const FleetEntry* e = nullptr;
  for (const FleetEntry& x : r->entries) {
    if (x.job == "tail") e = &x;
  }
  ASSERT_NE(e, nullptr);
  EXPECT_EQ(e->period.stats.windows, 20);
  EXPECT_EQ(e->period.partial_windows, 1);
  EXPECT_TRUE(IsPartialWindow(e->latest));
  EXPECT_EQ(e->period.capacity_ns, 20 * kWindow);
  const double span = 19.0 * kWindow + 300'000'000;
  EXPECT_DOUBLE_EQ(e->period.coverage(), span / (20.0 * kWindow));
  EXPECT_DOUBLE_EQ(e->score, (19.0 * 5 * kSecond + 290'000'000) / span);
  // beta (0.8) is out of the hour; gamma (0.4 over its 20 windows) and
  // alpha (0.45) stay below tail's weighted 0.5; odd/job's 0.1 last.
  EXPECT_THAT(Jobs(*r), ElementsAre("tail", "alpha", "gamma", "odd/job \"x\""));
  EXPECT_EQ(r->all.partial_windows, 1);

  // Ranked by the cause's GPU-time, the tail adds 0.29 s, not a whole
  // window's worth.
  auto dl = QueryFleet(*store_, JobPeriod::Last(absl::Hours(1)),
                       *ParseFleetOrder("cause:data_loading"), 1);
  ASSERT_TRUE(dl.ok());
  EXPECT_THAT(Jobs(*dl), ElementsAre("tail"));
  EXPECT_DOUBLE_EQ(dl->entries[0].score,
                   19.0 * (5 * kSecond - 1'000'000) + 290'000'000);
}

TEST_F(WindowQueriesTest, FleetRefusesAnEmptyOrTooLongPeriod) {
  EXPECT_TRUE(absl::IsInvalidArgument(
      QueryFleet(*store_, JobPeriod::Between(kT0, kT0), FleetOrder{}, 5)
          .status()));
  EXPECT_TRUE(absl::IsInvalidArgument(
      QueryFleet(*store_, JobPeriod::Last(absl::Hours(25)), FleetOrder{}, 5)
          .status()));
}

TEST(FleetQueryEmptyStore, HasNoJobsAndNoPeriod) {
  testing::TempDir dir;
  auto store = OpenRocksDbWindowStore(dir.path());
  ASSERT_TRUE(store.ok());
  auto r =
      QueryFleet(**store, JobPeriod::Last(absl::Hours(1)), FleetOrder{}, 5);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->jobs, 0);
  EXPECT_EQ(r->from_ns, 0);
  EXPECT_EQ(r->to_ns, 0);
}

TEST(FleetOrderTest, ParsesTheDocumentedNamesOnly) {
  EXPECT_EQ(ParseFleetOrder("bubble_time")->Name(), "bubble_time");
  EXPECT_EQ(ParseFleetOrder("cause:memcpy")->Name(), "cause:memcpy");
  EXPECT_THAT(ParseFleetOrder("cause:nope").status().message(),
              HasSubstr("unknown cause 'nope'"));
  EXPECT_TRUE(absl::IsInvalidArgument(ParseFleetOrder("ratio").status()));
}

TEST_F(WindowQueriesTest, ReadOnlyInstanceAnswersBesideTheWriter) {
  auto reader = OpenRocksDbWindowStoreReadOnly(dir_.path());
  ASSERT_TRUE(reader.ok()) << reader.status();
  auto before = QueryJob(**reader, "alpha", JobPeriod::Last(absl::Hours(1)));
  ASSERT_TRUE(before.ok()) << before.status();
  EXPECT_EQ(before->windows.back().start_ns, kT0 + 399 * kWindow);

  StoreBatch batch;
  batch.windows.push_back(MakeWindow("alpha", 400, 5 * kSecond));
  ASSERT_TRUE(store_->Commit(batch).ok());
  ASSERT_TRUE((*reader)->Refresh().ok());
  auto after = QueryJob(**reader, "alpha", JobPeriod::Last(absl::Hours(1)));
  ASSERT_TRUE(after.ok()) << after.status();
  EXPECT_EQ(after->windows.size(), 360u);
  EXPECT_EQ(after->windows.back().start_ns, kT0 + 400 * kWindow);
  EXPECT_DOUBLE_EQ(after->rolling[0].stats.utilization(),
                   (6 + 7 + 8 + 9 + 10 + 5) / 60.0);
}

}  // namespace
}  // namespace bubblewatch
