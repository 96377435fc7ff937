// AnalyzeCollectives computes the collective semantics of
// docs/semantics.md#collectives for the ranks of one job: it matches each
// collective's instances across the ranks, puts every clock domain (host,
// else file) on one clock from their end times (offset and drift), splits each
// rank's collective time into waiting and transfer, and blames every other
// rank's wait on the rank that arrived last, split by what made that rank late
// (its excess over the median rank since the previous common sync point).
//
// Input: one RankInput per rank: a device of a Trace whose collective kernels
// the reader recorded (Trace::collectives). Several ranks may share a Trace
// (an Nsight Systems export of a whole node: one rank per device).
//
// It runs AnalyzeTrace once per distinct trace and returns those analyses
// too, so a caller never analyzes a trace twice. It is DigestTrace of each
// distinct trace then AnalyzeDigests of the digests
// (analysis/rank_digest.h): the cross-rank part reads each rank's digest,
// never its trace, so the split stages of
// docs/architecture.md#one-job-across-processors give the same answers.
//
// Cost: O(n log n) in the events of the traces, plus O(m log m) in the
// collective kernels; memory O(n + m), not O(ranks²).
#ifndef BUBBLEWATCH_ANALYSIS_COLLECTIVES_H_
#define BUBBLEWATCH_ANALYSIS_COLLECTIVES_H_

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "analysis/bubble_analyzer.h"
#include "analysis/interval_set.h"
#include "schemas/analysis.h"
#include "schemas/bubble_cause.h"
#include "schemas/trace.h"

