// StateChangelog: the processor's per-partition state mirrored to a compacted
// Kafka topic (default `bubblewatch.processor.state`), so that whichever
// instance of the consumer group owns an input partition next resumes with
// the previous owner's job state, not just its offset. This is Kafka Streams'
// changelog topic, with one difference argued below.
//
// What a record holds: a PartitionSnapshot, i.e. ONE input partition's
// progress (resume offset, committed position), the state of every job in
// that partition (finalized edge, per-producer batch sequence), its limit
// ledger and its jobs' alert state, exactly as
// the same store commit wrote them to the local RocksDB store. A record is
// therefore always a consistent snapshot: there is no moment where the
// progress of a partition and the state of its jobs come from different
// commits.
//
// Where it goes: changelog partition P holds the snapshots of input
// partition P (key "topic/P", cleanup.policy=compact). The newest snapshot
// of P is therefore at the END of changelog partition P, and a restore reads
// only the last few records there instead of replaying the whole changelog
// (the "restores that take hours" complaint about Kafka Streams). Among the
// last `lookback` records the one with the highest committed position wins,
// which also discards a late write of a fenced-out (zombie) former owner.
//
// Why the order of commit steps makes a crash harmless, and how the next
// owner picks and replays a snapshot: docs/architecture.md#commit-protocol.
//
// Thread safety: one thread (the processor's poll loop and its rebalance
// callback).
#ifndef BUBBLEWATCH_PROCESSOR_STATE_CHANGELOG_H_
#define BUBBLEWATCH_PROCESSOR_STATE_CHANGELOG_H_

#include <librdkafka/rdkafka.h>

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "kafka/kafka_config.h"
#include "kafka/kafka_handles.h"
#include "processor/partition_limits.h"
#include "storage/window_store.h"

namespace bubblewatch {

// job -> JobState::Serialize(), ordered so that equal states encode equally.
// No job is named "" (ValidateBatch rejects such a batch as "empty_job").
using JobStates = std::map<std::string, std::string>;

// What the owner's store keeps of a job beside its state (storage/
// window_store.h JobUpdate): its newest event time and the wall time of the
// owner's last commit of it. Both only move forward.
struct JobActivity {
  int64_t last_event_ns = kNoEventNs;
  int64_t last_seen_wall_ns = 0;  // Unix ns.

  bool operator==(const JobActivity& o) const {
    return last_event_ns == o.last_event_ns &&
           last_seen_wall_ns == o.last_seen_wall_ns;
  }
};

struct PartitionSnapshot {
  std::string topic;  // The input topic.
  int32_t partition = 0;
  int64_t resume_offset = 0;
  int64_t committed_position = 0;
  JobStates jobs;
  LimitLedger ledger;
  // job -> its alert state (alerts/: an AlertStateRecord StateRecord, as
  // committed with the job's windows), so that whichever instance owns the
  // partition next evaluates the job's rules from where this one left them
  // (docs/alerts.md#fleet-wide-alerts). Opaque here, but a StateRecord
  // (the schema nests it).
  JobStates job_alerts;
  // job -> its activity, for jobs of `jobs` whose activity the owner knows
  // (a snapshot restored from a store written before the field existed
  // lacks it until the job is committed again). For readers of the
  // changelog that show jobs (`serve --brokers`); a restore carries it on
  // into the next snapshots.
  std::map<std::string, JobActivity> activity;
};

// A StateRecord holding a PartitionSnapshotRecord (schemas/state.fbs,
// docs/state.md): the changelog's values, and the state the local store
// keeps beside the partition's progress (the same bytes).
// REQUIRES: every job state is JobState::Serialize() output.
std::string EncodePartitionSnapshot(const PartitionSnapshot& snapshot);
// Reads EncodePartitionSnapshot's output and the changelog format written
// before the schema (format byte 1, the ledger under job ""): its job states
// are converted, so that the result holds only current encodings.
// kDataLoss for anything else.
absl::StatusOr<PartitionSnapshot> DecodePartitionSnapshot(
    absl::string_view bytes);
// Reads the state of a store's progress record: EncodePartitionSnapshot's
// output, or the job-state list written before the schema (only jobs and
// ledger are then filled; the progress record has the offsets).
absl::StatusOr<PartitionSnapshot> DecodeStoredPartitionState(
    absl::string_view bytes);

class StateChangelog {
 public:
  // `reader_config`: brokers and -X properties for the restore consumer (no
  // group: it assigns partitions itself). `producer` writes the snapshots;
  // its delivery callback and flushes are the caller's, so a snapshot is
  // acknowledged exactly when the caller's other output is.
  static absl::StatusOr<std::unique_ptr<StateChangelog>> Create(
      const KafkaConfig& reader_config, std::string topic,
      rd_kafka_t* producer);

  const std::string& topic() const { return topic_; }

  // Creates the changelog topic (compacted) with `input_partitions`
  // partitions when it is missing. kFailedPrecondition when it exists with
  // fewer partitions than the input topic (a snapshot of input partition P
  // lives in changelog partition P). Returns true when it created the topic:
  // then it holds no snapshot yet, and reading it can be skipped (a new
  // topic's partitions take a moment to get leaders).
  absl::StatusOr<bool> Prepare(int input_partitions);

  // Queues `snapshot` on the producer, to changelog partition
  // snapshot.partition. Errors are librdkafka's enqueue errors.
  absl::Status Write(const PartitionSnapshot& snapshot);

  // The newest snapshot of input (topic, partition), or nullopt when the
  // changelog has none. Records that do not decode are skipped with a
  // warning (a newer or the local copy is used).
  absl::StatusOr<std::optional<PartitionSnapshot>> ReadLatest(
      absl::string_view topic, int32_t partition);

 private:
  StateChangelog(std::string topic, rd_kafka_t* producer, RdKafkaPtr reader)
      : topic_(std::move(topic)),
        producer_(producer),
        reader_(std::move(reader)) {}

  static constexpr int kLookback = 16;
  static constexpr absl::Duration kTimeout = absl::Seconds(15);

  std::string topic_;
  rd_kafka_t* producer_;
  RdKafkaPtr reader_;
};

}  // namespace bubblewatch

#endif  // BUBBLEWATCH_PROCESSOR_STATE_CHANGELOG_H_
