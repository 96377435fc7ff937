// StateChangelog: the processor's per-partition state mirrored to a compacted
// Kafka topic (default `bubblewatch.processor.state`), so that whichever
// instance of the consumer group owns an input partition next resumes with
// the previous owner's job state, not just its offset. This is Kafka Streams'
// changelog topic, with one difference argued below.
//
// What the records hold: a partition's snapshot, i.e. ONE input
// partition's progress (resume offset, committed position) and limit ledger
// in its partition record (key "topic/P"), and the state, alert state and
// activity of each of its jobs in a record per job (key "topic/P/job/JOB"),
// as the same store commit wrote them to the local RocksDB store. A commit
// writes the records of the jobs it changed (each with the version it
// replaced), then the partition record, so that a restore can always
// assemble the snapshot of one commit (AssemblePartitionSnapshot): there is
// no moment where the progress of a partition and the state of its jobs
// come from different commits, and no record grows with the number of
// jobs. The rule and why it holds: docs/state.md#partition-snapshots.
//
// Where they go: changelog partition P holds the records of input
// partition P (cleanup.policy=compact: about one record per job remains).
// A restore reads the whole partition; the partition record with the
// highest committed position wins, which also discards a late partition
// record of a fenced-out (zombie) former owner.
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
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "kafka/kafka_config.h"
#include "processor/commit_kafka.h"
#include "processor/partition_limits.h"
#include "schemas/time_types.h"
#include "storage/window_store.h"

namespace bubblewatch {

// job -> JobState::Serialize(), ordered so that equal states encode equally.
// No job is named "" (ValidateBatch rejects such a batch as "empty_job").
using JobStates = std::map<std::string, std::string>;

// What the owner's store keeps of a job beside its state (storage/
// window_store.h JobUpdate): its newest event time and the wall time of the
// owner's last commit of it. Both only move forward.
struct JobActivity {
  std::optional<EventNs> last_event_ns;  // None: no event.
  WallNs last_seen_wall_ns = 0;          // Unix ns.

  bool operator==(const JobActivity& o) const {
    return last_event_ns == o.last_event_ns &&
           last_seen_wall_ns == o.last_seen_wall_ns;
  }
};

struct PartitionSnapshot {
  std::string topic;  // The input topic.
  int32_t partition = 0;
  KafkaOffset resume_offset = 0;
  KafkaOffset committed_position = 0;
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
  // The jobs are kept per key (PartitionJobRecord) rather than in this
  // record: how this build writes every partition record. Decoded records
  // with it have empty `jobs`, `job_alerts` and `activity` until
  // AssemblePartitionSnapshot fills them from the job records.
  bool jobs_per_key = false;
};

// One version of one job's part of its partition's snapshot
// (docs/state.md#partition-snapshots).
struct JobSnapshotVersion {
  // The commit that wrote it: the job's part of every snapshot of the
  // partition from this committed position to the job's next version.
  KafkaOffset committed_position = 0;
  // JobState::Serialize() of a job the partition tracks; nullopt once its
  // owner forgot it (--job-expiry).
  std::optional<std::string> state;
  // The job's alert state (alerts/), if any.
  std::optional<std::string> alerts;
  JobActivity activity;

  // Neither state nor alerts: the job is gone from the partition.
  bool gone() const { return !state && !alerts; }
};

// What the changelog and the store keep per job of a partition whose
// snapshot keeps its jobs per key. `previous` is the version `current`
// replaced, for a restore whose partition record is older than `current`:
// an owner that died after writing its jobs and before its partition record
// leaves exactly that.
struct PartitionJobRecord {
  std::string topic;
  int32_t partition = 0;
  std::string job;  // Not empty.
  JobSnapshotVersion current;
  std::optional<JobSnapshotVersion> previous;
};

// The changelog key of `job` of input (topic, partition): "TOPIC/P/job/JOB".
// A partition record's key is "TOPIC/P".
std::string PartitionJobKey(absl::string_view topic, int32_t partition,
                            absl::string_view job);

// A StateRecord holding a PartitionJobRecord.
std::string EncodePartitionJob(const PartitionJobRecord& record);
absl::StatusOr<PartitionJobRecord> DecodePartitionJob(absl::string_view bytes);
// True if `bytes` are a StateRecord whose body is a PartitionJobRecord (what
// a reader of the changelog needs to tell the two kinds of record apart).
bool IsPartitionJobRecord(absl::string_view bytes);

// The snapshot that `partition_record` and the newest job records of its
// partition (each job's last record, in any order) describe: per job the
// newest version at or before the partition record's committed position
// (current, else previous; a job with neither keeps what the partition
// record holds). A partition record written before jobs were kept per key
// holds its jobs itself; a job record then counts only at exactly its
// position. The jobs found gone (no state, no alerts) are added to
// `gone_jobs` when it is not null, for their records to be deleted.
PartitionSnapshot AssemblePartitionSnapshot(
    PartitionSnapshot partition_record,
    const std::vector<PartitionJobRecord>& jobs,
    std::vector<std::string>* gone_jobs = nullptr);

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
  // Over `kafka` (processor/commit_kafka.h; not owned, must outlive this):
  // what a unit test builds over the in-memory Kafka.
  StateChangelog(std::string topic, ChangelogKafka* kafka)
      : topic_(std::move(topic)), kafka_(kafka) {}

  const std::string& topic() const { return topic_; }

  // Creates the changelog topic (compacted) with `input_partitions`
  // partitions when it is missing. kFailedPrecondition when it exists with
  // fewer partitions than the input topic (a snapshot of input partition P
  // lives in changelog partition P). Returns true when it created the topic:
  // then it holds no snapshot yet, and reading it can be skipped (a new
  // topic's partitions take a moment to get leaders).
  absl::StatusOr<bool> Prepare(int input_partitions);

  // Each queues one record on the producer, to changelog partition
  // `partition` (of the input partition): a partition record (its
  // progress, ledger, and jobs only in the old form), one job's record
  // (EncodePartitionJob's bytes), or the tombstone that deletes a job's
  // record. A full local queue is waited out (the producer is polled);
  // errors are librdkafka's other enqueue errors.
  absl::Status Write(const PartitionSnapshot& snapshot);
  absl::Status WriteJob(absl::string_view topic, int32_t partition,
                        absl::string_view job, absl::string_view record);
  absl::Status DeleteJob(absl::string_view topic, int32_t partition,
                         absl::string_view job);

  // The newest snapshot of input (topic, partition), or nullopt when the
  // changelog has none: the whole changelog partition is read (compaction
  // keeps it about one record per job), the partition record with the
  // highest committed position wins and AssemblePartitionSnapshot adds the
  // jobs. Records that do not decode are skipped with a warning (a newer
  // or the local copy is used). The jobs found gone go to `gone_jobs`.
  absl::StatusOr<std::optional<PartitionSnapshot>> ReadLatest(
      absl::string_view topic, int32_t partition,
      std::vector<std::string>* gone_jobs = nullptr);

 private:
  // A read of the changelog that makes no progress for this long fails.
  static constexpr absl::Duration kTimeout = absl::Seconds(15);

  std::string topic_;
  std::unique_ptr<ChangelogKafka> owned_;  // Create's; null otherwise.
  ChangelogKafka* kafka_;
};

}  // namespace bubblewatch

#endif  // BUBBLEWATCH_PROCESSOR_STATE_CHANGELOG_H_
