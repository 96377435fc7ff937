// PartitionJobs: the input partitions this instance owns and the jobs that
// live in them: each job's windower and state, its expiry, its host skew.
//
// Per partition (PartitionState): its progress, the committed state of
// every job it tracks (as of the last commit: what its snapshot holds), and
// its limit ledger (partition_limits.h). Per live job (JobEntry): the
// JobWindower of its open windows (null once closed for idleness), its live
// JobState (finalized edge, per-producer sequences), ahead of the committed
// one until the next commit copies it there, and the partition its batches
// come from (producers key batches by job, so a job lives in one
// partition; a split job's host, keyed JOB@HOST, is a unit that lives like
// a job: SplitUnit). A job's state is a JobState in both places; it becomes
// bytes only at the boundary: serialized where a store or changelog record is
// written (CommitJobStates, JobRecordsToWrite, ForgetExpired's updates),
// parsed where one is read (AddPartition, GetOrLoad's store fallback).
//
// PartitionJobs is the only writer of both: the task, the admission and
// the commit pipeline read them (partitions(), live_jobs()) and say what
// happened through the methods below (a message, a rejection, a commit's
// steps), never by setting a flag themselves.
//
// Promises (docs/architecture.md#commit-protocol has why they matter):
//   - a job's state is loaded from its partition's snapshot when it has
//     one, else from the store's job record (GetOrLoad);
//   - every decision that changes what is stored is a function of the
//     partition's events in offset order (event-time expiry of jobs and
//     producers, finalization by watermark, end marker or observation, and
//     the closed_by each stamps), so a replay repeats it; decisions on wall
//     time (idle timeouts, host skew warnings) are not;
//   - a job is forgotten (ForgetExpired) only without open windows, unsaved
//     state, or a batch a replay from the resume offset would read.
//
// Thread safety: Run's thread only.
#ifndef BUBBLEWATCH_PROCESSOR_PARTITION_JOBS_H_
#define BUBBLEWATCH_PROCESSOR_PARTITION_JOBS_H_

#include <algorithm>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "analysis/window_merge.h"
#include "processor/job_state.h"
#include "processor/job_windower.h"
#include "processor/partition_limits.h"
#include "processor/processor_options.h"
#include "processor/runtime_shared.h"
#include "processor/state_changelog.h"
#include "schemas/event_batch_codec.h"
#include "storage/window_store.h"

namespace bubblewatch {

// One job's part of its partition's snapshot, in memory (typed): its state,
// its alert state and its activity as of the last commit. Its stored form
// is a JobSnapshotVersion (state_changelog.h), made only where a record is
// written (ToStoredVersion).
struct CommittedJob {
  std::optional<JobState> state;      // None: not tracked (alerts only).
  std::optional<std::string> alerts;  // Opaque (alerts/), as committed.
  JobActivity activity;

