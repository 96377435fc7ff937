// The consumer seam (processor/consumer_kafka.h) without a broker: the
// in-memory consumer's contract (memory_kafka.h), and the partition task
// driven through it by the poll loop's handling of each event, as
// StreamProcessor hands them on, across a revocation and a restart.
#include "processor/consumer_kafka.h"

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "ingest/synthetic/synthetic_fleet.h"
#include "processor/broker_health.h"
#include "processor/partition_task.h"
#include "processor/runtime_shared.h"
#include "schemas/window_summary_codec.h"
#include "storage/rocksdb_window_store.h"
#include "tests/processor/memory_kafka.h"
#include "tests/processor/task_driver.h"
#include "tests/testing/temp_dir.h"

// A namespace of its own: the test binary is a unity build.
namespace bubblewatch::consumer_seam_test {
namespace {

using Kind = ConsumerKafka::Event::Kind;
using testing::MemoryConsumerKafka;
using testing::MemoryRecord;
using testing::MemoryTopics;

// Records what it is told; rewrites the start offsets in `start_at`.
class RecordingListener : public ConsumerKafka::Listener {
 public:
  void OnAssigned(std::vector<PartitionTask::Assigned>& assigned) override {
    for (PartitionTask::Assigned& a : assigned) {
      offered.push_back(a);
      if (auto it = start_at.find(a.partition); it != start_at.end()) {
        a.offset = it->second;
      }
    }
  }
  void OnRevoked(const std::vector<int32_t>& revoked) override {
    this->revoked.insert(this->revoked.end(), revoked.begin(), revoked.end());
  }
  int64_t NextOffset(int32_t) const override { return -1; }
  std::optional<std::vector<std::pair<int32_t, int64_t>>> Lagging()
      const override {
    return std::nullopt;
  }

  std::map<int32_t, int64_t> start_at;
  std::vector<PartitionTask::Assigned> offered;
  std::vector<int32_t> revoked;
};

// "kind partition offset" of each event until a poll brings nothing.
std::vector<std::string> Drain(ConsumerKafka& consumer) {
  std::vector<std::string> out;
  for (int i = 0; i < 1000; ++i) {
    ConsumerKafka::Event e = consumer.Poll(absl::ZeroDuration());
    switch (e.kind) {
      case Kind::kNothing:
        return out;
      case Kind::kMessage:
        out.push_back(absl::StrCat("message ", e.partition, " ",
                                   e.message.offset, " ", e.message.key));
        break;
      case Kind::kEndOfPartition:
        out.push_back(absl::StrCat("end ", e.partition));
        break;
      default:
        out.push_back(absl::StrCat("other ", e.error.ToString()));
    }
  }
  return out;
}

TEST(MemoryConsumerKafka, StartsWhereTheListenerSaysElseAtTheGroupOffset) {
  MemoryTopics topics;
  topics.topics["events"].resize(2);
  for (int i = 0; i < 3; ++i) {
    topics.topics["events"][0].push_back({.key = absl::StrCat("a", i)});
  }
  for (int i = 0; i < 4; ++i) {
    topics.topics["events"][1].push_back({.key = absl::StrCat("b", i)});
  }
  topics.group_offsets[{"events", 0}] = 1;
  RecordingListener listener;
  listener.start_at[1] = 2;
  MemoryConsumerKafka consumer(&topics, &listener);
  ASSERT_TRUE(consumer.Subscribe("events").ok());
  EXPECT_EQ(consumer.Poll(absl::ZeroDuration()).kind, Kind::kNothing);
  consumer.Assign({0, 1});
  EXPECT_EQ(Drain(consumer), (std::vector<std::string>{
                                 "message 0 1 a1", "message 0 2 a2", "end 0",
                                 "message 1 2 b2", "message 1 3 b3", "end 1"}));
  ASSERT_EQ(listener.offered.size(), 2u);
  EXPECT_EQ(listener.offered[0].offset, 1);
  EXPECT_EQ(listener.offered[1].offset, MemoryConsumerKafka::kNoOffset);
  EXPECT_EQ(consumer.HighWatermark(1), 4);
  EXPECT_EQ(consumer.HighWatermark(5), std::nullopt);

  // More records: read, and the end told again.
  topics.topics["events"][0].push_back({.key = "a3"});
  EXPECT_EQ(Drain(consumer),
            (std::vector<std::string>{"message 0 3 a3", "end 0"}));

  consumer.InjectError(absl::UnavailableError("down"), /*code=*/-195,
                       /*fatal=*/false);
  ConsumerKafka::Event e = consumer.Poll(absl::ZeroDuration());
  EXPECT_EQ(e.kind, Kind::kError);
  EXPECT_EQ(e.code, -195);
  EXPECT_FALSE(e.fatal);

  consumer.Revoke({1});
  EXPECT_EQ(Drain(consumer), std::vector<std::string>{});
  EXPECT_EQ(listener.revoked, std::vector<int32_t>{1});
  consumer.Close();
  EXPECT_EQ(listener.revoked, (std::vector<int32_t>{1, 0}));
  consumer.Close();
  EXPECT_EQ(listener.revoked.size(), 2u);
}

// One process of `bubblewatch process` over the in-memory Kafka: a
// partition task fed by a MemoryConsumerKafka, its events handled as
// StreamProcessor::Impl::Run handles them, the task the consumer's
// listener as StreamProcessor is, on a simulated clock.
class SeamProcess : public ConsumerKafka::Listener {
 public:
  SeamProcess(const StreamProcessorOptions& options, const std::string& dir,
              MemoryTopics* topics, absl::Time* now)
      : options_(options), topics_(topics), now_(now) {
    absl::StatusOr<std::unique_ptr<WindowStore>> store =
        OpenRocksDbWindowStore(dir);
    EXPECT_TRUE(store.ok()) << store.status();
    store_ = *std::move(store);
    task_ = std::make_unique<PartitionTask>(options_, store_.get(), &health_,
                                            &shared_);
    auto kafka = std::make_unique<testing::MemoryKafka>(topics_, &shared_);
    kafka_ = kafka.get();
    task_->Connect(std::move(kafka), nullptr, kafka_);
    kafka_->set_dead_letter_sink(task_->dead_letters());
    task_->Start(*now_);
    consumer_ = std::make_unique<MemoryConsumerKafka>(topics_, this);
    EXPECT_TRUE(consumer_->Subscribe(options_.topic).ok());
    last_message_ = *now_;
  }
  ~SeamProcess() override { consumer_->Close(); }

