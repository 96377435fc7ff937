// Finding where a JSON object or array ends without parsing it: what lets the
// Chrome-trace reader cut "traceEvents" into single events, each parsed on
// its own (and on any thread), while the bytes arrive in chunks.
//
// The scan honours strings and their escapes (a bracket inside a string does
// not count) but checks nothing else: it is a cutter, not a validator. What
// it cuts is then parsed by simdjson, which reports any syntax error.
#ifndef BUBBLEWATCH_INGEST_CHROME_JSON_CONTAINER_SCAN_H_
#define BUBBLEWATCH_INGEST_CHROME_JSON_CONTAINER_SCAN_H_

namespace bubblewatch {

// Where a scan stands between two stretches of input. Starts zeroed, at the
// container's opening bracket.
struct JsonScanState {
  int depth = 0;
  bool in_string = false;
  bool escape_pending = false;  // The next byte is escaped by a '\\'.
};

// Scans [p, end) for the end of the object or array whose opening bracket
// the scan started at (with a zeroed state); returns the byte after its
// closing bracket, or nullptr when the stretch ended first (`state` then
// carries over to the next stretch).
// A backslash escapes the next byte inside a string; outside strings (invalid
// JSON, which the parser of the cut text rejects) it is an ordinary byte.
// REQUIRES: 64 bytes readable from every p < end (simdjson's padding).
// With AVX2 it goes 64 bytes a step, a few instructions per bracket and none
// per ordinary quote; without, byte by byte.
const char* ScanJsonContainer(const char* p, const char* end,
                              JsonScanState& state);

// The same byte by byte: the reference the vector scan is tested against.
const char* ScanJsonContainerBytewise(const char* p, const char* end,
                                      JsonScanState& state);

}  // namespace bubblewatch

#endif  // BUBBLEWATCH_INGEST_CHROME_JSON_CONTAINER_SCAN_H_
