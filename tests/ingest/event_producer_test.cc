// EventProducer and ReplayTraces against the embedded (mock) cluster: fast
// checks of batching, keys and counters. The guarantees themselves are
// tested against a real broker in tests/kafka (ctest label kafka).
#include "ingest/event_producer.h"

#include <map>
#include <set>
#include <string>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "ingest/batched_trace.h"
#include "ingest/synthetic/synthetic_fleet.h"
#include "ingest/trace_replay.h"
#include "kafka/embedded_kafka_cluster.h"
#include "schemas/event_batch_codec.h"
#include "tests/testing/topic_reader.h"

namespace bubblewatch {
namespace {

using ::testing::HasSubstr;

std::vector<SyntheticJob> SmallFleet(int jobs) {
  SyntheticFleetOptions o;
  o.jobs = jobs;
  o.gpus_per_job = 2;
  o.duration = absl::Seconds(2);
  o.scenario = SyntheticScenario::kMix;
  auto fleet = GenerateSyntheticFleet(o);
  EXPECT_TRUE(fleet.ok());
  return *std::move(fleet);
}

std::vector<std::unique_ptr<BatchedTrace>> Streams(
    std::vector<SyntheticJob> jobs, int64_t batch_events) {
  std::vector<std::unique_ptr<BatchedTrace>> streams;
  for (SyntheticJob& job : jobs) {
    for (Trace& t : job.ranks) {
      BatchHeader identity;
      identity.job = t.job;
      identity.host = t.host;
      identity.rank = t.rank;
      identity.world_size = t.world_size;
      streams.push_back(std::make_unique<BatchedTrace>(
          std::move(t), identity, BatchingOptions{.max_events = batch_events}));
    }
  }
  return streams;
}

std::vector<BatchedTrace*> Pointers(
    const std::vector<std::unique_ptr<BatchedTrace>>& streams) {
  std::vector<BatchedTrace*> out;
  for (const auto& s : streams) out.push_back(s.get());
  return out;
}

class EventProducerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto cluster = EmbeddedKafkaCluster::Create();
    ASSERT_TRUE(cluster.ok()) << cluster.status();
    cluster_ = *std::move(cluster);
    ASSERT_TRUE(cluster_->CreateTopic("events", /*partitions=*/4).ok());
  }

  std::unique_ptr<EventProducer> Producer(absl::Duration timeout) {
    EventProducerOptions options;
    options.topic = "events";
    options.delivery_timeout = timeout;
    options.linger = absl::Milliseconds(5);
    auto producer = EventProducer::Create(
        KafkaConfig(cluster_->bootstrap_servers()), options);
    EXPECT_TRUE(producer.ok()) << producer.status();
    return *std::move(producer);
  }

  std::unique_ptr<EmbeddedKafkaCluster> cluster_;
};

TEST_F(EventProducerTest, EveryBatchArrivesKeyedByJobWithItsSequence) {
  auto streams = Streams(SmallFleet(3), /*batch_events=*/1000);
  int64_t events = 0;
  size_t batches = 0;
  for (const auto& s : streams) {
    events += s->num_events();
    batches += s->num_batches() + 1;  // Its end marker.
  }
  std::unique_ptr<EventProducer> producer = Producer(absl::Seconds(20));
  ASSERT_TRUE(producer->WaitUntilReachable(absl::Seconds(10)).ok());
  ASSERT_TRUE(ReplayTraces(Pointers(streams), producer.get(), {}).ok());
  ASSERT_TRUE(producer->Flush(absl::Seconds(20)).ok());
  const ProducerStats stats = producer->stats();
  EXPECT_EQ(stats.batches_sent, static_cast<int64_t>(batches));
  EXPECT_EQ(stats.batches_acked, static_cast<int64_t>(batches));
  EXPECT_EQ(stats.events_acked, events);
  EXPECT_EQ(stats.batches_failed, 0);
  EXPECT_EQ(stats.batches_in_flight(), 0);

  auto messages = testing::ReadTopic(cluster_->bootstrap_servers(), "events",
                                     batches, absl::Seconds(30));
  ASSERT_TRUE(messages.ok()) << messages.status();
  ASSERT_EQ(messages->size(), batches);
  std::map<std::string, int32_t> partition_of_job;
  std::map<uint64_t, uint64_t> next_sequence;  // By producer id.
  std::set<uint64_t> ended;                    // Producers past their marker.
  std::set<std::string> ending;                // Jobs with a marker sent.
  int64_t decoded_events = 0;
  for (const testing::ConsumedMessage& m : *messages) {
    auto batch = DecodeEventBatch(std::span<const uint8_t>(
        reinterpret_cast<const uint8_t*>(m.value.data()), m.value.size()));
    ASSERT_TRUE(batch.ok()) << batch.status();
    EXPECT_EQ(m.key, batch->header.job);
    auto [it, inserted] = partition_of_job.emplace(m.key, m.partition);
    EXPECT_EQ(it->second, m.partition) << "job " << m.key << " split";
    // Within a partition, each producer's batches arrive in sequence.
    EXPECT_EQ(batch->header.sequence,
              next_sequence[batch->header.producer_id]++);
    // The end marker comes last, without events.
    EXPECT_FALSE(ended.contains(batch->header.producer_id));
    // A job's markers follow the last batch of all its streams (ranks), so
    // that no rank's marker ends the job before another rank's data
    // (docs/semantics.md#job-lifecycle).
    if (!batch->header.end_of_stream) {
      EXPECT_FALSE(ending.contains(m.key))
          << "job " << m.key << ": data after one of its markers";
    }
    if (batch->header.end_of_stream) {
      ending.insert(m.key);
      ended.insert(batch->header.producer_id);
      EXPECT_TRUE(batch->trace.gpu.empty() && batch->trace.cpu.empty());
    }
    EXPECT_LE(batch->trace.gpu.size() + batch->trace.cpu.size(), 1000u);
    decoded_events += batch->trace.gpu.size() + batch->trace.cpu.size();
  }
  EXPECT_EQ(decoded_events, events);
  EXPECT_EQ(partition_of_job.size(), 3u);
  EXPECT_EQ(next_sequence.size(), streams.size());
  EXPECT_EQ(ended.size(), streams.size());
}

