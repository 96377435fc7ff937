// The limits StreamProcessor enforces with state, so that one bad producer
// cannot hurt the fleet: open windows per job and jobs per input partition
// (the stateless per-batch limits are batch_validator.h's). A batch over one
// goes to the dead-letter topic whole, with the reason, and is counted by
// reason and by (job, producer) like any other rejection.
//
// Replay. After a restart or a rebalance a partition is re-read from its
// snapshot's resume offset, and what lies below the committed position is
// replay: those batches were decided before, from state (the job's open
// windows, the partition's jobs) that a restored processor no longer has.
// So the decisions are not recomputed: a partition's LimitLedger remembers
// the offsets it rejected at or after its resume offset, travels in the
// partition snapshot (local store and changelog: its own field of the
// PartitionSnapshotRecord, schemas/state.fbs), and a replayed batch is
// rejected exactly when its offset is in the ledger. Decisions come only from
// partition-local state, never from which partitions an instance owns, so a
// partition decides the same on whichever instance reads it.
#ifndef BUBBLEWATCH_PROCESSOR_PARTITION_LIMITS_H_
#define BUBBLEWATCH_PROCESSOR_PARTITION_LIMITS_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "base/option_problems.h"
#include "processor/batch_validator.h"
#include "schemas/time_types.h"

namespace bubblewatch {

struct ProcessorLimits {
  // Windows one job may hold open: from its oldest buffered event (at or
  // after its finalized edge) to its newest event end. Clock skew of minutes
  // between a job's hosts keeps skew / window + 2 open (20 for 3 min of 10 s
  // windows); 720 is two hours of 10 s windows. A far-future or far-past
  // timestamp would open millions (the analyzer materializes every window of
  // the range), which is what this stops.
  int64_t max_open_windows = 720;
  // Jobs one input partition tracks (state in its snapshot). A processor
  // holds at most partitions owned x this; jobs are forgotten once their
  // newest event is `job_expiry` (event time) behind their partition's.
  int64_t max_jobs_per_partition = 10'000;
  // GPU + CPU events one job may buffer (its open windows, the lateness
  // behind them, launch calls, each device's last kernel). A batch that
  // would take the buffer past it first closes all the job's windows
  // (closed_by: buffer_full) and drops the buffer
  // (docs/semantics.md#buffer-bound). About 200 bytes per event at the
  // peak of an analysis: 4,000,000 is about 0.8 GB for one job. Must be at
  // least BatchLimits::max_events, so that one batch always fits.
  int64_t max_job_buffer_events = 4'000'000;
  // How far one batch's sequence may run ahead of the highest counted batch
  // of its producer (same producer id) in its job. A producer numbers its
  // batches 0, 1, 2, ... and a restart resends from 0; only its own
  // dead-lettered batches leave holes. A batch further ahead is
  // dead-lettered as "sequence_gap" instead of adopted: a forged sequence
  // near 2^64 would otherwise make every real batch after it look like a
  // resent duplicate. A producer the job does not track counts as having
  // counted batch -1, so its first batch must be below this: a forged first
  // batch may not shadow the real stream either. So one forged batch with a
  // known producer id makes at most this many real batches look like
  // duplicates (docs/semantics.md#what-a-producer-can-forge).
  uint64_t max_sequence_step = 1024;

  // kInvalidArgument naming every limit below 1 (OptionProblems).
  absl::Status Validate() const;
  void AddProblems(OptionProblems problems) const;
};

// Returns "sequence_gap" when `header`'s producer id is not 0 and its
// sequence lies more than limits.max_sequence_step beyond the producer's
// highest counted sequence in `counted` (JobState::producer_sequences), or,
// for a producer not in `counted` (new, or forgotten after
// --producer-expiry), is limits.max_sequence_step or more. A sequence at or
// below the highest counted is a duplicate, not this check's.
std::optional<BatchRejection> CheckSequenceStep(
    const absl::flat_hash_map<uint64_t, uint64_t>& counted,
    const BatchHeader& header, const ProcessorLimits& limits);

// Returns "too_many_open_windows" when a batch would leave its job with
// `open_windows` (JobWindower::OpenWindowsWith) over the limit.
std::optional<BatchRejection> CheckOpenWindows(int64_t open_windows,
                                               int64_t window_ns,
                                               const ProcessorLimits& limits);

// Returns "too_many_jobs" when a batch of a job its partition does not track
// arrives while the partition tracks `tracked_jobs` >= the limit.
std::optional<BatchRejection> CheckNewJob(int64_t tracked_jobs,
                                          const ProcessorLimits& limits);

// One partition's memory of its limit decisions, and its event-time clock.
class LimitLedger {
 public:
  // Remembers that the batch at `offset` was rejected by a limit.
  // REQUIRES: offsets increase from call to call (one partition's order).
  void RecordRejection(KafkaOffset offset);
  // True if the batch at `offset` was rejected (and not yet forgotten).
  bool WasRejected(KafkaOffset offset) const;
  // Forgets rejections below `offset` (the partition's resume offset: no
  // replay starts below it).
  void ForgetBefore(KafkaOffset offset);
  size_t rejections() const { return rejected_.size(); }

  // The partition's event-time clock: the newest end of an accepted event
  // (none before the first; a batch without events, `end_ns` none, leaves
  // it).
  void NoteEvent(std::optional<EventNs> end_ns) {
    if (end_ns) RaiseTo(newest_event_ns_, *end_ns);
  }
  std::optional<EventNs> newest_event_ns() const { return newest_event_ns_; }

  bool empty() const { return rejected_.empty() && !newest_event_ns_; }
  // Ascending: what the partition snapshot stores.
  const std::vector<KafkaOffset>& rejected_offsets() const { return rejected_; }

  // A ledger as a snapshot stored it (state_changelog.h encodes it);
  // kDataLoss when the offsets are not strictly ascending.
  static absl::StatusOr<LimitLedger> Restore(
      std::optional<EventNs> newest_event_ns,
      std::vector<KafkaOffset> rejected_offsets);

 private:
  std::vector<KafkaOffset> rejected_;  // Ascending.
  std::optional<EventNs> newest_event_ns_;
};

}  // namespace bubblewatch

#endif  // BUBBLEWATCH_PROCESSOR_PARTITION_LIMITS_H_
