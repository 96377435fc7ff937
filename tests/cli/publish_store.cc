#include "tests/cli/publish_store.h"

#include <librdkafka/rdkafka.h>

#include <regex>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "httplib.h"
#include "kafka/kafka_config.h"
#include "kafka/kafka_handles.h"
#include "processor/fleet_topics.h"
#include "processor/job_state.h"
#include "processor/state_changelog.h"
#include "schemas/window_summary_codec.h"
#include "storage/window_store.h"
#include "tests/testing/kafka_broker.h"
#include "tests/testing/poll.h"

namespace bubblewatch::testing {
namespace {

constexpr int kWindowPartitions = 3;

void Produce(rd_kafka_t* producer, const std::string& topic, int32_t partition,
             const std::string& key, const std::string& value) {
  ASSERT_EQ(rd_kafka_producev(
                producer, RD_KAFKA_V_TOPIC(topic.c_str()),
                RD_KAFKA_V_PARTITION(partition),
                RD_KAFKA_V_KEY(key.data(), key.size()),
                RD_KAFKA_V_VALUE(const_cast<char*>(value.data()), value.size()),
                RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY), RD_KAFKA_V_END),
            RD_KAFKA_RESP_ERR_NO_ERROR);
}

}  // namespace

void PublishStore(const std::string& store, const std::string& topic) {
  const std::string brokers = Brokers();
  ASSERT_FALSE(brokers.empty());
  CreateTopic(topic + ".windows", kWindowPartitions, brokers);
  CreateTopic(topic + ".state", 1, brokers);
  auto reader = OpenRocksDbWindowStoreReadOnly(store);
  ASSERT_TRUE(reader.ok()) << reader.status();
  auto producer = NewKafkaClient(RD_KAFKA_PRODUCER, KafkaConfig(brokers));
  ASSERT_TRUE(producer.ok()) << producer.status();
  auto jobs = (*reader)->ListJobs();
  ASSERT_TRUE(jobs.ok()) << jobs.status();
  // One snapshot of an input partition "TOPIC/0" holding every job.
  PartitionSnapshot snapshot{.topic = topic, .partition = 0};
  for (const JobInfo& job : *jobs) {
    auto windows =
        (*reader)->Scan(job.job, absl::InfinitePast(), absl::InfiniteFuture());
    ASSERT_TRUE(windows.ok()) << windows.status();
    for (const WindowSummary& w : *windows) {
      Produce(producer->get(), topic + ".windows",
              WindowTopicPartition(w.job, kWindowPartitions),
              WindowTopicKey(w.job, w.window.start_ns), EncodeWindowSummary(w));
    }
    auto state = (*reader)->JobState(job.job);
    ASSERT_TRUE(state.ok()) << state.status();
    // A snapshot's job always has a state; one the store lacks (no record,
    // or an empty one) reads as the default (an active job), as it does
    // from the store.
    snapshot.jobs[job.job] = state->has_value() && !(*state)->empty()
                                 ? **state
                                 : JobState().Serialize();
    snapshot.activity[job.job] =
        JobActivity{.last_event_ns = job.last_event_ns,
                    .last_seen_wall_ns = absl::ToUnixNanos(job.last_seen_wall)};
  }
  auto alerts = (*reader)->AlertStates();
  ASSERT_TRUE(alerts.ok()) << alerts.status();
  for (const auto& [key, blob] : *alerts) {
    if (key.rfind("j/", 0) == 0) snapshot.job_alerts[key.substr(2)] = blob;
  }
  Produce(producer->get(), topic + ".state", 0, absl::StrCat(topic, "/0"),
          EncodePartitionSnapshot(snapshot));
  ASSERT_EQ(rd_kafka_flush(producer->get(), 30000), RD_KAFKA_RESP_ERR_NO_ERROR);
}

std::unique_ptr<ServeProcess> ServeThroughBrokers(
    const std::string& store, const std::string& serve_store,
    const std::string& topic_base) {
  const std::string topic = Unique(topic_base);
  PublishStore(store, topic);
  if (::testing::Test::HasFatalFailure()) return nullptr;
  auto serve = ServeProcess::StartCommand(
      "serve --brokers " + Brokers() + " --store '" + serve_store +
      "' --windows-topic " + topic + ".windows --state-topic " + topic +
      ".state --listen 127.0.0.1:0");
  if (serve == nullptr) return nullptr;
  auto reader = OpenRocksDbWindowStoreReadOnly(store);
  EXPECT_TRUE(reader.ok()) << reader.status();
  if (!reader.ok()) return nullptr;
  const size_t jobs = (*reader)->ListJobs().value().size();
  static const std::regex kCaughtUp(
      R"re(,"lag_messages":0,.*"state_lag_messages":0\})re");
  // The one snapshot published, applied (not skipped as invalid).
  const std::string applied =
      "\nbubblewatch_serve_snapshots_applied_total{"
      "topic=\"" +
      topic + ".state\"} 1\n";
  std::string health, listed, metrics;
  const bool ready = PollUntil(
      [&] {
        httplib::Client client(serve->url());
        auto h = client.Get("/healthz");
        auto j = client.Get("/api/v1/jobs");
        auto m = client.Get("/metrics");
        if (!h || !j || !m) return false;
        health = h->body;
        listed = j->body;
        metrics = m->body;
        if (metrics.find(applied) == std::string::npos) return false;
        size_t n = 0;
        for (size_t at = listed.find("\"job\":"); at != std::string::npos;
             at = listed.find("\"job\":", at + 1)) {
          ++n;
        }
        return std::regex_search(health, kCaughtUp) && n == jobs;
      },
      absl::Seconds(60), absl::Milliseconds(100));
  EXPECT_TRUE(ready) << health << "\n"
                     << listed << "\n"
                     << metrics << "\n"
                     << serve->Log();
  return ready ? std::move(serve) : nullptr;
}

}  // namespace bubblewatch::testing
