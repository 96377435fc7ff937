#include "ingest/chrome/chrome_trace_reader.h"

#include <memory>
#include <utility>

#include "base/status_macros.h"
#include "ingest/chrome/trace_assembler.h"
#include "ingest/chrome/trace_event_cutter.h"

namespace bubblewatch {
namespace {

// The wiring: the cutter walks the buffer's bytes and feeds blocks to the
// pipeline, which merges them, in file order, into the assembler; merged
// blocks give their buffers back to the buffer for reuse. Declared in this
// order, the pipeline (its threads) goes first when a read ends early.
absl::StatusOr<Trace> Read(EventStreamBuffer& buffer, int parse_threads,
                           uint64_t max_events) {
  TraceAssembler assembler(
      [&buffer](uint64_t done) { return buffer.EstimatedTotalBytes(done); },
      max_events);
  BlockPipeline pipeline(
      parse_threads,
      [&assembler](ChromeEventBlock& block) { return assembler.Merge(block); },
      [&buffer](ChromeEventBlock& block) {
        buffer.Recycle(block.storage, block.capacity);
      });
  TraceEventCutter cutter(buffer, pipeline, assembler);
  RETURN_IF_ERROR(cutter.Cut());
  ASSIGN_OR_RETURN(Trace trace, assembler.Finish());
  buffer.ReportProgress(/*last=*/true);
  return trace;
}

}  // namespace

absl::StatusOr<Trace> ReadChromeTrace(const simdjson::padded_string& json,
                                      const ReadProgressFn& progress,
                                      int parse_threads, uint64_t max_events) {
  EventStreamBuffer buffer(json, progress);
  return Read(buffer, parse_threads, max_events);
}

absl::StatusOr<Trace> ReadChromeTrace(TraceByteSource& source,
                                      absl::string_view head,
                                      const ReadProgressFn& progress,
                                      int parse_threads, uint64_t max_events) {
  EventStreamBuffer buffer(source, head, progress);
  return Read(buffer, parse_threads, max_events);
}

}  // namespace bubblewatch
