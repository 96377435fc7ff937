// CommitKafka: the Kafka calls the commit protocol makes
// (docs/architecture.md#commit-protocol), behind one narrow interface, so
// that CommitPipeline runs in a unit test over an in-memory Kafka
// (tests/processor/memory_kafka.h) as it runs over librdkafka in `process`
// (RdKafkaCommitKafka).
//
// Delivery accounting stays the caller's: it counts a record in
// RuntimeShared::undelivered before Produce (and uncounts it when Produce
// refuses at once); whoever serves the delivery reports (Poll, Flush)
// uncounts each report and sets RuntimeShared::fatal on a failed one.
//
// ChangelogKafka, beside it: the state changelog's calls (its snapshot
// writes and the restore's read of a partition), for StateChangelog
// (processor/state_changelog.h) over either implementation.
//
// RdKafkaDeadLetterKafka, last: the dead-letter sink's producer
// (processor/dead_letter_sink.h), and the translation of a failed dead
// letter's delivery report for it.
//
// Not here: the consumer (poll, assignments, the fetch wakeup), behind
// ConsumerKafka (processor/consumer_kafka.h), and the broker's health,
// which StreamProcessor (the librdkafka adapter) keeps.
//
// Thread safety: one thread (the processor's poll loop).
#ifndef BUBBLEWATCH_PROCESSOR_COMMIT_KAFKA_H_
#define BUBBLEWATCH_PROCESSOR_COMMIT_KAFKA_H_

#include <librdkafka/rdkafka.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "kafka/kafka_admin.h"
#include "kafka/kafka_handles.h"
#include "processor/dead_letter_sink.h"
#include "schemas/time_types.h"

namespace bubblewatch {

// A group offset to commit: the next offset to read of a partition.
struct PartitionOffset {
  std::string topic;
  int32_t partition = 0;
  KafkaOffset offset = 0;
};

class CommitKafka {
 public:
  // No partition: the producer's partitioner hashes the key.
  static constexpr int32_t kAnyPartition = -1;

  virtual ~CommitKafka() = default;

  // Enqueues one record (copied) for `topic`'s `partition`. Errors, at
  // once, as kafka/kafka_status.h maps them: kResourceExhausted when the
  // local queue is full (serve reports, wait and try again), anything else
  // a refusal: the record will never be delivered.
  virtual absl::Status Produce(const std::string& topic, int32_t partition,
                               absl::string_view key,
                               absl::string_view value) = 0;
  // Serves delivery reports for at most `timeout`.
  virtual void Poll(absl::Duration timeout) = 0;
  // Waits at most `timeout` for the delivery reports of everything
  // produced, serving them.
  virtual void Flush(absl::Duration timeout) = 0;
  // Commits the consumer group's offsets: asynchronously (the result only
  // logged by the client), or with `sync` waiting for the broker's answer,
  // returned.
  virtual absl::Status CommitOffsets(
      const std::vector<PartitionOffset>& offsets, bool sync) = 0;
  // `topic`'s partition count; kNotFound when it does not exist.
  // `just_created`: waits for the metadata of a topic created now.
  virtual absl::StatusOr<int> PartitionCount(const std::string& topic,
                                             bool just_created,
                                             absl::Duration timeout) = 0;
  // Creates `spec`'s topic unless it exists; true when it was created.
  virtual absl::StatusOr<bool> CreateTopicIfMissing(const TopicSpec& spec,
                                                    absl::Duration timeout) = 0;
};

// The librdkafka implementation: `producer` produces and serves the
// delivery reports (its dr_msg_cb does the accounting), `consumer` commits
// the group offsets and answers the admin calls. Both must outlive this.
class RdKafkaCommitKafka : public CommitKafka {
 public:
  RdKafkaCommitKafka(rd_kafka_t* consumer, rd_kafka_t* producer)
      : consumer_(consumer), producer_(producer) {}

  absl::Status Produce(const std::string& topic, int32_t partition,
                       absl::string_view key, absl::string_view value) override;
  void Poll(absl::Duration timeout) override;
  void Flush(absl::Duration timeout) override;
  absl::Status CommitOffsets(const std::vector<PartitionOffset>& offsets,
                             bool sync) override;
  absl::StatusOr<int> PartitionCount(const std::string& topic,
                                     bool just_created,
                                     absl::Duration timeout) override;
  absl::StatusOr<bool> CreateTopicIfMissing(const TopicSpec& spec,
                                            absl::Duration timeout) override;

