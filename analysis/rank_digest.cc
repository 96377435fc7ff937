#include "analysis/rank_digest.h"

#include <algorithm>
#include <array>
#include <cstring>
#include <optional>
#include <tuple>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "analysis/varint_codec.h"
#include "schemas/time_types.h"

namespace bubblewatch {
namespace {

// The collective's type from a kernel name: the part after the first '_'
// up to the next '_' or '(' ("ncclDevKernel_SendRecv(...)" -> "SendRecv",
// "ncclKernel_AllReduce_RING_LL_Sum_float" -> "AllReduce"); the whole name
// when it has no '_'.
std::string TypeFromKernelName(absl::string_view name) {
  absl::ConsumePrefix(&name, "void ");
  size_t us = name.find('_');
  if (us == absl::string_view::npos) return std::string(name);
  absl::string_view rest = name.substr(us + 1);
  size_t end = rest.find_first_of("_(");
  return std::string(rest.substr(0, end));
}

// A digest's names, each once.
class NameTable {
 public:
  explicit NameTable(std::vector<std::string>* names) : names_(names) {}
  int32_t Intern(absl::string_view text) {
    auto [it, inserted] = index_.try_emplace(
        std::string(text), static_cast<int32_t>(names_->size()));
    if (inserted) names_->push_back(std::string(text));
    return it->second;
  }