  MemoryConsumerKafka& consumer() { return *consumer_; }
  PartitionTask& task() { return *task_; }
  WindowStore& store() { return *store_; }
  // The last assignment, as the task rewrote it.
  const std::vector<PartitionTask::Assigned>& last_assigned() const {
    return last_assigned_;
  }

  // Polls until a poll brings nothing; at most `max_messages` messages.
  absl::Status PollAll(int64_t max_messages = 1'000'000) {
    for (int64_t read = 0; read < max_messages;) {
      ConsumerKafka::Event event = consumer_->Poll(absl::Milliseconds(100));
      kafka_->Poll(absl::ZeroDuration());
      if (!shared_.fatal.ok()) return shared_.fatal;
      switch (event.kind) {
        case Kind::kNothing:
          return task_->Tick(*now_);
        case Kind::kRefetched:
          break;
        case Kind::kMessage:
          *now_ += absl::Milliseconds(1);
          last_message_ = *now_;
          ++read;
          if (absl::Status s = task_->OnMessage(event.message, *now_);
              !s.ok()) {
            return s;
          }
          break;
        case Kind::kEndOfPartition:
          task_->OnEndOfPartition(event.partition);
          break;
        case Kind::kError:
          return event.error;
      }
      if (absl::Status s = task_->Tick(*now_); !s.ok()) return s;
    }
    return absl::OkStatus();
  }

  // --exit-when-idle: ticks every 100 ms until idle, then the last commit.
  absl::Status RunUntilIdle() {
    if (absl::Status s = PollAll(); !s.ok()) return s;
    for (int i = 0;
         i < 100'000 && !(*now_ - last_message_ >= options_.exit_when_idle &&
                          task_->AllClosed());
         ++i) {
      *now_ += absl::Milliseconds(100);
      if (absl::Status s = PollAll(); !s.ok()) return s;
    }
    if (absl::Status s = task_->Finish(*now_); !s.ok()) return s;
    return shared_.fatal;
  }

 private:
  void OnAssigned(std::vector<PartitionTask::Assigned>& assigned) override {
    last_message_ = *now_;
    task_->Assign(assigned);
    last_assigned_ = assigned;
  }
  void OnRevoked(const std::vector<int32_t>& revoked) override {
    task_->Revoke(revoked, *now_);
  }
  int64_t NextOffset(int32_t partition) const override {
    return task_->next_offset(partition);
  }
  std::optional<std::vector<std::pair<int32_t, int64_t>>> Lagging()
      const override {
    return task_->Lagging();
  }

