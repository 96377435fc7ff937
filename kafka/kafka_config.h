// KafkaConfig: the librdkafka properties of one client, producer or consumer,
// built from `--brokers` and kcat-style `-X key=value` pass-through, so that
// SASL, SSL and any tuning property work without code changes.
//
// Example (a consumer):
//   KafkaConfig config(brokers);
//   RETURN_IF_ERROR(config.SetAssignments(x_flags));   // -X key=value...
//   RETURN_IF_ERROR(config.Require("group.id", "bubblewatch-processor"));
//   RETURN_IF_ERROR(config.Require("enable.auto.commit", "false"));
//   config.SetDefault("partition.assignment.strategy", "cooperative-sticky");
//   ASSIGN_OR_RETURN(RdKafkaPtr consumer,
//                    NewKafkaClient(RD_KAFKA_CONSUMER, config));
//
// Three ways to set a property, by who should win:
//   Set        the caller, always (replaces any value);
//   SetDefault the user's -X value if there is one, else this default;
//   Require    this value, and an error if -X asked for another one (for
//              properties a guarantee depends on, e.g. enable.idempotence).
//
// Secrets (IsSecretKafkaProperty: passwords, secrets, private keys) are never
// written to logs or error messages: DebugString() redacts them.
#ifndef BUBBLEWATCH_KAFKA_KAFKA_CONFIG_H_
#define BUBBLEWATCH_KAFKA_KAFKA_CONFIG_H_

#include <librdkafka/rdkafka.h>

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "kafka/kafka_handles.h"

namespace bubblewatch {

// True for properties whose values must never be logged: any key containing
// "password", "secret" or "sasl.oauthbearer.config", and private keys
// ("ssl.key.pem", "ssl.keystore...").
bool IsSecretKafkaProperty(absl::string_view key);

class KafkaConfig {
 public:
  // `brokers` is librdkafka's bootstrap.servers: "host:port[,host:port...]".
  explicit KafkaConfig(absl::string_view brokers);

  // Sets `key` to `value`, replacing an earlier value.
  void Set(absl::string_view key, absl::string_view value);

  // Sets `key` to `value` unless it already has a value.
  void SetDefault(absl::string_view key, absl::string_view value);

  // Sets `key` to `value`. Returns kInvalidArgument, naming the key (and the
  // value unless it is secret), if it already holds a different value.
  absl::Status Require(absl::string_view key, absl::string_view value);

  // Applies one "key=value" assignment (the argument of -X). The value may
  // contain '='. Returns kInvalidArgument for a missing '=' or an empty key.
  absl::Status SetAssignment(absl::string_view assignment);

  // SetAssignment for each element, in order (a later one wins).
  absl::Status SetAssignments(const std::vector<std::string>& assignments);

  // The value of `key`, if set.
  std::optional<std::string> Get(absl::string_view key) const;

  // The brokers given to the constructor.
  const std::string& brokers() const { return brokers_; }

  // Properties in the order they were first set.
  const std::vector<std::pair<std::string, std::string>>& properties() const {
    return properties_;
  }

  // "key=value, key=value, ..." with secret values shown as "[redacted]".
  std::string DebugString() const;

  // Creates a librdkafka configuration holding every property, with
  // librdkafka's own log lines routed to the process logger (spdlog).
  // Returns kInvalidArgument naming the property librdkafka rejects (unknown
  // key or bad value); the message never contains a secret value.
  absl::StatusOr<RdKafkaConfPtr> Build() const;

 private:
  std::string* Find(absl::string_view key);
  const std::string* Find(absl::string_view key) const;

  std::string brokers_;
  std::vector<std::pair<std::string, std::string>> properties_;
};

// Creates a producer or consumer (`type`) from `conf`, which callers may
// have customised after KafkaConfig::Build() (callbacks, opaque pointer).
// Takes ownership of `conf`. Returns kInvalidArgument if librdkafka refuses
// to create the client (the message says why).
absl::StatusOr<RdKafkaPtr> NewKafkaClient(rd_kafka_type_t type,
                                          RdKafkaConfPtr conf);

// The same from `config` directly: Build() errors, then the above.
absl::StatusOr<RdKafkaPtr> NewKafkaClient(rd_kafka_type_t type,
                                          const KafkaConfig& config);

}  // namespace bubblewatch

#endif  // BUBBLEWATCH_KAFKA_KAFKA_CONFIG_H_
