#include "analysis/host_activity_index.h"

#include <algorithm>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace bubblewatch {
namespace {

// Names of every explaining class and of a context event.
const char* const kNames[] = {"cudaStreamSynchronize", "cudaMalloc",
                              "enumerate(DataLoader)#next", "cudaLaunchKernel",
                              "aten::mm"};

// Time per cause in [a, b) of the events of `threads` (all when empty),
// nanosecond by nanosecond: the highest class covering each one wins; the
// last entry is the time nothing covers.
std::vector<int64_t> BruteForce(const Trace& trace, uint64_t thread,
                                bool all_threads, int64_t a, int64_t b) {
  std::vector<int64_t> out(kNumBubbleCauses + 1, 0);
  for (int64_t t = a; t < b; ++t) {
    int best = kNumExplainingHostClasses;
    for (const CpuEvent& e : trace.cpu) {
      if (!all_threads && e.thread != thread) continue;
      if (e.start_ns > t || e.end_ns <= t) continue;
      const HostClass c =
          ClassifyCpuEvent(trace.Name(e.name), CpuEventCategory::kOther);
      best = std::min(best, static_cast<int>(c));
    }
    if (best == kNumExplainingHostClasses) {
      ++out.back();
    } else {
      ++out[static_cast<int>(HostClassCause(static_cast<HostClass>(best)))];
    }
  }
  return out;
}

// The index merges each thread's levels as the events come when they come by
// start, and from per-class lists otherwise: both must answer like the
// definition, for one thread and for all, with queries in and out of order.
TEST(HostActivityIndex, SortedAndUnsortedEventsAnswerLikeTheDefinition) {
  std::mt19937_64 rng(11);
  for (int round = 0; round < 60; ++round) {
    Trace trace;
    NameInterner names(&trace);
    std::vector<NameId> ids;
    for (const char* n : kNames) ids.push_back(names.Intern(n));
    const int threads = 1 + static_cast<int>(rng() % 3);
    const int n = static_cast<int>(rng() % 40);
    for (int i = 0; i < n; ++i) {
      CpuEvent e;
      e.start_ns = static_cast<int64_t>(rng() % 300);
      // Some empty, some nested in or overlapping others.
      e.end_ns = e.start_ns + static_cast<int64_t>(rng() % 60);
      e.thread = 1 + rng() % threads;
      e.name = ids[rng() % ids.size()];
      trace.cpu.push_back(e);
    }
    const bool sorted = round % 2 == 0;
    std::stable_sort(trace.cpu.begin(), trace.cpu.end(),
                     [](const CpuEvent& x, const CpuEvent& y) {
                       return x.start_ns < y.start_ns;
                     });
    if (!sorted && trace.cpu.size() > 1) {
      std::reverse(trace.cpu.begin(), trace.cpu.end());
    }
    const absl::flat_hash_set<CorrelationId> no_pageable;
    HostActivityIndex index(trace, no_pageable);
    for (int q = 0; q < 40; ++q) {
      const int64_t a = static_cast<int64_t>(rng() % 380) - 20;
      const int64_t b = a + static_cast<int64_t>(rng() % 120);
      const bool all = trace.cpu.empty() || rng() % 3 == 0;
      const size_t event = all ? 0 : rng() % trace.cpu.size();
      const HostActivityIndex::Scope scope =
          all ? HostActivityIndex::kAllThreads : index.ThreadOf(event);
      const uint64_t thread = all ? 0 : trace.cpu[event].thread;
      Attribution got{};
      const int64_t uncovered = index.Attribute(scope, a, b, got);
      const std::vector<int64_t> want = BruteForce(trace, thread, all, a, b);
      for (int c = 0; c < kNumBubbleCauses; ++c) {
        EXPECT_EQ(got[c], want[c]) << "round " << round << " cause " << c
                                   << " [" << a << ", " << b << ")";
      }
      EXPECT_EQ(uncovered, want.back())
          << "round " << round << " [" << a << ", " << b << ")";
      EXPECT_EQ(index.SyncOverlaps(scope, a, b),
                want[static_cast<int>(HostClassCause(HostClass::kSync))] > 0);
      if (all) continue;
      // FindBlamed: the event of the class overlapping [a, b) the most; ties
      // the earlier start, then the first in the trace.
      for (HostClass c : {HostClass::kSync, HostClass::kAllocator,
                          HostClass::kDataLoading, HostClass::kLaunch}) {
        std::optional<size_t> best;
        int64_t best_overlap = 0;
        for (size_t i = 0; i < trace.cpu.size(); ++i) {
          const CpuEvent& e = trace.cpu[i];
          if (e.thread != thread ||
              ClassifyCpuEvent(trace.Name(e.name), e.category) != c) {
            continue;
          }
          const int64_t overlap =
              std::min(b, e.end_ns) - std::max(a, e.start_ns);
          if (overlap <= 0) continue;
          if (!best || overlap > best_overlap ||
              (overlap == best_overlap &&
               e.start_ns < trace.cpu[*best].start_ns)) {
            best = i;
            best_overlap = overlap;
          }
        }
        EXPECT_EQ(index.FindBlamed(scope, c, a, b), best)
            << "round " << round << " class " << static_cast<int>(c) << " ["
            << a << ", " << b << ")";
      }
    }
  }
}

}  // namespace
}  // namespace bubblewatch
