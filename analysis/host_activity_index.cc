#include "analysis/host_activity_index.h"

#include <algorithm>
#include <limits>
#include <optional>

#include "absl/strings/match.h"
#include "schemas/time_types.h"

namespace bubblewatch {
namespace {

// Cumulative unions from per-class interval lists. A class with no events
// shares the level below it instead of copying it; a class above a non-empty
// level is merged into that level in its own list's memory (see
// IntervalSet::Union).
HostActivityIndex::Levels BuildLevels(
    std::array<std::vector<Interval>, kNumExplainingHostClasses> by_class) {
  HostActivityIndex::Levels levels;
  for (int k = 0; k < kNumExplainingHostClasses; ++k) {
    if (k > 0 && by_class[k].empty()) {
      levels.index[k] = levels.index[k - 1];
      continue;
    }
    IntervalSet level =
        k > 0 && !levels[k - 1].empty()
            ? IntervalSet::Union(levels[k - 1], std::move(by_class[k]))
            : IntervalSet::FromIntervals(std::move(by_class[k]));
    if (k > 0 && level.empty()) {
      // Only empty intervals: the level adds nothing.
      levels.index[k] = levels.index[k - 1];
      continue;
    }
    levels.index[k] = static_cast<uint8_t>(levels.sets.size());
    levels.sets.push_back(std::move(level));
  }
  levels.cursors.assign(levels.sets.size(), 0);
  return levels;
}

}  // namespace

HostActivityIndex::HostActivityIndex(
    const Trace& trace,
    const absl::flat_hash_set<CorrelationId>& pageable_copy_correlations)
    : trace_(trace) {
  CpuEventClassCache name_classes(trace);
  const size_t n = trace.cpu.size();
  classes_.resize(n);
  const bool any_pageable = !pageable_copy_correlations.empty();
  // Two passes: the first classifies and counts each thread's intervals per
  // class, so the second fills lists of exactly the right size (growing them
  // by doubling touched twice the memory: page faults at scale).
  std::vector<ClassCounts> counts;
  // Whether every thread's explaining events come by start, and the start
  // of each thread's last one.
  bool by_start = true;
  std::vector<int64_t> last_start;
  int slot = 0;
  uint64_t run_thread = 0;  // The thread `slot` belongs to.
  // Plain pointers, also to the current thread's counts: the stores below
  // would otherwise make the compiler reload every vector for every event.
  const CpuEvent* const events = trace.cpu.data();
  HostClass* const classes = classes_.data();
  ClassCounts* thread_counts = nullptr;
  int64_t* thread_last_start = nullptr;
  for (size_t i = 0; i < n; ++i) {
    const CpuEvent& e = events[i];
    HostClass c = name_classes.Of(e);
    if (any_pageable && e.correlation != kNoCorrelation &&
        pageable_copy_correlations.contains(e.correlation)) {
      c = HostClass::kSync;
    }
    classes[i] = c;
    // Events come in runs of one thread; skip the hash lookup within a run.
    if (i == 0 || e.thread != run_thread) {
      run_thread = e.thread;
      auto [it, inserted] = slots_.try_emplace(e.thread, slots_.size());
      if (inserted) {
        counts.emplace_back();
        // The least int64: every start is in order after it.
        last_start.push_back(std::numeric_limits<int64_t>::min());
        rare_events_.emplace_back();
      }
      slot = it->second;
      thread_counts = &counts[slot];
      thread_last_start = &last_start[slot];
    }
    if (c == HostClass::kContext || e.end_ns <= e.start_ns) continue;
    // An empty event overlaps nothing, so it is never blamed either.
    if (c == HostClass::kSync || c == HostClass::kAllocator ||
        c == HostClass::kDataLoading) {
      rare_events_[slot].push_back(static_cast<uint32_t>(i));
    }
    ++(*thread_counts)[static_cast<int>(c)];
    by_start &= e.start_ns >= *thread_last_start;
    *thread_last_start = e.start_ns;
  }
  if (by_start) {
    BuildSortedLevels(counts);
    // The rare events are by start too: FindBlamed can look at only those
    // that may overlap its stretch.
    rare_max_end_.resize(rare_events_.size());
    for (size_t t = 0; t < rare_events_.size(); ++t) {
      std::optional<EventNs> max_end;  // Of the events so far.
      rare_max_end_[t].reserve(rare_events_[t].size());
      for (uint32_t i : rare_events_[t]) {
        RaiseTo(max_end, trace.cpu[i].end_ns);
        rare_max_end_[t].push_back(*max_end);
      }
    }
  } else {
    BuildLevelsFromLists(counts);
  }
}

void HostActivityIndex::BuildSortedLevels(
    absl::Span<const ClassCounts> counts) {
  // Events by start: each level is merged as its events come (an event of
  // class c belongs to every level from c up), so nothing is collected per
  // class, sorted, or merged again. A level whose class has no events
  // shares the set below it.
  struct Builder {
    std::array<bool, kNumExplainingHostClasses> own{};
    std::array<std::vector<Interval>, kNumExplainingHostClasses> merged;
    // The interval each level is growing; none: none yet.
    std::array<std::optional<Interval>, kNumExplainingHostClasses> open{};
  };
  std::vector<Builder> builders(counts.size());
  for (size_t t = 0; t < counts.size(); ++t) {
    Builder& b = builders[t];
    size_t upto = 0;
    for (int k = 0; k < kNumExplainingHostClasses; ++k) {
      upto += counts[t][k];
      b.own[k] = k == 0 || counts[t][k] > 0;
      // At most one interval per event of the level: capacity never written
      // costs address space only.
      if (b.own[k]) b.merged[k].reserve(upto);
    }
  }
  // Plain pointers: the appends below would otherwise make the compiler
  // reload the vectors' data and sizes for every event.
  const CpuEvent* const events = trace_.cpu.data();
  const HostClass* const classes = classes_.data();
  const size_t n = trace_.cpu.size();
  Builder* b = nullptr;
  uint64_t run_thread = 0;
  for (size_t i = 0; i < n; ++i) {
    const HostClass c = classes[i];
    if (c == HostClass::kContext) continue;
    const int64_t start = events[i].start_ns;
    const int64_t end = events[i].end_ns;
    if (end <= start) continue;
    if (b == nullptr || events[i].thread != run_thread) {
      run_thread = events[i].thread;
      b = &builders[slots_.find(run_thread)->second];
    }
    for (int k = static_cast<int>(c); k < kNumExplainingHostClasses; ++k) {
      if (!b->own[k]) continue;
      std::optional<Interval>& run = b->open[k];
      if (run && start <= run->end) {
        if (end > run->end) run->end = end;
        continue;
      }
      if (run) b->merged[k].push_back(*run);
      run = Interval{start, end};
    }
  }
  per_thread_.reserve(builders.size());
  for (Builder& builder : builders) {
    Levels levels;
    for (int k = 0; k < kNumExplainingHostClasses; ++k) {
      if (!builder.own[k]) {
        levels.index[k] = levels.index[k - 1];
        continue;
      }
      if (builder.open[k]) builder.merged[k].push_back(*builder.open[k]);
      levels.index[k] = static_cast<uint8_t>(levels.sets.size());
      levels.sets.push_back(
          IntervalSet::FromMerged(std::move(builder.merged[k])));
    }
    levels.cursors.assign(levels.sets.size(), 0);
    per_thread_.push_back(std::move(levels));
  }
}

void HostActivityIndex::BuildLevelsFromLists(
    absl::Span<const ClassCounts> counts) {
  // Each list is sized once and then written through a cursor: no capacity
  // check per event.
  std::vector<std::array<std::vector<Interval>, kNumExplainingHostClasses>>
      by_thread(counts.size());
  std::vector<std::array<Interval*, kNumExplainingHostClasses>> cursor(
      counts.size());
  for (size_t t = 0; t < counts.size(); ++t) {
    size_t below = 0;
    for (int k = 0; k < kNumExplainingHostClasses; ++k) {
      // Room for the union with the levels below (BuildLevels).
      const size_t count = counts[t][k];
      if (count > 0) {
        by_thread[t][k].reserve(count + below);
        by_thread[t][k].resize(count);
      }
      cursor[t][k] = by_thread[t][k].data();
      below += count;
    }
  }
  int slot = 0;
  uint64_t run_thread = 0;
  bool first = true;
  for (size_t i = 0; i < trace_.cpu.size(); ++i) {
    const HostClass c = classes_[i];
    if (c == HostClass::kContext) continue;
    const CpuEvent& e = trace_.cpu[i];
    if (e.end_ns <= e.start_ns) continue;
    if (first || e.thread != run_thread) {
      first = false;
      run_thread = e.thread;
      slot = slots_.find(e.thread)->second;
    }
    *cursor[slot][static_cast<int>(c)]++ = {e.start_ns, e.end_ns};
  }
  per_thread_.reserve(by_thread.size());
  for (auto& lists : by_thread) {
    per_thread_.push_back(BuildLevels(std::move(lists)));
  }
}

HostActivityIndex::Scope HostActivityIndex::ThreadOf(size_t cpu_index) const {
  const uint64_t thread = trace_.cpu[cpu_index].thread;
  if (last_thread_slot_ < 0 || thread != last_thread_) {
    last_thread_ = thread;
    last_thread_slot_ = slots_.find(thread)->second;
  }
  return Scope{last_thread_slot_};
}

const HostActivityIndex::Levels& HostActivityIndex::LevelsOf(
    Scope scope) const {
  if (scope.thread_slot >= 0) return per_thread_[scope.thread_slot];
  if (!all_threads_) {
    std::array<size_t, kNumExplainingHostClasses> counts{};
    for (size_t i = 0; i < trace_.cpu.size(); ++i) {
      const CpuEvent& e = trace_.cpu[i];
      if (classes_[i] != HostClass::kContext && e.end_ns > e.start_ns) {
        ++counts[static_cast<int>(classes_[i])];
      }
    }
    std::array<std::vector<Interval>, kNumExplainingHostClasses> by_class;
    size_t below = 0;
    for (int k = 0; k < kNumExplainingHostClasses; ++k) {
      if (counts[k] > 0) by_class[k].reserve(counts[k] + below);
      below += counts[k];
    }
    for (size_t i = 0; i < trace_.cpu.size(); ++i) {
      const CpuEvent& e = trace_.cpu[i];
      if (classes_[i] != HostClass::kContext && e.end_ns > e.start_ns) {
        by_class[static_cast<int>(classes_[i])].push_back(
            {e.start_ns, e.end_ns});
      }
    }
    all_threads_ = BuildLevels(std::move(by_class));
  }
  return *all_threads_;
}

int64_t HostActivityIndex::Attribute(Scope scope, int64_t a, int64_t b,
                                     Attribution& attribution) const {
  if (b <= a) return 0;
  const Levels& levels = LevelsOf(scope);
  int64_t below = 0;
  for (int k = 0; k < kNumExplainingHostClasses; ++k) {
    // A level that shares the set below it adds nothing: no second query.
    if (k > 0 && levels.index[k] == levels.index[k - 1]) continue;
    const int64_t covered = levels.Covered(k, a, b);
    attribution[static_cast<int>(HostClassCause(static_cast<HostClass>(k)))] +=
        covered - below;
    below = covered;
  }
  return (b - a) - below;
}

bool HostActivityIndex::SyncOverlaps(Scope scope, int64_t a, int64_t b) const {
  return LevelsOf(scope).Covered(static_cast<int>(HostClass::kSync), a, b) > 0;
}

std::optional<size_t> HostActivityIndex::FindBlamed(Scope scope,
                                                    HostClass host_class,
                                                    int64_t a,
                                                    int64_t b) const {
  std::optional<size_t> best;
  int64_t best_overlap = 0;
  int64_t best_start = 0;
  auto consider = [&](size_t i) {
    if (classes_[i] != host_class) return;
    const CpuEvent& e = trace_.cpu[i];
    int64_t overlap = std::min(b, e.end_ns) - std::max(a, e.start_ns);
    if (overlap <= 0) return;
    if (overlap > best_overlap ||
        (overlap == best_overlap && e.start_ns < best_start)) {
      best = i;
      best_overlap = overlap;
      best_start = e.start_ns;
    }
  };
  bool rare = host_class == HostClass::kSync ||
              host_class == HostClass::kAllocator ||
              host_class == HostClass::kDataLoading;
  if (scope.thread_slot >= 0 && rare) {
    const std::vector<uint32_t>& events = rare_events_[scope.thread_slot];
    size_t from = 0;
    size_t to = events.size();
    if (!rare_max_end_.empty()) {
      // By start, with the running maximum of their ends: the events that
      // may overlap [a, b) are those after the first whose running end
      // passes a, up to the first starting at or after b. Same order as
      // the full scan, so the same ties.
      const std::vector<int64_t>& max_end = rare_max_end_[scope.thread_slot];
      from = static_cast<size_t>(
          std::upper_bound(max_end.begin(), max_end.end(), a) -
          max_end.begin());
      to = static_cast<size_t>(
          std::partition_point(
              events.begin() + from, events.end(),
              [&](uint32_t i) { return trace_.cpu[i].start_ns < b; }) -
          events.begin());
    }
    for (size_t j = from; j < to; ++j) consider(events[j]);
  } else {
    ForEachEventOf(scope, consider);
  }
  return best;
}

template <typename F>
void HostActivityIndex::ForEachEventOf(Scope scope, F f) const {
  if (scope.thread_slot < 0) {
    for (size_t i = 0; i < trace_.cpu.size(); ++i) f(i);
    return;
  }
  uint64_t thread = 0;
  for (const auto& [id, slot] : slots_) {
    if (slot == scope.thread_slot) thread = id;
  }
  for (size_t i = 0; i < trace_.cpu.size(); ++i) {
    if (trace_.cpu[i].thread == thread) f(i);
  }
}

std::optional<size_t> HostActivityIndex::FindBlamedHostCompute(
    Scope scope, int64_t a, int64_t b, int64_t lo, int64_t hi) const {
  std::optional<size_t> best;
  int best_tier = 0;
  int64_t best_overlap = 0;
  ForEachEventOf(scope, [&](size_t i) {
    if (classes_[i] != HostClass::kContext) return;
    const CpuEvent& e = trace_.cpu[i];
    // The Python stack and the profiler's step ranges are where the time
    // was spent, not what spent it; a range around the whole bubble (a
    // module's forward, a record_function block) is the same kind of
    // context.
    if (e.category == CpuEventCategory::kPythonFunction) return;
    if (e.start_ns <= lo && e.end_ns >= hi) return;
    int tier = 0;
    if (e.category == CpuEventCategory::kUserAnnotation) {
      if (absl::StartsWith(trace_.Name(e.name), "ProfilerStep#")) return;
      // An annotation inside the bubble (an NVTX op range of
      // emit_nvtx, which is all an Nsight trace has of operators) only
      // when no operator ran there.
      tier = 1;
    }
    const int64_t overlap = std::min(b, e.end_ns) - std::max(a, e.start_ns);
    if (overlap <= 0) return;
    if (best) {
      const CpuEvent& c = trace_.cpu[*best];
      if (tier != best_tier) {
        if (tier > best_tier) return;
      } else if (overlap != best_overlap) {
        if (overlap < best_overlap) return;
      } else if (e.start_ns != c.start_ns) {
        if (e.start_ns < c.start_ns) return;
      } else if (e.end_ns >= c.end_ns) {
        return;
      }
    }
    best = i;
    best_tier = tier;
    best_overlap = overlap;
  });
  return best;
}

}  // namespace bubblewatch
