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
    // The usual case, written out: a call to Insert per CPU event (which
    // picks the mode again each time) was a third of the index's cost.
    const CpuEvent* const events = trace.cpu.data();
    const size_t n = trace.cpu.size();
    uint32_t* const table = table_.data();
    for (size_t i = 0; i < n; ++i) {
      const CorrelationId correlation = events[i].correlation;
      if (correlation == kNoCorrelation) continue;
      uint32_t& slot = table[correlation - lo];
      const uint32_t index = static_cast<uint32_t>(i);
      if (slot == kNone || Prefer(index, slot)) slot = index;
    }
    return;
  }
  if (!BuildRanges(trace)) sparse_.reserve(with_correlation);
  for (size_t i = 0; i < trace.cpu.size(); ++i) {
    if (trace.cpu[i].correlation != kNoCorrelation) {
      Insert(trace.cpu[i].correlation, static_cast<uint32_t>(i));
    }
  }
}

bool LaunchIndex::BuildRanges(const Trace& trace) {
  struct Extent {
    uint64_t high;
    CorrelationId lo = UINT64_MAX, hi = 0;
    uint64_t count = 0;
  };
  std::vector<Extent> extents;
  size_t last = 0;
  for (const CpuEvent& e : trace.cpu) {
    if (e.correlation == kNoCorrelation) continue;
    const uint64_t high = e.correlation >> 32;
    // Events come in runs of one thread, so of one high value.
    if (extents.empty() || extents[last].high != high) {
      last = 0;
      while (last < extents.size() && extents[last].high != high) ++last;
      if (last == extents.size()) {
        if (extents.size() == kMaxRanges) return false;
        extents.push_back(Extent{.high = high});
      }
    }
    Extent& x = extents[last];
    x.lo = std::min(x.lo, e.correlation);
    x.hi = std::max(x.hi, e.correlation);
    ++x.count;
  }
  uint64_t total = 0;
  for (const Extent& x : extents) {
    // The dense rule of the whole table, per range.
    if (x.hi - x.lo >= 4 * x.count + 1024) return false;
    total += x.hi - x.lo + 1;
  }
  std::sort(extents.begin(), extents.end(),
            [](const Extent& a, const Extent& b) { return a.high < b.high; });
  ranges_.reserve(extents.size());
  size_t offset = 0;
  for (const Extent& x : extents) {
    const uint64_t size = x.hi - x.lo + 1;
    ranges_.push_back(
        Range{.high = x.high, .base = x.lo, .size = size, .offset = offset});
    offset += size;
  }
  table_.assign(total, kNone);
  return true;
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
  } else if (!ranges_.empty()) {
    slot = &table_[RangeSlot(correlation)];
  } else {
    slot = &sparse_.try_emplace(correlation, kNone).first->second;
  }
  if (*slot == kNone || Prefer(cpu_index, *slot)) *slot = cpu_index;
}

}  // namespace bubblewatch
