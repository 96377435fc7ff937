// LaunchIndex maps a correlation id to the CPU call that launched the GPU
// work carrying it (cudaLaunchKernel, cudaMemcpyAsync, ...).
//
// Profilers hand out correlation ids from a counter, so the ids of one trace
// are usually dense: then the index is a flat table (one cache-friendly load
// per lookup, kernels arrive in roughly id order). Ids that are dense within
// each value of their high 32 bits but far apart across them (one counter
// per process or rank folded into the high bits, as a job's ranks merged by
// the processor's windower) get one flat table per high value: a hash map
// of every launch, rebuilt at each window, was a third of the processor's
// CPU (docs/performance.md, "Where the processor's time goes"). Other
// sparse ids fall back to a hash map.
#ifndef BUBBLEWATCH_ANALYSIS_LAUNCH_INDEX_H_
#define BUBBLEWATCH_ANALYSIS_LAUNCH_INDEX_H_

#include <cstdint>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "schemas/trace.h"

namespace bubblewatch {

class LaunchIndex {
 public:
  static constexpr uint32_t kNone = UINT32_MAX;

  // Indexes trace.cpu. When several CPU events carry one correlation, CUDA
  // runtime/driver calls win over other categories, then the earliest start.
  explicit LaunchIndex(const Trace& trace);

  // The Trace::cpu index of the call that launched `correlation`, or kNone.
  uint32_t Find(CorrelationId correlation) const {
    if (correlation == kNoCorrelation) return kNone;
    if (dense_) {
      uint64_t slot = correlation - base_;
      return slot < table_.size() ? table_[slot] : kNone;
    }
    if (!ranges_.empty()) {
      size_t slot = RangeSlot(correlation);
      return slot == kNoSlot ? kNone : table_[slot];
    }
    auto it = sparse_.find(correlation);
    return it == sparse_.end() ? kNone : it->second;
  }

 private:
  // One dense piece of table_: the ids whose high 32 bits are `high`, from
  // `base` to base + size - 1, at table_[offset ...].
  struct Range {
    uint64_t high;
    CorrelationId base;
    uint64_t size;
    size_t offset;
  };
  static constexpr size_t kNoSlot = SIZE_MAX;
  // At most this many ranges; more falls back to the hash map.
  static constexpr size_t kMaxRanges = 64;

  // Builds ranges_ and table_ if every high value's ids are dense; false
  // (nothing built) otherwise.
  bool BuildRanges(const Trace& trace);
  // table_'s slot of `correlation` in ranges_ mode, or kNoSlot.
  size_t RangeSlot(CorrelationId correlation) const {
    const uint64_t high = correlation >> 32;
    for (const Range& r : ranges_) {  // Few: one per process or rank.
      if (r.high != high) continue;
      const uint64_t k = correlation - r.base;
      return k < r.size ? r.offset + k : kNoSlot;
    }
    return kNoSlot;
  }
  // True if event `candidate` should replace `current` as the launch.
  bool Prefer(uint32_t candidate, uint32_t current) const;
  void Insert(CorrelationId correlation, uint32_t cpu_index);

  const Trace& trace_;
  bool dense_ = false;
  CorrelationId base_ = 0;
  std::vector<uint32_t> table_;
  std::vector<Range> ranges_;  // Non-empty: table_ is piecewise (RangeSlot).
  absl::flat_hash_map<CorrelationId, uint32_t> sparse_;
};

}  // namespace bubblewatch

#endif  // BUBBLEWATCH_ANALYSIS_LAUNCH_INDEX_H_
