// EventProducer: sends encoded EventBatch messages to one Kafka topic with the
// guarantees a fleet needs, and counts what the brokers acknowledged.
//
// Guarantees (required: a conflicting -X property is an error):
//   enable.idempotence=true  retries never duplicate or reorder a batch;
//   acks=all                 (implied by idempotence) acknowledged = stored;
//   partitioner=murmur2_random  the key (job id) maps to the same partition
//                            as in Java clients, so all of a job's batches
//                            share a partition and its order.
// Defaults the user may override with -X: compression.type=lz4,
// linger.ms=EventProducerOptions::linger, batch.size=1 MB,
// message.timeout.ms=EventProducerOptions::delivery_timeout.
//
// Every Send() ends in exactly one delivery report: acknowledged, or failed
// (after message.timeout.ms at the latest, e.g. when no broker answers).
// Flush() returns OK only if every batch sent so far was acknowledged, so a
// caller never exits 0 with data lost.
//
// Thread safety: Send, Poll, Flush and WaitUntilReachable from one thread;
// stats() from any thread.
#ifndef BUBBLEWATCH_INGEST_EVENT_PRODUCER_H_
#define BUBBLEWATCH_INGEST_EVENT_PRODUCER_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "kafka/kafka_config.h"
#include "kafka/kafka_handles.h"

namespace bubblewatch {

struct EventProducerOptions {
  // Default: "bubblewatch.events".
  std::string topic = "bubblewatch.events";
  // How long librdkafka may try (and retry) to deliver one batch before
  // reporting it failed (message.timeout.ms). Also bounds
  // WaitUntilReachable() in the command. Default: 30 s.
  absl::Duration delivery_timeout = absl::Seconds(30);
  // librdkafka's linger.ms: how long it waits to fill a produce request.
  // Default: 50 ms.
  absl::Duration linger = absl::Milliseconds(50);
};

// Counters since creation. "Sent" = accepted into the local queue.
struct ProducerStats {
  int64_t batches_sent = 0;
  int64_t events_sent = 0;
  int64_t bytes_sent = 0;  // Uncompressed message bytes.
  int64_t batches_acked = 0;
  int64_t events_acked = 0;
  int64_t bytes_acked = 0;
  int64_t batches_failed = 0;
  int64_t events_failed = 0;

  int64_t batches_in_flight() const {
    return batches_sent - batches_acked - batches_failed;
  }
};

class EventProducer {
 public:
  // Creates the producer. `config` holds the brokers and -X properties.
  // Errors: kInvalidArgument for a property librdkafka rejects or one that
  // conflicts with the guarantees above.
  static absl::StatusOr<std::unique_ptr<EventProducer>> Create(
      KafkaConfig config, const EventProducerOptions& options);

  // Destroys the producer without waiting; call Flush() first.
  ~EventProducer();

  // Waits until a broker answers a metadata request for the topic (creating
  // it when the cluster auto-creates topics), so that an unreachable cluster
  // is reported as such instead of as N failed batches.
  // Then logs, once, the protocol features librdkafka negotiated with that
  // broker (kafka/broker_features.h).
  // Errors: kDeadlineExceeded / kUnavailable after `timeout`, naming the
  // brokers; kNotFound if the topic does not exist and is not created;
  // kFailedPrecondition if the broker has no idempotent producers.
  absl::Status WaitUntilReachable(absl::Duration timeout);

  // Queues one message with `key` (the job id); the bytes are copied.
  // `events` is the number of events it carries, for the counters. While
  // librdkafka's local queue is full this serves delivery reports and waits.
  // Errors: kAborted after a fatal producer error; kInvalidArgument for a
  // message larger than the topic allows; kResourceExhausted if the queue
  // stays full longer than delivery_timeout.
  absl::Status Send(absl::string_view key, std::span<const uint8_t> message,
                    int64_t events);

  // Serves pending delivery reports, waiting at most `timeout` for one.
  void Poll(absl::Duration timeout = absl::ZeroDuration());

  // Waits up to `timeout` until every queued batch is acknowledged or has
  // failed. Returns OK if all batches sent so far were acknowledged;
  // otherwise kUnavailable (or the failures' own code), with the number of
  // undelivered batches and events and the first delivery error.
  absl::Status Flush(absl::Duration timeout);

  ProducerStats stats() const;
  const std::string& topic() const { return options_.topic; }
  const std::string& brokers() const { return brokers_; }

 private:
  EventProducer(EventProducerOptions options, std::string brokers);
  static void OnDelivery(rd_kafka_t* rk, const rd_kafka_message_t* message,
                         void* opaque);
  absl::Status FatalError() const;

  EventProducerOptions options_;
  std::string brokers_;
  RdKafkaPtr producer_;
  RdKafkaTopicPtr topic_;  // Declared after producer_: destroyed first.

  std::atomic<int64_t> batches_sent_{0};
  std::atomic<int64_t> events_sent_{0};
  std::atomic<int64_t> bytes_sent_{0};
  std::atomic<int64_t> batches_acked_{0};
  std::atomic<int64_t> events_acked_{0};
  std::atomic<int64_t> bytes_acked_{0};
  std::atomic<int64_t> batches_failed_{0};
  std::atomic<int64_t> events_failed_{0};
  mutable std::mutex first_error_mu_;
  absl::Status first_delivery_error_;  // Guarded by first_error_mu_.
};

}  // namespace bubblewatch

#endif  // BUBBLEWATCH_INGEST_EVENT_PRODUCER_H_