  // Neither state nor alerts: the job is gone from the partition.
  bool gone() const { return !state && !alerts; }
};

// `job`'s stored version at `position`: its state serialized
// (JobState::Serialize, the bytes the records hold).
JobSnapshotVersion ToStoredVersion(const CommittedJob& job,
                                   KafkaOffset position);

// One owned input partition. Written by PartitionJobs only (its methods);
// the others read it through PartitionJobs::partitions() const.
struct PartitionState {
  KafkaOffset committed_position = 0;  // From the store at assignment.
  KafkaOffset next_offset = -1;        // After the last message seen.
  bool at_end = false;  // Reached the partition's end since the last one.
  // The state of every job the partition tracks as of the last commit (and
  // of the snapshot it was restored from): the committed copy, what its
  // snapshot holds. The same type as a live job's (JobEntry::state), which
  // runs ahead of it between commits; serialized only where a snapshot's
  // records are written, parsed where one is restored (AddPartition).
  std::map<std::string, JobState> committed_states;
  // The alert state of its jobs as of the last commit (commit observers'
  // per-job records, StoreBatch::alert_states with a job): it moves with
  // the partition's snapshot to the next owner. Opaque bytes: the alert
  // hook's, not a job state.
  JobStates job_alerts;
  // What the store keeps of its jobs beside their state (last event time,
  // last commit's wall time), as of the last commit: the snapshots carry it
  // for `serve --brokers`. Jobs committed since the snapshot this was
  // restored from (or all, with none) have it.
  std::map<std::string, JobActivity> activity;
  // Offsets rejected by a limit at or after the resume offset, and the
  // partition's event-time clock (partition_limits.h).
  LimitLedger ledger;
  KafkaOffset resume_offset = 0;  // Of the last commit.
  // When a new job at the limit last looked for expired jobs.
  absl::Time last_expiry_pass = absl::InfinitePast();
  bool changed = false;  // Since the last snapshot written.
  // Jobs are kept per key (docs/state.md#partition-snapshots): a commit
  // writes the records of the jobs whose part changed, each with the
  // version it replaces. The committed position of the last snapshot
  // written (or restored): the position of every version in the maps
  // above that no commit since changed.
  KafkaOffset snapshot_position = 0;
  // Jobs whose part changed since the last snapshot, with their part as of
  // snapshot_position (nullopt: the job was not in it). Filled by
  // NoteJobChanging, emptied by the commit that writes them.
  absl::flat_hash_map<std::string, std::optional<CommittedJob>> changing;
  // The next commit writes every job's record (and deletes the store's
  // records of jobs the maps lack): set on assignment, since the copy
  // not restored from may lack what the other had.
  bool write_all_jobs = false;
  // Jobs gone from the partition (neither state nor alerts) whose
  // changelog record is deleted (a tombstone) once a snapshot at or after
  // the position it went at is acknowledged: job -> that position.
  absl::flat_hash_map<std::string, KafkaOffset> gone_jobs;
};

// Call before `job`'s part of `part`'s snapshot (its entry in
// committed_states, job_alerts or activity) changes: keeps its part as of
// the last snapshot, once per commit, and marks the partition changed.
// PartitionJobs' (and its unit tests').
void NoteJobChanging(PartitionState& part, const std::string& job);

// `job`'s part of `part`'s snapshot as it is now (nullopt when the
// partition has neither its state nor its alerts).
std::optional<CommittedJob> CommittedJobOf(const PartitionState& part,
                                           const std::string& job);

// `job`'s stored version in `part`'s maps as they are now, at `position`
// (nullopt when the partition has neither its state nor its alerts).
std::optional<JobSnapshotVersion> CurrentJobVersion(const PartitionState& part,
                                                    const std::string& job,
                                                    KafkaOffset position);

// A split unit (docs/architecture.md#one-job-across-processors): the
// batches of one host of a job its producers split, keyed `JOB@HOST` (or
// `JOB@rank-R`).
struct SplitUnit {
  std::string job;   // The batches' job.
  std::string host;  // What follows the `@` of the key.
};

// The split unit a consumed message's `key` names for a batch of `job`:
// the key is `job@X` with X not empty. Nullopt: the batch is its job's
// (a key of another form, e.g. the job itself or nothing, keeps today's
// path).
std::optional<SplitUnit> SplitUnitOf(absl::string_view key,
                                     const std::string& job);

// What an assignment restored of a partition (CommitPipeline::
// RestorePartition), in its stored form, for PartitionJobs::AddPartition.
struct RestoredPartition {
  // The snapshot (empty without one); its resume_offset is where reading
  // starts (the group offset without a snapshot).
  PartitionSnapshot snapshot;
  // Jobs the changelog holds as gone, whose records are deleted once a
  // snapshot after snapshot.committed_position is acknowledged.
  std::vector<std::string> gone_jobs;
  // The first commit writes every job's record (PartitionState).
  bool write_all_jobs = false;
};

// One job's record that a commit writes (docs/state.md#partition-
// snapshots): `record` to the store and the changelog; for a job gone from
// the partition, nothing to the store (deleted) and `gone_record` to the
// changelog; neither: a stale store record, deleted.
struct JobRecordWrite {
  std::string job;
  std::optional<std::string> record;
  std::optional<std::string> gone_record;
};

// One live job (or split unit: it lives like a job, under the unit's name
// `JOB@X`, and finalizes window parts instead of windows).
struct JobEntry {
  std::unique_ptr<JobWindower> windower;  // Null once closed for idleness.
  JobState state;
  int32_t partition = 0;
  // A split unit's job and host; nullopt for a job.
  std::optional<SplitUnit> split;
  std::optional<EventNs> last_event_ns;  // None: no event yet.
  KafkaOffset last_offset = -1;          // Of the last batch added.
  bool dirty = false;
  // A skew warning was logged (at that time) and has not cleared yet.
  bool skew_warned = false;
  absl::Time skew_warned_at = absl::InfinitePast();
  // While replaying: producer id -> highest sequence replayed so far.
  absl::flat_hash_map<ProducerId, ProducerSeq> replayed_sequences;
};

class PartitionJobs {
 public:
  // `options`, `store` and `stats` must outlive this.
  PartitionJobs(const StreamProcessorOptions& options, WindowStore* store,
                StatsCell* stats)
      : options_(options), store_(store), stats_(stats) {}

