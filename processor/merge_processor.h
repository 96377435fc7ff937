// MergeProcessor: `bubblewatch process --stage merge`, stage 2 of jobs split
// across processors (docs/architecture.md#stage-2-the-merge). It consumes
// the window parts topic (options.topic, default kWindowPartsTopic) in its
// own consumer group, hands each part to WindowPartsTask (which merges a
// job's window once every host's part is in, and commits it to the store
// and the windows topic with the parts topic's positions), and is to
// WindowPartsTask what StreamProcessor is to PartitionTask: the librdkafka
// adapter (the consumer behind ConsumerKafka, the producer for windows and
// dead letters, the broker's health, retention, the progress line).
//
// With options.state_topic (default kWindowPartsStateTopic), each
// partition's progress and job records also go to that compacted topic, so
// that a partition moving to another instance (a rebalance, a new instance
// with an empty store) resumes with them (docs/architecture.md#stage-2-
// restart-and-rebalance). Differences from the events stage: no commit
// observer (alerts), no limits on batches (a part is one message of one
// host's window).
//
// Thread safety: Run on one thread; RequestStop and stats from any.
#ifndef BUBBLEWATCH_PROCESSOR_MERGE_PROCESSOR_H_
#define BUBBLEWATCH_PROCESSOR_MERGE_PROCESSOR_H_

#include <atomic>
#include <memory>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "processor/processor_options.h"
#include "processor/processor_stats.h"
#include "storage/window_store.h"

namespace bubblewatch {

// The defaults of `process --stage merge`.
inline constexpr char kWindowPartsTopic[] = "bubblewatch.window-parts";
inline constexpr char kMergeGroup[] = "bubblewatch-merge";
inline constexpr char kWindowPartsDlqTopic[] = "bubblewatch.window-parts.dlq";
inline constexpr char kWindowPartsStateTopic[] =
    "bubblewatch.window-parts.state";

class MergeProcessor {
 public:
  // Creates the consumer (subscribed to options.topic) and the producer.
  // options.observer must be unset (kInvalidArgument otherwise). `store` must
  // outlive the processor.
  static absl::StatusOr<std::unique_ptr<MergeProcessor>> Create(
      const StreamProcessorOptions& options, WindowStore* store);
  ~MergeProcessor();

  // Consumes until RequestStop(), exit_when_idle, or a fatal error.
  absl::Status Run();
  void RequestStop() { stop_.store(true); }
  ProcessorStats stats() const;

 private:
  class Impl;
  explicit MergeProcessor(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
  std::atomic<bool> stop_{false};
};

}  // namespace bubblewatch

#endif  // BUBBLEWATCH_PROCESSOR_MERGE_PROCESSOR_H_
