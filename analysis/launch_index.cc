#include "analysis/launch_index.h"

#include <algorithm>
#include <utility>

namespace bubblewatch {
namespace {

int CategoryRank(const CpuEvent& e) {
  return e.category == CpuEventCategory::kCudaRuntime ||
                 e.category == CpuEventCategory::kCudaDriver
             ? 0
             : 1;
}

}  // namespace

LaunchIndex::LaunchIndex(const Trace& trace) : trace_(trace) {
  CorrelationId lo = UINT64_MAX, hi = 0;
  size_t with_correlation = 0;
  for (const CpuEvent& e : trace.cpu) {
    if (e.correlation == kNoCorrelation) continue;
    lo = std::min(lo, e.correlation);
    hi = std::max(hi, e.correlation);
    ++with_correlation;
  }
  if (with_correlation == 0) return;
  // Dense when the table would be at most 4 slots per carried id.
  dense_ = hi - lo < 4 * static_cast<uint64_t>(with_correlation) + 1024;
  if (dense_) {
    base_ = lo;
    table_.assign(hi - lo + 1, kNone);
  } else {
    sparse_.reserve(with_correlation);
  }
  for (size_t i = 0; i < trace.cpu.size(); ++i) {
    if (trace.cpu[i].correlation != kNoCorrelation) {
      Insert(trace.cpu[i].correlation, static_cast<uint32_t>(i));
    }
  }
}

bool LaunchIndex::Prefer(uint32_t candidate, uint32_t current) const {
  const CpuEvent& a = trace_.cpu[candidate];
  const CpuEvent& b = trace_.cpu[current];
  return std::make_pair(CategoryRank(a), a.start_ns) <
         std::make_pair(CategoryRank(b), b.start_ns);
}

void LaunchIndex::Insert(CorrelationId correlation, uint32_t cpu_index) {
  uint32_t* slot;
  if (dense_) {
    slot = &table_[correlation - base_];
  } else {
    slot = &sparse_.try_emplace(correlation, kNone).first->second;
  }
  if (*slot == kNone || Prefer(cpu_index, *slot)) *slot = cpu_index;
}

}  // namespace bubblewatch
