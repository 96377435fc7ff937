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
// Values that may be secrets are never written to logs or error messages:
// those of secret-looking keys (IsSecretKafkaProperty) and of keys librdkafka
// does not know (a misspelt `sasl.pasword` is as secret as `sasl.password`).
// DebugString() and every error show "[redacted]" instead, and librdkafka's
// own log lines and error strings, which may quote a value, pass through
// RedactKafkaSecrets().
//
// Secrets from files: any property X may be given as `X.file=PATH` (e.g.
// -X sasl.password.file=/run/secrets/kafka): SetAssignment reads the file
// and sets X to its content, trailing line breaks removed. Such a value is
// redacted whatever X is called (ssl.ca.pem.file too), and the path, not the
// value, is what error messages name. A missing, unreadable or empty file is
// kInvalidArgument naming the key and the path.
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

// True for keys that look like they hold a secret, case-insensitively: any
// key containing "password" (or the misspellings "passwd", "pasword"),
// "secret", "token", "jaas", "credential" or "key" (ssl.key.*,
// ssl.keystore.*, sasl.kerberos.keytab: key material and where it lies), and
// every "sasl.*" key (usernames, JAAS and OAUTHBEARER configurations,
// Kerberos commands).
bool IsSecretKafkaProperty(absl::string_view key);

// True if librdkafka knows `key`, as a client or topic property, an alias, or
// a Java property it refuses with a reason (sasl.jaas.config).
bool IsKnownKafkaProperty(absl::string_view key);

// True if `value`, set for `key`, must never be printed: the key looks
// secret (IsSecretKafkaProperty) or is unknown to librdkafka. One exception:
// sasl.mechanism(s) set to a mechanism name librdkafka knows (PLAIN,
// SCRAM-SHA-256, ...) is shown, as librdkafka's own diagnostics name it
// ("SASL PLAIN mechanism handshake failed"); any other value there is
// redacted.
bool IsRedactedKafkaProperty(absl::string_view key, absl::string_view value);

// `text` with every value that a KafkaConfig of this process holds for a
// redacted property (IsRedactedKafkaProperty), of 4 characters or more,
// replaced by "[redacted]", where it stands as a whole word (not inside a
// longer word: a user name "kafka" leaves "rdkafka" alone). For text librdkafka
// writes: its log lines and error strings may quote a property's value (a
// CONFWARN line quotes sasl.mechanism's, rd_kafka_new() an unsupported
// mechanism).
std::string RedactKafkaSecrets(absl::string_view text);

// The suffix that makes `X.file=PATH` read X's value from PATH.
inline constexpr absl::string_view kKafkaSecretFileSuffix = ".file";

// For an assignment "X.file=PATH" (X.file not itself a librdkafka property):
// X's value read from PATH, trailing "\n"/"\r" removed, and registered for
// RedactKafkaSecrets(). `key` gets X. Returns nullopt for any other
// assignment. Errors (kInvalidArgument, one line naming `X.file` and PATH,
// never the content): PATH missing, unreadable or empty.
absl::StatusOr<std::optional<std::string>> ReadKafkaSecretFile(
    absl::string_view assignment, std::string* key);

// Reads every "X.file=PATH" assignment of `assignments` (as ReadKafkaSecretFile
// does) and returns the first error: for commands that check their -X
// secret files before starting anything, a missing one being a usage error.
absl::Status CheckKafkaSecretFiles(const std::vector<std::string>& assignments);

class KafkaConfig {
 public:
  // `brokers` is librdkafka's bootstrap.servers: "host:port[,host:port...]".
  explicit KafkaConfig(absl::string_view brokers);

  // Sets `key` to `value`, replacing an earlier value. A redacted value
  // (IsRedactedKafkaProperty) is remembered for RedactKafkaSecrets().
  void Set(absl::string_view key, absl::string_view value);

  // Sets `key` to `value` unless it already has a value.
  void SetDefault(absl::string_view key, absl::string_view value);

  // Sets `key` to `value`. Returns kInvalidArgument, naming the key (and the
  // values unless they are redacted), if it already holds a different value.
  absl::Status Require(absl::string_view key, absl::string_view value);

  // Applies one "key=value" assignment (the argument of -X). The value may
  // contain '='. "X.file=PATH" sets X to PATH's content (see above), a value
  // this configuration then always redacts. Returns kInvalidArgument for a
  // missing '=', an empty key, or a secret file that cannot be read.
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

  // Has Build() switch on librdkafka's "feature" debug context (added to any
  // `debug` the user set), whose lines kafka/broker_features.h collects, so
  // that ReportBrokerFeatures() can log and check what the broker supports.
  // Debug lines the user did not ask for (no `debug` property on any client)
  // are dropped, not logged. Not shown by properties() or DebugString().
  void WatchBrokerFeatures() { watch_features_ = true; }

  // "key=value, key=value, ..." with redacted values (secret-looking or
  // unknown keys) shown as "[redacted]".
  std::string DebugString() const;

  // Creates a librdkafka configuration holding every property, with
  // librdkafka's own log lines routed to the process logger (spdlog).
  // Returns kInvalidArgument naming the property librdkafka rejects (unknown
  // key or bad value); the message never contains a redacted value, and
  // keeps librdkafka's reason only where that does not quote it.
  absl::StatusOr<RdKafkaConfPtr> Build() const;

 private:
  std::string* Find(absl::string_view key);
  const std::string* Find(absl::string_view key) const;
  // IsRedactedKafkaProperty, or `key` was set from a secret file.
  bool Redacted(absl::string_view key, absl::string_view value) const;
  absl::string_view Shown(absl::string_view key, absl::string_view value) const;

  std::string brokers_;
  std::vector<std::pair<std::string, std::string>> properties_;
  std::vector<std::string> from_files_;  // Keys set from X.file.
  bool watch_features_ = false;
};

// Creates a producer or consumer (`type`) from `conf`, which callers may
// have customised after KafkaConfig::Build() (callbacks, opaque pointer).
// Takes ownership of `conf`. Returns kInvalidArgument if librdkafka refuses
// to create the client (the message says why, through RedactKafkaSecrets).
absl::StatusOr<RdKafkaPtr> NewKafkaClient(rd_kafka_type_t type,
                                          RdKafkaConfPtr conf);

// The same from `config` directly: Build() errors, then the above.
absl::StatusOr<RdKafkaPtr> NewKafkaClient(rd_kafka_type_t type,
                                          const KafkaConfig& config);

// The first librdkafka with fetch.queue.backoff.ms (2.4.0).
inline constexpr int kRdKafkaVersionWithFetchQueueBackoff = 0x020400ff;

// Sets a consumer's prefetch defaults (a -X value still wins): a queue of
// queued.max.messages.kbytes=16384 (16 MiB), which a long backlog fills:
// memory that grows with lag, not with open windows, is bounded by it.
//
// librdkafka stops fetching a partition once its queue holds that much, and
// looks again only after fetch.queue.backoff.ms: from 2.4 on (as
// rd_kafka_version() gives it: at least
// kRdKafkaVersionWithFetchQueueBackoff) this sets it to 10 ms. Before 2.4
// the wait is up to a second (librdkafka#2879) and not settable: a
// consumer of such a librdkafka wakes the fetcher itself
// (kafka/fetch_wakeup.h), or a queue this small holds it to a third of its
// speed on a backlog (docs/performance.md, "Fetching").
void SetConsumerPrefetchDefaults(KafkaConfig& config,
                                 int librdkafka_version = rd_kafka_version());

}  // namespace bubblewatch

#endif  // BUBBLEWATCH_KAFKA_KAFKA_CONFIG_H_
