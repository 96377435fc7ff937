// Reads an Nsight Systems report exported with `nsys export --type sqlite`.
//
// Which rows become what (docs/semantics.md#inputs):
//   GPU activities: CUPTI_ACTIVITY_KIND_KERNEL -> kKernel, _MEMCPY -> kMemcpy
//     (pageable when srcKind or dstKind is 0, i.e. pageable host memory),
//     _MEMSET -> kMemset; device = deviceId, stream = streamId, bytes = bytes.
//     Kernel names come from shortName (the demangled base name, e.g.
//     "vectorized_elementwise_kernel"), else demangledName, else mangledName,
//     each an id into StringIds (or, in exports that store it so, the text).
//     Copies and sets have no name in the export; they are named the way
//     Kineto names them: "Memcpy HtoD (Pinned -> Device)", "Memset (Device)".
//   CPU events: CUPTI_ACTIVITY_KIND_RUNTIME -> kCudaRuntime and _DRIVER ->
//     kCudaDriver, named through nameId, API version suffix kept as written
//     ("cudaLaunchKernel_v7000"; the analyzer drops it when classifying);
//     NVTX_EVENTS rows with an end (push/pop and start/end ranges) ->
//     kUserAnnotation, named by `text`, else `textId` through StringIds.
//   thread = the full globalTid, unique per (process, thread).
// Correlation ids are unique per process only, so the process id
// ((globalPid or globalTid >> 24) & 0xFFFFFF) is folded into the high 32 bits
// of every correlation: joins are on (process, correlationId). A GPU table
// without globalPid (trimmed exports) takes the one process that made CUDA API
// calls; if there are several, its activities keep no correlation and are
// counted in Trace::skipped as "correlation unknown: ..." (they are kept).
// Times are integer nanoseconds. When TARGET_INFO_SESSION_START_TIME gives
// utcEpochNs and systemClockNs (and the export was not time-normalized), every
// time is shifted by utcEpochNs - systemClockNs, so times are wall-clock epoch
// nanoseconds; otherwise they stay on the capture's clock.
// Tables with no rows are absent from exports and columns differ between
// schema versions: tables and columns are looked up by name and whatever is
// missing is treated as absent (an absent srcKind means "not pageable").
// Collectives: each kernel whose name IsCollectiveKernelName (NCCL/RCCL) also
// gets a CollectiveKernel in Trace::collectives with its times, device,
// stream and name only; the identity fields stay absent (NCCL operation
// tables of newer exports are not read yet).
// Rank and world size are unknown (-1): an export holds one job.
#ifndef BUBBLEWATCH_INGEST_NSYS_NSYS_READER_H_
#define BUBBLEWATCH_INGEST_NSYS_NSYS_READER_H_

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "schemas/trace.h"

namespace bubblewatch {

// Reads the export at `path`, opened read-only.
// Errors: kNotFound / kPermissionDenied / kUnavailable when the file cannot be
// read; kInvalidArgument "not an Nsight Systems export: ..." for a file that
// is not SQLite or lacks CUPTI_ACTIVITY_KIND_KERNEL or StringIds, or a
// table that lacks its "start" or "end" column; kInvalidArgument naming the
// table and row for an event that ends before it starts; kDataLoss for a
// corrupt database.
absl::StatusOr<Trace> ReadNsysExport(absl::string_view path);

}  // namespace bubblewatch

#endif  // BUBBLEWATCH_INGEST_NSYS_NSYS_READER_H_
