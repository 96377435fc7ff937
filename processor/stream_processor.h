// StreamProcessor: the consumer that turns the `bubblewatch.events` topic into
// per-job windows in the window store, effectively once.
//
// Effectively once: a crash or a rebalance at any moment yields the windows
// of an uninterrupted run. How (one atomic store commit of windows, job
// state and partition progress; snapshots mirrored to a compacted changelog;
// replay from the resume offset): docs/architecture.md#commit-protocol.
// Several instances in one consumer group (each with its own store) split
// the partitions.
//
// StreamProcessor is the loop that wires the runtime's units
// (processor/README.md): BatchAdmission, DeadLetterSink, PartitionJobs,
// BrokerHealth and CommitPipeline.
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
