// The protocol features librdkafka negotiated with the brokers, for the
// startup line operators read and for a clear refusal when a broker cannot
// give what bubblewatch relies on (idempotent producers, consumer groups).
//
// librdkafka 2.0.2 (Debian bookworm) has no public API that lists a broker's
// features: its feature set (MsgVer2, IdempotentProducer,
// BrokerBalancedConsumer, ...) is internal. What it does publish is its
// "feature" debug context: after each ApiVersion exchange the broker thread
// logs, in one synchronous burst, "Broker API support:", the API ranges and
// one "Enabling feature X" or "Disabling feature X" line per feature. A client
// whose KafkaConfig asked for it (WatchBrokerFeatures()) gets that context
// switched on; KafkaConfig's log callback hands those lines here and drops
// the debug lines nobody asked for, so nothing new reaches the log. The
// other ways were weaker: an idempotent producer learns only when it first
// asks for a producer id (a fatal error much later, on the first send), and
// a consumer without group support just never gets an assignment.
// If a later librdkafka words these lines differently, nothing is known:
// the startup line says so and no check fails (ReportBrokerFeatures).
#ifndef BUBBLEWATCH_KAFKA_BROKER_FEATURES_H_
#define BUBBLEWATCH_KAFKA_BROKER_FEATURES_H_

#include <librdkafka/rdkafka.h>

#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace bubblewatch {

// What a client needs of the broker (bit flags).
enum BrokerFeatureNeeds : int {
  kNeedNothing = 0,
  // enable.idempotence=true: librdkafka's IdempotentProducer.
  kNeedIdempotence = 1,
  // A group consumer: BrokerGroupCoordinator and BrokerBalancedConsumer.
  kNeedConsumerGroups = 2,
};

// One broker's verdicts, in the order librdkafka logged them.
struct BrokerFeatureSet {
  std::string broker;  // librdkafka's name, e.g. "127.0.0.1:9092/1".
  std::vector<std::string> enabled;
  std::vector<std::string> disabled;
};

// Feeds one librdkafka log line to the collector (KafkaConfig's log callback
// calls this for every line). Returns true when it was a feature line.
bool ObserveBrokerFeatureLine(absl::string_view client,
                              absl::string_view facility,
                              absl::string_view message,
                              absl::Time now = absl::Now());

// The feature set of one broker of `client` (rd_kafka_name) once one is
// known in full: with `answered` (the caller just had a reply from a broker,
// which librdkafka sends only after the ApiVersion exchange), the fullest
// set seen; otherwise a set whose burst ended at least a second before
// `now`. nullopt while none is.
std::optional<BrokerFeatureSet> KnownBrokerFeatures(
    absl::string_view client, bool answered, absl::Time now = absl::Now());

// OK, or kFailedPrecondition with one line naming what `features` lacks of
// `needs` and why that matters.
absl::Status CheckBrokerFeatures(const BrokerFeatureSet& features, int needs);

// For a client (rd_kafka_t) whose configuration had WatchBrokerFeatures():
// once its broker's feature set is known (see KnownBrokerFeatures), logs it
// at info, one line, the first time for that client, and returns
// CheckBrokerFeatures. nullopt while it is not known yet: call again later.
// With `answered` and still nothing known (a client without the debug
// context), logs that the features are unknown and returns OK.
std::optional<absl::Status> ReportBrokerFeatures(rd_kafka_t* rk, int needs,
                                                 bool answered);

}  // namespace bubblewatch

#endif  // BUBBLEWATCH_KAFKA_BROKER_FEATURES_H_
