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
// Not here yet: the state changelog's reads and writes (StateChangelog
// still holds its own clients).
//
// Thread safety: one thread (the processor's poll loop).
#ifndef BUBBLEWATCH_PROCESSOR_COMMIT_KAFKA_H_
#define BUBBLEWATCH_PROCESSOR_COMMIT_KAFKA_H_

#include <librdkafka/rdkafka.h>

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "kafka/kafka_admin.h"

namespace bubblewatch {

// A group offset to commit: the next offset to read of a partition.
struct PartitionOffset {
  std::string topic;
  int32_t partition = 0;
  int64_t offset = 0;
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

}  // namespace bubblewatch

#endif  // BUBBLEWATCH_PROCESSOR_COMMIT_KAFKA_H_
