// A RankDigest is everything the cross-rank collective analysis
// (docs/semantics.md#collectives: matching, clocks, waits, root cause, the
// what-if) needs of one rank, without its events: its collective kernels,
// its time by category at each kernel's edges, the compute kernels' busy
// time inside its collective kernels, and its device figures.
// AnalyzeCollectives (analysis/collectives.h) is DigestTrace per trace then
// AnalyzeDigests over the digests, so the two give the same answers by
// construction; a digest can also be encoded, travel, and be analyzed elsewhere
// (docs/architecture.md#one-job-across-processors).
//
// Why prefixes suffice: the root-cause rules ask where a rank's time went
// between two of its collective kernels (from the end of one to the start
// of the next). Each nanosecond of a device's time has exactly one
// category (compute, comm, or one bubble cause), and the analyzer's
// interval breakdowns add up across a cut to the nanosecond
// (DiagnosisRealTraces.IntervalBreakdownsAddUp), so that breakdown is the
// difference of two prefixes taken from a common origin.
#ifndef BUBBLEWATCH_ANALYSIS_RANK_DIGEST_H_
#define BUBBLEWATCH_ANALYSIS_RANK_DIGEST_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "analysis/bubble_analyzer.h"
#include "analysis/collectives.h"
#include "analysis/interval_set.h"
#include "schemas/analysis.h"

namespace bubblewatch {

// A name of RankDigest::names, or kNoDigestName.
inline constexpr int32_t kNoDigestName = -1;

// One collective kernel of the rank's device: the fields of its
// CollectiveKernel the analysis reads, names as indices into
// RankDigest::names.
struct DigestKernel {
  int64_t start_ns = 0;
  int64_t end_ns = 0;
  int32_t stream = 0;
  // The kernel name's collective part ("AllReduce" of
  // "ncclKernel_AllReduce_RING_LL_Sum_float"): all that stream-order
  // matching reads of the name.
  int32_t kernel_type = kNoDigestName;
  int32_t collective = kNoDigestName;     // CollectiveKernel::collective.
  int32_t process_group = kNoDigestName;  // CollectiveKernel::process_group.
  int32_t group_ranks = kNoDigestName;    // CollectiveKernel::group_ranks.
  int64_t seq = -1;
  int32_t group_size = -1;
  int32_t peer = -1;
  int64_t pair_index = -1;
};

// The rank's time by category from RankDigest::origin_ns to a kernel's
// start and to its end (time outside its device's span counts in none), so
// that its time in [a's end, b's start) is b's at_start - a's at_end.
struct KernelTime {
  LatenessBreakdown at_start;
  LatenessBreakdown at_end;
};

struct RankDigest {
  // RankInput's fields, less the trace.
  int32_t rank = 0;
  int32_t device = 0;
  std::string clock_domain;
  std::string host;
  std::string file;
  int64_t pid = -1;
  // The trace's Trace::job (checked equal across ranks) and world size.
  std::string job;
  int32_t world_size = -1;
  // Names the kernels refer to, each once.
  std::vector<std::string> names;
  // The rank's collective kernels on its device, by (start, end, stream);
  // equal ones in the trace's order.
  std::vector<DigestKernel> kernels;
  // times[i]: kernels[i]'s. Apart from the kernels, which the matching
  // reads again and again: only the blame reads these.
  std::vector<KernelTime> times;
  // Where the prefixes start: the first kernel's start (0 without kernels).
  int64_t origin_ns = 0;
  // The device's non-collective kernels' busy time inside the union of
  // `kernels`' spans: a wait (a part of a collective kernel) not overlapped
  // by compute is exact whatever the arrival turns out to be. Usually empty.
  IntervalSet compute_in_kernels;
  // The device's figures as AnalyzeTrace gives them (RankCollectiveStats::
  // stats), the union of its collective kernels (comm_ns) and the part of it
  // no other kernel overlaps (comm_exposed_ns).
  UtilizationStats stats;
  int64_t comm_ns = 0;
  int64_t comm_exposed_ns = 0;
};

// The digests of the ranks of one trace and the trace's analysis.
struct TraceDigests {
  // AnalyzeTrace of the trace with the caller's options; its breakdowns
  // (the digests' own queries) are cleared.
  Analysis analysis;
  std::vector<RankDigest> digests;  // In the order of `ranks`.
  // Each device's kernel sets as AnalyzeCheckedTrace split them (what a
  // rank's timeline is drawn from: analysis/rank_timeline.h).
  std::vector<DeviceKernelSets> kernel_sets;
};

// Digests `ranks`, which must all borrow the same trace (several devices
// of one Nsight Systems export; usually one), analyzing it once, and
// asking it to break down only the intervals between a rank's collective
// kernels (inside one, its own kernel keeps the device busy). A collective
// record with no kernel of its own (rare: the readers make records from
// kernels) costs a second analysis that asks every interval.
// Errors: kInvalidArgument for no rank, a null trace, ranks of different
// traces, or what AnalyzeTrace refuses (CheckEventTimes, the options).
absl::StatusOr<TraceDigests> DigestTrace(
    absl::Span<const RankInput> ranks,
    const AnalyzerOptions& analyzer_options = {});

// One rank alone: DigestTrace of {rank}.
absl::StatusOr<RankDigest> DigestRank(
    const RankInput& rank, const AnalyzerOptions& analyzer_options = {});

namespace digest_internal {
// DigestTrace for AnalyzeCollectives, which has checked the trace with
// CheckEventTimes (and the ranks) already. REQUIRES: both OK.
absl::StatusOr<TraceDigests> DigestCheckedTrace(
    absl::Span<const RankInput> ranks, const AnalyzerOptions& analyzer_options);
}  // namespace digest_internal

// The cross-rank analysis of AnalyzeCollectives over digests only; its
// `traces` and `analyses` stay empty. Errors: as AnalyzeCollectives's that
// are not AnalyzeTrace's (no rank, a duplicate rank, different jobs, group
// sizes that disagree, a digest whose times do not match its kernels).
absl::StatusOr<CollectiveAnalysis> AnalyzeDigests(
    absl::Span<const RankDigest> digests,
    const CollectiveOptions& options = {});

// A compact binary form of a digest (varints, deltas; a version byte
// first), and back: DecodeRankDigest(EncodeRankDigest(d)) equals d, and
// equal digests encode to equal bytes. Decode errors: kInvalidArgument
// for truncated or malformed bytes, an unknown version, or a name index
// out of range. REQUIRES (encoding): digest.times.size() ==
// digest.kernels.size().
std::string EncodeRankDigest(const RankDigest& digest);
absl::StatusOr<RankDigest> DecodeRankDigest(absl::string_view bytes);

}  // namespace bubblewatch

#endif  // BUBBLEWATCH_ANALYSIS_RANK_DIGEST_H_
