// The buffer bound (docs/semantics.md#buffer-bound): a batch that would take
// a job's buffer past max_job_buffer_events closes all the job's windows
// first (closed_by buffer_full) and drops the buffer. Checked without
// measuring memory: the buffered count never passes the bound, the windows
// close where the rule says, the counter counts each close, and a processor
// restarted after any batch (replaying from the resume offset) stores the
// same windows and job state as an uninterrupted one.
#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "analysis/window_accumulator.h"
#include "gtest/gtest.h"
#include "processor/batch_validator.h"
#include "processor/partition_jobs.h"
#include "processor/processor_options.h"
#include "processor/runtime_shared.h"
#include "schemas/window_summary_codec.h"
#include "storage/window_store.h"
#include "tests/testing/temp_dir.h"
#include "tests/testing/units.h"

namespace bubblewatch {
namespace {

constexpr int64_t kMs = 1'000'000;
using testing::kS;

constexpr int64_t kBound = 250;
constexpr int kPerBatch = 40;  // 20 kernels and their 20 launch calls.

// A dense job: one host, two devices, a kernel every 2 ms on each for 6 s,
// each with its launch call 1 ms before; 40 events per batch in start
// order. A 1 s window holds 2,000 events, far past the bound.
std::vector<DecodedBatch> DenseJob() {
  std::vector<DecodedBatch> out;
  CorrelationId correlation = 1;
  for (int64_t t_ms = 1000; t_ms < 7000; t_ms += 20) {
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
      for (int32_t device = 0; device < 2; ++device) {
        const int64_t start = (t_ms + 2 * k) * kMs + device * 100'000;
        b.trace.cpu.push_back(
            CpuEvent{.start_ns = start - kMs,
                     .end_ns = start - kMs + 10'000,
                     .correlation = correlation,
                     .thread = 1,
                     .name = 1,
                     .category = CpuEventCategory::kCudaRuntime});
        b.trace.gpu.push_back(GpuActivity{.start_ns = start,
                                          .end_ns = start + 1'500'000,
                                          .correlation = correlation,
                                          .name = 0,
                                          .device = device,
                                          .stream = 7});
        ++correlation;
      }
    }
    out.push_back(std::move(b));
  }
  return out;
}

class JobBufferBound : public ::testing::Test {
 protected:
  void SetUp() override {
    options_.windower.window_ns = kS;
    options_.windower.lateness_ns = 200 * kMs;
    options_.limits.max_events = kPerBatch;
    options_.state_limits.max_job_buffer_events = kBound;
    ASSERT_TRUE(options_.state_limits.Validate().ok());
    Reset();
  }
  void Reset() {
    jobs_.reset();
    store_.reset();
    dir_ = std::make_unique<testing::TempDir>();
    absl::StatusOr<std::unique_ptr<WindowStore>> store =
        OpenRocksDbWindowStore(dir_->Sub("store"));
    ASSERT_TRUE(store.ok()) << store.status();
    store_ = *std::move(store);
    {
      absl::MutexLock lock(&stats_.mu);
      stats_.stats = ProcessorStats();
    }
    jobs_ = std::make_unique<PartitionJobs>(options_, store_.get(), &stats_);
  }
  // Adds `b` at `offset` as the admission does; `replay`: a batch below the
  // committed position after a restart.
  std::vector<WindowSummary> FeedAt(const DecodedBatch& b, int64_t offset,
                                    bool replay) {
    absl::StatusOr<JobEntry*> job = jobs_->GetOrLoad("job", 0);
    EXPECT_TRUE(job.ok()) << job.status();
    if (!job.ok()) return {};
    EXPECT_FALSE(ValidateBatch(b, options_.limits).has_value());
    if (PartitionJobs::IsDuplicateBatch(**job, b.header, replay)) return {};
    std::vector<WindowSummary> out =
        jobs_
            ->AddBatch(0, "job", **job, b, offset, replay, clock_,
                       absl::InfiniteDuration())
            .windows;
    EXPECT_LE(Buffered(), kBound) << "after the batch at offset " << offset;
    return out;
  }
  int64_t Buffered() {
    if (!jobs_->live_jobs().contains("job")) return 0;
    const JobEntry& job = jobs_->live_jobs().at("job");
    return job.windower == nullptr
               ? 0
               : static_cast<int64_t>(job.windower->buffered_events());
  }
  void Restart(const std::string& job_state) {
    jobs_ = std::make_unique<PartitionJobs>(options_, store_.get(), &stats_);
    RestoredPartition restored;
    restored.snapshot.jobs["job"] = job_state;
    ASSERT_TRUE(jobs_->AddPartition(0, std::move(restored)).ok());
  }
  std::vector<WindowSummary> Idle() {
    clock_ += options_.idle_timeout + absl::Seconds(1);
    std::vector<WindowSummary> out;
    jobs_->CloseIdle(clock_, out);
    return out;
  }
  ProcessorStats Stats() {
    absl::MutexLock lock(&stats_.mu);
    return stats_.stats;
  }
  const JobState& State() { return jobs_->live_jobs().at("job").state; }

