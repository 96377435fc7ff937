#include "kafka/kafka_config.h"

#include <memory>
#include <sstream>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "spdlog/sinks/ostream_sink.h"
#include "spdlog/spdlog.h"
#include "tests/testing/files.h"
#include "tests/testing/temp_dir.h"

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
  EXPECT_FALSE(IsSecretKafkaProperty("security.protocol"));
  EXPECT_FALSE(IsSecretKafkaProperty("ssl.ca.location"));

  KafkaConfig config("b:1");
  ASSERT_TRUE(config
                  .SetAssignments({"sasl.username=alice",
                                   "sasl.password=hunter2-secret-value"})
                  .ok());
  EXPECT_THAT(config.DebugString(), HasSubstr("sasl.username=[redacted]"));
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

// secrets under keys the old list did not name were
// echoed, e.g. a JAAS line (a Java property librdkafka refuses, quoted with
// its value in the error) or a misspelt key (unknown, quoted likewise).
TEST(KafkaConfig, SecretLookingAndUnknownKeysAreRedacted) {
  for (const char* key :
       {"sasl.jaas.config", "sasl.pasword", "sasl.username", "SASL.PASSWORD",
        "ssl.keystore.passwd", "ssl.key.location", "sasl.kerberos.keytab",
        "my.api.token", "aws.credentials", "client.secret.id"}) {
    EXPECT_TRUE(IsSecretKafkaProperty(key)) << key;
  }
  for (const char* key : {"bootstrap.servers", "linger.ms", "acks",
                          "security.protocol", "client.id", "debug"}) {
    EXPECT_FALSE(IsSecretKafkaProperty(key)) << key;
    EXPECT_TRUE(IsKnownKafkaProperty(key)) << key;
  }
  EXPECT_TRUE(IsKnownKafkaProperty("topic.acks"));        // Topic level.
  EXPECT_TRUE(IsKnownKafkaProperty("sasl.jaas.config"));  // Refused, known.
  EXPECT_FALSE(IsKnownKafkaProperty("sasl.pasword"));
  EXPECT_FALSE(IsKnownKafkaProperty("lingr.ms"));

  // Unknown keys are redacted whatever they are called.
  EXPECT_TRUE(IsRedactedKafkaProperty("lingr.ms", "hunter2"));
  EXPECT_FALSE(IsRedactedKafkaProperty("linger.ms", "5"));
  // A mechanism name is shown, anything else under sasl.mechanism is not.
  EXPECT_FALSE(IsRedactedKafkaProperty("sasl.mechanism", "PLAIN"));
  EXPECT_FALSE(IsRedactedKafkaProperty("sasl.mechanisms", "SCRAM-SHA-512"));
  EXPECT_TRUE(IsRedactedKafkaProperty("sasl.mechanism", "hunter2"));

  KafkaConfig config("b:1");
  ASSERT_TRUE(
      config
          .SetAssignments({"sasl.jaas.config=org.apache.kafka.common.security."
                           "plain.PlainLoginModule required username=\"u\" "
                           "password=\"hunter2\";",
                           "sasl.pasword=hunter2", "lingr.ms=hunter2",
                           "sasl.mechanism=PLAIN", "linger.ms=5"})
          .ok());
  const std::string debug = config.DebugString();
  EXPECT_THAT(debug, Not(HasSubstr("hunter2")));
  EXPECT_THAT(debug, HasSubstr("sasl.jaas.config=[redacted]"));
  EXPECT_THAT(debug, HasSubstr("sasl.pasword=[redacted]"));
  EXPECT_THAT(debug, HasSubstr("lingr.ms=[redacted]"));
  EXPECT_THAT(debug, HasSubstr("sasl.mechanism=PLAIN"));
  EXPECT_THAT(debug, HasSubstr("linger.ms=5"));
}

