#include "kafka/kafka_config.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "base/logging.h"
#include "base/status_macros.h"
#include "kafka/broker_features.h"

namespace bubblewatch {
namespace {

constexpr char kRedacted[] = "[redacted]";
constexpr size_t kMinFreeTextSecret = 4;

// The values RedactKafkaSecrets() hides: every redacted value any KafkaConfig
// of the process was given. librdkafka's log callback has no way to tell
// which client's configuration a line comes from (rd_kafka_new logs before
// it returns the handle), so the set is process-wide; it only grows, by the
// few -X values of a command's clients.
class SecretValues {
 public:
  void Add(absl::string_view value) {
    // Shorter values are not looked for in librdkafka's text: as words,
    // "0", "1" or "PL" would blank out partition numbers and counts in
    // every line, and a secret that short protects nothing. (Where the
    // configuration itself is printed, every redacted value is hidden.)
    if (value.size() < kMinFreeTextSecret) return;
    absl::MutexLock lock(&mu_);
    if (!seen_.insert(std::string(value)).second) return;
    values_.emplace_back(value);
    // Longest first: a secret that contains another is replaced whole.
    std::stable_sort(values_.begin(), values_.end(),
                     [](const std::string& a, const std::string& b) {
                       return a.size() > b.size();
                     });
  }

  std::string Redact(absl::string_view text) const {
    std::string out(text);
    absl::MutexLock lock(&mu_);
    for (const std::string& value : values_) out = RedactOne(out, value);
    return out;
  }

 private:
  static std::string RedactOne(const std::string& text,
                               const std::string& value) {
    std::string out;
    size_t done = 0;  // text[0, done) is in `out`.
    for (size_t at = text.find(value); at != std::string::npos;
         at = text.find(value, at + 1)) {
      if (at < done || !StartsAWord(text, at, value) ||
          !EndsAWord(text, at + value.size(), value)) {
        continue;
      }
      absl::StrAppend(&out, absl::string_view(text).substr(done, at - done),
                      kRedacted);
      done = at + value.size();
    }
    if (done == 0) return text;
    absl::StrAppend(&out, absl::string_view(text).substr(done));
    return out;
  }
  static bool IsWordChar(char c) { return absl::ascii_isalnum(c) || c == '_'; }
  // The match is not the tail of a longer word (only matters when the value
  // itself begins with a word character).
  static bool StartsAWord(const std::string& text, size_t at,
                          const std::string& value) {
    return at == 0 || !IsWordChar(value.front()) || !IsWordChar(text[at - 1]);
  }
  static bool EndsAWord(const std::string& text, size_t end,
                        const std::string& value) {
    return end == text.size() || !IsWordChar(value.back()) ||
           !IsWordChar(text[end]);
  }

