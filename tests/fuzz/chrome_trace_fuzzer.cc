// libFuzzer target: a PyTorch-profiler Chrome trace read from memory. Any
// input is either a Trace or an error; every kept event's name is in the
// string table.
#include <cstddef>
#include <cstdint>

#include "ingest/chrome/chrome_trace_reader.h"
#include "tests/fuzz/trace_invariants.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  simdjson::padded_string json(reinterpret_cast<const char*>(data), size);
  absl::StatusOr<bubblewatch::Trace> trace = bubblewatch::ReadChromeTrace(json);
  if (trace.ok()) bubblewatch::CheckTraceInvariants(*trace);
  return 0;
}
