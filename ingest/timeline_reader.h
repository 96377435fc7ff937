// Reads the seed's timeline JSON:
//   {"gpu_kernels": [{"name", "start_us", "end_us", "stream",
//                     optional "device", "kind" (kernel|memcpy|memset),
//                     "correlation", "pageable", "bytes"}],
//    "cpu_events":  [{"name", "start_us", "end_us",
//                     optional "tid", "correlation"}]}
// Times are microseconds (numbers, or strings holding a decimal) converted
// exactly to nanoseconds. Unknown keys are skipped and counted. A kernel
// whose name IsCollectiveKernelName also gets a CollectiveKernel (times,
// device, stream and name only: the format says nothing more).
#ifndef BUBBLEWATCH_INGEST_TIMELINE_READER_H_
#define BUBBLEWATCH_INGEST_TIMELINE_READER_H_

#include "absl/status/statusor.h"
#include "schemas/trace.h"
#include "simdjson.h"

namespace bubblewatch {

// Errors (kInvalidArgument, message says where): bad JSON at byte offset K;
// missing or mistyped field; end before start; a number that is not finite or
// does not fit in int64 nanoseconds; an unknown "kind".
absl::StatusOr<Trace> ReadTimelineJson(const simdjson::padded_string& json);

}  // namespace bubblewatch

#endif  // BUBBLEWATCH_INGEST_TIMELINE_READER_H_
