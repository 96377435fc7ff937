// What the units of the streaming runtime (processor/README.md) share: the
// counters, and the producer's bookkeeping. Everything but the counters is
// used on Run's thread only (librdkafka serves its callbacks from the polls
// Run makes); the counters are also read by StreamProcessor::stats() from
// any thread, hence the lock.
#ifndef BUBBLEWATCH_PROCESSOR_RUNTIME_SHARED_H_
#define BUBBLEWATCH_PROCESSOR_RUNTIME_SHARED_H_

#include <cstdint>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "processor/processor_stats.h"

namespace bubblewatch {

// The processor's counters behind their lock.
struct StatsCell {
  mutable absl::Mutex mu;
  ProcessorStats stats ABSL_GUARDED_BY(mu);
};

struct RuntimeShared {
  // Messages produced (windows, dead letters, snapshots) whose delivery
  // report has not come yet. The commit pipeline's flush waits for 0 before
  // any offset moves.
  int64_t undelivered = 0;
  // A failure reported by a callback (rebalance, error, delivery report);
  // Run stops with it.
  absl::Status fatal;
};

}  // namespace bubblewatch

#endif  // BUBBLEWATCH_PROCESSOR_RUNTIME_SHARED_H_