  std::unique_ptr<testing::TempDir> dir_;
  std::unique_ptr<WindowStore> store_;
  StreamProcessorOptions options_;
  StatsCell stats_;
  std::unique_ptr<PartitionJobs> jobs_;
  absl::Time clock_ = absl::FromUnixSeconds(1'000'000);
};

TEST_F(JobBufferBound, ABatchPastTheBoundClosesTheWindowsAndDropsTheBuffer) {
  const std::vector<DecodedBatch> batches = DenseJob();
  int64_t buffered_gpu_end = INT64_MIN;  // Of the buffered data.
  int64_t closes = 0;
  for (size_t i = 0; i < batches.size(); ++i) {
    const DecodedBatch& b = batches[i];
    const int64_t before = Buffered();
    const int64_t reset_before = i == 0 ? -1 : State().buffer_reset_offset;
    const bool over =
        before + static_cast<int64_t>(b.trace.gpu.size() + b.trace.cpu.size()) >
        kBound;
    std::vector<WindowSummary> ws =
        FeedAt(b, static_cast<int64_t>(i), /*replay=*/false);
    if (over) {
      // The rule: every window through the one holding the buffered data's
      // last GPU end closes, as at an end marker; the buffer then holds
      // at most the batch.
      ++closes;
      EXPECT_EQ(State().buffer_reset_offset, static_cast<int64_t>(i));
      EXPECT_GE(State().finalized_through_ns,
                WindowStartOf(buffered_gpu_end - 1, kS) + kS);
      // (Less where the batch's own events fell behind the new edge and
      // were evicted by the usual rule.)
      EXPECT_LE(Buffered(),
                static_cast<int64_t>(b.trace.gpu.size() + b.trace.cpu.size()));
      buffered_gpu_end = INT64_MIN;
    } else {
      EXPECT_EQ(State().buffer_reset_offset, reset_before);
      for (const WindowSummary& w : ws) {
        EXPECT_NE(w.closed_by, WindowSummary::ClosedBy::kBufferFull);
      }
    }
    for (const GpuActivity& a : b.trace.gpu) {
      buffered_gpu_end = std::max(buffered_gpu_end, a.end_ns);
    }
  }
  EXPECT_GT(closes, 10);
  EXPECT_EQ(Stats().buffer_full_closes, closes);
  // What arrives for a window closed early is late: counted, not lost.
  EXPECT_GT(Stats().late_events, 0);
}

TEST_F(JobBufferBound, ARestartAfterAnyBatchStoresTheSame) {
  const std::vector<DecodedBatch> batches = DenseJob();
  std::vector<std::vector<WindowSummary>> closed_at(batches.size());
  for (size_t i = 0; i < batches.size(); ++i) {
    closed_at[i] = FeedAt(batches[i], static_cast<int64_t>(i), false);
  }
  const std::vector<WindowSummary> idle = Idle();
  const std::string final_state = State().Serialize();
  const int64_t final_closes = Stats().buffer_full_closes;
  ASSERT_GT(final_closes, 0);
  int replays = 0;
  for (size_t cut = 0; cut + 1 < batches.size(); ++cut) {
    SCOPED_TRACE(absl::StrCat("restart after batch ", cut));
    Reset();
    for (size_t i = 0; i <= cut; ++i) {
      FeedAt(batches[i], static_cast<int64_t>(i), false);
    }
    const JobEntry& job = jobs_->live_jobs().at("job");
    const std::string state = job.state.Serialize();
    const int64_t closes_before = Stats().buffer_full_closes;
    // Replay from the partition's resume offset, or from an earlier one
    // (another job of the partition may hold it back): both must rebuild
    // the same buffer.
    int64_t resume = static_cast<int64_t>(cut) + 1;
    if (job.windower != nullptr && job.windower->ResumeOffset()) {
      resume = *job.windower->ResumeOffset();
    }
    for (int64_t from : {resume, std::max<int64_t>(0, resume - 7)}) {
      Restart(state);
      for (int64_t i = from; i <= static_cast<int64_t>(cut); ++i) {
        EXPECT_TRUE(FeedAt(batches[i], i, /*replay=*/true).empty())
            << "replayed batch " << i << " closed a window again";
      }
      if (from <= static_cast<int64_t>(cut)) ++replays;
      std::vector<WindowSummary> got;
      for (size_t i = cut + 1; i < batches.size(); ++i) {
        for (WindowSummary& w :
             FeedAt(batches[i], static_cast<int64_t>(i), false)) {
          got.push_back(std::move(w));
        }
      }
      for (WindowSummary& w : Idle()) got.push_back(std::move(w));
      EXPECT_EQ(State().Serialize(), final_state) << "from " << from;
      std::vector<WindowSummary> want;
      for (size_t i = cut + 1; i < batches.size(); ++i) {
        want.insert(want.end(), closed_at[i].begin(), closed_at[i].end());
      }
      want.insert(want.end(), idle.begin(), idle.end());
      ASSERT_EQ(got.size(), want.size()) << "from " << from;
      for (size_t i = 0; i < got.size(); ++i) {
        std::string diff;
        EXPECT_TRUE(SameWindow(got[i], want[i], &diff))
            << "from " << from << ", window " << got[i].window.start_ns << ": "
            << diff;
      }
    }
    // The closes of the live batches, each counted once.
    EXPECT_EQ(Stats().buffer_full_closes - closes_before,
              2 * final_closes - 2 * closes_before)
        << "counted on replay";
  }
  EXPECT_GT(replays, 20);
}

TEST(JobBufferBoundOptions, TheBoundMustHoldOneBatch) {
  StreamProcessorOptions options;
  options.brokers = "b";
  options.state_limits.max_job_buffer_events = 10;
  options.limits.max_events = 11;
  absl::Status s = options.Validate();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("state_limits.max_job_buffer_events must be at "
                             "least limits.max_events (11), not 10"),
            std::string::npos)
      << s;
}

}  // namespace
}  // namespace bubblewatch
