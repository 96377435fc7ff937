#include "ingest/synthetic/synthetic_truth.h"

#include <map>

#include "analysis/bubble_analyzer.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "ingest/synthetic/synthetic_fleet.h"

namespace bubblewatch {
namespace {

using Segments = std::vector<std::tuple<int64_t, int64_t, PlantedCause>>;

Segments Of(const PlantedGap& gap) {
  Segments out;
  for (const GapSegment& s : gap.segments) {
    out.emplace_back(s.start_ns, s.end_ns, s.cause);
  }
  return out;
}

TEST(PaintGap, QueuedLaunchMakesGpuDependency) {
  std::deque<HostBlock> host = {{0, 100, PlantedHostClass::kLaunch}};
  PlantedGap g = PaintGap(0, 50, 60, /*launch_start=*/10, {}, host);
  EXPECT_EQ(Of(g), (Segments{{50, 60, PlantedCause::kGpuDependency}}));
}

TEST(PaintGap, SyncThenPythonIsHostSyncThenLaunchOverhead) {
  // The seed's shape: the host waits in a sync, does Python, then launches.
  std::deque<HostBlock> host = {{0, 108, PlantedHostClass::kSync},
                                {108, 120, PlantedHostClass::kUncovered},
                                {120, 125, PlantedHostClass::kLaunch}};
  PlantedGap g = PaintGap(0, 100, 124, /*launch_start=*/120, {}, host);
  EXPECT_EQ(Of(g), (Segments{{100, 120, PlantedCause::kHostSync},
                             {120, 124, PlantedCause::kLaunchOverhead}}));
}

TEST(PaintGap, UncoveredWithoutSyncIsHostCompute) {
  std::deque<HostBlock> host = {{0, 105, PlantedHostClass::kLaunch},
                                {105, 120, PlantedHostClass::kUncovered},
                                {120, 125, PlantedHostClass::kLaunch}};
  PlantedGap g = PaintGap(0, 100, 124, 120, {}, host);
  EXPECT_EQ(Of(g), (Segments{{100, 105, PlantedCause::kLaunchOverhead},
                             {105, 120, PlantedCause::kHostCompute},
                             {120, 124, PlantedCause::kLaunchOverhead}}));
}

TEST(PaintGap, CopiesComeFirstThenHostClasses) {
  std::deque<HostBlock> host = {{0, 130, PlantedHostClass::kAllocator},
                                {130, 150, PlantedHostClass::kDataLoading},
                                {150, 160, PlantedHostClass::kLaunch}};
  std::deque<TimeInterval> copies = {{110, 120}, {140, 158}};
  PlantedGap g = PaintGap(3, 100, 158, 150, copies, host);
  EXPECT_EQ(g.device, 3);
  EXPECT_EQ(Of(g), (Segments{{100, 110, PlantedCause::kAllocator},
                             {110, 120, PlantedCause::kMemcpy},
                             {120, 130, PlantedCause::kAllocator},
                             {130, 140, PlantedCause::kDataLoading},
                             {140, 158, PlantedCause::kMemcpy}}));
}

TEST(TruthAccumulator, SplitsAtWindowBoundaries) {
  TruthAccumulator acc(/*window_ns=*/100);
  acc.AddBusy(0, 50, 150);
  PlantedGap gap{.device = 0, .start_ns = 150, .end_ns = 260, .segments = {}};
  gap.segments = {{150, 210, PlantedCause::kHostSync},
                  {210, 260, PlantedCause::kLaunchOverhead}};
  acc.AddGap(gap);
  std::vector<TruthWindow> w = acc.Windows();
  ASSERT_EQ(w.size(), 3u);
  EXPECT_EQ(w[0].window_start_ns, 0);
  EXPECT_EQ(w[0].compute_ns, 50);
  EXPECT_EQ(w[1].compute_ns, 50);
  EXPECT_EQ(w[1].bubble_ns, 50);
  EXPECT_EQ(w[2].window_start_ns, 200);
  EXPECT_EQ(w[2].cause_ns[0], 10);
  EXPECT_EQ(w[2].cause_ns[1], 50);
}

TEST(WriteTruthJsonLines, DeviceLinesThenTheJobSum) {
  TruthWindow a{.device = 0,
                .window_start_ns = 0,
                .compute_ns = 7,
                .bubble_ns = 3,
                .cause_ns = {}};
  a.cause_ns[0] = 3;
  TruthWindow b = a;
  b.device = 1;
  std::string out;
  WriteTruthJsonLines("j", "sync", 10, {a, b}, &out);
  EXPECT_EQ(out,
            "{\"job\":\"j\",\"scenario\":\"sync\",\"scope\":\"device\","
            "\"device\":0,\"window_start_ns\":0,\"window_end_ns\":10,"
            "\"span_ns\":10,\"compute_ns\":7,\"bubble_ns\":3,\"causes\":{"
            "\"host_sync\":3,\"launch_overhead\":0,\"allocator\":0,"
            "\"memcpy\":0,\"data_loading\":0,\"host_compute\":0,"
            "\"gpu_dependency\":0,\"unattributed\":0}}\n"
            "{\"job\":\"j\",\"scenario\":\"sync\",\"scope\":\"device\","
            "\"device\":1,\"window_start_ns\":0,\"window_end_ns\":10,"
            "\"span_ns\":10,\"compute_ns\":7,\"bubble_ns\":3,\"causes\":{"
            "\"host_sync\":3,\"launch_overhead\":0,\"allocator\":0,"
            "\"memcpy\":0,\"data_loading\":0,\"host_compute\":0,"
            "\"gpu_dependency\":0,\"unattributed\":0}}\n"
            "{\"job\":\"j\",\"scenario\":\"sync\",\"scope\":\"job\","
            "\"window_start_ns\":0,\"window_end_ns\":10,\"span_ns\":20,"
            "\"compute_ns\":14,\"bubble_ns\":6,\"causes\":{\"host_sync\":6,"
            "\"launch_overhead\":0,\"allocator\":0,\"memcpy\":0,"
            "\"data_loading\":0,\"host_compute\":0,\"gpu_dependency\":0,"
            "\"unattributed\":0}}\n");
}

// The truth is built without the analyzer; a correct analyzer must agree
// with it to the nanosecond, window by window and device by device.
class TruthAgreesWithAnalyzer
    : public ::testing::TestWithParam<SyntheticScenario> {};

TEST_P(TruthAgreesWithAnalyzer, PerDeviceAndWindow) {
  SyntheticFleetOptions options;
  options.jobs = 1;
  options.gpus_per_job = 2;
  options.duration = absl::Seconds(12);
  options.scenario = GetParam();
  options.seed = 11;
  auto jobs = GenerateSyntheticFleet(options);
  ASSERT_TRUE(jobs.ok());
  const SyntheticJob& job = jobs->front();
  AnalyzerOptions analyzer_options;
  analyzer_options.window_ns = options.truth_window_ns;
  absl::StatusOr<Analysis> analysis =
      AnalyzeTrace(job.MergedTrace(), analyzer_options);
  ASSERT_TRUE(analysis.ok()) << analysis.status();

  std::map<std::pair<int64_t, int32_t>, const TruthWindow*> truth;
  for (const TruthWindow& w : job.truth) {
    truth[{w.window_start_ns, w.device}] = &w;
  }
  size_t compared = 0;
  for (const WindowAnalysis& w : analysis->windows) {
    for (const DeviceWindow& d : w.devices) {
      auto it = truth.find({w.start_ns, d.device});
      ASSERT_NE(it, truth.end()) << w.start_ns << " device " << d.device;
      const TruthWindow& t = *it->second;
      EXPECT_EQ(d.stats.compute_ns, t.compute_ns);
      EXPECT_EQ(d.stats.bubble_ns, t.bubble_ns);
      for (int c = 0; c < kNumPlantedCauses; ++c) {
        EXPECT_EQ(d.stats.attribution[c], t.cause_ns[c])
            << PlantedCauseName(static_cast<PlantedCause>(c)) << " window "
            << w.start_ns << " device " << d.device;
      }
      ++compared;
    }
  }
  EXPECT_EQ(compared, truth.size());
}

INSTANTIATE_TEST_SUITE_P(
    AllScenarios, TruthAgreesWithAnalyzer,
    ::testing::Values(SyntheticScenario::kHealthy, SyntheticScenario::kSync,
                      SyntheticScenario::kLaunch, SyntheticScenario::kAlloc,
                      SyntheticScenario::kDataloader,
                      SyntheticScenario::kMemcpy),
    [](const auto& info) {
      return std::string(SyntheticScenarioName(info.param));
    });

}  // namespace
}  // namespace bubblewatch
