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
#include "processor/processor_options.h"
#include "processor/processor_stats.h"
#include "storage/window_store.h"

namespace bubblewatch {

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
