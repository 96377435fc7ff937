#include "processor/processor_clients.h"

#include <memory>
#include <string>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "kafka/broker_features.h"
#include "kafka/kafka_handles.h"
#include "kafka/kafka_status.h"
#include "processor/commit_kafka.h"
#include "processor/commit_pipeline.h"
#include "processor/dead_letter.h"

namespace bubblewatch {

bool IsConsumerOnlyProperty(absl::string_view assignment) {
  absl::string_view key = assignment.substr(0, assignment.find('='));
  for (absl::string_view prefix :
       {"group.", "session.timeout.ms", "heartbeat.interval.ms",
        "auto.offset.reset", "enable.auto.", "auto.commit.", "fetch.",
        "max.poll.interval.ms", "partition.assignment.strategy",
        "isolation.level", "queued.", "check.crcs"}) {
    if (absl::StartsWith(key, prefix)) return true;
  }
  return false;
}

absl::StatusOr<KafkaConfig> ProcessorConsumerConfig(
    const StreamProcessorOptions& options) {
  KafkaConfig config(options.brokers);
  RETURN_IF_ERROR(config.SetAssignments(options.kafka_properties));
  config.Set("group.id", options.group);
  RETURN_IF_ERROR(config.Require("enable.auto.commit", "false"));
  config.SetDefault("enable.auto.offset.store", "false");
  config.SetDefault("auto.offset.reset", "earliest");
  // End-of-partition events tell when the consumer has caught up: idle
  // timeouts only apply then.
  RETURN_IF_ERROR(config.Require("enable.partition.eof", "true"));
  config.SetDefault("partition.assignment.strategy", "cooperative-sticky");
  // Work between polls is bounded (one message, one commit), so the default
  // poll interval is ample; keep it explicit for operators.
  config.SetDefault("max.poll.interval.ms", "300000");
  // A prefetch queue bounded in memory; with librdkafka < 2.4 the
  // consumer's Poll wakes its fetcher (RdKafkaConsumerKafka), or the queue
  // would throttle catching up on a backlog (kafka_config.h).
  SetConsumerPrefetchDefaults(config);
  config.WatchBrokerFeatures();
  return config;
}

absl::StatusOr<KafkaConfig> ProcessorProducerConfig(
    const StreamProcessorOptions& options, int* feature_needs) {
  KafkaConfig config(options.brokers);
  // -X applies to both clients (SASL/SSL settings are shared).
  for (const std::string& assignment : options.kafka_properties) {
    if (!IsConsumerOnlyProperty(assignment)) {
      RETURN_IF_ERROR(config.SetAssignment(assignment));
    }
  }
  config.SetDefault("enable.idempotence", "true");
  config.SetDefault("acks", "all");
  config.SetDefault("partitioner", "murmur2_random");
  config.SetDefault("compression.type", "lz4");
  // The consumer's brokers are the producer's: its feature set (which the
  // consumer learns first, at its bootstrap) is checked for both.
  if (config.Get("enable.idempotence") == "true") {
    *feature_needs |= kNeedIdempotence;
  }
  return config;
}

absl::StatusOr<int64_t> ProcessorWindowsLimit(
    const StreamProcessorOptions& options, KafkaConfig& producer_config) {
  RdKafkaPtr probe;
  if (options.windows_topic_max_bytes <= 0) {
    KafkaConfig probe_config = producer_config;
    ASSIGN_OR_RETURN(probe, NewKafkaClient(RD_KAFKA_PRODUCER, probe_config));
  }
  return CommitPipeline::ReadWindowsLimit(probe.get(), options.windows_topic,
                                          options.windows_topic_max_bytes,
                                          producer_config);
}

absl::StatusOr<KafkaConfig> StateReaderConfig(
    const StreamProcessorOptions& options) {
  KafkaConfig config(options.brokers);
  for (const std::string& assignment : options.kafka_properties) {
    if (!absl::StartsWith(assignment, "group.")) {
      RETURN_IF_ERROR(config.SetAssignment(assignment));
    }
  }
  return config;
}

absl::StatusOr<ProcessorClients> CreateProcessorClients(
    const StreamProcessorOptions& options, ConsumerKafka::Listener* listener,
    std::function<void(rd_kafka_t*, int, const char*)> on_client_error,
    void (*on_delivery)(rd_kafka_t*, const rd_kafka_message_t*, void*),
    void* opaque, int* feature_needs) {
  ProcessorClients clients;
  ASSIGN_OR_RETURN(KafkaConfig consumer_config,
                   ProcessorConsumerConfig(options));
  ASSIGN_OR_RETURN(RdKafkaConfPtr conf, consumer_config.Build());
  ASSIGN_OR_RETURN(clients.consumer,
                   RdKafkaConsumerKafka::Create(std::move(conf), listener,
                                                std::move(on_client_error)));
  ASSIGN_OR_RETURN(KafkaConfig producer_config,
                   ProcessorProducerConfig(options, feature_needs));
  if (!options.windows_topic.empty()) {
    ASSIGN_OR_RETURN(clients.windows_limit,
                     ProcessorWindowsLimit(options, producer_config));
  }
  ASSIGN_OR_RETURN(RdKafkaConfPtr pconf, producer_config.Build());
  rd_kafka_conf_set_dr_msg_cb(pconf.get(), on_delivery);
  rd_kafka_conf_set_opaque(pconf.get(), opaque);
  ASSIGN_OR_RETURN(clients.producer,
                   NewKafkaClient(RD_KAFKA_PRODUCER, std::move(pconf)));
  return clients;
}

void OnProcessorDelivery(const rd_kafka_message_t* message,
                         RuntimeShared& shared, DeadLetterSink* dead_letters) {
  --shared.undelivered;
  // Dead letters carry their minimal form; nothing else has a message
  // opaque.
  std::unique_ptr<DeadLetter> minimal(
      static_cast<DeadLetter*>(message->_private));
  if (message->err == RD_KAFKA_RESP_ERR_NO_ERROR) return;
  if (minimal != nullptr) {
    dead_letters->OnDeliveryFailed(DeadLetterDeliveryError(message->err),
                                   std::move(minimal));
    return;
  }
  shared.fatal = KafkaErrorToStatus(
      message->err,
      absl::StrCat("delivering to ", rd_kafka_topic_name(message->rkt)));
}

}  // namespace bubblewatch
