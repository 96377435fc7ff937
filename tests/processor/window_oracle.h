// The oracle the processor's stream tests compare with, broker or not:
// the synthetic fleet they stream, each job's whole trace through the
// offline analyzer (analyze --window), and reading windows back from a
// store. Used by the broker tests (processor_kafka_test_util.h) and the
// partition task's unit tests (task_driver.h).
#ifndef BUBBLEWATCH_TESTS_PROCESSOR_WINDOW_ORACLE_H_
#define BUBBLEWATCH_TESTS_PROCESSOR_WINDOW_ORACLE_H_

#include <algorithm>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "analysis/bubble_analyzer.h"
#include "gtest/gtest.h"
#include "ingest/synthetic/synthetic_fleet.h"
#include "schemas/window_summary.h"
#include "storage/window_store.h"

namespace bubblewatch {

inline constexpr int64_t kWindowNs = 10'000'000'000;

inline SyntheticFleetOptions Fleet() {
  SyntheticFleetOptions o;
  // Six jobs: with kMix each gets its own scenario, so every planted cause
  // (and the healthy loop) is checked against the truth.
  o.jobs = 6;
  o.gpus_per_job = 2;
  o.duration = absl::Seconds(35);
  o.events_per_second_per_gpu = 5000;
  o.scenario = SyntheticScenario::kMix;
  o.seed = 11;
  return o;
}

// The oracle: each job's whole trace through the offline analyzer.
inline std::vector<WindowSummary> OracleWindows(
    const SyntheticFleetOptions& fleet_options = Fleet()) {
  absl::StatusOr<std::vector<SyntheticJob>> fleet =
      GenerateSyntheticFleet(fleet_options);
  EXPECT_TRUE(fleet.ok()) << fleet.status();
  std::vector<WindowSummary> out;
  for (const SyntheticJob& job : *fleet) {
    AnalyzerOptions options;
    options.window_ns = kWindowNs;
    options.top_bubbles = 0;
    options.top_bubbles_per_window = 3;
    absl::StatusOr<Analysis> a = AnalyzeTrace(job.MergedTrace(), options);
    EXPECT_TRUE(a.ok()) << a.status();
    for (WindowAnalysis& w : a->windows) {
      WindowSummary s;
      s.job = job.job;
      s.window = std::move(w);
      out.push_back(std::move(s));
    }
  }
  return out;
}

// OracleWindows() sorted by (job, window start), the order of a store's
// scan.
inline std::vector<WindowSummary> SortedOracle() {
  std::vector<WindowSummary> want = OracleWindows();
  std::sort(want.begin(), want.end(), [](const auto& a, const auto& b) {
    return std::pair(a.job, a.window.start_ns) <
           std::pair(b.job, b.window.start_ns);
  });
  return want;
}

inline std::vector<WindowSummary> StoredWindows(
    const std::string& path, const std::vector<std::string>& jobs) {
  absl::StatusOr<std::unique_ptr<WindowStoreReader>> store =
      OpenRocksDbWindowStoreReadOnly(path);
  EXPECT_TRUE(store.ok()) << store.status();
  std::vector<WindowSummary> out;
  if (!store.ok()) return out;
  for (const std::string& job : jobs) {
    absl::StatusOr<std::vector<WindowSummary>> windows =
        (*store)->Scan(job, absl::InfinitePast(), absl::InfiniteFuture());
    EXPECT_TRUE(windows.ok()) << windows.status();
    for (WindowSummary& w : *windows) out.push_back(std::move(w));
  }
  return out;
}

inline std::vector<std::string> JobsOf(
    const std::vector<WindowSummary>& windows) {
  std::vector<std::string> jobs;
  for (const WindowSummary& w : windows) {
    if (jobs.empty() || jobs.back() != w.job) jobs.push_back(w.job);
  }
  return jobs;
}

// Compares the analysis part (the counters, closed_by and the observed time
// are the stream's).
inline void ExpectSameAnalysis(const std::vector<WindowSummary>& got,
                               const std::vector<WindowSummary>& want) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    WindowSummary expected = want[i];
    expected.gpu_events = got[i].gpu_events;
    expected.cpu_events = got[i].cpu_events;
    expected.late_events = got[i].late_events;
    expected.closed_by = got[i].closed_by;
    expected.host_skew_ns = got[i].host_skew_ns;
    expected.observed_ns = got[i].observed_ns;
    std::string diff;
    EXPECT_TRUE(SameWindow(got[i], expected, &diff))
        << got[i].job << " window " << got[i].window.start_ns << ": " << diff;
  }
}

}  // namespace bubblewatch

#endif  // BUBBLEWATCH_TESTS_PROCESSOR_WINDOW_ORACLE_H_
