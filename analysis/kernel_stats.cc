#include "analysis/kernel_stats.h"

#include <algorithm>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/match.h"
#include "absl/strings/strip.h"
#include "analysis/duration_percentiles.h"
#include "analysis/interval_set.h"

namespace bubblewatch {
namespace {

// Total time first; ties by name so reports are stable.
bool MoreTime(const KernelStat& a, const KernelStat& b) {
  if (a.total_ns != b.total_ns) return a.total_ns > b.total_ns;
  return a.name < b.name;
}

KernelStat MakeStat(absl::string_view name, std::vector<int64_t>& durations,
                    int64_t busy_ns) {
  KernelStat s;
  s.name = std::string(name);
  s.count = static_cast<int64_t>(durations.size());
  for (int64_t d : durations) s.total_ns += d;
  s.mean_ns = s.count > 0 ? s.total_ns / s.count : 0;
  std::sort(durations.begin(), durations.end());
  s.p90_ns = durations.empty() ? 0 : NearestRank(durations, 0.9);
  s.busy_share = busy_ns > 0 ? static_cast<double>(s.total_ns) / busy_ns : 0.0;
  return s;
}

// The `top` stats with the most time, in order.
std::vector<KernelStat> Top(std::vector<KernelStat> stats, int top) {
  size_t keep = std::min(stats.size(), static_cast<size_t>(std::max(0, top)));
  std::partial_sort(stats.begin(), stats.begin() + keep, stats.end(), MoreTime);
  stats.resize(keep);
  return stats;
}

}  // namespace

bool IsCommunicationKernel(absl::string_view name) {
  absl::ConsumePrefix(&name, "void ");
  return name.size() >= 4 && absl::EqualsIgnoreCase(name.substr(0, 4), "nccl");
}

KernelBreakdown BreakDownKernels(
    const Trace& trace,
    absl::Span<const std::vector<KernelSlot>* const> devices, int64_t busy_ns,
    int top) {
  KernelBreakdown out;
  // Names are interned, so one NameId is one kernel name.
  absl::flat_hash_map<NameId, std::vector<int64_t>> by_name;
  absl::flat_hash_map<NameId, bool> is_comm;
  std::vector<int64_t> all_durations;
  for (const std::vector<KernelSlot>* kernels : devices) {
    std::vector<Interval> comm, compute;
    for (const KernelSlot& k : *kernels) {
      NameId name = trace.gpu[k.index].name;
      int64_t d = k.end_ns - k.start_ns;
      by_name[name].push_back(d);
      all_durations.push_back(d);
      if (d < kTinyKernelNs) ++out.tiny_kernels;
      auto [it, inserted] = is_comm.try_emplace(name, false);
      if (inserted) it->second = IsCommunicationKernel(trace.Name(name));
      (it->second ? comm : compute).push_back({k.start_ns, k.end_ns});
      if (it->second) {
        ++out.communication.kernels;
        out.communication.total_ns += d;
      }
    }
    IntervalSet comm_set = IntervalSet::FromIntervals(std::move(comm));
    IntervalSet compute_set = IntervalSet::FromIntervals(std::move(compute));
    out.communication.busy_ns += comm_set.TotalLength();
    for (const Interval& c : comm_set.intervals()) {
      out.communication.overlap_ns += compute_set.CoveredLength(c.start, c.end);
    }
  }
  out.kernels = static_cast<int64_t>(all_durations.size());
  if (!all_durations.empty()) {
    std::sort(all_durations.begin(), all_durations.end());
    out.median_kernel_ns = NearestRank(all_durations, 0.5);
  }
  std::vector<KernelStat> compute_stats, comm_stats;
  for (auto& [name, durations] : by_name) {
    KernelStat s = MakeStat(trace.Name(name), durations, busy_ns);
    (is_comm[name] ? comm_stats : compute_stats).push_back(std::move(s));
  }
  out.top_compute = Top(std::move(compute_stats), top);
  out.top_communication = Top(std::move(comm_stats), top);
  return out;
}

}  // namespace bubblewatch
