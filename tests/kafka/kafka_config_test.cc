#include "kafka/kafka_config.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace bubblewatch {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

TEST(KafkaConfig, BrokersBecomeBootstrapServers) {
  KafkaConfig config("127.0.0.1:9092,127.0.0.1:9093");
  EXPECT_EQ(config.Get("bootstrap.servers"), "127.0.0.1:9092,127.0.0.1:9093");
  EXPECT_EQ(config.brokers(), "127.0.0.1:9092,127.0.0.1:9093");
}

TEST(KafkaConfig, AssignmentsSplitAtTheFirstEquals) {
  KafkaConfig config("b:1");
  ASSERT_TRUE(config.SetAssignment("sasl.oauthbearer.config=a=b c=d").ok());
  EXPECT_EQ(config.Get("sasl.oauthbearer.config"), "a=b c=d");
  EXPECT_EQ(config.SetAssignment("no-equals").code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(config.SetAssignment("=value").code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(KafkaConfig, LaterAssignmentWinsAndDefaultsDoNotOverride) {
  KafkaConfig config("b:1");
  ASSERT_TRUE(config.SetAssignments({"linger.ms=5", "linger.ms=7"}).ok());
  config.SetDefault("linger.ms", "50");
  config.SetDefault("compression.type", "lz4");
  EXPECT_EQ(config.Get("linger.ms"), "7");
  EXPECT_EQ(config.Get("compression.type"), "lz4");
}

TEST(KafkaConfig, RequireRejectsAConflictingUserValue) {
  KafkaConfig config("b:1");
  ASSERT_TRUE(config.SetAssignment("enable.idempotence=false").ok());
  absl::Status s = config.Require("enable.idempotence", "true");
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("enable.idempotence=false"));
  EXPECT_TRUE(config.Require("acks", "all").ok());
  EXPECT_TRUE(config.Require("acks", "all").ok());
}

TEST(KafkaConfig, SecretsNeverReachDebugStringOrErrors) {
  EXPECT_TRUE(IsSecretKafkaProperty("sasl.password"));
  EXPECT_TRUE(IsSecretKafkaProperty("ssl.key.password"));
  EXPECT_TRUE(IsSecretKafkaProperty("sasl.oauthbearer.client.secret"));
  EXPECT_TRUE(IsSecretKafkaProperty("ssl.key.pem"));
  EXPECT_FALSE(IsSecretKafkaProperty("sasl.username"));
  EXPECT_FALSE(IsSecretKafkaProperty("ssl.key.location"));

  KafkaConfig config("b:1");
  ASSERT_TRUE(config
                  .SetAssignments({"sasl.username=alice",
                                   "sasl.password=hunter2-secret-value"})
                  .ok());
  EXPECT_THAT(config.DebugString(), HasSubstr("sasl.username=alice"));
  EXPECT_THAT(config.DebugString(), HasSubstr("sasl.password=[redacted]"));
  EXPECT_THAT(config.DebugString(), Not(HasSubstr("hunter2")));
  absl::Status s = config.Require("sasl.password", "other");
  EXPECT_THAT(s.message(), Not(HasSubstr("hunter2")));
  EXPECT_THAT(s.message(), Not(HasSubstr("other")));
}

TEST(KafkaConfig, BuildNamesTheRejectedPropertyButNotASecretValue) {
  KafkaConfig config("b:1");
  config.Set("no.such.property", "1");
  absl::StatusOr<RdKafkaConfPtr> conf = config.Build();
  EXPECT_EQ(conf.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(conf.status().message(), HasSubstr("no.such.property"));

  KafkaConfig secret("b:1");
  secret.Set("ssl.key.password", "topsecret");
  secret.Set("ssl.key.pem", "topsecret-pem");
  // Whatever librdkafka thinks of these values, none may be echoed.
  absl::StatusOr<RdKafkaConfPtr> built = secret.Build();
  if (!built.ok()) {
    EXPECT_THAT(built.status().message(), Not(HasSubstr("topsecret")));
  }
}

TEST(KafkaConfig, BuildsAProducerAndAConsumer) {
  KafkaConfig producer_config("127.0.0.1:1");
  producer_config.Set("acks", "all");
  EXPECT_TRUE(NewKafkaClient(RD_KAFKA_PRODUCER, producer_config).ok());
  KafkaConfig consumer_config("127.0.0.1:1");
  consumer_config.Set("group.id", "g");
  consumer_config.Set("enable.auto.commit", "false");
  consumer_config.Set("partition.assignment.strategy", "cooperative-sticky");
  EXPECT_TRUE(NewKafkaClient(RD_KAFKA_CONSUMER, consumer_config).ok());
}

}  // namespace
}  // namespace bubblewatch
