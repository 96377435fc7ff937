// JobState: what the processor must remember about a job across restarts,
// stored in the window store atomically with the job's windows and its
// partition's progress: the finalized edge and, per producer, the highest
// batch sequence counted (so a resent batch never counts twice).
#ifndef BUBBLEWATCH_PROCESSOR_JOB_STATE_H_
#define BUBBLEWATCH_PROCESSOR_JOB_STATE_H_

#include <cstdint>
#include <string>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace bubblewatch {

struct JobState {
  int64_t finalized_through_ns = INT64_MIN;
  // producer id -> highest sequence number processed.
  absl::flat_hash_map<uint64_t, uint64_t> producer_sequences;

  // A compact text form: "v1 <finalized> <producer>:<seq> ...".
  std::string Serialize() const;
  // Parses Serialize()'s output; kDataLoss for anything else.
  static absl::StatusOr<JobState> Parse(absl::string_view text);
};

}  // namespace bubblewatch

#endif  // BUBBLEWATCH_PROCESSOR_JOB_STATE_H_
