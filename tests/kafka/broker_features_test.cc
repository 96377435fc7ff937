#include "kafka/broker_features.h"

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kafka/embedded_kafka_cluster.h"
#include "kafka/kafka_config.h"
#include "kafka/kafka_handles.h"

namespace bubblewatch {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Not;

const absl::Time kT0 = absl::FromUnixSeconds(1'700'000'000);

// A line as librdkafka 2.0.2's log callback receives it (facility
// APIVERSION, "feature" debug context).
std::string Line(absl::string_view broker, absl::string_view text) {
  return absl::StrCat("[thrd:", broker, "]: ", broker, ": ", text);
}

// The burst librdkafka 2.0.2 logged for a Kafka 4.4.0 broker here, less the
// API ranges: MsgVer1 and ThrottleTime off (KIP-896), the rest on.
void Kafka44Burst(const std::string& client, absl::string_view broker,
                  absl::Time at) {
  const std::vector<std::pair<const char*, bool>> verdicts = {
      {"MsgVer1", false},
      {"MsgVer2", true},
      {"ApiVersion", true},
      {"BrokerGroupCoordinator", true},
      {"BrokerBalancedConsumer", true},
      {"ThrottleTime", false},
      {"Sasl", true},
      {"SaslHandshake", true},
      {"LZ4", true},
      {"OffsetTime", true},
      {"IdempotentProducer", true},
      {"ZSTD", true},
      {"SaslAuthReq", true}};
  ASSERT_TRUE(ObserveBrokerFeatureLine(
      client, "APIVERSION", Line(broker, "Broker API support:"), at));
  for (const auto& [name, on] : verdicts) {
    // The per-API lines are not verdicts and change nothing.
    ObserveBrokerFeatureLine(
        client, "APIVERSION",
        Line(broker, absl::StrCat(" Feature ", name,
                                  ": Produce (2..2) supported by broker")),
        at);
    ASSERT_TRUE(ObserveBrokerFeatureLine(
        client, "APIVERSION",
        Line(broker,
             absl::StrCat(on ? "Enabling" : "Disabling", " feature ", name)),
        at));
  }
}

TEST(BrokerFeatures, CollectsABurstInOrder) {
  Kafka44Burst("collects", "127.0.0.1:9092/bootstrap", kT0);
  auto set = KnownBrokerFeatures("collects", /*answered=*/true, kT0);
  ASSERT_TRUE(set.has_value());
  EXPECT_EQ(set->broker, "127.0.0.1:9092/bootstrap");
  EXPECT_THAT(set->disabled, ElementsAre("MsgVer1", "ThrottleTime"));
  EXPECT_EQ(set->enabled.size(), 11u);
  EXPECT_EQ(set->enabled.front(), "MsgVer2");
  EXPECT_TRUE(
      CheckBrokerFeatures(*set, kNeedIdempotence | kNeedConsumerGroups).ok());
  EXPECT_FALSE(KnownBrokerFeatures("another-client", true, kT0).has_value());
}

TEST(BrokerFeatures, OtherLinesAreNotFeatures) {
  EXPECT_FALSE(ObserveBrokerFeatureLine(
      "other", "FEATURE",
      Line("b:1/1", "Updated enabled protocol features +ApiVersion"), kT0));
  EXPECT_FALSE(ObserveBrokerFeatureLine(
      "other", "APIVERSION", Line("b:1/1", "  ApiKey Produce (0) Versions"),
      kT0));
  EXPECT_FALSE(ObserveBrokerFeatureLine(
      "other", "CONNECT", Line("b:1/1", "Enabling feature X"), kT0));
  EXPECT_FALSE(KnownBrokerFeatures("other", true, kT0).has_value());
}

TEST(BrokerFeatures, WithoutAnAnswerABurstCountsOnceItIsOver) {
  Kafka44Burst("quiet", "b:1/1", kT0);
  EXPECT_FALSE(KnownBrokerFeatures("quiet", false, kT0).has_value());
  EXPECT_FALSE(
      KnownBrokerFeatures("quiet", false, kT0 + absl::Milliseconds(500))
          .has_value());
  EXPECT_TRUE(
      KnownBrokerFeatures("quiet", false, kT0 + absl::Seconds(1)).has_value());
}

TEST(BrokerFeatures, AReconnectStartsAfreshAndTheFullestBrokerWins) {
  Kafka44Burst("again", "b:1/1", kT0);
  // The same broker, reconnected, now without idempotent producers.
  ObserveBrokerFeatureLine("again", "APIVERSION",
                           Line("b:1/1", "Broker API support:"), kT0);
  ObserveBrokerFeatureLine("again", "APIVERSION",
                           Line("b:1/1", "Enabling feature MsgVer2"), kT0);
  ObserveBrokerFeatureLine(
      "again", "APIVERSION",
      Line("b:1/1", "Disabling feature IdempotentProducer"), kT0);
  // Another broker half-way through its burst.
  ObserveBrokerFeatureLine("again", "APIVERSION",
                           Line("b:2/2", "Enabling feature MsgVer2"), kT0);
  auto set = KnownBrokerFeatures("again", true, kT0);
  ASSERT_TRUE(set.has_value());
  EXPECT_EQ(set->broker, "b:1/1");
  EXPECT_THAT(set->enabled, ElementsAre("MsgVer2"));
  EXPECT_THAT(set->disabled, ElementsAre("IdempotentProducer"));
}

TEST(BrokerFeatures, RefusesWhatTheClientNeeds) {
  BrokerFeatureSet old;
  old.broker = "kafka-1:9092/1";
  old.enabled = {"ApiVersion", "BrokerGroupCoordinator", "MsgVer1"};
  old.disabled = {"BrokerBalancedConsumer", "IdempotentProducer"};
  EXPECT_TRUE(CheckBrokerFeatures(old, kNeedNothing).ok());

  absl::Status idempotence = CheckBrokerFeatures(old, kNeedIdempotence);
  EXPECT_EQ(idempotence.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(idempotence.message(),
              HasSubstr("the Kafka broker at kafka-1:9092 does not support "
                        "idempotent producers"));
  EXPECT_THAT(idempotence.message(), HasSubstr("disabled IdempotentProducer"));
  EXPECT_THAT(idempotence.message(), Not(HasSubstr("consumer groups")));

  absl::Status groups = CheckBrokerFeatures(old, kNeedConsumerGroups);
  EXPECT_EQ(groups.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(groups.message(), HasSubstr("consumer groups"));
  EXPECT_THAT(groups.message(), HasSubstr("disabled BrokerBalancedConsumer "));
  EXPECT_THAT(groups.message(), Not(HasSubstr("BrokerGroupCoordinator")));
  // One line.
  EXPECT_THAT(groups.message(), Not(HasSubstr("\n")));
}

// End to end through librdkafka: WatchBrokerFeatures() switches the debug
// context on, KafkaConfig's log callback feeds the lines, and after a
// broker's answer its set is known in full.
TEST(BrokerFeatures, LearnsTheEmbeddedClustersFeatures) {
  auto cluster = EmbeddedKafkaCluster::Create(/*num_brokers=*/1);
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  KafkaConfig config((*cluster)->bootstrap_servers());
  config.WatchBrokerFeatures();
  EXPECT_EQ(config.Get("debug"), std::nullopt);  // Not a user property.
  auto producer = NewKafkaClient(RD_KAFKA_PRODUCER, config);
  ASSERT_TRUE(producer.ok()) << producer.status();
  const rd_kafka_metadata_t* raw = nullptr;
  ASSERT_EQ(rd_kafka_metadata(producer->get(), 0, nullptr, &raw, 10000),
            RD_KAFKA_RESP_ERR_NO_ERROR);
  RdKafkaMetadataPtr metadata(raw);
  auto set = KnownBrokerFeatures(rd_kafka_name(producer->get()), true);
  ASSERT_TRUE(set.has_value());
  EXPECT_THAT(set->enabled, ::testing::Contains("IdempotentProducer"));
  EXPECT_THAT(set->enabled, ::testing::Contains("BrokerBalancedConsumer"));
  std::optional<absl::Status> report = ReportBrokerFeatures(
      producer->get(), kNeedIdempotence | kNeedConsumerGroups, true);
  ASSERT_TRUE(report.has_value());
  EXPECT_TRUE(report->ok()) << *report;

  // Without WatchBrokerFeatures() nothing is learnt.
  auto plain = NewKafkaClient(RD_KAFKA_PRODUCER,
                              KafkaConfig((*cluster)->bootstrap_servers()));
  ASSERT_TRUE(plain.ok());
  ASSERT_EQ(rd_kafka_metadata(plain->get(), 0, nullptr, &raw, 10000),
            RD_KAFKA_RESP_ERR_NO_ERROR);
  RdKafkaMetadataPtr plain_metadata(raw);
  EXPECT_FALSE(KnownBrokerFeatures(rd_kafka_name(plain->get()), true));
}

}  // namespace
}  // namespace bubblewatch
