// A window analysis that fails (a bug: batches are validated on arrival)
// loses nothing silently (docs/semantics.md#no-silent-loss): the windower
// keeps its edge and the failure, PartitionJobs counts and keeps it for the
// processor to stop on. The failure is provoked with analyzer options the
// analyzer refuses (a negative top_bubbles_per_window, which
// WindowerOptions::Validate would refuse before a processor starts).
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "processor/job_windower.h"
#include "processor/partition_jobs.h"
#include "processor/processor_options.h"
#include "processor/runtime_shared.h"
#include "storage/window_store.h"
#include "tests/testing/temp_dir.h"
#include "tests/testing/units.h"

namespace bubblewatch {
namespace analysis_failure_test {
namespace {

using ::testing::HasSubstr;
using testing::kS;
constexpr int64_t kMs = 1'000'000;

// One host, one device: a kernel every 10 ms for 4 s, a batch per 100 ms,
// each kernel with its launch call 1 ms before.
std::vector<DecodedBatch> Stream() {
  std::vector<DecodedBatch> out;
  CorrelationId correlation = 1;
  for (int64_t t_ms = 1000; t_ms < 5000; t_ms += 100) {
    DecodedBatch b;
    b.header = BatchHeader{.job = "job",
                           .host = "h",
                           .rank = 0,
                           .world_size = 1,
                           .producer_id = 7,
                           .sequence = out.size()};
    b.trace.job = "job";
    b.trace.names = {"k", "cudaLaunchKernel"};
    for (int64_t k = 0; k < 10; ++k) {
      const int64_t start = (t_ms + 10 * k) * kMs;
      b.trace.cpu.push_back(
          CpuEvent{.start_ns = start - kMs,
                   .end_ns = start - kMs + 10'000,
                   .correlation = correlation,
                   .thread = 1,
                   .name = 1,
                   .category = CpuEventCategory::kCudaRuntime});
      b.trace.gpu.push_back(GpuActivity{.start_ns = start,
                                        .end_ns = start + 4 * kMs,
                                        .correlation = correlation,
                                        .name = 0,
                                        .device = 0,
                                        .stream = 7});
      ++correlation;
    }
    out.push_back(std::move(b));
  }
  return out;
}

WindowerOptions Options(bool analysis_fails) {
  WindowerOptions o;
  o.window_ns = kS;
  o.lateness_ns = 200 * kMs;
  if (analysis_fails) o.top_bubbles_per_window = -1;
  return o;
}

// Windows the stream makes, and the windower after it.
struct Result {
  std::vector<WindowSummary> windows;
  std::optional<int64_t> finalized_through_ns;
  int64_t failures = 0;
  absl::Status error;
};
Result Feed(bool analysis_fails) {
  JobWindower w("job", Options(analysis_fails));
  const absl::Time now = absl::FromUnixSeconds(1'000'000);
  Result run;
  int64_t offset = 0;
  for (const DecodedBatch& b : Stream()) {
    w.Add(b, offset++, /*replay=*/false, now);
    for (WindowSummary& s : w.FinalizeReady(now, absl::InfiniteDuration())) {
      run.windows.push_back(std::move(s));
    }
    run.failures += w.TakeAnalysisFailures();
  }
  for (WindowSummary& s :
       w.FinalizeAll(WindowSummary::ClosedBy::kIdleTimeout)) {
    run.windows.push_back(std::move(s));
  }
  run.failures += w.TakeAnalysisFailures();
  run.finalized_through_ns = w.finalized_through_ns();
  run.error = w.analysis_error();
  return run;
}

TEST(AnalysisFailure, TheWindowerKeepsItsEdgeAndTheFirstError) {
  const Result ok = Feed(/*analysis_fails=*/false);
  ASSERT_GE(ok.windows.size(), 4u) << "the stream must make windows";
  EXPECT_EQ(ok.failures, 0);
  EXPECT_TRUE(ok.error.ok()) << ok.error;

  const Result failed = Feed(/*analysis_fails=*/true);
  EXPECT_TRUE(failed.windows.empty());
  // Every attempt to finalize failed and was counted; none moved the edge.
  EXPECT_GE(failed.failures, static_cast<int64_t>(ok.windows.size()) / 2);
  EXPECT_EQ(failed.finalized_through_ns, std::nullopt);
  ASSERT_FALSE(failed.error.ok());
  EXPECT_THAT(failed.error.message(), HasSubstr("job job"));
  EXPECT_THAT(failed.error.message(), HasSubstr("its first event to"));
  EXPECT_THAT(failed.error.message(), HasSubstr("top_bubbles_per_window"));
}

TEST(AnalysisFailure, PartitionJobsCountsItAndKeepsItForTheProcessor) {
  testing::TempDir dir;
  absl::StatusOr<std::unique_ptr<WindowStore>> store =
      OpenRocksDbWindowStore(dir.Sub("store"));
  ASSERT_TRUE(store.ok()) << store.status();
  for (const bool fails : {false, true}) {
    SCOPED_TRACE(fails ? "failing analysis" : "working analysis");
    StreamProcessorOptions options;
    options.windower = Options(fails);
    StatsCell stats;
    PartitionJobs jobs(options, store->get(), &stats);
    const absl::Time now = absl::FromUnixSeconds(1'000'000);
    int64_t offset = 0;
    size_t windows = 0;
    for (const DecodedBatch& b : Stream()) {
      absl::StatusOr<JobEntry*> job = jobs.GetOrLoad("job", 0);
      ASSERT_TRUE(job.ok()) << job.status();
      windows += jobs.AddBatch(0, "job", **job, b, offset++,
                               /*replay=*/false, now, absl::InfiniteDuration())
                     .windows.size();
    }
    absl::MutexLock lock(&stats.mu);
    if (!fails) {
      EXPECT_GT(windows, 0u);
      EXPECT_TRUE(jobs.analysis_failure().ok());
      EXPECT_EQ(stats.stats.window_analysis_failures, 0);
      continue;
    }
    EXPECT_EQ(windows, 0u);
    EXPECT_GT(stats.stats.window_analysis_failures, 0);
    ASSERT_FALSE(jobs.analysis_failure().ok());
    EXPECT_THAT(jobs.analysis_failure().message(), HasSubstr("job job"));
    // Its state says nothing was finalized: a restart redoes these windows.
    EXPECT_EQ(jobs.live_jobs().at("job").state.finalized_through_ns,
              std::nullopt);
  }
}

}  // namespace
}  // namespace analysis_failure_test
}  // namespace bubblewatch