  // The owned partitions and the live jobs, to read. Every write goes
  // through the methods below, so what a commit, a message or an
  // assignment does to them is said here.
  const absl::flat_hash_map<int32_t, PartitionState>& partitions() const {
    return partitions_;
  }
  const absl::flat_hash_map<std::string, JobEntry>& live_jobs() const {
    return live_jobs_;
  }

  // Takes over partition `p` as `restored` holds it: parses its jobs'
  // states (the snapshot's bytes become the committed JobStates).
  // kDataLoss, and `p` not owned, when one does not parse.
  absl::Status AddPartition(int32_t p, RestoredPartition restored);

  // A message at `offset` of partition `p` was consumed: `p` is no longer
  // read to its end, its snapshot changes, and reading goes on after the
  // message. Returns `p`'s state (a new one if `p` was not owned).
  const PartitionState& NoteMessage(int32_t p, KafkaOffset offset) {
    PartitionState& part = partitions_[p];
    part.at_end = false;
    part.changed = true;
    part.next_offset = std::max(part.next_offset, offset + 1);
    return part;
  }
  // Partition `p` was read to its end (a new state if `p` was not owned).
  void NoteEndOfPartition(int32_t p) { partitions_[p].at_end = true; }
  // A stateful limit rejected the message at `offset` of `p`: its ledger
  // remembers, so a replay decides the same (partition_limits.h).
  void NoteLimitRejection(int32_t p, KafkaOffset offset) {
    partitions_[p].ledger.RecordRejection(offset);
  }
  // A new job of `p` is at the jobs-per-partition limit: looks for expired
  // jobs to make room (ForgetExpired from the last commit's resume offset),
  // at most once a second, so a stream of made-up names costs no scan each.
  void MakeRoomForNewJob(int32_t p, absl::Time now);
  // Forgets the live entry of `job` when no partition's committed state
  // tracks it (a first batch rejected: it leaves no job behind).
  void DropIfUntracked(const std::string& job, int32_t p);

  // True when `job` is tracked by `part` (has a committed state in it).
  static bool Tracks(const PartitionState& part, const std::string& job) {
    return part.committed_states.contains(job);
  }
  // Jobs `part` tracks (its snapshot's jobs).
  static int64_t TrackedJobs(const PartitionState& part) {
    return static_cast<int64_t>(part.committed_states.size());
  }

