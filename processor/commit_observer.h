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
//   AfterCommit  once that batch is durable;
//   OnJobsAssigned / OnJobsRevoked  when a rebalance gives this instance an
//                input partition (after its snapshot was restored) or takes
//                one away (after the revocation's last commit): per-job
//                state moves with the partition, and only the owner of a
//                job's partition may act on the job.
// Implementations must keep these calls short: they run inside the poll
// loop (max.poll.interval.ms).
#ifndef BUBBLEWATCH_PROCESSOR_COMMIT_OBSERVER_H_
#define BUBBLEWATCH_PROCESSOR_COMMIT_OBSERVER_H_

#include <map>
#include <string>
#include <vector>

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
  // `jobs`: the partition's jobs; `job_states`: job -> the blob this
  // observer last committed for it (AlertStateUpdate::job), as the restored
  // snapshot holds it (the previous owner's, or this instance's own).
  virtual void OnJobsAssigned(
      const std::vector<std::string>& jobs,
      const std::map<std::string, std::string>& job_states) {}
  // The revoked partition's jobs: another instance owns them now.
  virtual void OnJobsRevoked(const std::vector<std::string>& jobs) {}
};

}  // namespace bubblewatch

#endif  // BUBBLEWATCH_PROCESSOR_COMMIT_OBSERVER_H_