 private:
  std::vector<std::string>* names_;
  absl::flat_hash_map<std::string, int32_t> index_;
};

}  // namespace

namespace digest_internal {

absl::StatusOr<TraceDigests> DigestCheckedTrace(
    absl::Span<const RankInput> ranks,
    const AnalyzerOptions& analyzer_options) {
  const Trace& trace = *ranks.front().trace;
  // Per rank: its collective kernels in order, and the distinct edges of
  // their spans. The prefixes are running sums over the intervals between
  // two consecutive edges, each broken down by the analyzer, except those
  // inside a collective kernel: its own kernel keeps the device busy there
  // (no bubble, nothing outside the span), checked once the analysis has
  // the device's collective busy set; only if some record has no such
  // kernel is the trace analyzed again with every interval asked.
  std::vector<std::vector<const CollectiveKernel*>> kernels(ranks.size());
  std::vector<std::vector<int64_t>> edges(ranks.size());
  for (size_t i = 0; i < ranks.size(); ++i) {
    std::vector<const CollectiveKernel*>& mine = kernels[i];
    for (const CollectiveKernel& c : trace.collectives) {
      if (c.device == ranks[i].device) mine.push_back(&c);
    }
    // Readers give them in time order, so the sort is usually skipped. Equal
    // kernels keep the trace's order (the pointers' order): a total order,
    // so skipping the sort and sorting agree.
    auto before = [](const CollectiveKernel* a, const CollectiveKernel* b) {
      return std::tie(a->start_ns, a->end_ns, a->stream) <
                 std::tie(b->start_ns, b->end_ns, b->stream) ||
             (std::tie(a->start_ns, a->end_ns, a->stream) ==
                  std::tie(b->start_ns, b->end_ns, b->stream) &&
              a < b);
    };
    if (!std::is_sorted(mine.begin(), mine.end(), before)) {
      std::sort(mine.begin(), mine.end(), before);
    }
    std::vector<int64_t>& e = edges[i];
    e.resize(2 * mine.size());
    for (size_t j = 0; j < mine.size(); ++j) {
      e[2 * j] = mine[j]->start_ns;
      e[2 * j + 1] = mine[j]->end_ns;
    }
    // Kernels one after the other (the usual case) give them in order.
    if (!std::is_sorted(e.begin(), e.end())) std::sort(e.begin(), e.end());
    e.erase(std::unique(e.begin(), e.end()), e.end());
  }
  // The queries, and per rank and interval between consecutive edges its
  // query (-1: inside a kernel's span, not asked).
  std::vector<DeviceInterval> queries;
  std::vector<std::vector<int32_t>> query_of(ranks.size());
  auto plan = [&](bool every_interval) {
    queries.clear();
    for (size_t i = 0; i < ranks.size(); ++i) {
      const std::vector<int64_t>& e = edges[i];
      std::vector<int32_t>& q = query_of[i];
      q.assign(e.empty() ? 0 : e.size() - 1, -1);
      // The kernels come by start: `reach` is the latest end of those
      // that start at or before the interval's start (none: no such kernel).
      size_t next = 0;
      std::optional<EventNs> reach;
      for (size_t k = 0; k + 1 < e.size(); ++k) {
        while (next < kernels[i].size() && kernels[i][next]->start_ns <= e[k]) {
          RaiseTo(reach, kernels[i][next++]->end_ns);
        }
        if (every_interval || !reach || *reach < e[k + 1]) {
          q[k] = static_cast<int32_t>(queries.size());
          queries.push_back({ranks[i].device, e[k], e[k + 1]});
        }
      }
    }
  };
  plan(false);
  AnalyzerOptions options = analyzer_options;
  options.breakdown_intervals = queries;
  std::vector<DeviceKernelSets> sets;
  absl::StatusOr<Analysis> analysis =
      AnalyzeCheckedTrace(trace, options, &sets);
  if (!analysis.ok()) return analysis.status();
  const DeviceKernelSets no_kernels;
  auto sets_of = [&](int32_t device) {
    const DeviceKernelSets* s = &no_kernels;  // A device without kernels.
    for (const DeviceKernelSets& x : sets) {
      if (x.device == device) s = &x;
    }
    return s;
  };
  // Each interval not asked lies in one interval of the (merged) collective
  // busy set: a walk along both, in order.
  bool all_busy = true;
  for (size_t i = 0; all_busy && i < ranks.size(); ++i) {
    const std::vector<Interval>& busy =
        sets_of(ranks[i].device)->collective.intervals();
    const std::vector<int64_t>& e = edges[i];
    size_t j = 0;
    for (size_t k = 0; all_busy && k < query_of[i].size(); ++k) {
      if (query_of[i][k] >= 0) continue;
      while (j < busy.size() && busy[j].end <= e[k]) ++j;
      all_busy =
          j < busy.size() && busy[j].start <= e[k] && busy[j].end >= e[k + 1];
    }
  }
  // The breakdowns of the intervals asked; the analysis itself is the same.
  std::vector<IntervalBreakdown> breakdowns = std::move(analysis->breakdowns);
  analysis->breakdowns = {};
  if (!all_busy) {
    plan(true);
    options.breakdown_intervals = queries;
    absl::StatusOr<Analysis> again = AnalyzeCheckedTrace(trace, options);
    if (!again.ok()) return again.status();
    breakdowns = std::move(again->breakdowns);
  }

  TraceDigests out;
  out.digests.resize(ranks.size());
  std::vector<uint32_t> by_end;
  for (size_t i = 0; i < ranks.size(); ++i) {
    const RankInput& in = ranks[i];
    RankDigest& d = out.digests[i];
    d.rank = in.rank;
    d.device = in.device;
    d.clock_domain = in.clock_domain;
    d.host = in.host;
    d.file = in.file;
    d.pid = in.pid;
    d.job = trace.job;
    d.world_size = trace.world_size;
    const DeviceKernelSets* s = sets_of(in.device);
    for (const DeviceAnalysis& x : analysis->devices) {
      if (x.device == in.device) d.stats = x.stats;
    }
    d.comm_ns = s->collective.TotalLength();
    // Collective time that no compute kernel overlaps, the length of
    // (collective minus compute), is |compute ∪ collective| - |compute|:
    // the device's busy time (its kernels' union, stats.compute_ns) less
    // the compute union, with no pass over the intervals.
    d.comm_exposed_ns = d.stats.compute_ns - s->compute.TotalLength();

    NameTable names(&d.names);
    // Consecutive kernels mostly share their names: the last one of each
    // field is remembered before the maps are asked.
    absl::flat_hash_map<NameId, int32_t> by_id;
    auto name_of = [&](NameId id, std::pair<NameId, int32_t>& last) {
      if (id == kNoName) return kNoDigestName;
      if (id == last.first) return last.second;
      auto [it, inserted] = by_id.try_emplace(id, 0);
      if (inserted) it->second = names.Intern(trace.Name(id));
      last = {id, it->second};
      return it->second;
    };
    absl::flat_hash_map<NameId, int32_t> type_of_name;
    std::pair<NameId, int32_t> last_type{kNoName, kNoDigestName};
    std::pair<NameId, int32_t> last_collective{kNoName, 0};
    std::pair<NameId, int32_t> last_group{kNoName, 0};
    std::pair<NameId, int32_t> last_ranks{kNoName, 0};
    d.kernels.reserve(kernels[i].size());
    for (const CollectiveKernel* kernel : kernels[i]) {
      const CollectiveKernel& c = *kernel;
      DigestKernel& k = d.kernels.emplace_back();
      k.start_ns = c.start_ns;
      k.end_ns = c.end_ns;
      k.stream = c.stream;
      if (c.kernel_name == kNoName) {
        last_type = {kNoName, kNoDigestName};
      } else if (c.kernel_name != last_type.first) {
        auto [type, new_type] = type_of_name.try_emplace(c.kernel_name, 0);
        if (new_type) {
          type->second =
              names.Intern(TypeFromKernelName(trace.Name(c.kernel_name)));
        }
        last_type = {c.kernel_name, type->second};
      }
      k.kernel_type = last_type.second;
      k.collective = name_of(c.collective, last_collective);
      k.process_group = name_of(c.process_group, last_group);
      k.group_ranks = name_of(c.group_ranks, last_ranks);
      k.seq = c.seq;
      k.group_size = c.group_size;
      k.peer = c.peer;
      k.pair_index = c.pair_index;
    }

    // The prefixes, swept along the edges: compute is the compute kernels'
    // busy time, comm the rest of the busy time, bubbles by cause. Kernel
    // starts come in order; ends usually do too.
    const std::vector<int64_t>& e = edges[i];
    d.origin_ns = e.empty() ? 0 : e.front();
    d.times.reserve(d.kernels.size());
    by_end.resize(d.kernels.size());
    for (uint32_t j = 0; j < by_end.size(); ++j) by_end[j] = j;
    auto end_before = [&](uint32_t a, uint32_t b) {
      return d.kernels[a].end_ns < d.kernels[b].end_ns;
    };
    if (!std::is_sorted(by_end.begin(), by_end.end(), end_before)) {
      std::sort(by_end.begin(), by_end.end(), end_before);
    }
    // The compute busy time before t, for t in order: a walk along the
    // compute set (done: the length of the intervals passed).
    const std::vector<Interval>& busy = s->compute.intervals();
    size_t passed = 0;
    int64_t done = 0;
    auto compute_before = [&](int64_t t) {
      while (passed < busy.size() && busy[passed].end <= t) {
        done += busy[passed].end - busy[passed].start;
        ++passed;
      }
      return done + (passed < busy.size() && busy[passed].start < t
                         ? t - busy[passed].start
                         : 0);
    };
    LatenessBreakdown prefix;
    size_t next_start = 0;
    size_t next_end = 0;
    int64_t compute_at_edge = e.empty() ? 0 : compute_before(e.front());
    for (size_t k = 0; k < e.size(); ++k) {
      if (k > 0) {
        const int64_t compute_now = compute_before(e[k]);
        const int64_t compute = compute_now - compute_at_edge;
        compute_at_edge = compute_now;
        const int32_t q = query_of[i][k - 1];
        prefix.compute_ns += compute;
        if (q < 0) {
          prefix.comm_ns += (e[k] - e[k - 1]) - compute;  // All busy.
        } else {
          const IntervalBreakdown& b = breakdowns[q];
          prefix.comm_ns += b.busy_ns - compute;
          for (int c = 0; c < kNumBubbleCauses; ++c) {
            prefix.bubble[c] += b.bubble[c];
          }
        }
      }
      // Every kernel's start comes before (or with) its end, so its times
      // exist when the end is set.
      while (next_start < d.kernels.size() &&
             d.kernels[next_start].start_ns == e[k]) {
        d.times.push_back(KernelTime{prefix, LatenessBreakdown{}});
        ++next_start;
      }
      while (next_end < by_end.size() &&
             d.kernels[by_end[next_end]].end_ns == e[k]) {
        d.times[by_end[next_end++]].at_end = prefix;
      }
    }

    // Compute inside the union of the kernels' spans (they come by start).
    std::vector<Interval> pieces;
    size_t compute_cursor = 0;
    auto add_compute = [&](int64_t lo, int64_t hi) {
      // Usually none: a local search says so without a binary search.
      if (s->compute.CoveredLength(lo, hi, &compute_cursor) == 0) return;
      s->compute.ForEachCovered(lo, hi, [&](int64_t a, int64_t b) {
        pieces.push_back({a, b});
      });
    };
    std::optional<Interval> open;
    for (const DigestKernel& k : d.kernels) {
      if (k.end_ns <= k.start_ns) continue;
      if (open.has_value() && k.start_ns <= open->end) {
        open->end = std::max(open->end, k.end_ns);
        continue;
      }
      if (open.has_value()) add_compute(open->start, open->end);
      open = Interval{k.start_ns, k.end_ns};
    }
    if (open.has_value()) add_compute(open->start, open->end);
    d.compute_in_kernels = IntervalSet::FromIntervals(std::move(pieces));
  }
  out.analysis = *std::move(analysis);
  out.kernel_sets = std::move(sets);
  return out;
}

}  // namespace digest_internal

absl::StatusOr<TraceDigests> DigestTrace(
    absl::Span<const RankInput> ranks,
    const AnalyzerOptions& analyzer_options) {
  if (ranks.empty()) return absl::InvalidArgumentError("no rank to digest");
  for (const RankInput& in : ranks) {
    if (in.trace == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat("rank ", in.rank, " has no trace"));
    }
    if (in.trace != ranks.front().trace) {
      return absl::InvalidArgumentError(
          absl::StrCat("ranks ", ranks.front().rank, " and ", in.rank,
                       " are of different traces"));
    }
  }
  if (absl::Status s = CheckEventTimes(*ranks.front().trace); !s.ok()) {
    return s;
  }
  return digest_internal::DigestCheckedTrace(ranks, analyzer_options);
}

