// Checks a decoded EventBatch for impossible events before it reaches a
// job's windows. A batch that fails goes to the dead-letter topic whole, with
// the reason, and is counted by reason (docs/semantics.md#dead-letters:
// nothing is silently dropped).
#ifndef BUBBLEWATCH_PROCESSOR_BATCH_VALIDATOR_H_
#define BUBBLEWATCH_PROCESSOR_BATCH_VALIDATOR_H_

#include <cstdint>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "base/option_problems.h"
#include "schemas/event_batch_codec.h"

namespace bubblewatch {

// Why a batch was rejected: a short stable code (the DLQ header and the
// metric label) and a sentence for people.
struct BatchRejection {
  std::string reason;  // e.g. "end_before_start".
  std::string detail;  // e.g. "GPU activity #3 'gemm' ends 5 ns before ...".
};

// Limits on a sane batch. Defaults: an event lasts at most a day; a batch's
// events lie within a day of each other. Whatever the limits, every time must
// be an accepted one (schemas/trace.h: about 146 years either side of the
// clock's epoch), so that no window arithmetic can overflow. The size limits
// keep one bad producer from exhausting the processor's memory: a batch over
// one is rejected whole before its events are buffered. The defaults are far
// above what `bubblewatch produce` sends (4096 events, a few hundred KB).
struct BatchLimits {
  int64_t max_event_duration_ns = int64_t{24} * 3600 * 1'000'000'000;
  int64_t max_batch_time_spread_ns = int64_t{24} * 3600 * 1'000'000'000;
  int64_t max_events = 1'000'000;
  // The encoded message, before decoding.
  int64_t max_batch_bytes = int64_t{64} << 20;
  // Any one string: an event name, the job or the host.
  int64_t max_name_bytes = 4096;
  // Entries in the batch's string table, and their bytes together.
  int64_t max_names = 100'000;
  int64_t max_string_table_bytes = int64_t{16} << 20;

  // kInvalidArgument naming every limit below 1 (OptionProblems).
  absl::Status Validate() const;
  void AddProblems(OptionProblems problems) const;
};

// Returns "batch_too_large" when an encoded message of `bytes` is over
// limits.max_batch_bytes (checked before decoding), else nullopt.
std::optional<BatchRejection> CheckBatchBytes(size_t bytes,
                                              const BatchLimits& limits = {});

// Returns the first reason `batch` cannot be processed, or nullopt:
//   "empty_job"            the batch names no job;
//   "bad_job_name"         the job is not printable UTF-8 (control
//                          characters or bytes that are not UTF-8): it is
//                          a key in the store, the API and /metrics;
//   "name_too_long"        the job, the host or a name in the string table
//                          is longer than limits.max_name_bytes;
//   "string_table_too_large"  more names than limits.max_names, or more
//                          bytes than limits.max_string_table_bytes;
//   "too_many_events"      more than limits.max_events, or more collective
//                          records than GPU activities (each describes one);
//   "end_before_start"     an event (or collective record) ends before it
//                          starts;
//   "duration_over_limit"  an event (or collective record) lasts longer
//                          than the limit;
//   "timestamps_out_of_range"  an event or collective record time outside
//                          the accepted range (IsAcceptedEventTime,
//                          schemas/trace.h), or events days apart (spread
//                          over the limit);
//   "bad_observation"      the batch's observation has id 0, ends before
//                          it starts, or has a time outside the accepted
//                          range (docs/semantics.md#observations);
//   "event_outside_observation"  an event or collective record lies (in
//                          part) outside the batch's observed interval.
std::optional<BatchRejection> ValidateBatch(const DecodedBatch& batch,
                                            const BatchLimits& limits = {});

// After ValidateBatch accepted `batch`: its host and event names that are
// not printable UTF-8 are replaced with their escaped form
// (EscapeUnprintableNames), deterministically, so a replay makes the same
// names.
void EscapeUnprintableNames(DecodedBatch* batch);

}  // namespace bubblewatch

#endif  // BUBBLEWATCH_PROCESSOR_BATCH_VALIDATOR_H_
