// The producer across a real broker restart (ctest label kafka): batches in
// flight when the broker stops are retried once it is back, and idempotence
// keeps them from being stored twice. This test runs its own broker
// (tests/testing/own_broker.h) on the shared test broker's port + 50 and
// restarts it (SIGTERM) with its data kept.
//
// Post-mortem aids: BUBBLEWATCH_TEST_RDKAFKA_DEBUG=eos,msg logs the
// producer's librdkafka debug contexts; BUBBLEWATCH_TEST_KEEP_BROKER=1 leaves
// the broker running (see own_broker.h).
#include <signal.h>
#include <unistd.h>

#include <cstdlib>
#include <map>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "ingest/batched_trace.h"
#include "ingest/event_producer.h"
#include "ingest/synthetic/synthetic_fleet.h"
#include "ingest/trace_replay.h"
#include "schemas/event_batch_codec.h"
#include "spdlog/spdlog.h"
#include "tests/testing/own_broker.h"
#include "tests/testing/poll.h"
#include "tests/testing/topic_reader.h"

namespace bubblewatch {
namespace {

using testing::PollUntil;

// The shared test broker's port + 50 (39142 by default), so that several
// checkouts testing at once (each with its own BUBBLEWATCH_KAFKA_BROKERS) do
// not collide.
const int kPort = testing::PortAboveSharedBroker(50);

TEST(BrokerRestart, InFlightBatchesAreRetriedNotLostNorDuplicated) {
  // ops/test passes the shared broker; this test uses its own, but like every
  // kafka-labelled test it refuses to run outside ops/test's setup.
  ASSERT_NE(std::getenv("BUBBLEWATCH_KAFKA_BROKERS"), nullptr)
      << "run through ops/test (BUBBLEWATCH_KAFKA_BROKERS is not set)";
  testing::OwnBroker broker(kPort, "restart");
  ASSERT_TRUE(broker.Start()) << "ops/kafka/start --port " << kPort;

  // 40 s of event time for 4 GPUs, replayed at 4x: about 10 s of sending,
  // so the restart (several seconds) falls in the middle.
  SyntheticFleetOptions options;
  options.jobs = 2;
  options.gpus_per_job = 2;
  options.duration = absl::Seconds(40);
  options.events_per_second_per_gpu = 5000;
  auto fleet = GenerateSyntheticFleet(options);
  ASSERT_TRUE(fleet.ok());
  std::vector<std::unique_ptr<BatchedTrace>> streams;
  std::vector<BatchedTrace*> pointers;
  size_t batches = 0;
  for (SyntheticJob& job : *fleet) {
    for (Trace& t : job.ranks) {
      BatchHeader identity;
      identity.job = t.job;
      identity.host = t.host;
      identity.rank = t.rank;
      streams.push_back(std::make_unique<BatchedTrace>(
          std::move(t), identity,
          BatchingOptions{.max_events = 1024, .max_span_ns = 200'000'000}));
      pointers.push_back(streams.back().get());
      // And the stream's end marker (docs/semantics.md#job-lifecycle).
      batches += streams.back()->num_batches() + 1;
    }
  }

  const std::string topic = absl::StrCat("it-restart-", getpid());
  EventProducerOptions producer_options;
  producer_options.topic = topic;
  producer_options.delivery_timeout = absl::Seconds(180);
  producer_options.linger = absl::Milliseconds(20);
  KafkaConfig producer_config(broker.brokers());
  if (const char* debug = std::getenv("BUBBLEWATCH_TEST_RDKAFKA_DEBUG")) {
    producer_config.Set("debug", debug);
    spdlog::set_level(spdlog::level::debug);
  }
  auto producer = EventProducer::Create(producer_config, producer_options);
  ASSERT_TRUE(producer.ok()) << producer.status();
  ASSERT_TRUE((*producer)->WaitUntilReachable(absl::Seconds(60)).ok());

  absl::Status sent, flushed;
  std::thread sender([&] {
    ReplayOptions replay;
    replay.speed = 4;
    sent = ReplayTraces(pointers, producer->get(), replay);
    flushed = (*producer)->Flush(absl::Seconds(200));
  });
  // Restart once a tenth of the batches is acknowledged.
  ASSERT_TRUE(PollUntil(
      [&] {
        return (*producer)->stats().batches_acked >=
               static_cast<int64_t>(batches / 10);
      },
      absl::Seconds(60)));
  const int64_t acked_before = (*producer)->stats().batches_acked;
  absl::Duration down_for;
  std::string error;
  const bool restarted = broker.Restart(SIGTERM, &down_for, &error);
  sender.join();
  ASSERT_TRUE(restarted) << error;
  ASSERT_TRUE(sent.ok()) << sent;
  ASSERT_TRUE(flushed.ok()) << flushed;
  const ProducerStats stats = (*producer)->stats();
  EXPECT_LT(acked_before, static_cast<int64_t>(batches)) << "not mid-run";
  EXPECT_EQ(stats.batches_sent, static_cast<int64_t>(batches));
  EXPECT_EQ(stats.batches_acked, static_cast<int64_t>(batches));
  std::cerr << "broker was down for " << absl::FormatDuration(down_for) << "; "
            << acked_before << " of " << batches
            << " batches were acknowledged before the restart\n";

  auto messages =
      testing::ReadTopic(broker.brokers(), topic, batches, absl::Seconds(60));
  if (!messages.ok()) {
    // Read what is there, so that the failures below name the missing batch.
    ADD_FAILURE() << messages.status() << " (state dir " << broker.state_dir()
                  << ")";
    messages =
        testing::ReadTopic(broker.brokers(), topic, 0, absl::Seconds(20));
  }
  ASSERT_TRUE(messages.ok()) << messages.status();
  EXPECT_EQ(messages->size(), batches);
  std::map<uint64_t, std::vector<uint64_t>> sequences;
  for (const testing::ConsumedMessage& m : *messages) {
    auto batch = DecodeEventBatch(std::span<const uint8_t>(
        reinterpret_cast<const uint8_t*>(m.value.data()), m.value.size()));
    ASSERT_TRUE(batch.ok()) << batch.status();
    sequences[batch->header.producer_id].push_back(batch->header.sequence);
  }
  EXPECT_EQ(sequences.size(), streams.size());
  for (auto& [producer_id, seq] : sequences) {
    // Per key, Kafka keeps order: the sequences are already sorted.
    for (size_t i = 0; i < seq.size(); ++i) {
      ASSERT_EQ(seq[i], i) << "producer " << producer_id
                           << ": batch lost (or duplicated) near sequence " << i
                           << " of " << seq.size();
    }
  }
}

}  // namespace
}  // namespace bubblewatch
