// PartitionTask: the processor's core without I/O of its own. It owns the
// assigned partitions' state and their jobs (PartitionJobs), decides what
// becomes of each consumed message (BatchAdmission), and takes what is
// final to the store, the windows topic, the changelog and the group
// offsets (CommitPipeline) on its own cadence. Where a window is made,
// stored and published: here (OnMessage, Tick), partition_jobs.h (made),
// commit_pipeline.h (stored and published).
//
// In: consumed messages (partition, offset, bytes), wall-time ticks,
// ends of partitions, assignments and revocations, all as plain values.
// Out: through the seams it is connected to (commit_kafka.h: CommitKafka,
// ChangelogKafka; dead_letter_sink.h: DeadLetterKafka), the counters
// (stats) and the partitions' positions. StreamProcessor is the librdkafka
// adapter around it (poll, rebalance callback, fetch wakeup, broker
// health); a unit test drives it over the in-memory Kafka
// (tests/processor/task_driver.h): no broker, no librdkafka type here.
//
// Promises: those of its parts (batch_admission.h, partition_jobs.h,
// commit_pipeline.h, dead_letter_sink.h); what it adds is the order of
// their calls, which is the processor's (docs/architecture.md#the-
// partition-task):
//   - a message counts in its partition's progress before it is decided;
//   - a failed window analysis stops the task before anything past it is
//     committed (docs/semantics.md#no-silent-loss), as does a failed
//     message or commit: RuntimeShared::fatal, the caller stops;
//   - idle timeouts apply only once every partition was read to its end
//     and the broker is reachable (CaughtUp).
//
// Thread safety: one thread (the processor's poll loop, its rebalance
// callback included); stats() from any.
#ifndef BUBBLEWATCH_PROCESSOR_PARTITION_TASK_H_
#define BUBBLEWATCH_PROCESSOR_PARTITION_TASK_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "processor/batch_admission.h"
#include "processor/broker_health.h"
#include "processor/commit_kafka.h"
#include "processor/commit_pipeline.h"
#include "processor/dead_letter_sink.h"
#include "processor/partition_jobs.h"
#include "processor/processor_options.h"
#include "processor/processor_stats.h"
#include "processor/runtime_shared.h"
#include "processor/state_changelog.h"
#include "schemas/time_types.h"
#include "storage/window_store.h"

namespace bubblewatch {

// One message consumed from the input topic (options.topic). Views valid
// during the call only.
struct ConsumedMessage {
  int32_t partition = 0;
  KafkaOffset offset = 0;
  std::span<const uint8_t> payload;
  absl::string_view key;
  // Reads the message's headers from `headers_source`; called only when
  // the message gets a dead letter. Null: no headers.
  MessageHeaders (*read_headers)(const void* headers_source) = nullptr;
  const void* headers_source = nullptr;
};

class PartitionTask {
 public:
  // `options`, `store`, `health` and `shared` must outlive the task.
  // `health` says whether the broker is reachable (CaughtUp) and learns
  // of flushes that wait too long (commit_pipeline.h); `shared` counts
  // what is produced and undelivered, and holds the first failure.
  PartitionTask(const StreamProcessorOptions& options, WindowStore* store,
                BrokerHealth* health, RuntimeShared* shared);

  // The seams, once the clients exist: `kafka` publishes windows and
  // commits offsets, `changelog` (null without --state-topic) keeps the
  // snapshots, `dead_letters` (must outlive the task) takes the DLQ's
  // records.
  void Connect(std::unique_ptr<CommitKafka> kafka,
               std::unique_ptr<StateChangelog> changelog,
               DeadLetterKafka* dead_letters);
  // See CommitPipeline::set_windows_limit and set_stop.
  void set_windows_limit(int64_t bytes) { commits_.set_windows_limit(bytes); }
  void set_stop(const std::atomic<bool>* stop) { commits_.set_stop(stop); }
  // The commit cadence starts at `now` (the poll loop starts).
  void Start(absl::Time now) { last_commit_ = now; }

  // Partitions of options.topic assigned: each one's state restored from
  // the newer of the store's and the changelog's snapshot. `offset`: in,
  // where the consumer would start; out, where it must (the snapshot's
  // resume offset, unchanged without one). A partition that fails to
  // restore is left out and its failure set as RuntimeShared::fatal.
  struct Assigned {
    int32_t partition = 0;
    KafkaOffset offset = 0;
  };
  void Assign(std::span<Assigned> partitions);
  // Partitions revoked: everything final is committed first (and flushed,
  // so that the next owner's changelog read holds it; a failure becomes
  // RuntimeShared::fatal), then their jobs are dropped (the next owner
  // rebuilds open windows from the stored resume offset).
  void Revoke(std::span<const int32_t> partitions, absl::Time now);

  // One consumed message. An error (the store's, a failed analysis) is
  // also RuntimeShared::fatal: the caller stops and commits nothing more.
  absl::Status OnMessage(const ConsumedMessage& message, absl::Time now);
  // `partition` was read to its end.
  void OnEndOfPartition(int32_t partition) {
    jobs_.NoteEndOfPartition(partition);
  }
  // Wall time passed: closes idle jobs (once caught up), stops on a failed
  // analysis (also RuntimeShared::fatal), and commits when windows wait
  // or options.commit_interval passed since the last commit.
  absl::Status Tick(absl::Time now);
  // The last commit and flush, the group offsets committed synchronously
  // (shutdown).
  absl::Status Finish(absl::Time now);
  // The broker is back at `now`: silence during the outage said nothing.
  void RestartIdleTimers(absl::Time now) { jobs_.RestartIdleTimers(now); }

  // True when partitions are owned, each read to its end, and the broker
  // is reachable.
  bool CaughtUp() const;
  // How long a host may be silent before it stops holding its job's
  // watermark back: the idle timeout when caught up, else forever.
  absl::Duration HostIdle() const;

  bool owns_partitions() const { return !jobs_.partitions().empty(); }
  // Some owned partition (for the broker's health probe), if any.
  std::optional<int32_t> AnyPartition() const;
  // The next offset to read of `partition` (-1: none read, or not owned).
  KafkaOffset next_offset(int32_t partition) const;
  // The owned partitions not read to their end, with their next offsets.
  std::vector<std::pair<int32_t, KafkaOffset>> Lagging() const;
  // True when no job has an open window.
  bool AllClosed() const { return jobs_.AllClosed(); }
  // The owned partitions and jobs, to read (progress lines, gauges).
  const PartitionJobs& jobs() const { return jobs_; }

  // The sink of dead letters, for the delivery reports of the client
  // behind the DeadLetterKafka (null before Connect).
  DeadLetterSink* dead_letters() { return dead_letters_.get(); }
  // The counters, and their cell for the gauges the adapter sets.
  ProcessorStats stats() const {
    absl::MutexLock lock(&stats_.mu);
    return stats_.stats;
  }
  StatsCell& stats_cell() { return stats_; }

 private:
  const StreamProcessorOptions& options_;
  RuntimeShared* shared_;
  BrokerHealth* health_;
  StatsCell stats_;
  PartitionJobs jobs_;
  BatchAdmission admission_{options_, &jobs_};
  CommitPipeline commits_;
  std::unique_ptr<DeadLetterSink> dead_letters_;
  absl::Time last_commit_ = absl::Now();
};

}  // namespace bubblewatch

#endif  // BUBBLEWATCH_PROCESSOR_PARTITION_TASK_H_
