// Reads a PyTorch-profiler (Kineto) Chrome trace, {"traceEvents": [...]}, the
// JSON `torch.profiler` exports (`.json`, gunzipped by the caller).
//
// Which events become what (docs/semantics.md#inputs). Only complete
// events ("ph": "X") of these categories are kept:
//   GPU activities: "kernel" / "Kernel" -> kKernel, "gpu_memcpy" / "Memcpy" ->
//     kMemcpy, "gpu_memset" / "Memset" -> kMemset. device = args.device (else
//     pid, which Kineto sets to the device), stream = args.stream (else tid),
//     correlation = args.correlation, bytes = args.bytes (0 when absent).
//     A memcpy whose name contains "Pageable" is pageable.
//   CPU events: "cuda_runtime" / "Runtime" -> kCudaRuntime, "cuda_driver" /
//     "Driver" -> kCudaDriver, both with correlation = args.correlation;
//     context ranges "cpu_op" / "Operator" -> kCpuOp, "user_annotation" ->
//     kUserAnnotation, "python_function" -> kPythonFunction.
//     thread = pid << 32 | tid, each as 32 bits, so threads of different
//     processes stay distinct. A pid or tid given as a string holding an
//     integer counts as that integer; any other string gets a stable per-trace
//     id counted down from 2^32 - 1.
//   Collectives: a kernel whose name IsCollectiveKernelName (NCCL/RCCL) also
//     gets a CollectiveKernel in Trace::collectives, from its args:
//     "Collective name", "Process Group Name", "Process Group Ranks" (as
//     written, e.g. "[0, 1]"), "dtype" (strings), "Group size", "Seq" (else
//     "seq"), "In msg nelems", "Out msg nelems" (non-negative JSON
//     integers). Absent or null: absent (kNoName / -1). Another type: absent
//     too, counted as "collective arg 'Seq' not a non-negative integer" /
//     "collective arg 'dtype' not a string" (not an error). Only collective
//     kernels pay for reading them. A duplicate kernel adds no record.
// Every other event is skipped and counted in Trace::skipped by reason:
//   "category 'ac2g'"       a category not listed above (flows, cuda_sync,
//                           gpu_user_annotation, mtia_*, Trace, ...);
//   "phase 'M'"             an event without a category (metadata, instant);
//   "phase 'i' in category 'cpu_op'"  a listed category, but not a complete
//                           event, so it has no duration;
//   "non-object event"      an array element that is not an object;
//   "duplicate event"       an event whose JSON text is byte-identical to an
//                           earlier kept event (a doubled write or a naive
//                           merge); the first copy is kept. Events that differ
//                           in any byte, even only in args the reader ignores,
//                           are all kept.
//
// Times: "ts" and "dur" are microseconds given as JSON integers, decimals or
// strings holding a decimal; they are converted to nanoseconds from their
// text, exactly (never through a double). end = ts + dur.
// Top level, in any order relative to "traceEvents":
//   "distributedInfo": {"rank", "world_size"} -> Trace::rank / world_size.
//   "host_name" (a string) -> Trace::host.
//   "bubblewatch_job" (a string) -> Trace::job: the metadata bubblewatch_torch
//     adds with torch.profiler's add_metadata.
//   "baseTimeNanoseconds": newer Kineto writes "ts" relative to it. When it is
//     present and every kept event starts before it (i.e. the ts values are
//     relative, not already epoch microseconds), it is added to every start
//     and end, so times are wall-clock epoch nanoseconds. When some event
//     already starts at or after it, the ts are taken as absolute and nothing
//     is added. Without it, times are the ts as written (older Kineto writes
//     absolute epoch microseconds).
//   Other keys ("deviceProperties", "schemaVersion", ...) are metadata, not
//   events: ignored and not counted.
//
// Speed and memory: the input is never parsed as one document. The reader
// is the wiring of four units: EventStreamBuffer (event_stream_buffer.h: the
// bytes, borrowed or streamed into 64 KiB buffers that travel with their
// block), TraceEventCutter (trace_event_cutter.h: the top-level walk and a
// string-aware scanner, AVX2 64 bytes a step, cutting "traceEvents" into
// blocks of elements), BlockPipeline (block_pipeline.h: blocks parsed with
// simdjson On-Demand on several threads, merged in file order on the
// calling thread) and TraceAssembler (trace_assembler.h: names interned,
// duplicates dropped, numbers read exactly from their token text, metadata
// applied), so the result is the same whatever the thread count, and peak
// memory is that of the events kept plus a few blocks in flight, not of the
// file.
#ifndef BUBBLEWATCH_INGEST_CHROME_CHROME_TRACE_READER_H_
#define BUBBLEWATCH_INGEST_CHROME_CHROME_TRACE_READER_H_

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "ingest/chrome/block_pipeline.h"       // kChromeParseThreadsAuto
#include "ingest/chrome/event_stream_buffer.h"  // ReadProgressFn
#include "ingest/trace_io/trace_file.h"
#include "schemas/trace.h"
#include "simdjson.h"

namespace bubblewatch {

// Reads the Chrome trace in `json`. `progress`, when set, is called about
// every kChromeProgressStepBytes. parse_threads: threads that parse events
// besides the calling thread; kChromeParseThreadsAuto = one less than the
// machine's cores, at most 3; 0 = the calling thread alone. Only the speed
// depends on it. max_events (0: no limit): kResourceExhausted ("over the
// limit of N events") as soon as more GPU + CPU events are kept, so that
// the read stops there.
// Errors (kInvalidArgument; the message names the place): bad JSON at byte
// offset K (truncated input included); no "traceEvents" array; a kept event
// (see above) without "name", "ts" or "dur", or with one of the wrong type;
// a negative "dur" ("traceEvents[K]: negative dur ..."); a time that does not
// fit in int64 nanoseconds (also after adding baseTimeNanoseconds); args.device
// or args.stream present but not an integer on a GPU activity.
absl::StatusOr<Trace> ReadChromeTrace(
    const simdjson::padded_string& json,
    const ReadProgressFn& progress = nullptr,
    int parse_threads = kChromeParseThreadsAuto, uint64_t max_events = 0);

// The same, streaming the bytes of `source`, which starts with `head` (bytes
// already taken from it, e.g. to sniff the format). Errors also include the
// source's (kDataLoss for a truncated gzip). Byte offsets in messages count
// uncompressed JSON bytes from the start of the file.
absl::StatusOr<Trace> ReadChromeTrace(
    TraceByteSource& source, absl::string_view head,
    const ReadProgressFn& progress = nullptr,
    int parse_threads = kChromeParseThreadsAuto, uint64_t max_events = 0);

}  // namespace bubblewatch

#endif  // BUBBLEWATCH_INGEST_CHROME_CHROME_TRACE_READER_H_
