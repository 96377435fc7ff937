// StreamProcessor: the consumer that turns the `bubblewatch.events` topic into
// per-job windows in the window store, effectively once.
//
// Mechanism (as Kafka Streams and Flink commit state with offsets):
//   - each job's events feed a JobWindower; finalized windows are
//     deterministic and upserted by (job, window start);
//   - every commit writes, in ONE store batch, the new windows, each job's
//     state (finalized edge, per-producer batch sequence) and, per partition,
//     the lowest offset an open window still needs (resume_offset) and the
//     next unprocessed offset (committed_position);
//   - on assignment (start, crash, rebalance) a partition resumes at its
//     stored resume_offset; messages below committed_position are replays
//     that rebuild open windows without being counted again.
// So a crash at any moment yields the windows of an uninterrupted run; the
// replay is at most one window plus the lateness.
//
// Several instances in one consumer group (each with its own store) split the
// partitions. Progress and job state of a partition are one snapshot, stored
// locally with the windows and mirrored, after each store commit, to a
// compacted changelog topic (processor/state_changelog.h); the group offsets
// are committed only once that mirror is acknowledged. On assignment a
// partition resumes from the newer of its local snapshot and the changelog's,
// so an instance taking a partition over (rebalance, graceful stop, SIGKILL)
// continues with the previous owner's finalized edges and batch sequences and
// stores the same windows the previous owner would have.
//
// Bad input never stops it: a message that fails decoding or validation, or
// a batch over a limit that needs state (open windows per job, jobs per
// partition: partition_limits.h), goes to the dead-letter topic with the
// reason in header `bubblewatch.error`, and is counted. Limit decisions are
// remembered per partition in its snapshot, so a replay repeats them. A store
// write failure does stop it (Run returns the error): offsets must not move
// past unwritten windows.
//
// Thread safety: Run on one thread; RequestStop and stats from any.
#ifndef BUBBLEWATCH_PROCESSOR_STREAM_PROCESSOR_H_
#define BUBBLEWATCH_PROCESSOR_STREAM_PROCESSOR_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "processor/batch_validator.h"
#include "processor/commit_observer.h"
#include "processor/job_windower.h"
#include "processor/partition_limits.h"
#include "processor/processor_stats.h"
#include "storage/window_store.h"

namespace bubblewatch {

struct StreamProcessorOptions {
  std::string brokers;
  std::string topic = "bubblewatch.events";
  std::string group = "bubblewatch";
  std::string windows_topic = "bubblewatch.windows";  // "" = don't publish.
  std::string dlq_topic = "bubblewatch.events.dlq";
  // Compacted changelog of per-partition state ("" = none: a partition then
  // moves to another instance with its offset only, as in a single-instance
  // deployment).
  std::string state_topic = "bubblewatch.processor.state";
  // librdkafka properties (-X key=value), for both consumer and producer.
  std::vector<std::string> kafka_properties;
  WindowerOptions windower;
  BatchLimits limits;
  // Open windows per job, jobs per input partition (partition_limits.h).
  ProcessorLimits state_limits;
  // A job whose newest event lies this far (event time) behind the newest
  // event of its partition, and that has no open window, is forgotten: it
  // no longer counts towards state_limits.max_jobs_per_partition. A batch
  // it sends later starts it afresh (with the local store's record of its
  // finalized edge, when there is one).
  absl::Duration job_expiry = absl::Hours(6);
  // A job whose hosts' newest events lie this far apart (clock skew or
  // delivery delay; JobWindower::HostSkewNs) is logged with a warning and
  // gets a series on /metrics. 0 = never.
  absl::Duration skew_warning = absl::Seconds(30);
  // A job (and a host within it) silent this long, in wall time, is closed.
  absl::Duration idle_timeout = absl::Seconds(30);
  // A producer (id) whose newest event lies this far behind its job's
  // finalized edge (event time) is forgotten; a batch it resends later only
  // counts as late events. Bounds the job state when producers come and go
  // (the watcher uses one producer id per trace file).
  absl::Duration producer_expiry = absl::Hours(1);
  // Windows older than this (event time, per job) are deleted.
  absl::Duration retention = absl::Hours(6);
  // How often progress is committed when no window closes.
  absl::Duration commit_interval = absl::Seconds(1);
  // How often a progress line is logged.
  absl::Duration log_interval = absl::Seconds(10);
  // If > 0: Run returns once no message arrived for this long and every job
  // has been closed (for tests, batch jobs and the demo).
  absl::Duration exit_when_idle = absl::ZeroDuration();
  // Optional; must outlive the processor. Sees every batch before it is
  // committed and may add to it (alerts: processor/commit_observer.h).
  CommitObserver* observer = nullptr;

  // kInvalidArgument listing every problem (a missing broker list or topic,
  // a window, limit, expiry or interval out of range, nested ones named
  // "windower.window_ns" etc.); Create calls it.
  absl::Status Validate() const;
};

class StreamProcessor {
 public:
  // Creates the consumer (subscribed to options.topic) and the producer for
  // windows and the DLQ. `store` must outlive the processor.
  static absl::StatusOr<std::unique_ptr<StreamProcessor>> Create(
      const StreamProcessorOptions& options, WindowStore* store);
  ~StreamProcessor();

  // Consumes until RequestStop(), exit_when_idle, or a fatal error (a store
  // write failure, a fatal Kafka error), which it returns.
  absl::Status Run();

  void RequestStop() { stop_.store(true); }
  ProcessorStats stats() const;

 private:
  class Impl;
  explicit StreamProcessor(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
  std::atomic<bool> stop_{false};
};

}  // namespace bubblewatch

#endif  // BUBBLEWATCH_PROCESSOR_STREAM_PROCESSOR_H_
