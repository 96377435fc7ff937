// The in-memory event model every stage shares: what one job's profiler data
// says happened on its GPUs and CPU threads.
//
// Readers (ingest/) produce a Trace from a file; the EventBatch codec
// (schemas/event_batch_codec.h) turns a Trace into wire messages and back; the
// analyzer (analysis/) consumes it. Events are plain fixed-size structs with
// names as indices into the trace's string table, mirroring the wire format,
// so decoding is a copy, not a rebuild.
//
// Units: every time is an integer nanosecond count on the trace's own clock
// (wall-clock epoch nanoseconds when the source gives them). Intervals are
// half-open [start_ns, end_ns).
#ifndef BUBBLEWATCH_SCHEMAS_TRACE_H_
#define BUBBLEWATCH_SCHEMAS_TRACE_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace bubblewatch {

// Index into Trace::names.
using NameId = uint32_t;

// Correlation id linking a GPU activity to the CPU API call that launched it.
// 0 means "unknown". Readers make ids unique per trace (nsys ids are unique
// only per process, so its reader folds the process id into the high bits).
using CorrelationId = uint64_t;
inline constexpr CorrelationId kNoCorrelation = 0;

enum class GpuActivityKind : uint8_t {
  kKernel = 0,
  kMemcpy = 1,
  kMemset = 2,
};

// One activity executed by a GPU.
struct GpuActivity {
  int64_t start_ns = 0;
  int64_t end_ns = 0;
  CorrelationId correlation = kNoCorrelation;
  uint64_t bytes = 0;  // Copies and sets only; 0 if unknown.
  NameId name = 0;
  int32_t device = 0;
  int32_t stream = 0;
  GpuActivityKind kind = GpuActivityKind::kKernel;
  // Memcpy only: one side is pageable (not pinned) host memory, so the
  // launching call blocked the host (host_sync:
  // docs/semantics.md#cpu-event-classes).
  bool pageable = false;
};

// Marks an absent name in records whose names are optional.
inline constexpr NameId kNoName = 0xFFFFFFFFu;

// What the profiler says about one collective (NCCL/RCCL) kernel, for
// matching its instances across the ranks of a job
// (docs/semantics.md#collectives). Readers add one record per collective
// kernel to Trace::collectives, beside its GpuActivity in Trace::gpu, which
// stays as it is (a collective kernel is busy time like any kernel). A kernel
// is a collective when its name, after an optional "void ", starts with
// "nccl" or "rccl" in any case. Fields the source does not give stay absent
// (kNoName, -1): never guessed.
struct CollectiveKernel {
  int64_t start_ns = 0;
  int64_t end_ns = 0;
  int32_t device = 0;
  int32_t stream = 0;
  NameId kernel_name = 0;  // The kernel's name.
  // Kineto's `Collective name` ("allreduce", "send", ...); nsys: the
  // operation's name when the export has NCCL operation tables.
  NameId collective = kNoName;
  // Kineto's `Process Group Name` ("0"); nsys: the communicator hash
  // (`commHash`) in decimal.
  NameId process_group = kNoName;
  // Kineto's `Process Group Ranks` as given ("[0, 1]").
  NameId group_ranks = kNoName;
  NameId dtype = kNoName;     // Kineto's `dtype` ("Float").
  int64_t seq = -1;           // Kineto's `Seq`; nsys `seqNumber`.
  int64_t in_elements = -1;   // Kineto's `In msg nelems`.
  int64_t out_elements = -1;  // Kineto's `Out msg nelems`.
  int32_t group_size = -1;    // Kineto's `Group size`.
  // A send's or recv's other end, a global rank: Kineto's `Dst Rank` (send)
  // or `Src Rank` (recv). The stream carries it in EventBatch.collective_peers.
  int32_t peer = -1;
  // A send's or recv's index k among its rank's send/recv kernels of the same
  // pair in its whole trace (docs/semantics.md#point-to-point-pairs), as
  // NumberPointToPointPairs numbered it before the trace was cut (the
  // producer numbers a stream's, EventBatch.collective_pair_indices); -1: not
  // numbered, the analysis counts k itself in what it is given.
  int64_t pair_index = -1;
};

// True for a send or a recv: Kineto's `Collective name` "send" or "recv".
bool IsPointToPointName(absl::string_view collective);

// A process group's rank list as PyTorch prints it ("[0, 4, 8]") in the
// order given; empty when it does not parse.
std::vector<int32_t> ParseGroupRanks(absl::string_view text);

// True when a kernel of this name is a collective: after an optional "void ",
// it starts with "nccl" or "rccl" in any case.
bool IsCollectiveKernelName(absl::string_view name);

