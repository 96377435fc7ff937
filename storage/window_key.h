// Keys of the window store's column families (storage/README.md, "Key
// layout").
//
//   windows:  job '\0' BE64(start_ns XOR 2^63)   → WindowSummary FlatBuffer
//   jobs:     job                                → JobRecord
//   progress: topic '\0' BE32(partition)         → ProgressRecord
//   default:  "alert_state\0" key                 → alert-state blob (alerts/)
//   default:  "window_sums\0" job '\0' BE64(start XOR 2^63)
//                                                → RunningSumsRecord
//   default:  "window_sums_last\0" job          → BE64 start + the job's
//                                                  newest RunningSumsRecord
//   default:  "meta\0window_sums"                 → "1" once the running
//                                                  sums cover every window
//
// Flipping the sign bit and writing big-endian makes bytewise key order equal
// numeric order of signed start times, so one job's windows between two
// times are one contiguous range. The '\0' after the job keeps "job1" and
// "job10" apart: every key of "job1" sorts before every key of "job10".
#ifndef BUBBLEWATCH_STORAGE_WINDOW_KEY_H_
#define BUBBLEWATCH_STORAGE_WINDOW_KEY_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "schemas/time_types.h"

namespace bubblewatch {

// kInvalidArgument unless `job` is non-empty and holds no '\0' (which would
// let one job's keys fall inside another's range).
absl::Status ValidateJobName(absl::string_view job);

// job '\0' + the encoded start. REQUIRES: ValidateJobName(job).ok().
std::string WindowKey(absl::string_view job, WindowStartNs start_ns);

// job '\0': every window key of `job` starts with it.
std::string WindowKeyPrefix(absl::string_view job);

// The smallest key greater than every window key of `job` (job '\x01').
std::string WindowKeyLimit(absl::string_view job);

// Splits a window key. Returns false if `key` is not one.
bool ParseWindowKey(absl::string_view key, absl::string_view* job,
                    WindowStartNs* start_ns);

// topic '\0' + big-endian partition.
std::string ProgressKey(absl::string_view topic, int32_t partition);
// The key of one job's record under a partition's progress (same family):
// ProgressKey, a 0 byte, the job. Never equal to a ProgressKey (longer), and
// the records of one partition share the prefix of job "".
std::string PartitionJobRecordKey(absl::string_view topic, int32_t partition,
                                  absl::string_view job);

// "alert_state" '\0' + key: alert-state blobs live in the default family.
std::string AlertStateKey(absl::string_view key);

// "window_sums" '\0' + WindowKey(job, start_ns): the running sums
// (storage/window_sums.h) of one window, in the default family. Ordered as
// the windows are. REQUIRES: ValidateJobName(job).ok().
std::string SumsKey(absl::string_view job, WindowStartNs start_ns);
// Every sums key of `job` starts with it / is below it.
std::string SumsKeyPrefix(absl::string_view job);
std::string SumsKeyLimit(absl::string_view job);
// Splits a sums key. Returns false if `key` is not one.
bool ParseSumsKey(absl::string_view key, absl::string_view* job,
                  WindowStartNs* start_ns);
// "window_sums_last" '\0' + job: a copy of the running sums of the job's
// newest window, with its start, in a small contiguous range that a fleet
// query reads in one pass (and the block cache keeps).
std::string SumsLastKey(absl::string_view job);
// Every SumsLastKey starts with it.
std::string SumsLastKeyPrefix();

// The default-family key whose presence says the running sums cover every
// stored window (written when a primary has built them).
std::string SumsCompleteKey();

}  // namespace bubblewatch

#endif  // BUBBLEWATCH_STORAGE_WINDOW_KEY_H_
