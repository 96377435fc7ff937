#include "kafka/broker_features.h"

#include <algorithm>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "base/logging.h"

namespace bubblewatch {
namespace {

// A burst is written by one broker thread in a tight loop (microseconds);
// this much silence after its last line means it is complete.
constexpr absl::Duration kBurstQuiet = absl::Seconds(1);

constexpr absl::string_view kBurstStart = ": Broker API support:";
constexpr absl::string_view kEnabling = ": Enabling feature ";
constexpr absl::string_view kDisabling = ": Disabling feature ";

struct BrokerBurst {
  // Feature name -> enabled, with the order of first appearance.
  std::vector<std::pair<std::string, bool>> verdicts;
  absl::Time last_line = absl::InfinitePast();
};

struct ClientFeatures {
  // By broker name, in order of appearance.
  std::vector<std::pair<std::string, BrokerBurst>> brokers;
  bool reported = false;

  BrokerBurst& Broker(absl::string_view name) {
    for (auto& [n, burst] : brokers) {
      if (n == name) return burst;
    }
    brokers.emplace_back(std::string(name), BrokerBurst{});
    return brokers.back().second;
  }
};

class Collector {
 public:
  void Observe(absl::string_view client, absl::string_view broker,
               std::optional<std::pair<absl::string_view, bool>> verdict,
               absl::Time now) {
    absl::MutexLock lock(&mu_);
    BrokerBurst& burst = clients_[client].Broker(broker);
    burst.last_line = now;
    if (!verdict) {  // A new burst: a reconnect asks again.
      burst.verdicts.clear();
      return;
    }
    for (auto& [name, on] : burst.verdicts) {
      if (name == verdict->first) {
        on = verdict->second;
        return;
      }
    }
    burst.verdicts.emplace_back(std::string(verdict->first), verdict->second);
  }

  std::optional<BrokerFeatureSet> Known(absl::string_view client, bool answered,
                                        absl::Time now) {
    absl::MutexLock lock(&mu_);
    auto it = clients_.find(client);
    if (it == clients_.end()) return std::nullopt;
    const std::pair<std::string, BrokerBurst>* best = nullptr;
    for (const auto& entry : it->second.brokers) {
      const BrokerBurst& burst = entry.second;
      if (burst.verdicts.empty()) continue;
      if (!answered && now - burst.last_line < kBurstQuiet) continue;
      if (best == nullptr ||
          burst.verdicts.size() > best->second.verdicts.size()) {
        best = &entry;
      }
    }
    if (best == nullptr) return std::nullopt;
    BrokerFeatureSet set;
    set.broker = best->first;
    for (const auto& [name, on] : best->second.verdicts) {
      (on ? set.enabled : set.disabled).push_back(name);
    }
    return set;
  }

  // True the first time for `client`.
  bool MarkReported(absl::string_view client) {
    absl::MutexLock lock(&mu_);
    ClientFeatures& c = clients_[client];
    if (c.reported) return false;
    c.reported = true;
    return true;
  }

 private:
  absl::Mutex mu_;
  absl::flat_hash_map<std::string, ClientFeatures> clients_
      ABSL_GUARDED_BY(mu_);
};

Collector& TheCollector() {
  static Collector* collector = new Collector();
  return *collector;
}

bool Has(const BrokerFeatureSet& set, absl::string_view feature) {
  return std::find(set.enabled.begin(), set.enabled.end(), feature) !=
         set.enabled.end();
}

// "host:port" of librdkafka's broker name "host:port/id".
absl::string_view Address(absl::string_view broker) {
  return broker.substr(0, broker.rfind('/'));
}

}  // namespace

bool ObserveBrokerFeatureLine(absl::string_view client,
                              absl::string_view facility,
                              absl::string_view message, absl::Time now) {
  if (facility != "APIVERSION") return false;
  // "[thrd:BROKER]: BROKER: Enabling feature X": the broker's name is what
  // stands between the thread prefix and the phrase.
  size_t from = message.find("]: ");
  from = from == absl::string_view::npos ? 0 : from + 3;
  for (auto [phrase, on] :
       {std::pair{kEnabling, true}, std::pair{kDisabling, false}}) {
    const size_t at = message.find(phrase, from);
    if (at == absl::string_view::npos) continue;
    absl::string_view feature = message.substr(at + phrase.size());
    if (feature.empty()) return false;
    TheCollector().Observe(client, message.substr(from, at - from),
                           std::pair{feature, on}, now);
    return true;
  }
  const size_t at = message.find(kBurstStart, from);
  if (at == absl::string_view::npos) return false;
  TheCollector().Observe(client, message.substr(from, at - from), std::nullopt,
                         now);
  return true;
}

std::optional<BrokerFeatureSet> KnownBrokerFeatures(absl::string_view client,
                                                    bool answered,
                                                    absl::Time now) {
  return TheCollector().Known(client, answered, now);
}

absl::Status CheckBrokerFeatures(const BrokerFeatureSet& features, int needs) {
  std::vector<std::string> missing;
  std::vector<std::string> why;
  if ((needs & kNeedIdempotence) != 0 && !Has(features, "IdempotentProducer")) {
    missing.push_back("IdempotentProducer");
    why.push_back(
        "idempotent producers (InitProducerId; bubblewatch produces with "
        "enable.idempotence=true so that retries never duplicate a batch)");
  }
  if ((needs & kNeedConsumerGroups) != 0) {
    for (absl::string_view f :
         {"BrokerGroupCoordinator", "BrokerBalancedConsumer"}) {
      if (!Has(features, f)) missing.emplace_back(f);
    }
    if (!Has(features, "BrokerGroupCoordinator") ||
        !Has(features, "BrokerBalancedConsumer")) {
      why.push_back(
          "consumer groups (FindCoordinator, JoinGroup, SyncGroup, Heartbeat, "
          "OffsetCommit; the processor shares partitions and commits offsets "
          "through its group)");
    }
  }
  if (missing.empty()) return absl::OkStatus();
  return absl::FailedPreconditionError(absl::StrCat(
      "the Kafka broker at ", Address(features.broker), " does not support ",
      absl::StrJoin(why, " nor "), ": librdkafka ", rd_kafka_version_str(),
      " disabled ", absl::StrJoin(missing, ", "),
      " for it (supported brokers: Kafka 3.9 and 4.0.1 or later, "
      "docs/deploying.md)"));
}

std::optional<absl::Status> ReportBrokerFeatures(rd_kafka_t* rk, int needs,
                                                 bool answered) {
  const std::string client = rd_kafka_name(rk);
  std::optional<BrokerFeatureSet> features =
      KnownBrokerFeatures(client, answered);
  if (!features) {
    if (!answered) return std::nullopt;
    if (TheCollector().MarkReported(client)) {
      spdlog::info(
          "Kafka broker features: unknown (librdkafka {} logged none for {}); "
          "not checked",
          rd_kafka_version_str(), client);
    }
    return absl::OkStatus();
  }
  if (TheCollector().MarkReported(client)) {
    spdlog::info(
        "Kafka broker {} features (librdkafka {}, {}): {}; disabled: {}",
        std::string(Address(features->broker)), rd_kafka_version_str(), client,
        absl::StrJoin(features->enabled, ","),
        features->disabled.empty() ? "none"
                                   : absl::StrJoin(features->disabled, ","));
  }
  return CheckBrokerFeatures(*features, needs);
}

}  // namespace bubblewatch
