// LaunchIndex maps a correlation id to the CPU call that launched the GPU
// work carrying it (cudaLaunchKernel, cudaMemcpyAsync, ...).
//
// Profilers hand out correlation ids from a counter, so the ids of one trace
// are usually dense: then the index is a flat table (one cache-friendly load
// per lookup, kernels arrive in roughly id order). Sparse ids (e.g. nsys ids
// with the process folded into the high bits) fall back to a hash map.
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
    auto it = sparse_.find(correlation);
    return it == sparse_.end() ? kNone : it->second;
  }

 private:
  // True if event `candidate` should replace `current` as the launch.
  bool Prefer(uint32_t candidate, uint32_t current) const;
  void Insert(CorrelationId correlation, uint32_t cpu_index);

  const Trace& trace_;
  bool dense_ = false;
  CorrelationId base_ = 0;
  std::vector<uint32_t> table_;
  absl::flat_hash_map<CorrelationId, uint32_t> sparse_;
};

}  // namespace bubblewatch

#endif  // BUBBLEWATCH_ANALYSIS_LAUNCH_INDEX_H_
