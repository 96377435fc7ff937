#include "kafka/kafka_config.h"

#include <array>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/logging.h"
#include "base/status_macros.h"

namespace bubblewatch {
namespace {

// librdkafka's syslog-style levels (0 emergency .. 7 debug) to spdlog's.
// Connection errors arrive at level 3; they are expected while a broker
// restarts and the producer retries, so they are warnings, not errors.
spdlog::level::level_enum SpdlogLevel(int syslog_level) {
  if (syslog_level <= 2) return spdlog::level::err;
  if (syslog_level <= 4) return spdlog::level::warn;
  if (syslog_level <= 6) return spdlog::level::info;
  return spdlog::level::debug;
}

void LogToSpdlog(const rd_kafka_t* rk, int level, const char* facility,
                 const char* message) {
  spdlog::log(SpdlogLevel(level), "librdkafka {} {}: {}",
              rk != nullptr ? rd_kafka_name(rk) : "-", facility, message);
}

}  // namespace

bool IsSecretKafkaProperty(absl::string_view key) {
  static constexpr std::array<absl::string_view, 5> kSecretParts = {
      "password", "secret", "sasl.oauthbearer.config", "ssl.key.pem",
      "ssl.keystore"};
  const std::string lower = absl::AsciiStrToLower(key);
  for (absl::string_view part : kSecretParts) {
    if (absl::StrContains(lower, part)) return true;
  }
  // "ssl.key.location" names a file, not a key; only the PEM itself is secret.
  return false;
}

KafkaConfig::KafkaConfig(absl::string_view brokers)
    : brokers_(brokers.data(), brokers.size()) {
  if (!brokers.empty()) Set("bootstrap.servers", brokers);
}

std::string* KafkaConfig::Find(absl::string_view key) {
  for (auto& [k, v] : properties_) {
    if (k == key) return &v;
  }
  return nullptr;
}

const std::string* KafkaConfig::Find(absl::string_view key) const {
  for (const auto& [k, v] : properties_) {
    if (k == key) return &v;
  }
  return nullptr;
}

void KafkaConfig::Set(absl::string_view key, absl::string_view value) {
  if (std::string* existing = Find(key)) {
    existing->assign(value.data(), value.size());
    return;
  }
  properties_.emplace_back(std::string(key.data(), key.size()),
                           std::string(value.data(), value.size()));
}

void KafkaConfig::SetDefault(absl::string_view key, absl::string_view value) {
  if (Find(key) == nullptr) Set(key, value);
}

absl::Status KafkaConfig::Require(absl::string_view key,
                                  absl::string_view value) {
  if (const std::string* existing = Find(key);
      existing != nullptr && *existing != value) {
    const bool secret = IsSecretKafkaProperty(key);
    return absl::InvalidArgumentError(
        absl::StrCat("Kafka property ", key, "=",
                     secret ? "[redacted]" : *existing, " conflicts with the ",
                     secret ? "[redacted]" : value, " this client needs"));
  }
  Set(key, value);
  return absl::OkStatus();
}

absl::Status KafkaConfig::SetAssignment(absl::string_view assignment) {
  const size_t eq = assignment.find('=');
  if (eq == absl::string_view::npos || eq == 0) {
    // Do not echo the text: it may be a mistyped secret.
    return absl::InvalidArgumentError(
        "a Kafka property must look like key=value (as in -X "
        "security.protocol=SASL_SSL)");
  }
  Set(assignment.substr(0, eq), assignment.substr(eq + 1));
  return absl::OkStatus();
}

absl::Status KafkaConfig::SetAssignments(
    const std::vector<std::string>& assignments) {
  for (const std::string& a : assignments) {
    RETURN_IF_ERROR(SetAssignment(absl::string_view(a.data(), a.size())));
  }
  return absl::OkStatus();
}

std::optional<std::string> KafkaConfig::Get(absl::string_view key) const {
  if (const std::string* v = Find(key)) return *v;
  return std::nullopt;
}

std::string KafkaConfig::DebugString() const {
  return absl::StrJoin(properties_, ", ", [](std::string* out, const auto& kv) {
    absl::StrAppend(out, kv.first, "=",
                    IsSecretKafkaProperty(kv.first) ? "[redacted]" : kv.second);
  });
}

absl::StatusOr<RdKafkaConfPtr> KafkaConfig::Build() const {
  RdKafkaConfPtr conf(rd_kafka_conf_new());
  char errstr[512];
  for (const auto& [key, value] : properties_) {
    if (rd_kafka_conf_set(conf.get(), key.c_str(), value.c_str(), errstr,
                          sizeof(errstr)) != RD_KAFKA_CONF_OK) {
      // librdkafka's message quotes the value; drop it for secrets.
      return absl::InvalidArgumentError(
          IsSecretKafkaProperty(key)
              ? absl::StrCat("invalid value for Kafka property ", key)
              : absl::StrCat("Kafka property ", key, "=", value, ": ", errstr));
    }
  }
  rd_kafka_conf_set_log_cb(conf.get(), &LogToSpdlog);
  return conf;
}

absl::StatusOr<RdKafkaPtr> NewKafkaClient(rd_kafka_type_t type,
                                          RdKafkaConfPtr conf) {
  char errstr[512];
  // On success rd_kafka_new() owns the configuration; on failure we still do.
  rd_kafka_t* rk = rd_kafka_new(type, conf.get(), errstr, sizeof(errstr));
  if (rk == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(
        "cannot create the Kafka ",
        type == RD_KAFKA_PRODUCER ? "producer" : "consumer", ": ", errstr));
  }
  conf.release();
  return RdKafkaPtr(rk);
}

absl::StatusOr<RdKafkaPtr> NewKafkaClient(rd_kafka_type_t type,
                                          const KafkaConfig& config) {
  ASSIGN_OR_RETURN(RdKafkaConfPtr conf, config.Build());
  return NewKafkaClient(type, std::move(conf));
}

}  // namespace bubblewatch