  // The commit's part of the state (docs/architecture.md#commit-protocol,
  // CommitPipeline::Commit calls them in this order).
  // 1. The live jobs changed since the last commit: their state becomes
  // their partition's committed state (activity stamped `now`), and their
  // store updates (state serialized) are returned.
  std::vector<JobUpdate> CommitJobStates(absl::Time now);
  // 2. The progress of each owned partition a message was read of: its
  // resume offset (the oldest an open window needs, else the next
  // offset) and committed position, kept as the partition's; then, with
  // `expire_jobs`, the jobs past options.job_expiry are forgotten
  // (ForgetExpired), and the ledger forgets what lies before the resume
  // offset.
  std::vector<PartitionProgress> CommitProgress(const std::string& topic,
                                                bool expire_jobs);
  // 3. The alert state the commit observer committed for `job` (nullopt:
  // none any more) joins its partition's snapshot; ignored for a job of no
  // owned partition.
  void CommitAlertState(const std::string& job,
                        const std::optional<std::string>& alerts);
  // 4. The job records partition `progress.partition`'s snapshot at
  // `progress` needs written: those of the jobs that changed since the
  // last snapshot, or all after an assignment (PartitionState::
  // write_all_jobs), with the store's records of jobs it does not hold.
  // Notes which jobs went (their changelog tombstone is due later).
  absl::StatusOr<std::vector<JobRecordWrite>> JobRecordsToWrite(
      const PartitionProgress& progress);
  // 5. The jobs of `p` whose changelog record can be deleted now: gone at
  // or before the last snapshot written (acknowledged by this commit's
  // flush).
  std::vector<std::string> GoneJobsToDelete(int32_t p) const;
  // 6. `p` was committed at `position`; `snapshot` says what became of its
  // snapshot: written to the changelog (with GoneJobsToDelete's
  // tombstones), not written (unchanged), or there is no changelog.
  enum class SnapshotWrite { kWritten, kUnchanged, kNoChangelog };
  void NoteCommitted(int32_t p, KafkaOffset position, SnapshotWrite snapshot);

  // The live entry of `job`, loaded (see the top) and given a windower if
  // it has none. `split`: `job` is that split unit's name (its windower
  // makes parts: JobWindower::SplitAs). (Mutable because the admission
  // hands it on to this class's IsDuplicateBatch and AddBatch, which change
  // it: the writes stay here; a caller only reads it.)
  absl::StatusOr<JobEntry*> GetOrLoad(
      const std::string& job, int32_t partition,
      const std::optional<SplitUnit>& split = std::nullopt);

  // The window parts split units finalized since the last call
  // (JobWindower::TakeParts), in the order they were made: what the commit
  // publishes instead of their windows.
  std::vector<HostWindowPart> TakeParts() { return std::exchange(parts_, {}); }

  // The store updates of the jobs forgotten after --job-expiry since the
  // last call: their state with the lifecycle ended and expired.
  std::vector<JobUpdate> TakeExpiredUpdates();

  // True if `header`'s batch was already counted (see the definition).
  static bool IsDuplicateBatch(JobEntry& job, const BatchHeader& header,
                               bool replay);

  // What adding an accepted batch produced.
  struct Added {
    // Finalized by the batch: by the watermark, its end marker or its
    // observation (WindowSummary::closed_by says which).
    std::vector<WindowSummary> windows;
    // Window start -> late events of this batch for finalized windows.
    absl::flat_hash_map<WindowStartNs, int64_t> late_counts;
    // Window start -> late collective records of this batch.
    absl::flat_hash_map<WindowStartNs, int64_t> late_collective_counts;
  };
  // Adds the accepted `batch` (at `offset` of partition `p`, which
  // NoteMessage made owned) to `job`, finalizes
  // what its watermark allows (hosts silent for `host_idle` no longer hold
  // it back) and tracks the job in `part` from its first batch.
  // Lifecycle (live batches only: a replayed one is in the restored state
  // already): an end marker ends its producer's stream, and the job once
  // every producer it tracks ended, closing all its windows at once; a
  // new producer's first batch after a silence records a gap; a batch of an
  // ended job starts a new run; a batch of a producer after its own marker
  // is counted as bad input (docs/semantics.md#job-lifecycle).
  // Observations: a batch whose observation starts at or after the first
  // window boundary after the job's buffered data closes the job's windows
  // first, as an end marker does, so unobserved time is never a bubble; an
  // observation that overlaps or precedes its stream's previous one is
  // counted (docs/semantics.md#observations).
  Added AddBatch(int32_t p, const std::string& name, JobEntry& job,
                 const DecodedBatch& batch, KafkaOffset offset, bool replay,
                 absl::Time now, absl::Duration host_idle);

  // Counts a live batch's observation that overlaps or precedes the
  // previous observation of its stream: its (host, rank) when the rank is
  // known, else its producer (docs/semantics.md#observations). Per job in
  // its state (lifecycle.overlapping_observations, observations_backwards,
  // compared with JobState::last_observations, all persisted: see
  // job_state.h) and process-wide in the stats.
  void NoteObservation(const std::string& name, JobEntry& job,
                       const BatchHeader& header);

