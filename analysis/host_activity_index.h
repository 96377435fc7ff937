// HostActivityIndex answers, for a stretch of GPU idle time, "what were the
// CPU threads doing": how much of [a, b) each class of host activity covers
// (docs/semantics.md#step-3-host-side-time), on one thread or on all of them.
//
// Design: per thread, the cumulative unions V0 = sync, V1 = sync ∪ allocator,
// V2 = V1 ∪ data loading, V3 = V2 ∪ launch are kept as IntervalSets with
// prefix sums. The time of [a, b) whose highest-priority class is k is then
// |V_k ∩ [a,b)| - |V_{k-1} ∩ [a,b)|: four O(log n) queries per stretch,
// however many events nest or overlap there. When each thread's explaining
// events come by start (the usual case), the levels are merged in one pass as
// the events come; otherwise from per-class lists.
#ifndef BUBBLEWATCH_ANALYSIS_HOST_ACTIVITY_INDEX_H_
#define BUBBLEWATCH_ANALYSIS_HOST_ACTIVITY_INDEX_H_

#include <array>
#include <cstdint>
#include <optional>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/types/span.h"
#include "analysis/cpu_event_classifier.h"
#include "analysis/interval_set.h"
#include "schemas/bubble_cause.h"
#include "schemas/trace.h"

namespace bubblewatch {

class HostActivityIndex {
 public:
  // Which threads a question is about.
  struct Scope {
    int thread_slot = -1;  // -1: all threads.
  };
  static constexpr Scope kAllThreads{-1};

  // Indexes trace.cpu. A CPU event whose correlation is in
  // `pageable_copy_correlations` (the launch of a copy touching pageable host
  // memory) is sync-class whatever its name.
  // The index borrows `trace`, which must outlive it.
  HostActivityIndex(
      const Trace& trace,
      const absl::flat_hash_set<CorrelationId>& pageable_copy_correlations);

  bool has_cpu_events() const { return !trace_.cpu.empty(); }

  // The cumulative unions V0..V3 of one scope; levels that add nothing share
  // the set below them.
  struct Levels {
    std::vector<IntervalSet> sets;
    std::array<uint8_t, kNumExplainingHostClasses> index{};
    // Per set, where its last query landed: the analyzer asks about the
    // gaps of a device in time order, so each query starts its search there
    // (IntervalSet::CoveredLength with a cursor) instead of bisecting the
    // whole thread's activity again.
    mutable std::vector<size_t> cursors;
    const IntervalSet& operator[](int k) const { return sets[index[k]]; }
    // |V_k ∩ [a, b)|.
    int64_t Covered(int k, int64_t a, int64_t b) const {
      return sets[index[k]].CoveredLength(a, b, &cursors[index[k]]);
    }
  };

  // The scope of the thread that ran CPU event `cpu_index`.
  Scope ThreadOf(size_t cpu_index) const;

  HostClass ClassOf(size_t cpu_index) const { return classes_[cpu_index]; }

  // Adds to `attribution` the time of [a, b) covered by each explaining class
  // (sync, allocator, data loading, launch; the highest class wins where they
  // overlap) and returns the time no explaining event covers.
  int64_t Attribute(Scope scope, int64_t a, int64_t b,
                    Attribution& attribution) const;

  // True if a sync-class event in `scope` overlaps [a, b) for a positive time.
  bool SyncOverlaps(Scope scope, int64_t a, int64_t b) const;

  // The event of class `host_class` in `scope` that overlaps [a, b) the most
  // (ties: the earlier one), or nullopt. Meant for the few bubbles a report
  // shows: linear in the events of the scope, except for a sync, allocator
  // or data-loading class on one thread whose events come by start, where
  // only those that can overlap [a, b) are looked at.
  std::optional<size_t> FindBlamed(Scope scope, HostClass host_class, int64_t a,
                                   int64_t b) const;

  // The CPU op blamed for host_compute time in [a, b), the host-side window
  // of the bubble [lo, hi) (docs/semantics.md#reports): among the context
  // events of `scope` that overlap [a, b) and do not enclose the whole
  // bubble, a framework operator (or an event of unknown category) before a
  // user annotation, then the one overlapping [a, b) the most, then the
  // later start (the inner one), then the earlier end. Profiler steps
  // (ProfilerStep#N), Python stack ranges and any range enclosing the bubble
  // are context and never blamed; nullopt when nothing else overlaps.
  // Linear in the events of the scope.
  std::optional<size_t> FindBlamedHostCompute(Scope scope, int64_t a, int64_t b,
                                              int64_t lo, int64_t hi) const;

 private:
  // Per thread slot: its non-empty events of each explaining class.
  using ClassCounts = std::array<size_t, kNumExplainingHostClasses>;
  // Fill per_thread_ from classes_: in one merging pass when every thread's
  // explaining events come by start, else from per-class lists.
  void BuildSortedLevels(absl::Span<const ClassCounts> counts);
  void BuildLevelsFromLists(absl::Span<const ClassCounts> counts);
  const Levels& LevelsOf(Scope scope) const;
  // Calls `f(i)` for every CPU event index of `scope`.
  template <typename F>
  void ForEachEventOf(Scope scope, F f) const;

  const Trace& trace_;
  std::vector<HostClass> classes_;            // Per CPU event.
  absl::flat_hash_map<uint64_t, int> slots_;  // Thread id -> slot.
  // Per thread slot, the indices of its non-empty sync, allocator and
  // data-loading events: few, and the usual subjects of FindBlamed.
  std::vector<std::vector<uint32_t>> rare_events_;
  // When every thread's events come by start (so do its rare events): per
  // thread slot, the running maximum of its rare events' ends. Else empty.
  std::vector<std::vector<int64_t>> rare_max_end_;
  std::vector<Levels> per_thread_;             // Cumulative unions per thread.
  mutable std::optional<Levels> all_threads_;  // Built on first use.
  // ThreadOf's last answer: the gaps of a device are mostly launched from
  // one thread, so most calls skip the hash lookup.
  mutable uint64_t last_thread_ = 0;
  mutable int last_thread_slot_ = -1;
};

}  // namespace bubblewatch

#endif  // BUBBLEWATCH_ANALYSIS_HOST_ACTIVITY_INDEX_H_