// Where a CPU event came from; decides which events may explain idle time.
enum class CpuEventCategory : uint8_t {
  kCudaRuntime = 0,     // cudaLaunchKernel, cudaMemcpyAsync, ...
  kCudaDriver = 1,      // cuLaunchKernel, ...
  kCpuOp = 2,           // framework operators (aten::item, ...)
  kUserAnnotation = 3,  // record_function / NVTX ranges
  kPythonFunction = 4,  // Python stack ranges
  kOther = 5,           // the seed timeline format: category unknown
};

// One CPU-side range: an API call, an operator, an annotation.
struct CpuEvent {
  int64_t start_ns = 0;
  int64_t end_ns = 0;
  CorrelationId correlation = kNoCorrelation;
  uint64_t thread = 0;  // Unique per trace (process and thread folded).
  NameId name = 0;
  CpuEventCategory category = CpuEventCategory::kOther;
};

// Events counted but not kept, by reason ("unknown category 'ac2g'", ...), so
// a report can say what it skipped instead of hiding it.
using SkipCounts = absl::flat_hash_map<std::string, int64_t>;

// All events of one job (or one rank of it) plus what is known about it.
struct Trace {
  std::vector<std::string> names;  // The string table; NameId indexes it.
  std::vector<GpuActivity> gpu;    // Any order.
  std::vector<CpuEvent> cpu;       // Any order.
  // One per collective kernel of `gpu` (any order); see CollectiveKernel.
  std::vector<CollectiveKernel> collectives;

  // Workload hints; -1 when the source does not say.
  int32_t rank = -1;
  int32_t world_size = -1;
  std::string job;
  std::string host;
  // The OS process that recorded the events (an Inspector log's pid), for
  // reports; -1 when the source does not say.
  int64_t pid = -1;
  // The format the events were read from ("timeline", "chrome", "nsys",
  // "eventbatch"), for reports.
  std::string source_format;
  SkipCounts skipped;

  // The name of an event. REQUIRES: id < names.size().
  absl::string_view Name(NameId id) const { return names[id]; }
};

// Numbers the send/recv kernels of `trace` (CollectiveKernel::pair_index):
// per device and pair, in (start, end, stream) order from 0, a pair being
// the kernel's process group and its rank list when that lists exactly two
// ranks, else its process group and `peer`. A kernel with neither stays -1.
// Counting over a whole trace before it is cut into windows keeps a pair's
// two ends at the same k even when a window's start falls between them.
// Kernels already numbered are left as they are when any is.
void NumberPointToPointPairs(Trace& trace);

// The event times bubblewatch accepts: |t| <= kMaxEventTimeNs, about 146
// years either side of the clock's epoch (1824 to 2116 on a wall clock;
// docs/semantics.md, "Times"). Inside this range the difference of any two
// times, and the end of any window holding one (a window is at most
// kMaxWindowNs long), fit in int64, so no time arithmetic downstream can
// overflow. Every entrance checks it: the readers (ReadTraceFile), the
// processor's batch admission (ValidateBatch) and the analyzer.
inline constexpr int64_t kMaxEventTimeNs = (int64_t{1} << 62) - 1;
inline constexpr int64_t kMaxWindowNs = int64_t{1} << 62;

inline bool IsAcceptedEventTime(int64_t t) {
  return t >= -kMaxEventTimeNs && t <= kMaxEventTimeNs;
}

// Returns kInvalidArgument naming the first event of `trace` (GPU, CPU or
// collective record) that starts or ends outside the accepted range, or that
// ends before it starts, or a collective record naming a string the table
// lacks; OK otherwise. Names are escaped (they come from the input).
absl::Status CheckEventTimes(const Trace& trace);

// Replaces every name of `trace` (the string table, the job and the host)
// that is not printable UTF-8 with its escaped form (base/text_escape.h), so
// that names from a file or a producer can reach logs, reports, JSON and
// /metrics without forging lines or breaking documents. Printable names are
// untouched.
void EscapeUnprintableNames(Trace* trace);

// Deduplicates names while a reader fills a Trace.
// The interner borrows `trace`, which must outlive it.
class NameInterner {
 public:
  explicit NameInterner(Trace* trace);

  // Returns the id of `name` in trace->names, adding it if new.
  NameId Intern(absl::string_view name);

 private:
  Trace* trace_;
  absl::flat_hash_map<std::string, NameId> ids_;
};

}  // namespace bubblewatch

#endif  // BUBBLEWATCH_SCHEMAS_TRACE_H_