absl::StatusOr<RankDigest> DigestRank(const RankInput& rank,
                                      const AnalyzerOptions& analyzer_options) {
  absl::StatusOr<TraceDigests> d =
      DigestTrace(absl::MakeConstSpan(&rank, 1), analyzer_options);
  if (!d.ok()) return d.status();
  return std::move(d->digests.front());
}

// --- Encoding -------------------------------------------------------------
//
// Version 1. Integers are LEB128 varints, signed ones zigzag-coded first;
// strings a varint length and the bytes. In order: rank, device,
// clock_domain, host, file, pid, job, world_size; the names; origin_ns;
// the kernels, each: start (less the previous kernel's start, the first's
// less origin_ns), end less start, stream, the four name indices plus one,
// seq, group_size, peer, pair_index, then at_start less the previous
// kernel's at_start and at_end less at_start (time categories, see
// PutTime); compute_in_kernels as its count and per interval its start less
// the previous end and its length; the stats; comm_ns, comm_exposed_ns.

namespace {

constexpr uint8_t kDigestVersion = 1;
// compute, comm, the bubble causes.
constexpr int kTimeCategories = 2 + kNumBubbleCauses;

std::array<int64_t, kTimeCategories> Flatten(const LatenessBreakdown& b) {
  std::array<int64_t, kTimeCategories> out{};
  out[0] = b.compute_ns;
  out[1] = b.comm_ns;
  for (int i = 0; i < kNumBubbleCauses; ++i) out[2 + i] = b.bubble[i];
  return out;
}

LatenessBreakdown Unflatten(const std::array<int64_t, kTimeCategories>& a) {
  LatenessBreakdown b;
  b.compute_ns = a[0];
  b.comm_ns = a[1];
  for (int i = 0; i < kNumBubbleCauses; ++i) b.bubble[i] = a[2 + i];
  return b;
}

// A time breakdown's change: a mask of the categories that changed, then
// each change (most of the ten are 0 between two kernel edges).
void PutTime(VarintWriter& w, const LatenessBreakdown& v,
             const LatenessBreakdown& base) {
  const auto a = Flatten(v);
  const auto b = Flatten(base);
  uint64_t mask = 0;
  for (int k = 0; k < kTimeCategories; ++k) {
    if (a[k] != b[k]) mask |= uint64_t{1} << k;
  }
  w.Unsigned(mask);
  for (int k = 0; k < kTimeCategories; ++k) {
    if (a[k] != b[k]) w.Delta(a[k], b[k]);
  }
}

LatenessBreakdown GetTime(VarintReader& r, const LatenessBreakdown& base) {
  auto a = Flatten(base);
  const uint64_t mask = r.Unsigned();
  if (mask >> kTimeCategories != 0) r.Fail();
  for (int k = 0; r.ok() && k < kTimeCategories; ++k) {
    if ((mask >> k) & 1) a[k] = r.Delta(a[k]);
  }
  return Unflatten(a);
}

}  // namespace