// --split-ranks (docs/architecture.md#one-job-across-processors): a job
// whose declared world size reaches the threshold is keyed JOB@HOST, or
// JOB@rank-R for a rank that names no host, its end markers with its
// batches; a smaller job, or any job without the flag, keeps JOB.
TEST_F(EventProducerTest, SplitRanksKeysABigJobsBatchesByHostOrRank) {
  std::vector<SyntheticJob> fleet = SmallFleet(3);
  // Job 0: 4 ranks declared, on two hosts; job 1: 4 ranks, no host; job 2:
  // world size 3, below the threshold.
  std::vector<std::unique_ptr<BatchedTrace>> streams;
  std::map<uint64_t, std::string> want;  // Producer id -> its key.
  for (size_t j = 0; j < fleet.size(); ++j) {
    for (size_t r = 0; r < fleet[j].ranks.size(); ++r) {
      Trace& t = fleet[j].ranks[r];
      BatchHeader identity{.job = t.job,
                           .host = j == 0   ? absl::StrCat("node-", r % 2)
                                   : j == 1 ? ""
                                            : "node-x",
                           .rank = static_cast<int32_t>(r),
                           .world_size = j == 2 ? 3 : 4};
      streams.push_back(std::make_unique<BatchedTrace>(
          std::move(t), identity, BatchingOptions{.max_events = 1000}));
      const BatchHeader& h = streams.back()->header();
      want[h.producer_id] = j == 0   ? absl::StrCat(h.job, "@node-", r % 2)
                            : j == 1 ? absl::StrCat(h.job, "@rank-", r)
                                     : h.job;
      // The rule itself, and no split without the flag.
      EXPECT_EQ(BatchKey(h, 4), want[h.producer_id]);
      EXPECT_EQ(BatchKey(h, 0), h.job);
      EXPECT_EQ(BatchKey(h, 5), h.job) << "world size below 5";
    }
  }
  ASSERT_EQ(want.size(), streams.size());
  size_t batches = 0;
  for (const auto& s : streams) batches += s->num_batches() + 1;
  std::unique_ptr<EventProducer> producer = Producer(absl::Seconds(20));
  ASSERT_TRUE(producer->WaitUntilReachable(absl::Seconds(10)).ok());
  ASSERT_TRUE(ReplayTraces(Pointers(streams), producer.get(),
                           ReplayOptions{.split_ranks = 4})
                  .ok());
  ASSERT_TRUE(producer->Flush(absl::Seconds(20)).ok());
  auto messages = testing::ReadTopic(cluster_->bootstrap_servers(), "events",
                                     batches, absl::Seconds(30));
  ASSERT_TRUE(messages.ok()) << messages.status();
  ASSERT_EQ(messages->size(), batches);
  std::set<std::string> keys;
  int markers = 0;
  for (const testing::ConsumedMessage& m : *messages) {
    auto batch = DecodeEventBatch(std::span<const uint8_t>(
        reinterpret_cast<const uint8_t*>(m.value.data()), m.value.size()));
    ASSERT_TRUE(batch.ok()) << batch.status();
    EXPECT_EQ(m.key, want[batch->header.producer_id]);
    keys.insert(m.key);
    markers += batch->header.end_of_stream ? 1 : 0;
  }
  EXPECT_EQ(markers, static_cast<int>(streams.size()));
  // Two hosts of job 0, each rank of job 1, job 2 whole.
  EXPECT_EQ(keys.size(), 2u + fleet[1].ranks.size() + 1u);
}

