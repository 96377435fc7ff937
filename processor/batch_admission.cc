#include "processor/batch_admission.h"

#include <optional>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "processor/partition_limits.h"

namespace bubblewatch {
namespace {

Admission WithVerdict(Admission::Verdict verdict) {
  Admission a;
  a.verdict = verdict;
  return a;
}

Admission Skip() { return WithVerdict(Admission::Verdict::kSkip); }

// A rejection: a dead letter when live; on replay it went the first time.
Admission Reject(bool replay, BatchRejection rejection,
                 const BatchHeader* source = nullptr) {
  if (replay) return Skip();
  Admission a = WithVerdict(Admission::Verdict::kDeadLetter);
  a.rejection = std::move(rejection);
  if (source != nullptr) a.source = *source;
  return a;
}

}  // namespace

absl::StatusOr<Admission> BatchAdmission::Admit(
    std::span<const uint8_t> payload, int32_t partition, KafkaOffset offset,
    bool replay, absl::Time now, absl::string_view key) {
  // Checked before decoding: a huge message is not decoded at all.
  if (std::optional<BatchRejection> too_large =
          CheckBatchBytes(payload.size(), options_.limits)) {
    return Reject(replay, *std::move(too_large));
  }
  absl::StatusOr<DecodedBatch> batch = DecodeEventBatch(payload);
  if (!batch.ok()) {
    // A replayed message went to the DLQ the first time.
    return Reject(replay, BatchRejection{
                              .reason = "undecodable",
                              .detail = std::string(batch.status().message())});
  }
  if (std::optional<BatchRejection> rejection =
          ValidateBatch(*batch, options_.limits)) {
    return Reject(replay, *std::move(rejection), &batch->header);
  }
  EscapeUnprintableNames(&*batch);
  // A key `JOB@X` makes the batch its split unit's (compared with the
  // escaped job: one whose name needed escaping keeps the single stage,
  // whole, nothing lost).
  const std::optional<SplitUnit> split = SplitUnitOf(key, batch->header.job);
  const std::string job_name =
      split ? absl::StrCat(split->job, "@", split->host) : batch->header.job;
  const PartitionState& part = jobs_->partitions().at(partition);
  // A stateful limit's rejection is remembered in the partition's ledger,
  // so that a replay decides the same.
  auto reject_for_limit = [&](BatchRejection rejection) {
    jobs_->NoteLimitRejection(partition, offset);
    return Reject(/*replay=*/false, std::move(rejection), &batch->header);
  };
  // The stateful limits. A replayed batch is decided as it was the first
  // time (its partition's ledger); its dead letter was sent then.
  if (replay) {
    if (part.ledger.WasRejected(offset)) return Skip();
  } else if (!PartitionJobs::Tracks(part, job_name)) {
    // At the limit, expired jobs make room first.
    if (PartitionJobs::TrackedJobs(part) >=
        options_.state_limits.max_jobs_per_partition) {
      jobs_->MakeRoomForNewJob(partition, now);
    }
    if (std::optional<BatchRejection> rejection = CheckNewJob(
            PartitionJobs::TrackedJobs(part), options_.state_limits)) {
      return reject_for_limit(*std::move(rejection));
    }
  }
  ASSIGN_OR_RETURN(JobEntry * job,
                   jobs_->GetOrLoad(job_name, partition, split));
  if (!replay) {
    std::optional<BatchRejection> rejection =
        CheckOpenWindows(job->windower->OpenWindowsWith(*batch),
                         options_.windower.window_ns, options_.state_limits);
    if (!rejection) {
      rejection = CheckSequenceStep(job->state.producer_sequences,
                                    batch->header, options_.state_limits);
    }
    if (rejection) {
      Admission a = reject_for_limit(*std::move(rejection));
      // A job whose first batch this was is not tracked: a stream of
      // made-up job names must not grow the job table either.
      jobs_->DropIfUntracked(job_name, partition);
      return a;
    }
  }
  if (PartitionJobs::IsDuplicateBatch(*job, batch->header, replay)) {
    // A replayed duplicate was counted the first time.
    return replay ? Skip() : WithVerdict(Admission::Verdict::kDuplicate);
  }
  Admission accepted = WithVerdict(Admission::Verdict::kAccept);
  accepted.batch = *std::move(batch);
  accepted.job = job;
  accepted.name = job_name;
  return accepted;
}

}  // namespace bubblewatch