std::string EncodeRankDigest(const RankDigest& d) {
  VarintWriter w;
  w.Byte(kDigestVersion);
  w.Signed(d.rank);
  w.Signed(d.device);
  w.String(d.clock_domain);
  w.String(d.host);
  w.String(d.file);
  w.Signed(d.pid);
  w.String(d.job);
  w.Signed(d.world_size);
  w.Unsigned(d.names.size());
  for (const std::string& n : d.names) w.String(n);
  w.Signed(d.origin_ns);
  w.Unsigned(d.kernels.size());
  int64_t previous_start = d.origin_ns;
  LatenessBreakdown previous_at_start;
  for (size_t j = 0; j < d.kernels.size(); ++j) {
    const DigestKernel& k = d.kernels[j];
    const KernelTime& t = d.times[j];
    w.Delta(k.start_ns, previous_start);
    w.Delta(k.end_ns, k.start_ns);
    w.Signed(k.stream);
    // Name indices are >= -1 (kNoDigestName).
    for (int32_t name :
         {k.kernel_type, k.collective, k.process_group, k.group_ranks}) {
      w.Unsigned(static_cast<uint64_t>(static_cast<int64_t>(name) + 1));
    }
    w.Signed(k.seq);
    w.Signed(k.group_size);
    w.Signed(k.peer);
    w.Signed(k.pair_index);
    PutTime(w, t.at_start, previous_at_start);
    PutTime(w, t.at_end, t.at_start);
    previous_start = k.start_ns;
    previous_at_start = t.at_start;
  }
  const std::vector<Interval>& compute = d.compute_in_kernels.intervals();
  w.Unsigned(compute.size());
  int64_t previous_end = d.origin_ns;
  for (const Interval& i : compute) {
    w.Delta(i.start, previous_end);
    w.Delta(i.end, i.start);
    previous_end = i.end;
  }
  const UtilizationStats& s = d.stats;
  for (int64_t v : {s.span_ns, s.compute_ns, s.bubble_ns, s.largest_bubble_ns,
                    s.largest_bubble_start_ns}) {
    w.Signed(v);
  }
  w.Byte(s.culprit_before_bubble.has_value() ? 1 : 0);
  if (s.culprit_before_bubble.has_value()) {
    const KernelRef& c = *s.culprit_before_bubble;
    w.String(c.name);
    w.Signed(c.start_ns);
    w.Delta(c.end_ns, c.start_ns);
    w.Signed(c.stream);
  }
  for (int64_t v : s.attribution) w.Signed(v);
  w.Signed(d.comm_ns);
  w.Signed(d.comm_exposed_ns);
  return w.Take();
}