TEST(KafkaConfig, BuildErrorsNameTheKeyButNeverARedactedValue) {
  KafkaConfig jaas("b:1");
  jaas.Set("sasl.jaas.config",
           "org.apache.kafka.common.security.plain.PlainLoginModule required "
           "username=\"u\" password=\"hunter2\";");
  absl::Status s = jaas.Build().status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("sasl.jaas.config=[redacted]"));
  // librdkafka's reason quotes no value here: it is kept.
  EXPECT_THAT(s.message(), HasSubstr("JAAS configuration is not supported"));
  EXPECT_THAT(s.message(), Not(HasSubstr("hunter2")));

  KafkaConfig misspelt("b:1");
  misspelt.Set("sasl.pasword", "hunter2");
  s = misspelt.Build().status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("sasl.pasword"));
  EXPECT_THAT(s.message(), HasSubstr("No such configuration property"));
  EXPECT_THAT(s.message(), Not(HasSubstr("hunter2")));

  // A known key's bad value is still shown, with librdkafka's reason.
  KafkaConfig plain("b:1");
  plain.Set("security.protocol", "SASL_PLAINTEXTT");
  s = plain.Build().status();
  EXPECT_THAT(s.message(), HasSubstr("security.protocol=SASL_PLAINTEXTT"));
}

// librdkafka's own text may quote a value: rd_kafka_new()'s error for an
// unsupported mechanism, and the CONFWARN line for sasl.mechanism without a
// SASL security.protocol. Both pass through RedactKafkaSecrets.
TEST(KafkaConfig, LibrdkafkaTextNeverQuotesARedactedValue) {
  KafkaConfig sasl("127.0.0.1:1");
  sasl.Set("security.protocol", "SASL_PLAINTEXT");
  sasl.Set("sasl.mechanism", "hunter2-mech");
  absl::StatusOr<RdKafkaPtr> client = NewKafkaClient(RD_KAFKA_PRODUCER, sasl);
  ASSERT_FALSE(client.ok());
  EXPECT_THAT(client.status().message(), HasSubstr("SASL mechanism"));
  EXPECT_THAT(client.status().message(), Not(HasSubstr("hunter2")));

  std::ostringstream captured;
  auto previous = spdlog::default_logger();
  auto logger = std::make_shared<spdlog::logger>(
      "capture", std::make_shared<spdlog::sinks::ostream_sink_mt>(captured));
  logger->set_level(spdlog::level::trace);
  spdlog::set_default_logger(logger);
  {
    KafkaConfig warned("127.0.0.1:1");
    warned.Set("sasl.mechanism", "hunter2-confwarn");
    warned.Set("sasl.username", "alice-user");
    warned.Set("debug", "conf");
    absl::StatusOr<RdKafkaPtr> made = NewKafkaClient(RD_KAFKA_PRODUCER, warned);
    EXPECT_TRUE(made.ok()) << made.status();
  }
  spdlog::set_default_logger(previous);
  // The lines were logged (the check is real), without the values.
  EXPECT_THAT(captured.str(), HasSubstr("CONFWARN"));
  EXPECT_THAT(captured.str(), HasSubstr("sasl.mechanism"));
  EXPECT_THAT(captured.str(), Not(HasSubstr("hunter2")));
  EXPECT_THAT(captured.str(), Not(HasSubstr("alice-user")));
}

TEST(KafkaConfig, RedactKafkaSecretsReplacesWholeWordsOnly) {
  KafkaConfig config("b:1");
  config.Set("sasl.username", "kafkauser");
  config.Set("sasl.password", "s3cret;");
  EXPECT_EQ(RedactKafkaSecrets("user kafkauser, pw s3cret; end"),
            "user [redacted], pw [redacted] end");
  // Inside a longer word it is another word, left alone.
  EXPECT_EQ(RedactKafkaSecrets("rdkafkauser#1 xkafkauser"),
            "rdkafkauser#1 xkafkauser");
  EXPECT_EQ(RedactKafkaSecrets("`kafkauser`"), "`[redacted]`");
}