  // Closes the jobs silent for options.idle_timeout (wall time), and those
  // whose wait for their ranks passed options.rank_grace of their
  // partition's event time (EndIfGraceOver), appending their windows to
  // `windows`. Returns how many it closed.
  int CloseIdle(absl::Time now, std::vector<WindowSummary>& windows);

  // Restarts every open job's idle timers (the broker is back).
  void RestartIdleTimers(absl::Time now);

  // Drops partition `p` and its jobs (revoked: the next owner rebuilds
  // them from the snapshot).
  void DropPartition(int32_t p);

  // True when no job has an open window.
  bool AllClosed() const;

  // The first failed window analysis (JobWindower::analysis_error), OK
  // when none: its windows were not made, so the owner must stop before it
  // commits anything past them (docs/semantics.md#no-silent-loss).
  const absl::Status& analysis_failure() const { return analysis_failure_; }

 private:
  // Forgets the jobs of `p` past options.job_expiry that have no open
  // window and no batch at or after `resume_offset` (CommitProgress,
  // MakeRoomForNewJob). Each one's stored state is marked ended (expired)
  // by the next commit (TakeExpiredUpdates).
  void ForgetExpired(int32_t p, KafkaOffset resume_offset);
  // The owned partition `job` belongs to (a live job's, else the one whose
  // snapshot holds it), or null.
  PartitionState* PartitionOf(const std::string& job);
  // Measures the host skew of `job` (its windows just closed), logs a
  // warning when it is over options.skew_warning and updates the stats.
  // Counts (ProcessorStats::collective_errors) and logs the windows whose
  // collective analysis refused the job's ranks since the last call.
  // Also notes a failed analysis of the job's windows (NoteAnalysisFailure).
  void NoteCollectiveErrors(const std::string& name, JobEntry& job);
  // Counts (ProcessorStats::window_analysis_failures), logs and keeps in
  // analysis_failure_ the failed analyses of `job`'s windows. Called after
  // every Finalize* of a windower, before it may be dropped: also takes a
  // split unit's parts into parts_.
  void NoteAnalysisFailure(const std::string& name, JobEntry& job);
  void NoteHostSkew(const std::string& name, JobEntry& job, absl::Time now,
                    absl::Duration host_idle);
  // The lifecycle part of AddBatch, for a live batch, before its events.
  // `partition_clock_ns`: the partition's event-time clock before the
  // batch (PartitionState::ledger; none before its first event), from which
  // --rank-grace counts.
  void NoteLifecycle(const std::string& name, JobEntry& job,
                     const DecodedBatch& batch,
                     std::optional<EventNs> partition_clock_ns);
  // Ends `job` when it has waited for its ranks (JobState::
  // awaiting_ranks_since_ns) for options.rank_grace of its partition's
  // event time, `partition_clock_ns`: closes its windows (closed_by
  // end_marker) and returns them. Nothing otherwise. `replay`: the batch
  // that moved the clock is a replayed one (JobWindower::FinalizeAll).
  std::vector<WindowSummary> EndIfGraceOver(
      const std::string& name, JobEntry& job,
      std::optional<EventNs> partition_clock_ns, bool replay = false);
  // Forgets the producers of `state` whose newest event lies more than
  // options.producer_expiry behind its finalized edge, and the streams
  // whose last observation ended that far behind it.
  void ForgetOldProducers(JobState& state);
  // A new windower for `job` named `name` (split: its unit's).
  std::unique_ptr<JobWindower> MakeWindower(const std::string& name,
                                            const JobEntry& job) const;

  const StreamProcessorOptions& options_;
  WindowStore* store_;
  StatsCell* stats_;
  absl::flat_hash_map<int32_t, PartitionState> partitions_;
  absl::flat_hash_map<std::string, JobEntry> live_jobs_;
  std::vector<JobUpdate> expired_updates_;
  std::vector<HostWindowPart> parts_;
  absl::Status analysis_failure_;
};

}  // namespace bubblewatch

#endif  // BUBBLEWATCH_PROCESSOR_PARTITION_JOBS_H_
