// `bubblewatch topics` and the windows topic `process` creates, against the
// real test broker (ctest label kafka; an earlier review): what `create` makes
// is what `describe` (and the cluster, asked directly) reports; a missing
// windows topic is created compacted with the events topic's partition
// count, and each window goes to its job's partition under a (job, window)
// key; the events topic refuses a compressed record that inflates past the
// processor's batch limit.
#include <algorithm>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kafka/kafka_admin.h"
#include "kafka/kafka_config.h"
#include "kafka/kafka_handles.h"
#include "processor/batch_validator.h"
#include "processor/fleet_topics.h"
#include "schemas/window_summary_codec.h"
#include "simdjson.h"
#include "tests/cli/cli_runner.h"
#include "tests/testing/kafka_broker.h"
#include "tests/testing/own_broker.h"
#include "tests/testing/temp_dir.h"
#include "tests/testing/topic_reader.h"

namespace bubblewatch {
namespace {

using ::bubblewatch::testing::RunBubblewatch;
using ::testing::HasSubstr;
using ::testing::Not;

// The cluster's own answer, not the command's.
std::vector<TopicDescription> Describe(
    const std::vector<std::string>& names,
    const std::string& brokers = testing::Brokers()) {
  absl::StatusOr<RdKafkaPtr> client =
      NewKafkaClient(RD_KAFKA_PRODUCER, KafkaConfig(brokers));
  EXPECT_TRUE(client.ok()) << client.status();
  if (!client.ok()) return {};
  absl::StatusOr<std::vector<TopicDescription>> d =
      DescribeTopics(client->get(), names, absl::Seconds(30));
  EXPECT_TRUE(d.ok()) << d.status();
  return d.ok() ? *d : std::vector<TopicDescription>{};
}

std::string FleetFlags(const std::string& base) {
  return " --topic " + base + " --windows-topic " + base +
         ".windows --parts-topic " + base + ".parts --state-topic " + base +
         ".state --dlq-topic " + base + ".dlq --alerts-topic " + base +
         ".alerts";
}

TEST(TopicsCommand, CreateThenDescribeRoundTrips) {
  const std::string brokers = testing::Brokers();
  ASSERT_FALSE(HasFailure());
  const std::string base = testing::Unique("it-topics");
  auto created = RunBubblewatch("topics create --brokers " + brokers +
                                " --partitions 5 --replication-factor 1"
                                " --retention 72h" +
                                FleetFlags(base));
  ASSERT_EQ(created.exit_code, 0) << created.err;
  EXPECT_THAT(created.out, HasSubstr("created " + base + ".windows: 5 "));

  // The cluster holds what was asked for.
  const std::vector<std::string> names = {
      base,          base + ".windows", base + ".state",
      base + ".dlq", base + ".alerts",  base + ".parts"};
  std::vector<TopicDescription> cluster = Describe(names);
  ASSERT_EQ(cluster.size(), 6u);
  const std::map<std::string, std::pair<int, std::string>> want = {
      {base, {5, "delete"}},
      {base + ".windows", {5, "compact,delete"}},
      // Keyed by job: compaction would keep one part per job.
      {base + ".parts", {5, "delete"}},
      {base + ".state", {5, "compact"}},
      {base + ".dlq", {1, "delete"}},
      {base + ".alerts", {1, "delete"}}};
  for (const TopicDescription& d : cluster) {
    ASSERT_TRUE(d.exists) << d.name;
    EXPECT_EQ(d.partitions, want.at(d.name).first) << d.name;
    EXPECT_EQ(d.replication_factor, 1) << d.name;
    EXPECT_EQ(d.configs.at("cleanup.policy"), want.at(d.name).second) << d.name;
  }
  EXPECT_EQ(cluster[0].configs.at("retention.ms"),
            std::to_string(3 * 24 * 3600 * 1000LL));
  // The events topic bounds a record's decompressed size at the processor's
  // batch limit; the others are left at the broker's default.
  EXPECT_EQ(cluster[0].configs.at(kMaxDecompressedRecordConfig),
            std::to_string(BatchLimits{}.max_batch_bytes));
  EXPECT_NE(cluster[1].configs.at(kMaxDecompressedRecordConfig),
            std::to_string(BatchLimits{}.max_batch_bytes));
  // Windows are kept at least a week, whatever --retention says; so are
  // window parts, which stage 2 replays them from.
  EXPECT_EQ(cluster[1].configs.at("retention.ms"),
            std::to_string(7 * 24 * 3600 * 1000LL));
  EXPECT_EQ(cluster[5].configs.at("retention.ms"),
            std::to_string(7 * 24 * 3600 * 1000LL));

  // describe --json says the same.
  auto described = RunBubblewatch("topics describe --json --brokers " +
                                  brokers + FleetFlags(base));
  ASSERT_EQ(described.exit_code, 0) << described.err;
  simdjson::dom::parser parser;
  simdjson::dom::element doc;
  ASSERT_EQ(parser.parse(described.out).get(doc), simdjson::SUCCESS)
      << described.out;
  simdjson::dom::array topics = doc["topics"].get_array();
  ASSERT_EQ(topics.size(), 6u);
  for (simdjson::dom::element t : topics) {
    const std::string name{std::string_view(t["topic"])};
    const TopicDescription& d = *std::find_if(
        cluster.begin(), cluster.end(),
        [&](const TopicDescription& c) { return c.name == name; });
    EXPECT_TRUE(bool(t["exists"]));
    EXPECT_EQ(int64_t(t["partitions"]), d.partitions) << name;
    EXPECT_EQ(int64_t(t["replication_factor"]), d.replication_factor) << name;
    EXPECT_EQ(bool(t["compacted"]),
              absl::StrContains(d.configs.at("cleanup.policy"), "compact"))
        << name;
    int64_t retention = 0;
    ASSERT_TRUE(absl::SimpleAtoi(d.configs.at("retention.ms"), &retention));
    EXPECT_EQ(int64_t(t["retention_ms"]), retention) << name;
    EXPECT_EQ(std::string_view(t["configs"]["cleanup.policy"]),
              d.configs.at("cleanup.policy"));
  }

  // A second create leaves them as they are.
  auto again = RunBubblewatch("topics create --brokers " + brokers +
                              " --partitions 7" + FleetFlags(base));
  EXPECT_EQ(again.exit_code, 0) << again.err;
  EXPECT_THAT(again.out, HasSubstr("exists  " + base + ".windows"));
  EXPECT_EQ(Describe({base + ".windows"}).at(0).partitions, 5);

  // A missing topic: described as such, exit 1.
  auto missing = RunBubblewatch("topics describe --brokers " + brokers + " " +
                                base + " " + base + ".nothing");
  EXPECT_EQ(missing.exit_code, 1) << missing.err;
  EXPECT_THAT(missing.out, HasSubstr(base + ".nothing  (missing)"));
}

// The delivery result of each message a raw lz4 producer sends.
class Lz4Producer {
 public:
  explicit Lz4Producer(const std::string& brokers = testing::Brokers()) {
    rd_kafka_conf_t* conf = rd_kafka_conf_new();
    char err[512];
    for (const auto& [key, value] :
         std::vector<std::pair<std::string, std::string>>{
             {"bootstrap.servers", brokers},
             {"compression.type", "lz4"},
             {"message.max.bytes", "200000000"},
             {"message.timeout.ms", "60000"}}) {
      EXPECT_EQ(
          rd_kafka_conf_set(conf, key.c_str(), value.c_str(), err, sizeof(err)),
          RD_KAFKA_CONF_OK)
          << err;
    }
    rd_kafka_conf_set_dr_msg_cb(
        conf, [](rd_kafka_t*, const rd_kafka_message_t* m, void* opaque) {
          static_cast<Lz4Producer*>(opaque)->results_.push_back(m->err);
        });
    rd_kafka_conf_set_opaque(conf, this);
    producer_.reset(rd_kafka_new(RD_KAFKA_PRODUCER, conf, err, sizeof(err)));
    EXPECT_NE(producer_, nullptr) << err;
  }
  // Sends `value` alone (flushed), and returns its delivery result.
  rd_kafka_resp_err_t Deliver(const std::string& topic,
                              const std::string& value) {
    results_.clear();
    rd_kafka_resp_err_t err = rd_kafka_producev(
        producer_.get(), RD_KAFKA_V_TOPIC(topic.c_str()),
        RD_KAFKA_V_VALUE(const_cast<char*>(value.data()), value.size()),
        RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY), RD_KAFKA_V_END);
    if (err != RD_KAFKA_RESP_ERR_NO_ERROR) return err;
    rd_kafka_flush(producer_.get(), 90'000);
    return results_.size() == 1 ? results_[0] : RD_KAFKA_RESP_ERR__TIMED_OUT;
  }

