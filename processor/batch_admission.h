// BatchAdmission: decides what becomes of one consumed message, in this
// order: size (before decoding) → decode → validate (batch_validator.h) →
// the stateful limits (partition_limits.h: jobs per partition, open windows
// per job, sequence step, a new producer's first sequence included) →
// per-producer duplicates. The decision is data (Admission); the caller acts
// on it: a dead letter goes to the DeadLetterSink, an accepted batch to its
// job (PartitionJobs::AddBatch).
//
// Promises:
//   - a replayed message (below its partition's committed position) is
//     decided as the first pass decided it, and gets no second dead letter:
//     stateless rejections are recomputed (same bytes, same answer) and
//     skipped; limit rejections come from the partition's LimitLedger,
//     where the first pass recorded them (Admit records them), because the
//     state they were decided from (open windows, tracked jobs) is not what
//     a restored processor has; duplicates are checked against the batches
//     replayed before (PartitionJobs::IsDuplicateBatch);
//   - a decision depends only on the partition's own state, never on which
//     partitions this instance owns;
//   - a batch rejected by the open-windows or the sequence limit leaves no
//     job behind when it was its job's first.
//
// Thread safety: Run's thread only.
#ifndef BUBBLEWATCH_PROCESSOR_BATCH_ADMISSION_H_
#define BUBBLEWATCH_PROCESSOR_BATCH_ADMISSION_H_

#include <cstdint>
#include <optional>
#include <span>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "processor/batch_validator.h"
#include "processor/partition_jobs.h"
#include "processor/processor_options.h"
#include "schemas/event_batch_codec.h"
#include "schemas/time_types.h"

namespace bubblewatch {

struct Admission {
  enum class Verdict {
    kAccept,      // Add `batch` to `job`.
    kDeadLetter,  // Send the message to the DLQ with `rejection`.
    kDuplicate,   // A resent batch, live: counted, then dropped.
    kSkip,        // A replayed rejection or duplicate: nothing to do.
  };
  Verdict verdict = Verdict::kSkip;
  // kDeadLetter: why, and the batch's header when it decoded (for the
  // per-(job, producer) counts).
  BatchRejection rejection;
  std::optional<BatchHeader> source;
  // kAccept: the batch (names escaped) and its job, loaded, under `name`:
  // the batch's job, or the split unit `JOB@X` its message key names
  // (docs/architecture.md#one-job-across-processors).
  DecodedBatch batch;
  JobEntry* job = nullptr;
  std::string name;
};

class BatchAdmission {
 public:
  // `options` and `jobs` must outlive this.
  BatchAdmission(const StreamProcessorOptions& options, PartitionJobs* jobs)
      : options_(options), jobs_(jobs) {}

  // Decides `payload`, at `offset` of `partition` (owned: NoteMessage).
  // `replay`: below the partition's committed position. `key`: the
  // message's key; `JOB@X` for a batch of JOB makes it the split unit
  // `JOB@X`'s (SplitUnitOf), a job of its own for the limits, sequences and
  // lifecycle. Errors are the store's (loading a job's state); the caller
  // stops on them. What it changes goes through PartitionJobs (a limit's
  // rejection into the ledger, expired jobs forgotten, the job loaded or
  // dropped).
  absl::StatusOr<Admission> Admit(std::span<const uint8_t> payload,
                                  int32_t partition, KafkaOffset offset,
                                  bool replay, absl::Time now,
                                  absl::string_view key = {});

 private:
  const StreamProcessorOptions& options_;
  PartitionJobs* jobs_;
};

}  // namespace bubblewatch

#endif  // BUBBLEWATCH_PROCESSOR_BATCH_ADMISSION_H_
