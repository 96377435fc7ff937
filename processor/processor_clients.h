// What both stages of `bubblewatch process` (the events stage,
// StreamProcessor; the merge stage, MergeProcessor) set up alike around
// their task: the consumer's and the producer's settings, the windows
// topic's message limit, the state topic's reader settings, and what a
// delivery report of their shared producer means. One place, so that the
// stages cannot drift apart in how they talk to the brokers.
#ifndef BUBBLEWATCH_PROCESSOR_PROCESSOR_CLIENTS_H_
#define BUBBLEWATCH_PROCESSOR_PROCESSOR_CLIENTS_H_

#include <librdkafka/rdkafka.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "kafka/kafka_config.h"
#include "kafka/kafka_handles.h"
#include "processor/consumer_kafka.h"
#include "processor/dead_letter_sink.h"
#include "processor/processor_options.h"
#include "processor/runtime_shared.h"

namespace bubblewatch {

// True for a "key=value" whose key only a consumer understands: left out of
// the producer's settings, where librdkafka would warn.
bool IsConsumerOnlyProperty(absl::string_view assignment);

// The group consumer's settings: -X first, then the group, manual offset
// commits, earliest start, ends of partitions (idle timeouts apply only
// once caught up), the cooperative assignor, a bounded prefetch, and the
// broker features watched. Errors: a -X that contradicts what the
// processor requires (kInvalidArgument).
absl::StatusOr<KafkaConfig> ProcessorConsumerConfig(
    const StreamProcessorOptions& options);

// The producer's settings (windows, parts, dead letters, snapshots): -X but
// consumer-only keys, then idempotence, acks=all, the murmur2 partitioner
// (the Java client's: a key maps to the partition its producers' key maps
// to) and lz4. Adds kNeedIdempotence to `feature_needs` when idempotence
// stays on.
absl::StatusOr<KafkaConfig> ProcessorProducerConfig(
    const StreamProcessorOptions& options, int* feature_needs);

// The most bytes one window may have on options.windows_topic
// (CommitPipeline::ReadWindowsLimit), asked on a client of its own: the
// same request on the consumer, before it subscribed, left the
// subscription blind to an input topic created after it, for librdkafka's
// 5-minute metadata refresh. Lowers `producer_config`'s batch.size to it.
// REQUIRES: !options.windows_topic.empty(); call before the producer is
// created.
absl::StatusOr<int64_t> ProcessorWindowsLimit(
    const StreamProcessorOptions& options, KafkaConfig& producer_config);

// The state topic's restore reader's settings: -X but group settings (the
// reader joins no group; static membership among them is the group
// consumer's only).
absl::StatusOr<KafkaConfig> StateReaderConfig(
    const StreamProcessorOptions& options);

// A stage's two clients, made alike (the settings above).
struct ProcessorClients {
  std::unique_ptr<RdKafkaConsumerKafka> consumer;
  RdKafkaPtr producer;
  // ProcessorWindowsLimit's, with a windows topic; nullopt without.
  std::optional<int64_t> windows_limit;
};

// Creates the group consumer (reporting to `listener`, its client errors
// to `on_client_error`) and the producer (its delivery reports to
// `on_delivery` with `opaque`: call OnProcessorDelivery there), adding to
// `feature_needs` what the producer needs of the brokers.
absl::StatusOr<ProcessorClients> CreateProcessorClients(
    const StreamProcessorOptions& options, ConsumerKafka::Listener* listener,
    std::function<void(rd_kafka_t*, int, const char*)> on_client_error,
    void (*on_delivery)(rd_kafka_t*, const rd_kafka_message_t*, void*),
    void* opaque, int* feature_needs);

// A delivery report of the processor's producer: one message fewer in
// flight; a failed dead letter (its minimal form is the message's opaque)
// goes back to `dead_letters`; any other failure (a window, a part, a
// snapshot) becomes `shared`'s fatal error.
void OnProcessorDelivery(const rd_kafka_message_t* message,
                         RuntimeShared& shared, DeadLetterSink* dead_letters);

}  // namespace bubblewatch

#endif  // BUBBLEWATCH_PROCESSOR_PROCESSOR_CLIENTS_H_
