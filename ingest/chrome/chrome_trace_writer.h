// Writes a Trace as a PyTorch-profiler (Kineto) Chrome trace, the JSON
// `torch.profiler` exports, so that synthetic jobs can be put on disk and
// read back by `analyze`, the watcher or any Kineto tool.
//
// ReadChromeTrace (chrome_trace_reader.h) reads the output back to the same
// events: every GPU activity (times, correlation, bytes, name, device,
// stream, kind), CPU event (times, correlation, thread, name, category) and
// collective record (every field that is present), plus rank, world_size
// (`distributedInfo`), host (`host_name`) and job (`bubblewatch_job`). What
// does not travel: the order of the string table (names are interned as
// read), Trace::skipped and Trace::source_format ("chrome" once read);
// `pageable` is the reader's reading of a memcpy's name ("Pageable"), so it
// survives only where the name says it; kOther CPU events (the seed format's)
// have no Kineto category and are written as "cpu_op". Events that are
// byte-identical are one event to the reader (its duplicate filter).
//
// Times: "ts" and "dur" in microseconds with three decimals (exact
// nanoseconds), absolute, as older PyTorch writes them.
#ifndef BUBBLEWATCH_INGEST_CHROME_CHROME_TRACE_WRITER_H_
#define BUBBLEWATCH_INGEST_CHROME_CHROME_TRACE_WRITER_H_

#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "schemas/trace.h"

namespace bubblewatch {

// The Kineto JSON of `trace`. REQUIRES: every collective record has its
// kernel in trace.gpu (same start, end, device, stream and name); a record
// without one is written nowhere.
std::string ChromeTraceJson(const Trace& trace);

// Writes ChromeTraceJson(trace) to `path`, gzip-compressed when the path ends
// in ".gz". Errors: kUnavailable (or the errno's code) from the file system.
absl::Status WriteChromeTraceFile(const Trace& trace, absl::string_view path);

}  // namespace bubblewatch

#endif  // BUBBLEWATCH_INGEST_CHROME_CHROME_TRACE_WRITER_H_