 private:
  RdKafkaPtr producer_;
  std::vector<rd_kafka_resp_err_t> results_;
};

TEST(TopicsCommand, EventsTopicRefusesARecordInflatingPastTheBatchLimit) {
  const std::string brokers = testing::Brokers();
  ASSERT_FALSE(HasFailure());
  const std::string base = testing::Unique("it-bomb");
  auto created = RunBubblewatch("topics create --brokers " + brokers +
                                " --partitions 1" + FleetFlags(base));
  ASSERT_EQ(created.exit_code, 0) << created.err;
  ASSERT_THAT(created.out,
              HasSubstr(std::string(kMaxDecompressedRecordConfig) + "=" +
                        std::to_string(BatchLimits{}.max_batch_bytes)));

  // Zeros compress about 250:1, so both are well under the broker's 1 MB
  // max.message.bytes on the wire: only the decompressed bound tells them
  // apart.
  const int64_t limit = BatchLimits{}.max_batch_bytes;
  Lz4Producer producer;
  EXPECT_EQ(producer.Deliver(base, std::string(limit - 1024, '\0')),
            RD_KAFKA_RESP_ERR_NO_ERROR);
  const rd_kafka_resp_err_t bomb =
      producer.Deliver(base, std::string(limit + 1024 * 1024, '\0'));
  EXPECT_NE(bomb, RD_KAFKA_RESP_ERR_NO_ERROR) << rd_kafka_err2str(bomb);
  EXPECT_NE(bomb, RD_KAFKA_RESP_ERR__TIMED_OUT) << rd_kafka_err2str(bomb);
  // Only the first one is in the topic.
  absl::StatusOr<int64_t> stored =
      testing::StoredMessageCount(brokers, base, absl::Seconds(30));
  ASSERT_TRUE(stored.ok()) << stored.status();
  EXPECT_EQ(*stored, 1);

  // --max-record-bytes 0: no bound; the same record is taken.
  const std::string unbounded = testing::Unique("it-nobomb");
  auto plain = RunBubblewatch("topics create --brokers " + brokers +
                              " --partitions 1 --max-record-bytes 0" +
                              FleetFlags(unbounded));
  ASSERT_EQ(plain.exit_code, 0) << plain.err;
  EXPECT_THAT(plain.out, Not(HasSubstr(kMaxDecompressedRecordConfig)));
  EXPECT_EQ(producer.Deliver(unbounded, std::string(limit + 1024 * 1024, '\0')),
            RD_KAFKA_RESP_ERR_NO_ERROR);
}

// Kafka before 4.4 does not know max.decompressed.message.bytes and refuses
// a topic that names it. `create` then makes the events topic without the
// bound and says so in one line, and the other topics as on any broker. The
// broker is a 3.9.1 of the test's own (ops/test fetches that release too).
TEST(TopicsCommand, OlderBrokerGetsTheEventsTopicWithoutTheBound) {
  testing::OwnBroker broker(testing::PortAboveSharedBroker(54), "kafka-3.9",
                            "3.9.1");
  ASSERT_TRUE(broker.Start())
      << "BUBBLEWATCH_KAFKA_VERSION=3.9.1 ops/kafka/start --port "
      << broker.port();
  const std::string base = testing::Unique("it-old-broker");
  auto created = RunBubblewatch("topics create --brokers " + broker.brokers() +
                                " --partitions 2" + FleetFlags(base));
  ASSERT_EQ(created.exit_code, 0) << created.err;
  EXPECT_THAT(created.err,
              HasSubstr(std::string("the broker does not know ") +
                        kMaxDecompressedRecordConfig +
                        " (Kafka before 4.4): " + base + " has no bound"));
  EXPECT_THAT(created.out, HasSubstr("created " + base + ": 2 "));
  EXPECT_THAT(created.out, Not(HasSubstr(kMaxDecompressedRecordConfig)));

  const std::vector<std::string> names = {base, base + ".windows",
                                          base + ".state", base + ".dlq",
                                          base + ".alerts"};
  std::vector<TopicDescription> cluster = Describe(names, broker.brokers());
  ASSERT_EQ(cluster.size(), 5u);
  for (const TopicDescription& d : cluster) {
    EXPECT_TRUE(d.exists) << d.name;
    // 3.9 reports no such config at all, for any topic.
    EXPECT_EQ(d.configs.count(kMaxDecompressedRecordConfig), 0u) << d.name;
  }
  EXPECT_EQ(cluster[0].partitions, 2);
  EXPECT_EQ(cluster[0].configs.at("cleanup.policy"), "delete");
  EXPECT_EQ(cluster[1].configs.at("cleanup.policy"), "compact,delete");

  // The gap the line warns of: the record a 4.4 broker refuses is stored.
  Lz4Producer producer(broker.brokers());
  EXPECT_EQ(
      producer.Deliver(
          base, std::string(BatchLimits{}.max_batch_bytes + 1024 * 1024, '\0')),
      RD_KAFKA_RESP_ERR_NO_ERROR);
}

TEST(TopicsCommand, UsageErrors) {
  EXPECT_EQ(RunBubblewatch("topics").exit_code, 2);
  EXPECT_EQ(RunBubblewatch("topics frob --brokers a:1").exit_code, 2);
  EXPECT_EQ(RunBubblewatch("topics create").exit_code, 2);
  EXPECT_EQ(RunBubblewatch("topics create --brokers embedded").exit_code, 2);
  EXPECT_EQ(RunBubblewatch("topics create --brokers a:1 --max-record-bytes -1")
                .exit_code,
            2);
  EXPECT_EQ(
      RunBubblewatch("topics create --brokers a:1 --partitions 0").exit_code,
      2);
  auto twice = RunBubblewatch(
      "topics create --brokers a:1 --partitions 2 "
      "--partitions 3");
  EXPECT_EQ(twice.exit_code, 2);
  EXPECT_THAT(twice.err, HasSubstr("'--partitions' given more than once"));
}

TEST(ProcessTopics, WindowsTopicIsCreatedCompactedWithTheEventsPartitions) {
  const std::string brokers = testing::Brokers();
  ASSERT_FALSE(HasFailure());
  const std::string topic = testing::Unique("it-wintopic");
  ASSERT_NO_FATAL_FAILURE(testing::CreateTopic(topic, 3, brokers));
  auto produce = RunBubblewatch(
      "produce --brokers " + brokers + " --topic " + topic +
      " --synthetic --jobs 6 --gpus-per-job 1 --duration 25s --rate 200"
      " --log-level error");
  ASSERT_EQ(produce.exit_code, 0) << produce.err;
  EXPECT_TRUE(Describe({topic + ".windows"}).at(0).exists == false);

  testing::TempDir dir;
  auto process = RunBubblewatch(
      "process --brokers " + brokers + " --topic " + topic + " --group " +
          topic + " --windows-topic " + topic + ".windows --state-topic " +
          topic + ".state --dlq-topic " + topic +
          ".dlq --idle-timeout 1s --exit-when-idle 3s --log-level info"
          " --store '" +
          dir.Sub("store") + "'",
      ".", /*kill_after_s=*/300);
  ASSERT_EQ(process.exit_code, 0) << process.err;
  EXPECT_THAT(process.err, HasSubstr("created windows topic " + topic +
                                     ".windows: 3 partitions"));

  const TopicDescription windows = Describe({topic + ".windows"}).at(0);
  ASSERT_TRUE(windows.exists);
  EXPECT_EQ(windows.partitions, 3);
  EXPECT_EQ(windows.configs.at("cleanup.policy"), "compact,delete");

  // Every window: keyed (job, window start), in its job's partition, which
  // is the partition of the job's events.
  absl::StatusOr<std::vector<testing::ConsumedMessage>> events =
      testing::ReadTopic(brokers, topic, 1, absl::Seconds(60));
  ASSERT_TRUE(events.ok()) << events.status();
  std::map<std::string, std::set<int32_t>> event_partitions;
  for (const testing::ConsumedMessage& m : *events) {
    event_partitions[m.key].insert(m.partition);
  }
  absl::StatusOr<std::vector<testing::ConsumedMessage>> published =
      testing::ReadTopic(brokers, topic + ".windows", 6, absl::Seconds(60));
  ASSERT_TRUE(published.ok()) << published.status();
  std::set<std::string> jobs;
  for (const testing::ConsumedMessage& m : *published) {
    absl::StatusOr<WindowSummary> w = DecodeWindowSummary(m.value);
    ASSERT_TRUE(w.ok()) << w.status();
    EXPECT_EQ(m.key, WindowTopicKey(w->job, w->window.start_ns));
    EXPECT_EQ(m.partition, WindowTopicPartition(w->job, 3)) << w->job;
    EXPECT_THAT(event_partitions[w->job], ::testing::ElementsAre(m.partition))
        << w->job;
    jobs.insert(w->job);
  }
  EXPECT_EQ(jobs.size(), 6u);
  // The jobs spread over more than one partition: the check above can fail.
  std::set<int32_t> partitions;
  for (const auto& [job, p] : event_partitions)
    partitions.insert(p.begin(), p.end());
  EXPECT_GT(partitions.size(), 1u);
}

}  // namespace
}  // namespace bubblewatch