absl::StatusOr<RankDigest> DecodeRankDigest(absl::string_view bytes) {
  VarintReader r(bytes);
  const uint8_t version = r.Byte();
  if (!r.ok()) return absl::InvalidArgumentError("empty rank digest");
  if (version != kDigestVersion) {
    return absl::InvalidArgumentError(absl::StrCat(
        "rank digest version ", version, " is not ", kDigestVersion));
  }
  RankDigest d;
  d.rank = r.Int32();
  d.device = r.Int32();
  d.clock_domain = r.String();
  d.host = r.String();
  d.file = r.String();
  d.pid = r.Signed();
  d.job = r.String();
  d.world_size = r.Int32();
  d.names.resize(r.Count());
  for (std::string& n : d.names) n = r.String();
  d.origin_ns = r.Signed();
  d.kernels.resize(r.Count());
  d.times.resize(d.kernels.size());
  int64_t previous_start = d.origin_ns;
  LatenessBreakdown previous_at_start;
  bool names_ok = true;
  for (size_t j = 0; j < d.kernels.size(); ++j) {
    DigestKernel& k = d.kernels[j];
    KernelTime& t = d.times[j];
    k.start_ns = r.Delta(previous_start);
    k.end_ns = r.Delta(k.start_ns);
    k.stream = r.Int32();
    for (int32_t* name :
         {&k.kernel_type, &k.collective, &k.process_group, &k.group_ranks}) {
      const uint64_t v = r.Unsigned();
      names_ok &= v <= d.names.size();
      *name = names_ok ? static_cast<int32_t>(v) - 1 : kNoDigestName;
    }
    k.seq = r.Signed();
    k.group_size = r.Int32();
    k.peer = r.Int32();
    k.pair_index = r.Signed();
    t.at_start = GetTime(r, previous_at_start);
    t.at_end = GetTime(r, t.at_start);
    previous_start = k.start_ns;
    previous_at_start = t.at_start;
    if (!r.ok()) break;
  }
  std::vector<Interval> compute(r.Count());
  int64_t previous_end = d.origin_ns;
  for (Interval& i : compute) {
    i.start = r.Delta(previous_end);
    i.end = r.Delta(i.start);
    previous_end = i.end;
  }
  UtilizationStats& s = d.stats;
  for (int64_t* v : {&s.span_ns, &s.compute_ns, &s.bubble_ns,
                     &s.largest_bubble_ns, &s.largest_bubble_start_ns}) {
    *v = r.Signed();
  }
  const uint8_t has_culprit = r.Byte();
  if (has_culprit > 1) r.Fail();
  if (has_culprit == 1) {
    KernelRef c;
    c.name = r.String();
    c.start_ns = r.Signed();
    c.end_ns = r.Delta(c.start_ns);
    c.stream = r.Int32();
    s.culprit_before_bubble = std::move(c);
  }
  for (int64_t& v : s.attribution) v = r.Signed();
  d.comm_ns = r.Signed();
  d.comm_exposed_ns = r.Signed();
  if (!r.ok() || !r.done()) {
    return absl::InvalidArgumentError(r.ok() ? "rank digest has trailing bytes"
                                             : "rank digest is truncated");
  }
  if (!names_ok) {
    return absl::InvalidArgumentError("rank digest names a missing name");
  }
  // Intervals that are not sorted, disjoint and non-empty were not encoded
  // from an IntervalSet.
  for (size_t k = 0; k < compute.size(); ++k) {
    if (compute[k].end <= compute[k].start ||
        (k > 0 && compute[k].start <= compute[k - 1].end)) {
      return absl::InvalidArgumentError(
          "rank digest's compute intervals are not a set");
    }
  }
  d.compute_in_kernels = IntervalSet::FromMerged(std::move(compute));
  return d;
}

}  // namespace bubblewatch
