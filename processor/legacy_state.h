// Decoders of the processor's state formats written before schemas/state.fbs
// (bubblewatch up to 50f374e; docs/state.md, "Old formats"), so that a store
// or a changelog written then still restores. Nothing writes these formats
// any more: the Parse/Decode functions of job_state.h and state_changelog.h
// call these when the bytes are not a StateRecord, and the result holds only
// current encodings (job states re-serialized, the ledger out of the jobs).
//
//   job state:   text "v2 <finalized> <producer>:<seq>:<newest> ..."
//                or the older "v1 <finalized> <producer>:<seq> ..."
//   ledger:      text "L1 <newest event> <offset> <offset> ...", stored as
//                the state of the reserved job ""
//   job states:  u64 count, then per job u64-length-prefixed name and state
//                (all integers little-endian): the store's progress state
//   snapshot:    u8 1, length-prefixed topic, u64 partition, resume offset,
//                committed position, then job states: the changelog's
#ifndef BUBBLEWATCH_PROCESSOR_LEGACY_STATE_H_
#define BUBBLEWATCH_PROCESSOR_LEGACY_STATE_H_

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "processor/job_state.h"
#include "processor/partition_limits.h"
#include "processor/state_changelog.h"

namespace bubblewatch {

// A "v1" job state's producers get the finalized edge as their newest
// event, so they are kept for a full expiry. kDataLoss for anything else.
absl::StatusOr<JobState> LegacyParseJobState(absl::string_view text);

// kDataLoss for anything but "L1 ..." with ascending offsets.
absl::StatusOr<LimitLedger> LegacyParseLimitLedger(absl::string_view text);

// The store's progress state as written before: jobs and ledger filled.
absl::StatusOr<PartitionSnapshot> LegacyDecodeStoredJobStates(
    absl::string_view bytes);

// The changelog's snapshot format 1.
absl::StatusOr<PartitionSnapshot> LegacyDecodePartitionSnapshot(
    absl::string_view bytes);

}  // namespace bubblewatch

#endif  // BUBBLEWATCH_PROCESSOR_LEGACY_STATE_H_
