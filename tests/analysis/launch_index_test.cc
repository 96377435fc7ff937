#include "analysis/launch_index.h"

#include <cstdint>
#include <random>
#include <utility>
#include <vector>

#include "gtest/gtest.h"
#include "schemas/trace.h"

namespace bubblewatch {
namespace {

CpuEvent Call(CorrelationId correlation, int64_t start_ns,
              CpuEventCategory category = CpuEventCategory::kCudaRuntime) {
  return CpuEvent{.start_ns = start_ns,
                  .end_ns = start_ns + 10,
                  .correlation = correlation,
                  .category = category};
}

// The launch of `correlation` by the documented rule, by brute force: CUDA
// runtime/driver calls first, then the earliest start, then the first.
uint32_t Oracle(const Trace& trace, CorrelationId correlation) {
  if (correlation == kNoCorrelation) return LaunchIndex::kNone;
  uint32_t best = LaunchIndex::kNone;
  auto rank = [&](uint32_t i) {
    const CpuEvent& e = trace.cpu[i];
    bool cuda = e.category == CpuEventCategory::kCudaRuntime ||
                e.category == CpuEventCategory::kCudaDriver;
    return std::make_pair(cuda ? 0 : 1, e.start_ns);
  };
  for (uint32_t i = 0; i < trace.cpu.size(); ++i) {
    if (trace.cpu[i].correlation != correlation) continue;
    if (best == LaunchIndex::kNone || rank(i) < rank(best)) best = i;
  }
  return best;
}

// Ids of one counter per rank in the high bits (the synthetic fleet's
// layout, a job's ranks merged by the windower): each found, the rule
// applied within a rank, and ids outside every rank's range not found.
TEST(LaunchIndex, FindsIdsDenseWithinEachHighValue) {
  Trace trace;
  const CorrelationId rank1 = (uint64_t{1} << 40) + 1;
  const CorrelationId rank2 = (uint64_t{2} << 40) + 1;
  for (int i = 0; i < 100; ++i) {
    trace.cpu.push_back(Call(rank1 + i, 1000 * i));
    trace.cpu.push_back(Call(rank2 + i, 1000 * i + 1));
  }
  // A later runtime call and an earlier operator with rank 2's first id:
  // the first call (index 1) stays the launch.
  trace.cpu.push_back(Call(rank2, 5));
  trace.cpu.push_back(Call(rank2, -5, CpuEventCategory::kCpuOp));
  // An earlier driver call with rank 1's id 7 replaces index 14.
  trace.cpu.push_back(Call(rank1 + 7, -1, CpuEventCategory::kCudaDriver));
  LaunchIndex index(trace);
  EXPECT_EQ(index.Find(rank1), 0u);
  EXPECT_EQ(index.Find(rank2), 1u);
  EXPECT_EQ(index.Find(rank1 + 99), 198u);
  EXPECT_EQ(index.Find(rank2 + 50), 101u);
  EXPECT_EQ(index.Find(rank1 + 7), 202u);
  EXPECT_EQ(index.Find(rank1 + 100), LaunchIndex::kNone);
  EXPECT_EQ(index.Find(rank2 - 1), LaunchIndex::kNone);
  EXPECT_EQ(index.Find((uint64_t{3} << 40) + 1), LaunchIndex::kNone);
  EXPECT_EQ(index.Find(uint64_t{1} << 32), LaunchIndex::kNone);
  EXPECT_EQ(index.Find(kNoCorrelation), LaunchIndex::kNone);
}

// Every layout (one dense counter, one counter per high value, a high value
// whose ids are sparse, more high values than the per-range tables take)
// against the brute-force rule, on every id present and their neighbours.
TEST(LaunchIndex, AgreesWithBruteForceOnEveryLayout) {
  std::mt19937_64 rng(24);
  struct Layout {
    int highs;      // Distinct high values.
    uint64_t step;  // Spacing of ids within one high value.
  };
  for (Layout layout : {Layout{1, 1}, Layout{4, 1}, Layout{4, 3},
                        Layout{3, 100000}, Layout{70, 1}}) {
    Trace trace;
    std::vector<CorrelationId> ids;
    for (int h = 0; h < layout.highs; ++h) {
      const CorrelationId base =
          (static_cast<uint64_t>(h) << 36) + 1 + rng() % 1000;
      for (int i = 0; i < 300; ++i) {
        const CorrelationId id = base + layout.step * (rng() % 400);
        const auto category = rng() % 4 == 0 ? CpuEventCategory::kCpuOp
                                             : CpuEventCategory::kCudaRuntime;
        trace.cpu.push_back(
            Call(id, static_cast<int64_t>(rng() % 100000), category));
        if (rng() % 10 == 0) trace.cpu.push_back(Call(kNoCorrelation, 0));
        ids.push_back(id);
      }
    }
    LaunchIndex index(trace);
    for (CorrelationId id : ids) {
      for (CorrelationId q : {id - 1, id, id + 1}) {
        ASSERT_EQ(index.Find(q), Oracle(trace, q))
            << "highs " << layout.highs << " step " << layout.step << " id "
            << q;
      }
    }
  }
}

}  // namespace
}  // namespace bubblewatch
