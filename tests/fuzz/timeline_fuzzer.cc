// libFuzzer target: the seed's timeline JSON read from memory. Any input is
// either a Trace or an error; every event's name is in the string table and
// no event ends before it starts.
#include <cstddef>
#include <cstdint>

#include "ingest/timeline_reader.h"
#include "tests/fuzz/trace_invariants.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  simdjson::padded_string json(reinterpret_cast<const char*>(data), size);
  absl::StatusOr<bubblewatch::Trace> trace =
      bubblewatch::ReadTimelineJson(json);
  if (trace.ok()) bubblewatch::CheckTraceInvariants(*trace);
  return 0;
}