TEST_F(EventProducerTest, PacedReplayFollowsEventTime) {
  Trace t;
  NameInterner names(&t);
  const NameId k = names.Intern("k");
  // 300 ms of event time, one kernel every 10 ms.
  for (int i = 0; i < 30; ++i) {
    t.gpu.push_back(GpuActivity{.start_ns = i * 10'000'000LL,
                                .end_ns = i * 10'000'000LL + 1000,
                                .name = k});
  }
  BatchHeader identity;
  identity.job = "paced";
  BatchedTrace stream(std::move(t), identity,
                      {.max_events = 4096, .max_span_ns = 50'000'000});
  EXPECT_EQ(stream.num_batches(), 6u);
  std::unique_ptr<EventProducer> producer = Producer(absl::Seconds(20));
  ReplayOptions replay;
  replay.speed = 1.0;
  const absl::Time begin = absl::Now();
  ASSERT_TRUE(ReplayTraces({&stream}, producer.get(), replay).ok());
  EXPECT_GE(absl::Now() - begin, absl::Milliseconds(280));
  ASSERT_TRUE(producer->Flush(absl::Seconds(20)).ok());
}

TEST_F(EventProducerTest, UndeliveredBatchesAreCountedAndReported) {
  std::unique_ptr<EventProducer> producer = Producer(absl::Seconds(2));
  ASSERT_TRUE(producer->WaitUntilReachable(absl::Seconds(10)).ok());
  ASSERT_TRUE(cluster_->SetBrokerDown(1).ok());
  const std::vector<uint8_t> message(100, 7);
  for (int i = 0; i < 5; ++i) {
    ASSERT_TRUE(producer->Send("job", message, /*events=*/10).ok());
  }
  const absl::Time begin = absl::Now();
  absl::Status flushed = producer->Flush(absl::Seconds(15));
  // The batches fail at their 2 s message timeout, not at the flush's 15 s
  // deadline. The bound is that deadline less a margin, not a speed: under
  // ASan on a loaded 2-core machine the failure took 10.9 s.
  EXPECT_LT(absl::Now() - begin, absl::Seconds(14));
  EXPECT_FALSE(flushed.ok());
  EXPECT_THAT(flushed.message(), HasSubstr("50 of 50 events (5 of 5 batches)"));
  EXPECT_EQ(producer->stats().batches_failed, 5);
  EXPECT_EQ(producer->stats().batches_acked, 0);
}

TEST_F(EventProducerTest, RetriesAcrossABrokerOutageWithoutDuplicates) {
  std::unique_ptr<EventProducer> producer = Producer(absl::Seconds(30));
  ASSERT_TRUE(producer->WaitUntilReachable(absl::Seconds(10)).ok());
  const std::vector<uint8_t> message(100, 7);
  ASSERT_TRUE(producer->Send("job", message, 1).ok());
  ASSERT_TRUE(producer->Flush(absl::Seconds(10)).ok());
  ASSERT_TRUE(cluster_->SetBrokerDown(1).ok());
  for (int i = 0; i < 20; ++i)
    ASSERT_TRUE(producer->Send("job", message, 1).ok());
  // Let the producer notice the outage: nothing gets acknowledged.
  producer->Poll(absl::Milliseconds(500));
  EXPECT_EQ(producer->stats().batches_acked, 1);
  ASSERT_TRUE(cluster_->SetBrokerUp(1).ok());
  ASSERT_TRUE(producer->Flush(absl::Seconds(25)).ok());
  EXPECT_EQ(producer->stats().batches_acked, 21);
  auto messages = testing::ReadTopic(cluster_->bootstrap_servers(), "events",
                                     21, absl::Seconds(20));
  ASSERT_TRUE(messages.ok()) << messages.status();
  EXPECT_EQ(messages->size(), 21u);
}

TEST(EventProducer, UnreachableBrokerIsAClearErrorWithinTheTimeout) {
  EventProducerOptions options;
  options.topic = "t";
  auto producer = EventProducer::Create(KafkaConfig("127.0.0.1:1"), options);
  ASSERT_TRUE(producer.ok());
  const absl::Time begin = absl::Now();
  absl::Status s = (*producer)->WaitUntilReachable(absl::Seconds(2));
  EXPECT_LT(absl::Now() - begin, absl::Seconds(4));
  EXPECT_FALSE(s.ok());
  EXPECT_THAT(s.message(), HasSubstr("no Kafka broker at 127.0.0.1:1"));
}

TEST(EventProducer, PropertiesThatBreakTheGuaranteesAreRejected) {
  for (const char* bad : {"enable.idempotence=false", "acks=1",
                          "partitioner=consistent_random"}) {
    KafkaConfig config("127.0.0.1:1");
    ASSERT_TRUE(config.SetAssignment(bad).ok());
    auto producer = EventProducer::Create(config, {});
    EXPECT_EQ(producer.status().code(), absl::StatusCode::kInvalidArgument)
        << bad;
  }
  KafkaConfig config("127.0.0.1:1");
  ASSERT_TRUE(config.SetAssignments({"acks=-1", "compression.type=zstd"}).ok());
  EXPECT_TRUE(EventProducer::Create(config, {}).ok());
}

}  // namespace
}  // namespace bubblewatch
