// CommitPipeline over the in-memory Kafka (memory_kafka.h): a window is
// published, then stored, then its offsets committed one flush later
// (docs/architecture.md#commit-protocol); a window the producer refuses,
// at once or in its delivery report, fails the commit before the store
// write and nothing is written after it, the revocation's commit included
// (docs/semantics.md#no-silent-loss).
#include "processor/commit_pipeline.h"

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "analysis/window_merge.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "processor/fleet_topics.h"
#include "processor/partition_jobs.h"
#include "schemas/window_summary_codec.h"
#include "storage/window_store.h"
#include "tests/processor/memory_kafka.h"
#include "tests/testing/temp_dir.h"

namespace bubblewatch {
namespace commit_pipeline_test {
namespace {

using ::testing::HasSubstr;
using testing::MemoryKafka;
using testing::MemoryRecord;
using testing::MemoryTopics;

constexpr int64_t kWindow = 10'000'000'000;
constexpr int64_t kBase = int64_t{1'767'225'600} * 1'000'000'000;

WindowSummary Window(const std::string& job, int index) {
  WindowSummary w;
  w.job = job;
  w.window.start_ns = kBase + index * kWindow;
  w.window.end_ns = w.window.start_ns + kWindow;
  w.gpu_events = 10 + index;
  return w;
}

class CommitPipelineTest : public ::testing::Test {
 protected:
  void SetUp() override {
    options_.topic = "events";
    options_.windows_topic = "events.windows";
    topics_.topics["events"].resize(1);
    topics_.topics["events.windows"].resize(1);
    absl::StatusOr<std::unique_ptr<WindowStore>> store =
        OpenRocksDbWindowStore(dir_.Sub("store"));
    ASSERT_TRUE(store.ok()) << store.status();
    store_ = *std::move(store);
    Start();
  }
  // A (re)started processor: new pipeline and jobs over the same store and
  // topics, partition 0 restored.
  void Start() {
    pipeline_.reset();
    jobs_ = std::make_unique<PartitionJobs>(options_, store_.get(), &stats_);
    shared_ = RuntimeShared();
    pipeline_ = std::make_unique<CommitPipeline>(
        options_, store_.get(), jobs_.get(), &health_, &shared_, &stats_);
    auto kafka = std::make_unique<MemoryKafka>(&topics_, &shared_);
    kafka_ = kafka.get();
    pipeline_->Connect(std::move(kafka), /*changelog=*/nullptr);
    pipeline_->set_stop(&stop_);
    int64_t offset = RD_KAFKA_OFFSET_INVALID;
    absl::StatusOr<RestoredPartition> restored =
        pipeline_->RestorePartition(options_.topic, 0, offset);
    ASSERT_TRUE(restored.ok()) << restored.status();
    resume_ = offset;
    ASSERT_TRUE(jobs_->AddPartition(0, *std::move(restored)).ok());
    pipeline_->AssignmentDone();
  }
  // The message at `offset` was handled and made `windows`; then a commit.
  absl::Status Step(int64_t offset, std::vector<WindowSummary> windows) {
    jobs_->NoteMessage(0, offset);
    pipeline_->MarkUncommitted();
    for (WindowSummary& w : windows) {
      pipeline_->pending_windows().push_back(std::move(w));
    }
    now_ += absl::Seconds(1);
    return pipeline_->Commit(now_);
  }
  std::vector<WindowSummary> Stored(const std::string& job) {
    absl::StatusOr<std::vector<WindowSummary>> w =
        store_->Scan(job, absl::InfinitePast(), absl::InfiniteFuture());
    EXPECT_TRUE(w.ok()) << w.status();
    return w.ok() ? *std::move(w) : std::vector<WindowSummary>();
  }
  const std::vector<MemoryRecord>& Published() {
    return topics_.topics["events.windows"][0];
  }
  std::optional<PartitionProgress> Progress() {
    absl::StatusOr<std::optional<PartitionProgress>> p =
        store_->Progress("events", 0);
    EXPECT_TRUE(p.ok()) << p.status();
    return p.ok() ? *p : std::nullopt;
  }

  ::bubblewatch::testing::TempDir dir_;
  StreamProcessorOptions options_;
  std::unique_ptr<WindowStore> store_;
  MemoryTopics topics_;
  StatsCell stats_;
  BrokerHealth health_;
  RuntimeShared shared_;
  std::atomic<bool> stop_{false};
  std::unique_ptr<PartitionJobs> jobs_;
  std::unique_ptr<CommitPipeline> pipeline_;
  MemoryKafka* kafka_ = nullptr;
  int64_t resume_ = 0;
  absl::Time now_ = absl::FromUnixSeconds(1'800'000'000);
};

TEST_F(CommitPipelineTest, PublishesStoresThenCommitsTheOffsetsAFlushLater) {
  ASSERT_TRUE(Step(0, {Window("a", 0)}).ok());
  ASSERT_EQ(Published().size(), 1u);
  EXPECT_EQ(Published()[0].key, WindowTopicKey("a", kBase));
  ASSERT_EQ(Stored("a").size(), 1u);
  EXPECT_EQ(Published()[0].value, EncodeWindowSummary(Stored("a")[0]));
  ASSERT_TRUE(Progress().has_value());
  EXPECT_EQ(Progress()->committed_position, 1);
  // This commit's offsets wait for the next flush.
  EXPECT_TRUE(topics_.group_offsets.empty());
  ASSERT_TRUE(Step(1, {}).ok());
  EXPECT_EQ((topics_.group_offsets[{"events", 0}]), 1);
  ASSERT_TRUE(pipeline_->FlushAndCommitOffsets(/*sync=*/true).ok());
  EXPECT_EQ((topics_.group_offsets[{"events", 0}]), 2);
  {
    absl::MutexLock lock(&stats_.mu);
    EXPECT_EQ(stats_.stats.windows_published, 1);
    EXPECT_EQ(stats_.stats.windows_written, 1);
  }
  // A restart resumes after what was stored.
  Start();
  EXPECT_EQ(resume_, 2);
}

TEST_F(CommitPipelineTest, AFullQueueIsWaitedOutAndTheWindowPublished) {
  kafka_->RefuseProduces(absl::ResourceExhaustedError("Local: Queue full"), 3);
  ASSERT_TRUE(Step(0, {Window("a", 0)}).ok());
  EXPECT_EQ(kafka_->produce_calls(), 4);
  EXPECT_EQ(Published().size(), 1u);
  EXPECT_EQ(Stored("a").size(), 1u);
  EXPECT_EQ(shared_.undelivered, 0);
}

TEST_F(CommitPipelineTest, AWindowRefusedAtOnceFailsTheCommitAndAllAfterIt) {
  ASSERT_TRUE(Step(0, {Window("a", 0)}).ok());
  kafka_->RefuseProduces(
      absl::InvalidArgumentError("Broker: Message size too large"));
  const absl::Status failed = Step(1, {Window("a", 1), Window("b", 0)});
  ASSERT_FALSE(failed.ok());
  EXPECT_THAT(failed.message(), HasSubstr("cannot publish the window of a"));
  EXPECT_THAT(failed.message(), HasSubstr("Message size too large"));
  EXPECT_EQ(shared_.undelivered, 0);
  // The revocation's commit and flush, and more messages: nothing moves.
  EXPECT_EQ(pipeline_->Commit(now_ + absl::Seconds(1)), failed);
  EXPECT_EQ(Step(2, {}), failed);
  EXPECT_EQ(Stored("a").size(), 1u);
  EXPECT_TRUE(Stored("b").empty());
  EXPECT_EQ(Published().size(), 1u);
  ASSERT_TRUE(Progress().has_value());
  EXPECT_EQ(Progress()->committed_position, 1);
  for (const auto& [tp, offset] : topics_.group_offsets) {
    EXPECT_LE(offset, 1) << tp.first << "/" << tp.second;
  }
  // A restart replays the message whose windows were refused.
  Start();
  EXPECT_EQ(resume_, 1);
}

TEST_F(CommitPipelineTest, AWindowFailedInItsDeliveryReportFailsTheCommit) {
  ASSERT_TRUE(Step(0, {Window("a", 0)}).ok());
  kafka_->FailDeliveries(
      absl::InvalidArgumentError("Broker: Message size too large"));
  const absl::Status failed = Step(1, {Window("a", 1)});
  ASSERT_FALSE(failed.ok());
  EXPECT_THAT(failed.message(), HasSubstr("delivering to events.windows"));
  EXPECT_EQ(pipeline_->Commit(now_ + absl::Seconds(1)), failed);
  EXPECT_EQ(Step(2, {}), failed);
  EXPECT_FALSE(pipeline_->FlushAndCommitOffsets(/*sync=*/true).ok());
  EXPECT_EQ(Stored("a").size(), 1u);
  EXPECT_EQ(Published().size(), 1u);
  EXPECT_EQ(Progress()->committed_position, 1);
  for (const auto& [tp, offset] : topics_.group_offsets) {
    EXPECT_LE(offset, 1) << tp.first << "/" << tp.second;
  }
  Start();
  EXPECT_EQ(resume_, 1);
}

// A split unit's window part (docs/architecture.md#one-job-across-
// processors) goes where windows go, with the same rule: one the producer
// refuses fails the commit before the progress is stored, and every commit
// after it (docs/semantics.md#no-silent-loss).
TEST_F(CommitPipelineTest, AWindowPartIsPublishedOrItsRefusalFailsTheCommit) {
  HostWindowPart part{.job = "big", .host = "node-1"};
  part.window.start_ns = kBase;
  part.window.end_ns = kBase + kWindow;
  pipeline_->pending_parts().push_back(part);
  ASSERT_TRUE(Step(0, {}).ok());
  const std::vector<MemoryRecord>& parts =
      topics_.topics[options_.parts_topic][0];
  ASSERT_EQ(parts.size(), 1u);
  EXPECT_EQ(parts[0].key, "big");
  EXPECT_EQ(parts[0].value, EncodeHostWindowPart(part));
  EXPECT_TRUE(Stored("big").empty()) << "a part is never stored";
  {
    absl::MutexLock lock(&stats_.mu);
    EXPECT_EQ(stats_.stats.window_parts_published, 1);
    EXPECT_EQ(stats_.stats.windows_written, 0);
  }

  kafka_->RefuseProduces(
      absl::InvalidArgumentError("Broker: Message size too large"));
  part.window.start_ns += kWindow;
  part.window.end_ns += kWindow;
  pipeline_->pending_parts().push_back(part);
  const absl::Status failed = Step(1, {});
  ASSERT_FALSE(failed.ok());
  EXPECT_THAT(failed.message(),
              HasSubstr("cannot publish the window part of big host node-1"));
  EXPECT_EQ(Step(2, {}), failed);
  EXPECT_EQ(topics_.topics[options_.parts_topic][0].size(), 1u);
  ASSERT_TRUE(Progress().has_value());
  EXPECT_EQ(Progress()->committed_position, 1);
  Start();
  EXPECT_EQ(resume_, 1);
}

}  // namespace
}  // namespace commit_pipeline_test
}  // namespace bubblewatch