  StreamProcessorOptions options_;
  MemoryTopics* topics_;
  absl::Time* now_;
  absl::Time last_message_;
  RuntimeShared shared_;
  BrokerHealth health_;
  std::unique_ptr<WindowStore> store_;
  std::unique_ptr<PartitionTask> task_;
  testing::MemoryKafka* kafka_ = nullptr;  // Owned by the task.
  std::unique_ptr<MemoryConsumerKafka> consumer_;
  std::vector<PartitionTask::Assigned> last_assigned_;
};

SyntheticFleetOptions SeamFleet() {
  return {.jobs = 2,
          .gpus_per_job = 2,
          .duration = absl::Seconds(40),
          .events_per_second_per_gpu = 500};
}

// The encoded windows of `jobs` in `store`, in scan order.
std::vector<std::string> Windows(WindowStore& store,
                                 const std::vector<std::string>& jobs) {
  std::vector<std::string> out;
  for (const std::string& job : jobs) {
    absl::StatusOr<std::vector<WindowSummary>> windows =
        store.Scan(job, absl::InfinitePast(), absl::InfiniteFuture());
    EXPECT_TRUE(windows.ok()) << windows.status();
    if (!windows.ok()) continue;
    for (const WindowSummary& w : *windows) {
      out.push_back(EncodeWindowSummary(w));
    }
  }
  return out;
}

// Through the seam, with a revocation mid-stream and a restart, the store
// ends with the windows the task driver's one uninterrupted run stores.
TEST(ConsumerSeam, RevokedAndRestartedStoresWhatOneRunStores) {
  ::bubblewatch::testing::TempDir dir;
  const std::vector<std::string> jobs = {"synthetic-job-000",
                                         "synthetic-job-001"};
  StreamProcessorOptions options = testing::ProcessOptions();
  options.state_topic.clear();
  testing::TaskDriver reference(options, dir.Sub("reference"));
  ASSERT_TRUE(reference.SendFleet(SeamFleet()).ok());
  ASSERT_TRUE(reference.RunUntilIdle().ok());
  const std::vector<MemoryRecord> input = reference.Input();
  ASSERT_GT(input.size(), 20u);
  std::vector<std::string> want = Windows(*reference.store(), jobs);
  ASSERT_FALSE(want.empty());

  MemoryTopics topics;
  for (const std::string& t :
       {options.topic, options.windows_topic, options.dlq_topic}) {
    if (!t.empty()) topics.topics[t].resize(1);
  }
  topics.topics[options.topic][0] = input;
  absl::Time now = absl::FromUnixSeconds(1'800'000'000);
  const int64_t half = static_cast<int64_t>(input.size()) / 2;
  {
    SeamProcess first(options, dir.Sub("seam"), &topics, &now);
    first.consumer().Assign({0});
    ASSERT_TRUE(first.PollAll(half).ok());
    EXPECT_EQ(first.consumer().position(0), half);
    // A rebalance takes the partition away and gives it back, its group
    // offset lost meanwhile: the consumer starts where the task says (its
    // store's resume offset), not at the topic's start.
    first.consumer().Revoke({0});
    EXPECT_EQ(first.consumer().Poll(absl::ZeroDuration()).kind, Kind::kNothing);
    EXPECT_EQ(topics.group_offsets.erase({options.topic, 0}), 1u);
    first.consumer().Assign({0});
    ASSERT_TRUE(first.PollAll(half / 2).ok());
    ASSERT_EQ(first.last_assigned().size(), 1u);
    const int64_t resume = first.last_assigned()[0].offset;
    EXPECT_GT(resume, 0);
    EXPECT_LT(resume, half);
    EXPECT_EQ(first.consumer().position(0), resume + half / 2);
  }  // Stopped: closing the consumer revokes the partition (a commit).
  SeamProcess second(options, dir.Sub("seam"), &topics, &now);
  second.consumer().Assign({0});
  ASSERT_TRUE(second.RunUntilIdle().ok());
  EXPECT_EQ(second.consumer().position(0), static_cast<int64_t>(input.size()));
  EXPECT_EQ(Windows(second.store(), jobs), want);
  EXPECT_EQ(second.task().stats().duplicate_batches, 0);
}

}  // namespace
}  // namespace bubblewatch::consumer_seam_test