namespace bubblewatch {

// One rank of the job: the kernels of `device` in `*trace`.
struct RankInput {
  const Trace* trace = nullptr;  // Borrowed; outlives the call.
  int32_t device = 0;
  int32_t rank = 0;  // Unique among the inputs.
  // Ranks with the same clock_domain share a clock (the same host); offsets
  // are estimated per domain. Usually the host name, else the file.
  std::string clock_domain;
  std::string host;  // For reports; may be empty.
  std::string file;  // For reports; may be empty.
  int64_t pid = -1;  // For reports: the process, when known; else -1.
};

// The straggler threshold of a stored window (docs/semantics.md#stragglers).
inline constexpr int64_t kWindowMinStragglerWaitNs = 100'000;
inline constexpr double kWindowMinStragglerShare = 0.10;

struct CollectiveOptions {
  // Stragglers whose saved_ns is computed (one replay each), the first by
  // wait caused; the others keep -1.
  int max_what_if_stragglers = 32;
  // A matched instance is synchronized when its corrected end times agree
  // within max(sync_floor_ns, sync_fraction × its shortest kernel).
  int64_t sync_floor_ns = 50'000;
  double sync_fraction = 0.05;
  // Clocks (docs/semantics.md#clocks): two clock domains are linked when at
  // least this many of the instances they share fit the solution; a domain
  // not linked to the reference, directly or through others, keeps offset
  // 0, reported as not corrected. Edges whose residual exceeds
  // max(sync_floor_ns, 5 × the median one) are rejected.
  int min_clock_instances = 3;
  // A domain's drift is fitted when its clock rests on at least this many
  // instance edges spanning at least min_drift_span_ns; else its offset is
  // constant.
  int min_drift_instances = 10;
  int64_t min_drift_span_ns = 1'000'000'000;
  // The straggler threshold (docs/semantics.md#stragglers): a rank is named
  // in CollectiveAnalysis::stragglers only when the wait it caused is at
  // least max(min_straggler_wait_ns, min_straggler_share × the ranks'
  // collective time, the sum of their comm_ns). Below, it is jitter: the
  // rank keeps its wait_caused_ns in `ranks`. Both 0 (the default, what
  // `analyze` uses): every rank that caused any wait is named. The
  // processor's windows use kWindowMinStragglerWaitNs and
  // kWindowMinStragglerShare (analysis/collective_windows.h).
  int64_t min_straggler_wait_ns = 0;
  double min_straggler_share = 0;
  // Keep CollectiveAnalysis::instances (every matched instance, for tests
  // and reports); off, only the aggregates are kept.
  bool keep_instances = false;
  // Keep CollectiveAnalysis::rank_time (each rank's kernels and waits as
  // intervals, what a rank's timeline is drawn from: analysis/
  // rank_timeline.h) and each trace's gaps (Analysis::gaps); off, they are
  // not copied out.
  bool keep_rank_time = false;
};

// Which key matched instances across ranks (the first one every rank has).
enum class CollectiveKey : uint8_t {
  kProcessGroupSeq,    // (process group, Seq): "pg_seq"
  kProcessGroupOrder,  // (process group, k-th of that group): "pg_order"
  kStreamOrder,        // (type from the kernel name, k-th such): "stream_order"
};
// "pg_seq", "pg_order", "stream_order".
const char* CollectiveKeyName(CollectiveKey key);

// Where a rank's time went between two common sync points (or what made a
// late rank late): non-collective compute, time in collectives only, and
// bubble time by cause. Adds up to the interval's length.
struct LatenessBreakdown {
  int64_t compute_ns = 0;
  int64_t comm_ns = 0;
  Attribution bubble{};
  int64_t total_ns() const;
};

// One matched instance of a collective.
struct CollectiveInstance {
  std::string group;  // Process group name, or the collective type.
  int64_t key = 0;    // Seq or the order index within the group.
  std::string type;   // "allreduce", or the kernel name's collective part.
  bool pair = false;  // A point-to-point pair (send and recv).
  bool synchronized = false;  // Ends agree; only these are used.
  // Per participating rank (ordered by rank): its kernel, in its own clock.
  struct Part {
    int32_t rank = 0;
    int64_t start_ns = 0;
    int64_t end_ns = 0;
    int64_t wait_ns = 0;  // Comm wait not overlapped by compute (if used).
  };
  std::vector<Part> parts;
  // Used instances only: the arrival (max corrected start, in the reference
  // clock), the late rank, the wait it caused (sum of the others' wait_ns)
  // and the part of it blamed on the late rank's own time, by category;
  // unattributed_ns is the part no excess explains.
  int64_t arrival_ns = 0;
  int32_t late_rank = -1;
  // The rank with the largest share of the blame once it is followed to
  // its root (docs/semantics.md#root-cause); the late rank when it was late
  // for its own time.
  int32_t root_rank = -1;
  int64_t wait_caused_ns = 0;
  int64_t compute_ns = 0;
  int64_t comm_ns = 0;
  Attribution causes{};
  int64_t unattributed_ns = 0;
};

// One rank's figures over the whole trace.
struct RankCollectiveStats {
  int32_t rank = 0;
  int32_t device = 0;
  std::string host;
  std::string file;
  int64_t pid = -1;             // RankInput::pid.
  UtilizationStats stats;       // The device's figures (as `analyze` gives).
  int64_t comm_ns = 0;          // Union of its collective kernels.
  int64_t comm_exposed_ns = 0;  // ... not overlapped by other kernels.
  int64_t comm_wait_ns = 0;     // Waits not overlapped by other kernels.
  int64_t wait_caused_ns = 0;   // Others' waits blamed on this rank.
  int64_t arrived_last = 0;     // Used instances where it was late.
  // Its clock domain's clock (docs/semantics.md#clocks): subtract
  // clock_offset_ns + clock_drift_ns_per_s × (t − the clock origin) / 1 s
  // from its time t for the reference clock; clock_offset_ns is the offset
  // at the origin, the earliest end of an instance spanning two domains.
  // clock_instances: the instances its solution rests on (edges kept, shared
  // with a connected domain; 0 when not connected); clock_residual_ns: the
  // root mean square of those edges' residuals. clock_connected: the
  // reference domain, or linked to it; clock_corrected: connected and not
  // the reference (offset and drift 0 otherwise).
  int64_t clock_offset_ns = 0;
  double clock_drift_ns_per_s = 0;
  int64_t clock_instances = 0;
  int64_t clock_residual_ns = 0;
  bool clock_connected = false;
  bool clock_corrected = false;
  // (busy - comm_wait) / span; 0 when the span is 0.
  double busy_useful_utilization() const;
};

// A rank that made others wait, with what made it late.
struct CollectiveAnalysis {
  CollectiveKey key = CollectiveKey::kStreamOrder;
  int32_t world_size = -1;  // From the traces, if they say; else -1.
  std::vector<RankCollectiveStats> ranks;  // By rank.
  int64_t collective_kernels = 0;          // Over all ranks.
  int64_t matched = 0;         // Instances seen on every expected rank.
  int64_t unmatched = 0;       // Instances missing on some rank.
  int64_t unsynchronized = 0;  // Matched, but their ends disagree.
  int64_t used = 0;            // matched - unsynchronized.
  int64_t unattributed = 0;    // Used instances with no sync point/excess.
  // Sends/recvs whose other end is unknown (counted in unmatched too).
  int64_t unpaired = 0;
  // Used point-to-point pairs with no replica pair to compare with: their
  // waits are blamed on no one (docs/semantics.md#pipeline-waits).
  int64_t pairs_without_replicas = 0;
  // Some instance's members were inferred (the input ranks with kernels of
  // its group), its kernels not listing `Process Group Ranks`.
  bool members_inferred = false;
  int64_t seq_backwards = 0;  // Kernels whose Seq went backwards: skipped.
  // Kernels whose Seq skipped ahead: more than one past the previous kept
  // one of their group on their rank. Kept; the instances skipped over are
  // missing on that rank (unmatched where other ranks have them).
  int64_t seq_jumps = 0;
  std::vector<Straggler> stragglers;  // By wait_caused_ns, descending.
  // The what-if (docs/semantics.md#what-it-cost): the job's used
  // collectives replayed as barriers over each rank's own time between
  // them, from the first rank's first to the last one's end (job_ns), and
  // with every straggler's own time cut to its peers' median
  // (job_ns_without_stragglers). -1 with no used instance.
  int64_t job_ns = -1;
  int64_t job_ns_without_stragglers = -1;
  // The clock origin of RankCollectiveStats::clock_drift_ns_per_s: where
  // each clock_offset_ns applies (0 when no clock was solved).
  int64_t clock_origin_ns = 0;
  std::vector<CollectiveInstance> instances;  // If keep_instances.
  // If keep_rank_time, one per rank (same order as `ranks`): the sets its
  // figures were measured on, in its own clock. busy = compute ∪
  // collective (stats.compute_ns); comm_wait_ns = |waits \ compute|.
  struct RankTime {
    int trace = 0;        // Index into traces / analyses.
    IntervalSet compute;  // Its device's non-collective kernels.
    IntervalSet collective;
    IntervalSet waits;  // Its waits in used instances (in collective).
  };
  std::vector<RankTime> rank_time;
  // AnalyzeTrace of each distinct trace, in order of first appearance in
  // the inputs (with the caller's AnalyzerOptions; no breakdowns).
  std::vector<const Trace*> traces;
  std::vector<Analysis> analyses;
};

// The ranks of `traces` (read from `files`, same order), by
// docs/semantics.md#collective-kernels: one per device that ran kernels (a
// trace without kernels is one rank on device 0); single-device traces
// that all say their rank keep it (one alone too: a rank's events in a
// window are the same rank whether or not others had events there); else a
// single trace's ranks are its device numbers (an Nsight Systems node
// export), and otherwise ranks are numbered in input order. Clock domains
// are host names, else files. The traces are borrowed.
std::vector<RankInput> RanksOfTraces(absl::Span<const Trace> traces,
                                     absl::Span<const std::string> files);

// Errors: kInvalidArgument for no rank, a duplicate rank, ranks of different
// jobs (Trace::job set on both and different), a null trace, kernels of one
// process group stating different group sizes (on one rank or two), or
// what AnalyzeTrace refuses. Collective kernels whose Seq is not after the
// previous one of their group on that rank are skipped and counted
// (seq_backwards), those more than one past it counted (seq_jumps), never an
// error.
absl::StatusOr<CollectiveAnalysis> AnalyzeCollectives(
    absl::Span<const RankInput> ranks, const CollectiveOptions& options = {},
    const AnalyzerOptions& analyzer_options = {});

}  // namespace bubblewatch

#endif  // BUBBLEWATCH_ANALYSIS_COLLECTIVES_H_
