// What the text and JSON renderings of a diff share.
#include "diff/diff_report.h"

#include <algorithm>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "analysis/kernel_stats.h"

namespace bubblewatch {
namespace {

int64_t TimeOf(const DiffSide& side, const std::string& name) {
  for (const auto& [n, ns] : side.kernel_time) {
    if (n == name) return ns;
  }
  return 0;
}

}  // namespace

Normalization ReportNormalization(const DiffSide& before,
                                  const DiffSide& after) {
  if (before.diagnosis.steps > 0 && after.diagnosis.steps > 0) {
    return Normalization::kPerStep;
  }
  if (before.wall_span_ns > 0 && after.wall_span_ns > 0) {
    return Normalization::kPerSecond;
  }
  return Normalization::kNone;
}

std::vector<KernelChange> TopKernelChanges(const DiffSide& before,
                                           const DiffSide& after, int top) {
  absl::flat_hash_set<std::string> names;
  for (const DiffSide* side : {&before, &after}) {
    const KernelBreakdown& k = side->diagnosis.job.kernels;
    for (const auto* list : {&k.top_compute, &k.top_communication}) {
      for (const KernelStat& s : *list) names.insert(s.name);
    }
  }
  std::vector<KernelChange> out;
  for (const std::string& name : names) {
    out.push_back({name, IsCommunicationKernel(name), TimeOf(before, name),
                   TimeOf(after, name)});
  }
  std::sort(out.begin(), out.end(),
            [](const KernelChange& a, const KernelChange& b) {
              int64_t x = std::max(a.before_ns, a.after_ns);
              int64_t y = std::max(b.before_ns, b.after_ns);
              return x != y ? x > y : a.name < b.name;
            });
  if (out.size() > static_cast<size_t>(std::max(0, top))) {
    out.resize(std::max(0, top));
  }
  return out;
}

}  // namespace bubblewatch
