#include "processor/partition_jobs.h"

#include <algorithm>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/btree_set.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "spdlog/spdlog.h"

namespace bubblewatch {
namespace {

// How often a job whose hosts stay skewed is warned about again.
constexpr absl::Duration kSkewWarningInterval = absl::Minutes(10);

}  // namespace

std::optional<SplitUnit> SplitUnitOf(absl::string_view key,
                                     const std::string& job) {
  if (key.size() <= job.size() + 1 || !absl::StartsWith(key, job) ||
      key[job.size()] != '@') {
    return std::nullopt;
  }
  return SplitUnit{.job = job, .host = std::string(key.substr(job.size() + 1))};
}

std::unique_ptr<JobWindower> PartitionJobs::MakeWindower(
    const std::string& name, const JobEntry& job) const {
  auto windower = std::make_unique<JobWindower>(name, options_.windower);
  if (job.split) windower->SplitAs(job.split->job, job.split->host);
  windower->RestoreFinalizedThrough(job.state.finalized_through_ns);
  return windower;
}

JobSnapshotVersion ToStoredVersion(const CommittedJob& job,
                                   KafkaOffset position) {
  JobSnapshotVersion v{.committed_position = position,
                       .alerts = job.alerts,
                       .activity = job.activity};
  if (job.state) v.state = job.state->Serialize();
  return v;
}

std::optional<CommittedJob> CommittedJobOf(const PartitionState& part,
                                           const std::string& job) {
  CommittedJob c;
  if (auto it = part.committed_states.find(job);
      it != part.committed_states.end()) {
    c.state = it->second;
  }
  if (auto it = part.job_alerts.find(job); it != part.job_alerts.end()) {
    c.alerts = it->second;
  }
  if (c.gone()) return std::nullopt;
  if (auto it = part.activity.find(job); it != part.activity.end()) {
    c.activity = it->second;
  }
  return c;
}

std::optional<JobSnapshotVersion> CurrentJobVersion(const PartitionState& part,
                                                    const std::string& job,
                                                    KafkaOffset position) {
  std::optional<CommittedJob> c = CommittedJobOf(part, job);
  if (!c) return std::nullopt;
  return ToStoredVersion(*c, position);
}

void NoteJobChanging(PartitionState& part, const std::string& job) {
  part.changed = true;
  if (part.changing.contains(job)) return;
  part.changing.emplace(job, CommittedJobOf(part, job));
}

absl::Status PartitionJobs::AddPartition(int32_t p,
                                         RestoredPartition restored) {
  PartitionSnapshot& snapshot = restored.snapshot;
  PartitionState state;
  // The boundary: the snapshot's job states are parsed once, here.
  for (auto& [job, bytes] : snapshot.jobs) {
    absl::StatusOr<JobState> parsed = JobState::Parse(bytes);
    if (!parsed.ok()) {
      return absl::DataLossError(
          absl::StrCat("partition ", p, ": the restored state of job '", job,
                       "' does not parse: ", parsed.status().message()));
    }
    state.committed_states.emplace_hint(state.committed_states.end(), job,
                                        *std::move(parsed));
  }
  state.committed_position = snapshot.committed_position;
  state.snapshot_position = snapshot.committed_position;
  state.resume_offset = snapshot.resume_offset;
  state.ledger = std::move(snapshot.ledger);
  state.job_alerts = std::move(snapshot.job_alerts);
  state.activity = std::move(snapshot.activity);
  for (std::string& job : restored.gone_jobs) {
    state.gone_jobs.emplace(std::move(job), snapshot.committed_position);
  }
  state.write_all_jobs = restored.write_all_jobs;
  partitions_[p] = std::move(state);
  return absl::OkStatus();
}

void PartitionJobs::MakeRoomForNewJob(int32_t p, absl::Time now) {
  PartitionState& part = partitions_[p];
  if (now - part.last_expiry_pass < absl::Seconds(1)) return;
  part.last_expiry_pass = now;
  ForgetExpired(p, part.resume_offset);
}

void PartitionJobs::DropIfUntracked(const std::string& job, int32_t p) {
  if (auto it = partitions_.find(p);
      it != partitions_.end() && Tracks(it->second, job)) {
    return;
  }
  live_jobs_.erase(job);
}

absl::StatusOr<JobEntry*> PartitionJobs::GetOrLoad(
    const std::string& job, int32_t partition,
    const std::optional<SplitUnit>& split) {
  auto it = live_jobs_.find(job);
  if (it == live_jobs_.end()) {
    JobEntry entry;
    entry.partition = partition;
    // The partition's snapshot is the truth (it may come from another
    // instance, and this store may hold an older state of the job from a
    // past ownership); the store's own job record is for jobs no snapshot
    // has seen (stores written before snapshots existed).
    const JobState* committed = nullptr;
    if (auto part = partitions_.find(partition); part != partitions_.end()) {
      if (auto it = part->second.committed_states.find(job);
          it != part->second.committed_states.end()) {
        committed = &it->second;
      }
    }
    if (committed != nullptr) {
      entry.state = *committed;
    } else if (!split) {
      // (A split unit's state is in its partition's snapshot only: never in
      // the store's job table, docs/state.md.)
      ASSIGN_OR_RETURN(std::optional<std::string> stored,
                       store_->JobState(job));
      if (stored) {
        ASSIGN_OR_RETURN(entry.state, JobState::Parse(*stored));
      }
    }
    it = live_jobs_.emplace(job, std::move(entry)).first;
  }
  JobEntry& entry = it->second;
  entry.partition = partition;
  if (split) {
    entry.split = split;
    // Stored so: what lists jobs from the snapshots skips it.
    entry.state.split_unit = true;
  }
  if (!entry.windower) entry.windower = MakeWindower(job, entry);
  return &entry;
}

void PartitionJobs::ForgetExpired(int32_t p, KafkaOffset resume_offset) {
  PartitionState& part = partitions_[p];
  // While replaying, jobs with batches ahead are not loaded yet.
  if (part.next_offset < part.committed_position) return;
  const std::optional<EventNs> clock = part.ledger.newest_event_ns();
  if (!clock) return;
  const std::optional<EventNs> cutoff =
      EarlierBy(*clock, absl::ToInt64Nanoseconds(options_.job_expiry));
  if (!cutoff) return;
  int64_t forgotten = 0;
  for (auto it = part.committed_states.begin();
       it != part.committed_states.end();) {
    auto live = live_jobs_.find(it->first);
    // Open windows, or a batch a replay from the resume offset would read:
    // the job's state is still needed.
    // (A dirty one was closed since the last commit: its newest state is
    // not in the table yet.)
    if (live != live_jobs_.end() &&
        (live->second.windower != nullptr || live->second.dirty ||
         live->second.last_offset >= resume_offset)) {
      ++it;
      continue;
    }
    // A job that knows of no event has nothing newer than the cutoff.
    const std::optional<EventNs> newest = it->second.NewestEventNs();
    if (newest && *newest >= *cutoff) {
      ++it;
      continue;
    }
    spdlog::info(
        "job {} forgotten: its newest event is more than {} behind "
        "its partition's",
        it->first, absl::FormatDuration(options_.job_expiry));
    // It ended (docs/semantics.md#job-lifecycle): what the store keeps of
    // it says so.
    NoteJobChanging(part, it->first);
    JobState& state = it->second;
    // A split unit has no record in the store's job table (docs/state.md):
    // none is made for it now. (A unit stored before its state said so is
    // told by the store having no record of its name.)
    bool in_store = !state.split_unit;
    if (in_store && live != live_jobs_.end()) {
      in_store = !live->second.split.has_value();
    } else if (in_store && absl::StrContains(it->first, '@')) {
      absl::StatusOr<std::optional<std::string>> record =
          store_->JobState(it->first);
      in_store = !record.ok() || record->has_value();
    }
    if (state.MarkExpired() && in_store) {
      expired_updates_.push_back(JobUpdate{.job = it->first,
                                           .state = state.Serialize(),
                                           .lifecycle = state.lifecycle});
    }
    if (live != live_jobs_.end()) live_jobs_.erase(live);
    part.activity.erase(it->first);
    it = part.committed_states.erase(it);
    ++forgotten;
  }
  if (forgotten > 0) {
    part.changed = true;
    absl::MutexLock lock(&stats_->mu);
    stats_->stats.jobs_forgotten += forgotten;
  }
}

std::vector<JobUpdate> PartitionJobs::TakeExpiredUpdates() {
  std::vector<JobUpdate> out;
  out.swap(expired_updates_);
  return out;
}

void PartitionJobs::NoteLifecycle(const std::string& name, JobEntry& job,
                                  const DecodedBatch& batch,
                                  std::optional<EventNs> partition_clock_ns) {
  JobState& state = job.state;
  JobLifecycle& life = state.lifecycle;
  const BatchHeader& header = batch.header;
  const bool has_events = !batch.trace.gpu.empty() || !batch.trace.cpu.empty();
  int64_t first_start = INT64_MAX;
  for (const GpuActivity& a : batch.trace.gpu) {
    first_start = std::min(first_start, a.start_ns);
  }
  for (const CpuEvent& e : batch.trace.cpu) {
    first_start = std::min(first_start, e.start_ns);
  }
  // Bad input: the producer said it was done. The batch is kept (it is
  // data like any other) and the producer's stream is open again.
  if (header.producer_id != 0 &&
      state.ended_producers.erase(header.producer_id) > 0) {
    ++life.batches_after_end;
    spdlog::warn(
        "job {}: producer {:016x} sent batch {} after its end marker; kept, "
        "the job is active again (docs/semantics.md#job-lifecycle)",
        name, header.producer_id, header.sequence);
    absl::MutexLock lock(&stats_->mu);
    ++stats_->stats.batches_after_end;
  }
  // A new stream's first batch after a silence: a gap between snapshots.
  // Measured from the newest event of the job's producers (not the
  // finalized edge, which closing a job rounds up to a window end).
  if (has_events && header.sequence == 0) {
    std::optional<EventNs> newest;
    for (const auto& [producer, ns] : state.producer_newest_ns) {
      if (producer != header.producer_id) newest = LaterOf(newest, ns);
    }
    if (newest && first_start > *newest &&
        first_start - *newest >= JobLifecycle::kMinGapNs) {
      life.NoteGap(first_start - *newest);
    }
  }
  if (has_events && life.ended) {
    spdlog::info("job {}: events after it ended, a new run", name);
    life.ended = false;
    life.expired = false;
    // A new run's ranks end anew (the next snapshot of a duty cycle).
    life.ended_ranks.clear();
  }
  // The ranks a job has (docs/semantics.md#job-lifecycle, "Multi-rank
  // jobs"): its world size, or at least the size of a group of its
  // collectives, which holds ranks of the job only.
  // A split unit is one host's ranks: it ends with its own producers,
  // and waiting for the job's world is stage 2's
  // (docs/architecture.md#one-job-across-processors).
  if (!job.split) {
    life.world_size = std::max(life.world_size, header.world_size);
    for (const CollectiveKernel& c : batch.trace.collectives) {
      life.world_size = std::max(life.world_size, c.group_size);
    }
  }
  if (has_events && header.rank >= 0) life.ended_ranks.erase(header.rank);
  // Waiting for ranks: a batch restarts the grace, which counts from the
  // last batch after the last marker.
  if (life.awaiting_ranks()) {
    life.awaiting_ranks_since_ns =
        LaterOf(life.awaiting_ranks_since_ns, partition_clock_ns);
  }
  if (header.end_of_stream) {
    if (header.producer_id != 0) {
      state.ended_producers.insert(header.producer_id);
    }
    if (header.rank >= 0) life.ended_ranks.insert(header.rank);
    const bool was_ended = life.ended;
    // A producer without an id cannot be told from the others: its marker
    // ends the job. Else every producer the job tracks must have ended,
    // and, for a multi-rank job, as many ranks as its world size: the
    // ranks of a finished job uploaded one file after another come as
    // producers one after another, and the first one's marker must not
    // close the windows the others' events belong to.
    const bool producers_ended =
        header.producer_id == 0 || state.AllProducersEnded();
    life.ended =
        producers_ended && (header.producer_id == 0 || life.AllRanksEnded() ||
                            options_.rank_grace <= absl::ZeroDuration());
    if (producers_ended && !life.ended) {
      if (!life.awaiting_ranks()) {
        spdlog::info(
            "job {}: {} of {} ranks ended; waiting up to --rank-grace {} for "
            "the others (docs/semantics.md#job-lifecycle)",
            name, life.ended_ranks.size(), life.world_size,
            absl::FormatDuration(options_.rank_grace));
      }
      // (Not waiting while the partition's clock is none: no event of it
      // yet to count the grace from.)
      life.awaiting_ranks_since_ns =
          LaterOf(life.awaiting_ranks_since_ns, partition_clock_ns);
    } else if (life.ended) {
      life.awaiting_ranks_since_ns.reset();
    }
    absl::MutexLock lock(&stats_->mu);
    ++stats_->stats.end_markers;
    if (life.ended && !was_ended) ++stats_->stats.jobs_ended;
  }
}

PartitionJobs::Added PartitionJobs::AddBatch(
    int32_t p, const std::string& job_name, JobEntry& entry,
    const DecodedBatch& decoded, KafkaOffset offset, bool replay,
    absl::Time now, absl::Duration host_idle) {
  PartitionState& part = partitions_[p];
  JobEntry* job = &entry;
  const DecodedBatch* batch = &decoded;
  Added added;
  if (!replay) NoteObservation(job_name, *job, batch->header);
  // A new observation after a gap: the time between it and what the job
  // holds was observed by nobody, so the job's windows close now, as at an
  // end marker, before its events come in (docs/semantics.md#observations).
  // By partition order, so a replay closes them at the same batch.
  std::vector<WindowSummary> closed;
  if (const std::optional<ObservationInfo>& o = batch->header.observation;
      o && job->windower != nullptr) {
    const std::optional<EventNs> data_end =
        job->windower->BufferedDataWindowEndNs();
    if (data_end && o->start_ns >= *data_end) {
      closed =
          job->windower->FinalizeAll(WindowSummary::ClosedBy::kObservationEnd);
      NoteCollectiveErrors(job_name, *job);
      job->state.finalized_through_ns = job->windower->finalized_through_ns();
      spdlog::info(
          "job {}: observation {:016x} starts after its data: closed "
          "through {}",
          job_name, o->id, NsText(job->state.finalized_through_ns));
      job->windower = MakeWindower(job_name, *job);
      job->skew_warned = false;
      {
        absl::MutexLock lock(&stats_->mu);
        if (!replay) ++stats_->stats.observation_closes;
        stats_->stats.host_skew.erase(job_name);
      }
    }
  }
  // The buffer bound (docs/semantics.md#buffer-bound): a batch that would
  // take the job's buffer past it closes all the job's windows first, as
  // an end marker does, and the buffer is dropped, so one job's memory
  // stays bounded whatever its event rate. The decision counts the events
  // buffered, which a replay must reproduce: the offset of the drop is kept
  // in the job's state, and a replay ignores the job's batches before it
  // (the live run dropped them; kept, their evicted remains, e.g. each
  // device's last kernel, would make the replayed buffer differ). Later
  // batches replay into a buffer no larger than the live run's, so they
  // trigger no drop the live run did not.
  const int64_t batch_events =
      static_cast<int64_t>(batch->trace.gpu.size() + batch->trace.cpu.size());
  const bool before_reset = replay && offset < job->state.buffer_reset_offset;
  if (!before_reset && job->windower != nullptr &&
      static_cast<int64_t>(job->windower->buffered_events()) + batch_events >
          options_.state_limits.max_job_buffer_events) {
    const size_t dropped = job->windower->buffered_events();
    for (WindowSummary& w :
         job->windower->FinalizeAll(WindowSummary::ClosedBy::kBufferFull)) {
      closed.push_back(std::move(w));
    }
    NoteCollectiveErrors(job_name, *job);
    job->state.finalized_through_ns = job->windower->finalized_through_ns();
    job->state.buffer_reset_offset = offset;
    if (!replay) {
      spdlog::warn(
          "job {}: {} buffered events and {} more at offset {} would pass "
          "--max-job-buffer-events {}: closed its windows through {} early "
          "and dropped its buffer (docs/semantics.md#buffer-bound)",
          job_name, dropped, batch_events, offset,
          options_.state_limits.max_job_buffer_events,
          NsText(job->state.finalized_through_ns));
    }
    job->windower = MakeWindower(job_name, *job);
    job->skew_warned = false;
    absl::MutexLock lock(&stats_->mu);
    if (!replay) ++stats_->stats.buffer_full_closes;
    stats_->stats.host_skew.erase(job_name);
  }
  // Before the batch's events are noted: a gap is measured from the newest
  // event before it.
  // A job that waited for its ranks longer than --rank-grace ends before
  // this batch (its own or another job's moved the partition's clock), as
  // CloseIdle would have ended it had it run first: by event time, so the
  // windows close at the same batch in a replay.
  for (WindowSummary& w :
       EndIfGraceOver(job_name, *job, part.ledger.newest_event_ns(), replay)) {
    closed.push_back(std::move(w));
  }
  if (job->windower == nullptr) {
    job->windower = MakeWindower(job_name, *job);
  }
  if (!replay) {
    NoteLifecycle(job_name, *job, *batch, part.ledger.newest_event_ns());
  }
  int64_t late =
      before_reset ? 0 : job->windower->Add(*batch, offset, replay, now);
  added.late_counts = job->windower->TakeLateCounts();
  added.late_collective_counts = job->windower->TakeLateCollectiveCounts();
  int64_t late_collectives = 0;
  for (const auto& [window, count] : added.late_collective_counts) {
    late_collectives += count;
  }
  std::optional<EventNs> batch_newest_ns;  // None: the batch has no events.
  for (const GpuActivity& a : batch->trace.gpu) {
    RaiseTo(batch_newest_ns, a.end_ns);
  }
  for (const CpuEvent& e : batch->trace.cpu) {
    RaiseTo(batch_newest_ns, e.end_ns);
  }
  job->last_event_ns = LaterOf(job->last_event_ns, batch_newest_ns);
  job->last_offset = offset;
  if (batch->header.producer_id != 0) {
    job->state.NoteProducerEvents(batch->header.producer_id, batch_newest_ns);
  }
  job->dirty = true;
  part.ledger.NoteEvent(batch_newest_ns);
  const std::optional<EventNs> edge_before =
      job->windower->finalized_through_ns();
  std::vector<WindowSummary> done =
      job->windower->FinalizeReady(now, host_idle);
  NoteCollectiveErrors(job_name, *job);
  job->state.finalized_through_ns = job->windower->finalized_through_ns();
  // (A split unit's windows became parts: its edge tells that some closed.)
  if (job->split ? job->state.finalized_through_ns != edge_before
                 : !done.empty()) {
    ForgetOldProducers(job->state);
    NoteHostSkew(job_name, *job, now, host_idle);
  }
  // The job ended: nothing more is coming, its windows close now (by event
  // order, so a replay closes them at the same batch).
  if (batch->header.end_of_stream && job->state.lifecycle.ended) {
    for (WindowSummary& w : job->windower->FinalizeAll(
             WindowSummary::ClosedBy::kEndMarker, replay)) {
      done.push_back(std::move(w));
    }
    NoteAnalysisFailure(job_name, *job);
    job->state.finalized_through_ns = job->windower->finalized_through_ns();
    spdlog::info("job {} ended (end marker): closed through {}", job_name,
                 NsText(job->state.finalized_through_ns));
    job->windower.reset();
    job->skew_warned = false;
    absl::MutexLock lock(&stats_->mu);
    stats_->stats.host_skew.erase(job_name);
  }
  // Tracked from its first accepted batch (the commit writes its state).
  if (!Tracks(part, job_name)) {
    NoteJobChanging(part, job_name);
    part.committed_states.emplace(job_name, job->state);
  }
  {
    absl::MutexLock lock(&stats_->mu);
    stats_->stats.events +=
        static_cast<int64_t>(batch->trace.gpu.size() + batch->trace.cpu.size());
    stats_->stats.late_events += late;
    stats_->stats.late_collectives += late_collectives;
  }
  if (!closed.empty()) {
    for (WindowSummary& w : done) closed.push_back(std::move(w));
    done = std::move(closed);
  }
  added.windows = std::move(done);
  return added;
}

void PartitionJobs::NoteObservation(const std::string& name, JobEntry& job,
                                    const BatchHeader& header) {
  if (!header.observation) return;
  const ObservationInfo& o = *header.observation;
  // One profiler at a time records a rank: a rank's two observations that
  // overlap hold the same time twice. A rank below 0 is unknown and does
  // not name a process (the processes of one host that each send a trace
  // without one overlap, legitimately): only its producer's own
  // observations are compared, and without a producer id none.
  uint64_t producer = 0;
  if (header.rank < 0) {
    if (header.producer_id == 0) return;
    producer = header.producer_id;
  }
  // Live batches only: the state restored after a restart holds the last
  // observations and counts of every batch before the committed position,
  // so a replayed batch neither counts again nor moves them back.
  auto [it, inserted] = job.state.last_observations.try_emplace(
      ObservationStream(header.host, header.rank, producer), o);
  if (inserted || it->second.id == o.id) return;
  const ObservationInfo previous = it->second;
  it->second = o;
  // Bad input (docs/semantics.md#observations): counted, per job and
  // process-wide, and logged; the events are kept and analyzed like any
  // others.
  JobLifecycle& life = job.state.lifecycle;
  if (o.start_ns < previous.start_ns) {
    spdlog::warn(
        "job {}: host {} rank {} producer {:016x}: observation {:016x} "
        "starts at {} ns, before the previous one {:016x} (at {} ns): "
        "observations go backwards (docs/semantics.md#observations)",
        name, header.host, header.rank, header.producer_id, o.id, o.start_ns,
        previous.id, previous.start_ns);
    ++life.observations_backwards;
    absl::MutexLock lock(&stats_->mu);
    ++stats_->stats.observations_backwards;
  } else if (o.start_ns < previous.end_ns) {
    spdlog::warn(
        "job {}: host {} rank {} producer {:016x}: observation {:016x} "
        "[{}, {}] ns overlaps the previous one {:016x} [{}, {}] ns "
        "(docs/semantics.md#observations)",
        name, header.host, header.rank, header.producer_id, o.id, o.start_ns,
        o.end_ns, previous.id, previous.start_ns, previous.end_ns);
    ++life.overlapping_observations;
    absl::MutexLock lock(&stats_->mu);
    ++stats_->stats.overlapping_observations;
  }
}

void PartitionJobs::NoteAnalysisFailure(const std::string& name,
                                        JobEntry& job) {
  if (job.windower == nullptr) return;
  for (HostWindowPart& p : job.windower->TakeParts()) {
    parts_.push_back(std::move(p));
  }
  const int64_t failures = job.windower->TakeAnalysisFailures();
  if (failures == 0) return;
  const absl::Status& error = job.windower->analysis_error();
  spdlog::error("job {}: {} window analysis failure(s), stopping: {}", name,
                failures, error.ToString());
  if (analysis_failure_.ok()) analysis_failure_ = error;
  absl::MutexLock lock(&stats_->mu);
  stats_->stats.window_analysis_failures += failures;
}

void PartitionJobs::NoteCollectiveErrors(const std::string& name,
                                         JobEntry& job) {
  NoteAnalysisFailure(name, job);
  std::string reason;
  const int64_t errors = job.windower->TakeCollectiveErrors(&reason);
  if (errors == 0) return;
  spdlog::warn(
      "job {}: {} window(s) stored without their collective analysis: {}", name,
      errors, reason);
  absl::MutexLock lock(&stats_->mu);
  stats_->stats.collective_errors += errors;
}

void PartitionJobs::NoteHostSkew(const std::string& name, JobEntry& job,
                                 absl::Time now, absl::Duration host_idle) {
  const int64_t threshold = absl::ToInt64Nanoseconds(options_.skew_warning);
  if (threshold <= 0) return;
  std::string ahead, behind;
  const int64_t skew =
      job.windower->HostSkewNs(now, host_idle, &ahead, &behind);
  const bool above = skew >= threshold;
  if (above &&
      (!job.skew_warned || now - job.skew_warned_at >= kSkewWarningInterval)) {
    const std::string by = absl::FormatDuration(absl::Nanoseconds(skew));
    spdlog::warn(
        "job {}: host {} is {} ahead of host {} in event time (clock skew or "
        "delivery delay); its windows close that much later and hold that "
        "much more of {}'s events (ops/RUNBOOK.md, \"Clock skew\")",
        name, ahead, by, behind, ahead);
    job.skew_warned = true;
    job.skew_warned_at = now;
  } else if (!above && job.skew_warned && skew < threshold / 2) {
    spdlog::info("job {}: host skew back to {}", name,
                 absl::FormatDuration(absl::Nanoseconds(skew)));
    job.skew_warned = false;
  }
  absl::MutexLock lock(&stats_->mu);
  if (!above) {
    stats_->stats.host_skew.erase(name);
  } else if (stats_->stats.host_skew.size() < kMaxDlqSources ||
             stats_->stats.host_skew.contains(name)) {
    stats_->stats.host_skew[name] =
        ProcessorStats::HostSkew{.skew_ns = skew,
                                 .ahead = std::move(ahead),
                                 .behind = std::move(behind)};
  }
}

// A batch resent by its producer (same id and sequence, e.g. a watcher that
// resent a file after a crash) counts once. Live, it is checked against the
// highest sequence counted, stored with the job's state. On replay that
// stored sequence covers the whole replayed range (those batches were
// counted before the restart), so a replayed batch is checked against the
// batches replayed before it instead: a resent copy follows its original in
// the partition and was dropped the first time too. (A copy whose original
// lies before the resume offset only holds events of finalized windows,
// which the windower drops on replay.)
bool PartitionJobs::IsDuplicateBatch(JobEntry& job, const BatchHeader& header,
                                     bool replay) {
  if (header.producer_id == 0) return false;
  absl::flat_hash_map<uint64_t, uint64_t>& seen =
      replay ? job.replayed_sequences : job.state.producer_sequences;
  auto it = seen.find(header.producer_id);
  if (it != seen.end() && header.sequence <= it->second) return true;
  seen[header.producer_id] = header.sequence;
  return false;
}

// Only when the finalized edge moves, and only by event time, so a replay
// forgets exactly what the first pass forgot.
void PartitionJobs::ForgetOldProducers(JobState& state) {
  if (!state.finalized_through_ns) return;
  const std::optional<EventNs> cutoff =
      EarlierBy(*state.finalized_through_ns,
                absl::ToInt64Nanoseconds(options_.producer_expiry));
  if (!cutoff) return;
  state.ForgetProducersBefore(*cutoff);
  state.ForgetObservationsBefore(*cutoff);
}

std::vector<WindowSummary> PartitionJobs::EndIfGraceOver(
    const std::string& name, JobEntry& job,
    std::optional<EventNs> partition_clock_ns, bool replay) {
  JobState& state = job.state;
  const std::optional<EventNs> since = state.lifecycle.awaiting_ranks_since_ns;
  const int64_t grace = absl::ToInt64Nanoseconds(options_.rank_grace);
  if (!since || !partition_clock_ns || *partition_clock_ns - *since < grace) {
    return {};
  }
  state.lifecycle.awaiting_ranks_since_ns.reset();
  state.lifecycle.ended = true;
  job.dirty = true;
  std::vector<WindowSummary> done;
  if (job.windower != nullptr) {
    done =
        job.windower->FinalizeAll(WindowSummary::ClosedBy::kEndMarker, replay);
    NoteCollectiveErrors(name, job);
    state.finalized_through_ns = job.windower->finalized_through_ns();
    job.windower.reset();
  }
  spdlog::warn(
      "job {} ended: {} of {} ranks sent their end marker and none came "
      "for --rank-grace {}: closed through {} "
      "(docs/semantics.md#job-lifecycle)",
      name, state.lifecycle.ended_ranks.size(), state.lifecycle.world_size,
      absl::FormatDuration(options_.rank_grace),
      NsText(state.finalized_through_ns));
  job.skew_warned = false;
  absl::MutexLock lock(&stats_->mu);
  ++stats_->stats.jobs_ended;
  stats_->stats.host_skew.erase(name);
  return done;
}

int PartitionJobs::CloseIdle(absl::Time now,
                             std::vector<WindowSummary>& windows) {
  int closed = 0;
  for (auto& [name, job] : live_jobs_) {
    if (job.state.lifecycle.awaiting_ranks()) {
      auto part = partitions_.find(job.partition);
      if (part != partitions_.end()) {
        for (WindowSummary& w :
             EndIfGraceOver(name, job, part->second.ledger.newest_event_ns())) {
          windows.push_back(std::move(w));
        }
        // Ended, with windows or without (the idle timeout closed them):
        // its state changed, the caller commits.
        if (!job.state.lifecycle.awaiting_ranks()) ++closed;
      }
    }
    if (!job.windower ||
        now - job.windower->last_activity() < options_.idle_timeout) {
      continue;
    }
    for (WindowSummary& w :
         job.windower->FinalizeAll(WindowSummary::ClosedBy::kIdleTimeout)) {
      windows.push_back(std::move(w));
    }
    NoteCollectiveErrors(name, job);
    job.state.finalized_through_ns = job.windower->finalized_through_ns();
    spdlog::info("job {} idle for {}: closed through {}", name,
                 absl::FormatDuration(options_.idle_timeout),
                 NsText(job.state.finalized_through_ns));
    job.windower.reset();
    job.dirty = true;
    job.skew_warned = false;
    ++closed;
    absl::MutexLock lock(&stats_->mu);
    stats_->stats.host_skew.erase(name);
  }
  return closed;
}

void PartitionJobs::RestartIdleTimers(absl::Time now) {
  for (auto& [name, job] : live_jobs_) {
    if (job.windower) job.windower->RestartIdleTimers(now);
  }
}

PartitionState* PartitionJobs::PartitionOf(const std::string& job) {
  if (auto it = live_jobs_.find(job); it != live_jobs_.end()) {
    auto part = partitions_.find(it->second.partition);
    return part == partitions_.end() ? nullptr : &part->second;
  }
  for (auto& [p, part] : partitions_) {
    if (Tracks(part, job) || part.job_alerts.contains(job)) return &part;
  }
  return nullptr;
}

void PartitionJobs::DropPartition(int32_t p) {
  partitions_.erase(p);
  absl::erase_if(live_jobs_, [&](const auto& kv) {
    if (kv.second.partition != p) return false;
    absl::MutexLock lock(&stats_->mu);
    stats_->stats.host_skew.erase(kv.first);
    return true;
  });
}

bool PartitionJobs::AllClosed() const {
  return std::none_of(live_jobs_.begin(), live_jobs_.end(), [](const auto& kv) {
    return kv.second.windower != nullptr;
  });
}

std::vector<JobUpdate> PartitionJobs::CommitJobStates(absl::Time now) {
  std::vector<JobUpdate> updates;
  for (auto& [name, job] : live_jobs_) {
    if (!job.dirty) continue;
    if (auto part = partitions_.find(job.partition);
        part != partitions_.end()) {
      NoteJobChanging(part->second, name);
      part->second.committed_states.insert_or_assign(name, job.state);
      // As the store keeps it: both only move forward. (Not for a split
      // unit: no user-facing listing shows it, docs/state.md.)
      if (!job.split) {
        JobActivity& seen = part->second.activity[name];
        seen.last_event_ns = LaterOf(seen.last_event_ns, job.last_event_ns);
        seen.last_seen_wall_ns =
            std::max(seen.last_seen_wall_ns, absl::ToUnixNanos(now));
      }
    }
    // The boundary: the store's job record. A split unit's state is its
    // partition snapshot's only: stored with the progress (its job record,
    // effectively once), never in the store's job table that `query jobs`
    // and serve list.
    if (!job.split) {
      updates.push_back(JobUpdate{.job = name,
                                  .last_event_ns = job.last_event_ns,
                                  .last_seen_wall = now,
                                  .state = job.state.Serialize(),
                                  .lifecycle = job.state.lifecycle});
    }
    job.dirty = false;
  }
  return updates;
}

std::vector<PartitionProgress> PartitionJobs::CommitProgress(
    const std::string& topic, bool expire_jobs) {
  absl::flat_hash_map<int32_t, KafkaOffset> resume;
  for (const auto& [name, job] : live_jobs_) {
    if (!job.windower) continue;
    if (std::optional<KafkaOffset> r = job.windower->ResumeOffset()) {
      spdlog::debug("job {} partition {}: resume {} finalized through {}", name,
                    job.partition, *r,
                    NsText(job.windower->finalized_through_ns()));
      auto [it, inserted] = resume.try_emplace(job.partition, *r);
      if (!inserted) it->second = std::min(it->second, *r);
    }
  }
  std::vector<PartitionProgress> out;
  out.reserve(partitions_.size());
  for (auto& [p, part] : partitions_) {
    if (part.next_offset < 0) continue;
    PartitionProgress progress;
    progress.topic = topic;
    progress.partition = p;
    auto it = resume.find(p);
    progress.resume_offset = it != resume.end() ? it->second : part.next_offset;
    progress.committed_position =
        std::max(part.committed_position, part.next_offset);
    part.resume_offset = progress.resume_offset;
    if (expire_jobs) ForgetExpired(p, progress.resume_offset);
    // No replay starts below the resume offset: older decisions are done.
    part.ledger.ForgetBefore(progress.resume_offset);
    part.committed_position = progress.committed_position;
    out.push_back(std::move(progress));
  }
  return out;
}

void PartitionJobs::CommitAlertState(const std::string& job,
                                     const std::optional<std::string>& alerts) {
  if (job.empty()) return;
  PartitionState* part = PartitionOf(job);
  if (part == nullptr) return;  // Not an owned partition's job.
  NoteJobChanging(*part, job);
  if (alerts) {
    part->job_alerts[job] = *alerts;
  } else {
    part->job_alerts.erase(job);
  }
}

absl::StatusOr<std::vector<JobRecordWrite>> PartitionJobs::JobRecordsToWrite(
    const PartitionProgress& progress) {
  PartitionState& part = partitions_[progress.partition];
  std::vector<JobRecordWrite> out;
  auto add = [&](const std::string& job) {
    PartitionJobRecord r{
        .topic = progress.topic, .partition = progress.partition, .job = job};
    std::optional<JobSnapshotVersion> current =
        CurrentJobVersion(part, job, progress.committed_position);
    if (auto it = part.changing.find(job); it != part.changing.end()) {
      if (it->second) {
        r.previous = ToStoredVersion(*it->second, part.snapshot_position);
      }
    } else {
      r.previous = CurrentJobVersion(part, job, part.snapshot_position);
    }
    JobRecordWrite w{.job = job};
    if (current) {
      r.current = *std::move(current);
      w.record = EncodePartitionJob(r);
      part.gone_jobs.erase(job);
    } else if (r.previous) {
      // Gone: the store deletes it at once (its commit is atomic); the
      // changelog keeps a record without state or alerts, with the version
      // it replaces, until a snapshot after it is acknowledged.
      r.current.committed_position = progress.committed_position;
      w.gone_record = EncodePartitionJob(r);
      part.gone_jobs.insert_or_assign(job, progress.committed_position);
    } else {
      return;  // Came and went within one commit: nothing was written.
    }
    out.push_back(std::move(w));
  };
  if (part.write_all_jobs) {
    absl::btree_set<std::string> jobs;
    for (const auto& [job, unused] : part.committed_states) jobs.insert(job);
    for (const auto& [job, unused] : part.job_alerts) jobs.insert(job);
    for (const auto& [job, unused] : part.changing) jobs.insert(job);
    for (const std::string& job : jobs) add(job);
    // The store's records of jobs the restored snapshot does not hold.
    ASSIGN_OR_RETURN(auto stored, store_->PartitionJobRecords(
                                      progress.topic, progress.partition));
    for (const auto& [job, unused] : stored) {
      if (!jobs.contains(job)) out.push_back(JobRecordWrite{.job = job});
    }
  } else {
    for (const auto& [job, unused] : part.changing) add(job);
  }
  return out;
}

std::vector<std::string> PartitionJobs::GoneJobsToDelete(int32_t p) const {
  std::vector<std::string> out;
  auto it = partitions_.find(p);
  if (it == partitions_.end()) return out;
  for (const auto& [job, position] : it->second.gone_jobs) {
    if (position <= it->second.snapshot_position) out.push_back(job);
  }
  return out;
}

void PartitionJobs::NoteCommitted(int32_t p, KafkaOffset position,
                                  SnapshotWrite snapshot) {
  PartitionState& part = partitions_[p];
  switch (snapshot) {
    case SnapshotWrite::kWritten:
      // GoneJobsToDelete's tombstones went with it.
      absl::erase_if(part.gone_jobs, [&](const auto& kv) {
        return kv.second <= part.snapshot_position;
      });
      part.changed = false;
      part.snapshot_position = position;
      break;
    case SnapshotWrite::kUnchanged:
      break;
    case SnapshotWrite::kNoChangelog:
      part.snapshot_position = position;
      part.gone_jobs.clear();
      break;
  }
  part.changing.clear();
  part.write_all_jobs = false;
}

}  // namespace bubblewatch
