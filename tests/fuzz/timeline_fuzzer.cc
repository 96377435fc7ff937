// libFuzzer target: the seed's timeline JSON read from memory. Any input is
// either a Trace or an error; every event's name is in the string table and
// no event ends before it starts. A trace whose times are accepted ones is
// then analyzed in 10 s windows: an error is fine, a crash, an overflow
// (UBSan) or a runaway allocation is not (one kernel near
// INT64_MAX overflowed the window loop).
#include <cstddef>
#include <cstdint>

#include "analysis/bubble_analyzer.h"
#include "ingest/timeline_reader.h"
#include "tests/fuzz/trace_invariants.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  simdjson::padded_string json(reinterpret_cast<const char*>(data), size);
  absl::StatusOr<bubblewatch::Trace> trace =
      bubblewatch::ReadTimelineJson(json);
  if (!trace.ok()) return 0;
  bubblewatch::CheckTraceInvariants(*trace);
  if (bubblewatch::CheckEventTimes(*trace).ok()) {
    bubblewatch::AnalyzerOptions options;
    options.window_ns = 10'000'000'000;
    options.max_windows = 10'000;  // Keeps each run small, as the cap is.
    (void)bubblewatch::AnalyzeTrace(*trace, options);
  }
  return 0;
}
