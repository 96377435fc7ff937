// What every Trace a reader returns promises, checked by the fuzz targets:
// each name id is in the string table and no event ends before it starts.
// A broken promise traps, which libFuzzer reports as a crash with its input.
#ifndef BUBBLEWATCH_TESTS_FUZZ_TRACE_INVARIANTS_H_
#define BUBBLEWATCH_TESTS_FUZZ_TRACE_INVARIANTS_H_

#include "schemas/trace.h"

namespace bubblewatch {

inline void CheckTraceInvariants(const Trace& trace) {
  for (const GpuActivity& a : trace.gpu) {
    if (a.name >= trace.names.size() || a.end_ns < a.start_ns) {
      __builtin_trap();
    }
  }
  for (const CpuEvent& e : trace.cpu) {
    if (e.name >= trace.names.size() || e.end_ns < e.start_ns) {
      __builtin_trap();
    }
  }
}

}  // namespace bubblewatch

#endif  // BUBBLEWATCH_TESTS_FUZZ_TRACE_INVARIANTS_H_