// `X.file=PATH` reads X's value from a file; the value is then a
// secret whatever X is called, and only the path is ever named.
TEST(KafkaConfig, SecretFilesSetTheirContentAndAreAlwaysRedacted) {
  testing::TempDir dir;
  const std::string pw = dir.Sub("pw");
  const std::string id = dir.Sub("id");
  testing::WriteFile(pw, "Pw-from-file-5e1f\n");
  testing::WriteFile(id, "client-id-from-file-77\r\n");
  KafkaConfig config("b:1");
  ASSERT_TRUE(config
                  .SetAssignments({"sasl.password.file=" + pw,
                                   "client.id.file=" + id, "linger.ms=5"})
                  .ok());
  // The trailing line break is not part of the value.
  EXPECT_EQ(config.Get("sasl.password"), "Pw-from-file-5e1f");
  EXPECT_EQ(config.Get("client.id"), "client-id-from-file-77");
  EXPECT_FALSE(config.Get("sasl.password.file").has_value());
  const std::string debug = config.DebugString();
  EXPECT_THAT(debug, HasSubstr("sasl.password=[redacted]"));
  // client.id is no secret when given directly; from a file it is.
  EXPECT_THAT(debug, HasSubstr("client.id=[redacted]"));
  EXPECT_THAT(debug, HasSubstr("linger.ms=5"));
  EXPECT_THAT(debug, Not(HasSubstr("from-file")));
  // librdkafka's text that quotes it is redacted too.
  EXPECT_EQ(RedactKafkaSecrets("client client-id-from-file-77 up"),
            "client [redacted] up");
  EXPECT_THAT(config.Require("client.id", "other").message(),
              Not(HasSubstr("from-file")));
  EXPECT_TRUE(config.Build().ok());
}

TEST(KafkaConfig, AMissingOrEmptySecretFileIsAnErrorNamingThePath) {
  testing::TempDir dir;
  KafkaConfig config("b:1");
  absl::Status missing =
      config.SetAssignment("sasl.password.file=" + dir.Sub("nope"));
  EXPECT_EQ(missing.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(missing.message(),
              HasSubstr("sasl.password.file: cannot read the secret file '" +
                        dir.Sub("nope") + "': No such file"));
  testing::WriteFile(dir.Sub("empty"), "\n");
  EXPECT_THAT(
      config.SetAssignment("sasl.password.file=" + dir.Sub("empty")).message(),
      HasSubstr("the file is empty"));
  EXPECT_FALSE(config.Get("sasl.password").has_value());
  EXPECT_THAT(CheckKafkaSecretFiles(
                  {"acks=all", "ssl.key.password.file=" + dir.Sub("nope")})
                  .message(),
              HasSubstr("ssl.key.password.file"));
  EXPECT_TRUE(CheckKafkaSecretFiles({"acks=all"}).ok());
}

TEST(KafkaConfig, BuildErrorsOfAFileValueNeverQuoteIt) {
  testing::TempDir dir;
  testing::WriteFile(dir.Sub("acks"), "not-an-acks-value-9c1");
  KafkaConfig config("b:1");
  ASSERT_TRUE(config.SetAssignment("acks.file=" + dir.Sub("acks")).ok());
  absl::StatusOr<RdKafkaConfPtr> built = config.Build();
  ASSERT_FALSE(built.ok());
  EXPECT_THAT(built.status().message(), HasSubstr("acks=[redacted]"));
  EXPECT_THAT(built.status().message(), Not(HasSubstr("not-an-acks")));
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

TEST(KafkaConfig, PrefetchDefaultsFollowTheLibrarysFetchBackoff) {
  // Before 2.4 the backoff is not settable (FetchWakeup stands in for it).
  KafkaConfig old_library("b:1");
  SetConsumerPrefetchDefaults(old_library, 0x020002ff);
  EXPECT_EQ(old_library.Get("queued.max.messages.kbytes"), "16384");
  EXPECT_EQ(old_library.Get("fetch.queue.backoff.ms"), std::nullopt);
  KafkaConfig new_library("b:1");
  SetConsumerPrefetchDefaults(new_library,
                              kRdKafkaVersionWithFetchQueueBackoff);
  EXPECT_EQ(new_library.Get("queued.max.messages.kbytes"), "16384");
  EXPECT_EQ(new_library.Get("fetch.queue.backoff.ms"), "10");
  // The user's -X wins.
  KafkaConfig user("b:1");
  ASSERT_TRUE(user.SetAssignment("queued.max.messages.kbytes=4096").ok());
  SetConsumerPrefetchDefaults(user, 0x020002ff);
  EXPECT_EQ(user.Get("queued.max.messages.kbytes"), "4096");
  // What this build links is accepted by librdkafka.
  KafkaConfig linked("b:1");
  SetConsumerPrefetchDefaults(linked);
  EXPECT_TRUE(linked.Build().ok());
}

}  // namespace
}  // namespace bubblewatch