  mutable absl::Mutex mu_;
  absl::flat_hash_set<std::string> seen_ ABSL_GUARDED_BY(mu_);
  std::vector<std::string> values_ ABSL_GUARDED_BY(mu_);
};

SecretValues& Secrets() {
  static SecretValues* secrets = new SecretValues();
  return *secrets;
}

// librdkafka's syslog-style levels (0 emergency .. 7 debug) to spdlog's.
// Connection errors arrive at level 3; they are expected while a broker
// restarts and the producer retries, so they are warnings, not errors.
spdlog::level::level_enum SpdlogLevel(int syslog_level) {
  if (syslog_level <= 2) return spdlog::level::err;
  if (syslog_level <= 4) return spdlog::level::warn;
  if (syslog_level <= 6) return spdlog::level::info;
  return spdlog::level::debug;
}

// Whether some client of the process was given a `debug` property: only
// then are librdkafka's debug lines (level 7) logged. Without it librdkafka
// writes none, except those of the "feature" context that
// WatchBrokerFeatures() switches on for kafka/broker_features.h.
std::atomic<bool> g_user_debug{false};

void LogToSpdlog(const rd_kafka_t* rk, int level, const char* facility,
                 const char* message) {
  if (rk != nullptr) {
    ObserveBrokerFeatureLine(rd_kafka_name(rk), facility, message);
  }
  if (level >= 7 && !g_user_debug.load(std::memory_order_relaxed)) return;
  spdlog::log(SpdlogLevel(level), "librdkafka {} {}: {}",
              rk != nullptr ? rd_kafka_name(rk) : "-", facility,
              RedactKafkaSecrets(message));
}

// Whether librdkafka's reason for refusing `key`=`value` may be shown when
// the value is redacted: it must not contain the value, and every quoted
// part must be a property name (librdkafka quotes the key, its canonical
// name, or the value or a part of it: "Invalid value \"x\" for ...").
bool ReasonHidesTheValue(absl::string_view reason, absl::string_view key,
                         absl::string_view value) {
  if (!value.empty() && absl::StrContains(reason, value)) return false;
  size_t open = reason.find('"');
  while (open != absl::string_view::npos) {
    const size_t close = reason.find('"', open + 1);
    if (close == absl::string_view::npos) return false;
    absl::string_view quoted = reason.substr(open + 1, close - open - 1);
    if (quoted != key && !IsKnownKafkaProperty(quoted)) return false;
    open = reason.find('"', close + 1);
  }
  return true;
}

}  // namespace

bool IsSecretKafkaProperty(absl::string_view key) {
  static constexpr std::array<absl::string_view, 8> kSecretParts = {
      "password", "passwd", "pasword",    "secret",
      "token",    "jaas",   "credential", "key"};
  const std::string lower = absl::AsciiStrToLower(key);
  if (absl::StartsWith(lower, "sasl.")) return true;
  for (absl::string_view part : kSecretParts) {
    if (absl::StrContains(lower, part)) return true;
  }
  return false;
}

bool IsKnownKafkaProperty(absl::string_view key) {
  // Setting the property to "" on a throwaway configuration: librdkafka
  // answers "unknown" only for a name it does not have (global or topic
  // level), whether or not it accepts an empty value. Nothing outside the
  // configuration happens (an empty plugin.library.paths loads nothing).
  RdKafkaConfPtr scratch(rd_kafka_conf_new());
  char errstr[512];
  return rd_kafka_conf_set(scratch.get(), std::string(key).c_str(), "", errstr,
                           sizeof(errstr)) != RD_KAFKA_CONF_UNKNOWN;
}

bool IsRedactedKafkaProperty(absl::string_view key, absl::string_view value) {
  const std::string lower = absl::AsciiStrToLower(key);
  if (lower == "sasl.mechanism" || lower == "sasl.mechanisms") {
    static constexpr std::array<absl::string_view, 5> kMechanisms = {
        "GSSAPI", "PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER"};
    return std::find(kMechanisms.begin(), kMechanisms.end(), value) ==
           kMechanisms.end();
  }
  return IsSecretKafkaProperty(key) || !IsKnownKafkaProperty(key);
}

std::string RedactKafkaSecrets(absl::string_view text) {
  return Secrets().Redact(text);
}

absl::StatusOr<std::optional<std::string>> ReadKafkaSecretFile(
    absl::string_view assignment, std::string* key) {
  const size_t eq = assignment.find('=');
  if (eq == absl::string_view::npos || eq == 0) return std::nullopt;
  const absl::string_view file_key = assignment.substr(0, eq);
  if (!absl::EndsWith(file_key, kKafkaSecretFileSuffix) ||
      file_key.size() == kKafkaSecretFileSuffix.size() ||
      IsKnownKafkaProperty(file_key)) {
    return std::nullopt;
  }
  const std::string path(assignment.substr(eq + 1));
  auto fail = [&](absl::string_view why) {
    return absl::InvalidArgumentError(
        absl::StrCat("Kafka property ", file_key,
                     ": cannot read the secret file '", path, "': ", why));
  };
  if (path.empty()) return fail("no path given");
  std::ifstream in(path, std::ios::binary);
  if (!in) return fail(std::strerror(errno));
  std::ostringstream content;
  content << in.rdbuf();
  if (in.bad()) return fail(std::strerror(errno));
  std::string value = std::move(content).str();
  while (!value.empty() && (value.back() == '\n' || value.back() == '\r')) {
    value.pop_back();
  }
  if (value.empty()) return fail("the file is empty");
  Secrets().Add(value);
  *key = std::string(
      file_key.substr(0, file_key.size() - kKafkaSecretFileSuffix.size()));
  return value;
}

absl::Status CheckKafkaSecretFiles(
    const std::vector<std::string>& assignments) {
  for (const std::string& a : assignments) {
    std::string key;
    RETURN_IF_ERROR(ReadKafkaSecretFile(a, &key).status());
  }
  return absl::OkStatus();
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

bool KafkaConfig::Redacted(absl::string_view key,
                           absl::string_view value) const {
  return IsRedactedKafkaProperty(key, value) ||
         std::find(from_files_.begin(), from_files_.end(), key) !=
             from_files_.end();
}

absl::string_view KafkaConfig::Shown(absl::string_view key,
                                     absl::string_view value) const {
  return Redacted(key, value) ? kRedacted : value;
}

void KafkaConfig::Set(absl::string_view key, absl::string_view value) {
  if (IsRedactedKafkaProperty(key, value)) Secrets().Add(value);
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
    return absl::InvalidArgumentError(absl::StrCat(
        "Kafka property ", key, "=", Shown(key, *existing),
        " conflicts with the ", Shown(key, value), " this client needs"));
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
  std::string key;
  ASSIGN_OR_RETURN(std::optional<std::string> secret,
                   ReadKafkaSecretFile(assignment, &key));
  if (secret.has_value()) {
    if (std::find(from_files_.begin(), from_files_.end(), key) ==
        from_files_.end()) {
      from_files_.push_back(key);
    }
    Set(key, *secret);
    return absl::OkStatus();
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
  return absl::StrJoin(
      properties_, ", ", [this](std::string* out, const auto& kv) {
        absl::StrAppend(out, kv.first, "=", Shown(kv.first, kv.second));
      });
}

absl::StatusOr<RdKafkaConfPtr> KafkaConfig::Build() const {
  RdKafkaConfPtr conf(rd_kafka_conf_new());
  char errstr[512];
  for (const auto& [key, value] : properties_) {
    const rd_kafka_conf_res_t res = rd_kafka_conf_set(
        conf.get(), key.c_str(), value.c_str(), errstr, sizeof(errstr));
    if (res == RD_KAFKA_CONF_OK) continue;
    if (!Redacted(key, value)) {
      return absl::InvalidArgumentError(
          absl::StrCat("Kafka property ", key, "=", value, ": ", errstr));
    }
    // librdkafka's reason may quote the value (or part of it): keep it only
    // where it does not.
    absl::string_view reason = errstr;
    if (!ReasonHidesTheValue(reason, key, value)) {
      reason = res == RD_KAFKA_CONF_UNKNOWN ? "no such configuration property"
                                            : "invalid value";
    }
    return absl::InvalidArgumentError(
        absl::StrCat("Kafka property ", key, "=", kRedacted, ": ", reason));
  }
  const std::optional<std::string> debug = Get("debug");
  if (debug.has_value() && !debug->empty()) g_user_debug.store(true);
  if (watch_features_) {
    // The user's contexts, if any, plus "feature" (a repeated context is
    // harmless to librdkafka).
    const std::string contexts =
        debug.has_value() && !debug->empty() ? *debug + ",feature" : "feature";
    if (rd_kafka_conf_set(conf.get(), "debug", contexts.c_str(), errstr,
                          sizeof(errstr)) != RD_KAFKA_CONF_OK) {
      return absl::InvalidArgumentError(
          absl::StrCat("Kafka property debug=", contexts, ": ", errstr));
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
    // Its reason may quote a value ("Unsupported SASL mechanism: ...").
    return absl::InvalidArgumentError(
        absl::StrCat("cannot create the Kafka ",
                     type == RD_KAFKA_PRODUCER ? "producer" : "consumer", ": ",
                     RedactKafkaSecrets(errstr)));
  }
  conf.release();
  return RdKafkaPtr(rk);
}

absl::StatusOr<RdKafkaPtr> NewKafkaClient(rd_kafka_type_t type,
                                          const KafkaConfig& config) {
  ASSIGN_OR_RETURN(RdKafkaConfPtr conf, config.Build());
  return NewKafkaClient(type, std::move(conf));
}

void SetConsumerPrefetchDefaults(KafkaConfig& config, int librdkafka_version) {
  config.SetDefault("queued.max.messages.kbytes", "16384");
  if (librdkafka_version >= kRdKafkaVersionWithFetchQueueBackoff) {
    config.SetDefault("fetch.queue.backoff.ms", "10");
  }
}

}  // namespace bubblewatch
