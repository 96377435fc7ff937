// ConsumerKafka: the processor's consumer of its input topic (a member of
// its group), behind one narrow interface beside CommitKafka
// (processor/commit_kafka.h): subscribe, poll, a partition's high
// watermark, close. StreamProcessor's loop hands what a poll brings to
// PartitionTask; RdKafkaConsumerKafka is the librdkafka implementation,
// tests/processor/memory_kafka.h an in-memory one for unit tests.
//
// Poll returns a plain value (a message, an end of partition, an error, or
// nothing) and delivers the group's assignment changes synchronously,
// during the call, to a Listener: nothing reaches the application from
// another thread or outside Poll and Close.
//
// What only librdkafka needs stays inside its implementation: the
// rebalance callback (eager or cooperative assignment), the fetch wakeup
// of librdkafka < 2.4 (kafka/fetch_wakeup.h: a poll that brought nothing
// may seek lagging partitions; a message sent again after such a seek is
// returned as kRefetched, never as a message) and the mapping of its
// errors.
//
// Thread safety: one thread (the processor's poll loop).
#ifndef BUBBLEWATCH_PROCESSOR_CONSUMER_KAFKA_H_
#define BUBBLEWATCH_PROCESSOR_CONSUMER_KAFKA_H_

#include <librdkafka/rdkafka.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "kafka/fetch_wakeup.h"
#include "kafka/kafka_handles.h"
#include "processor/partition_task.h"

namespace bubblewatch {

class ConsumerKafka {
 public:
  // The application's side of the consumer, called during Poll and Close.
  class Listener {
   public:
    virtual ~Listener() = default;
    // Partitions assigned to this member. In, each one's offset where the
    // consumer would start (the group's offset, or a negative logical
    // offset); out, where it must start (the application may rewrite it).
    virtual void OnAssigned(std::vector<PartitionTask::Assigned>& assigned) = 0;
    // Partitions taken away (a rebalance, or Close).
    virtual void OnRevoked(const std::vector<int32_t>& revoked) = 0;
    // The next offset the application expects of `partition` (-1: none
    // read, or not owned): a message before it was handled already.
    virtual int64_t NextOffset(int32_t partition) const = 0;
    // The owned partitions not read to their end, with their next offsets,
    // for an implementation that may restart their fetching; nullopt when
    // none must be touched now (the broker is away).
    virtual std::optional<std::vector<std::pair<int32_t, int64_t>>> Lagging()
        const = 0;
  };

  // What one Poll brought.
  struct Event {
    enum class Kind {
      kNothing,         // The timeout passed.
      kMessage,         // `message`.
      kRefetched,       // A message handled already, sent again: skipped.
      kEndOfPartition,  // `partition` was read to its end.
      kError,           // `error`; `fatal`: the consumer is unusable.
    };
    Kind kind = Kind::kNothing;
    // kMessage: views (and its header reader) valid until the next Poll or
    // Close.
    ConsumedMessage message;
    int32_t partition = -1;  // kMessage, kRefetched, kEndOfPartition.
    absl::Status error;      // kError.
    // kError: the client's error code (librdkafka's rd_kafka_resp_err_t),
    // for BrokerHealth::OnConsumeError.
    int code = 0;
    bool fatal = false;
  };

  virtual ~ConsumerKafka() = default;

  // Joins the group, subscribed to `topic`; assignments follow in Poll.
  virtual absl::Status Subscribe(const std::string& topic) = 0;
  // Waits at most `timeout` for one event; assignment changes go to the
  // listener meanwhile. A failed assignment change is a fatal kError.
  virtual Event Poll(absl::Duration timeout) = 0;
  // The high watermark of the subscribed topic's `partition` the consumer
  // last learned (no request); nullopt when it knows none.
  virtual std::optional<int64_t> HighWatermark(int32_t partition) = 0;
  // Leaves the group: what is owned is revoked (OnRevoked) first. Once;
  // later calls do nothing.
  virtual void Close() = 0;
};

// The librdkafka implementation, owning the consumer handle.
class RdKafkaConsumerKafka : public ConsumerKafka {
 public:
  // Creates the consumer from `conf` (its rebalance and error callbacks
  // and opaque are this object's). `on_client_error` gets the client-level
  // errors (librdkafka's error callback, served during Poll) with the
  // handle; `listener` must outlive this.
  static absl::StatusOr<std::unique_ptr<RdKafkaConsumerKafka>> Create(
      RdKafkaConfPtr conf, Listener* listener,
      std::function<void(rd_kafka_t*, int, const char*)> on_client_error);
  ~RdKafkaConsumerKafka() override { Close(); }

  absl::Status Subscribe(const std::string& topic) override;
  Event Poll(absl::Duration timeout) override;
  std::optional<int64_t> HighWatermark(int32_t partition) override;
  // Also logs what the fetch wakeup did, if anything.
  void Close() override;

  // The raw handle, for what is not behind the interface yet: group offset
  // commits and admin calls (RdKafkaCommitKafka), the broker's health
  // probes and feature checks.
  rd_kafka_t* handle() const { return consumer_.get(); }

 private:
  RdKafkaConsumerKafka(Listener* listener,
                       std::function<void(rd_kafka_t*, int, const char*)> e)
      : listener_(listener), on_client_error_(std::move(e)) {}
  static void RebalanceCallback(rd_kafka_t* rk, rd_kafka_resp_err_t err,
                                rd_kafka_topic_partition_list_t* partitions,
                                void* opaque);
  static void ErrorCallback(rd_kafka_t* rk, int err, const char* reason,
                            void* opaque);
  void OnAssign(rd_kafka_topic_partition_list_t* partitions);
  void OnRevoke(rd_kafka_topic_partition_list_t* partitions);
  void WakeStalledFetches(absl::Time now);

  Listener* listener_;
  std::function<void(rd_kafka_t*, int, const char*)> on_client_error_;
  RdKafkaPtr consumer_;
  bool closed_ = false;
  std::string topic_;
  // The message the last Poll returned, alive until the next.
  RdKafkaMessagePtr current_;
  // A failed assignment change, for Poll to return.
  absl::Status rebalance_failure_;
  // Restarts fetching that librdkafka < 2.4 put to sleep while a partition
  // still lags (kafka/fetch_wakeup.h); unused with a newer librdkafka.
  FetchWakeup fetch_wakeup_;
};

}  // namespace bubblewatch

#endif  // BUBBLEWATCH_PROCESSOR_CONSUMER_KAFKA_H_