 private:
  rd_kafka_t* consumer_;
  rd_kafka_t* producer_;
};

// The state changelog's Kafka calls (processor/state_changelog.h): its
// records go out on the processor's producer (so they are acknowledged, and
// counted, with the windows: the caller's Flush waits for them), and a
// restore reads one partition of the changelog topic from its start.
class ChangelogKafka {
 public:
  // One record of a partition as a read sees it: `value` nullopt for a
  // tombstone. Valid during the visit only.
  struct Record {
    KafkaOffset offset = 0;
    absl::string_view key;
    std::optional<absl::string_view> value;
  };

  virtual ~ChangelogKafka() = default;

  // Enqueues one record (copied; `value` nullopt: a tombstone) for
  // `topic`'s `partition`. A full local queue is waited out (delivery
  // reports served meanwhile); other errors, at once, as
  // kafka/kafka_status.h maps them with `what` in the message.
  virtual absl::Status ProduceRecord(const std::string& topic,
                                     int32_t partition, absl::string_view key,
                                     std::optional<absl::string_view> value,
                                     absl::string_view what) = 0;
  // `topic`'s partition count; kNotFound when it does not exist.
  // `just_created`: waits for the metadata of a topic created now.
  virtual absl::StatusOr<int> TopicPartitions(const std::string& topic,
                                              bool just_created,
                                              absl::Duration timeout) = 0;
  // Creates `spec`'s topic unless it exists; true when it was created.
  virtual absl::StatusOr<bool> CreateTopic(const TopicSpec& spec,
                                           absl::Duration timeout) = 0;
  // Visits every record of `topic`'s `partition` that the log holds when
  // the call starts (what compaction left, from the low to the high
  // watermark), in offset order. No record for `timeout` (the partition's
  // leader unknown that long included) fails with kDeadlineExceeded; other
  // errors as kafka/kafka_status.h maps them.
  virtual absl::Status ReadPartition(
      const std::string& topic, int32_t partition, absl::Duration timeout,
      absl::FunctionRef<void(const Record&)> visit) = 0;
};

// The librdkafka implementation: `producer` (not owned, must outlive this)
// produces, its delivery callback doing the accounting; `reader`, a
// consumer that joins no group, answers the admin calls and reads.
class RdKafkaChangelogKafka : public ChangelogKafka {
 public:
  RdKafkaChangelogKafka(RdKafkaPtr reader, rd_kafka_t* producer)
      : reader_(std::move(reader)), producer_(producer) {}

  absl::Status ProduceRecord(const std::string& topic, int32_t partition,
                             absl::string_view key,
                             std::optional<absl::string_view> value,
                             absl::string_view what) override;
  absl::StatusOr<int> TopicPartitions(const std::string& topic,
                                      bool just_created,
                                      absl::Duration timeout) override;
  absl::StatusOr<bool> CreateTopic(const TopicSpec& spec,
                                   absl::Duration timeout) override;
  absl::Status ReadPartition(
      const std::string& topic, int32_t partition, absl::Duration timeout,
      absl::FunctionRef<void(const Record&)> visit) override;

 private:
  RdKafkaPtr reader_;
  rd_kafka_t* producer_;
};

// The librdkafka implementation: `producer` (not owned, must outlive this)
// produces each dead letter with its fallback as the message opaque; its
// delivery callback hands a failed one to DeadLetterSink::OnDeliveryFailed
// with DeadLetterDeliveryError.
class RdKafkaDeadLetterKafka : public DeadLetterKafka {
 public:
  explicit RdKafkaDeadLetterKafka(rd_kafka_t* producer) : producer_(producer) {}

  std::optional<DeadLetterError> ProduceDeadLetter(
      const std::string& topic, const DeadLetter& letter,
      std::unique_ptr<DeadLetter> fallback) override;

 private:
  rd_kafka_t* producer_;
};

// What DeadLetterSink::OnDeliveryFailed needs to know of `err`, a dead
// letter's failed delivery: a refusal for good (too large, invalid, a
// policy), or the broker away (fatal).
DeadLetterError DeadLetterDeliveryError(rd_kafka_resp_err_t err);

}  // namespace bubblewatch

#endif  // BUBBLEWATCH_PROCESSOR_COMMIT_KAFKA_H_
