// CommitObserver: a narrow hook for stages that derive state from finalized
// windows (alerts/) and must commit it atomically with them, so that a
// restart neither repeats nor loses what they did.
//
// The processor calls it on its own thread, from its commit path only:
//   WantsCommit  every commit interval (default 1 s): may run wall-clock
//                work (e.g. silence checks) and returns true when it has
//                state to commit although no window closed;
//   BeforeCommit with the batch about to be written (windows finalized since
//                the last commit, job updates, progress); may add its own
//                records (StoreBatch::alert_states). An error stops the
//                processor like a store write failure (no offsets move);
//   AfterCommit  once that batch is durable.
// Implementations must keep these calls short: they run inside the poll
// loop (max.poll.interval.ms).
#ifndef BUBBLEWATCH_PROCESSOR_COMMIT_OBSERVER_H_
#define BUBBLEWATCH_PROCESSOR_COMMIT_OBSERVER_H_

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "storage/window_store.h"

namespace bubblewatch {

class CommitObserver {
 public:
  virtual ~CommitObserver() = default;
  virtual bool WantsCommit(absl::Time now) = 0;
  virtual absl::Status BeforeCommit(absl::Time now, StoreBatch& batch) = 0;
  virtual void AfterCommit(absl::Time now) = 0;
};

}  // namespace bubblewatch

#endif  // BUBBLEWATCH_PROCESSOR_COMMIT_OBSERVER_H_
