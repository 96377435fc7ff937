#include "analysis/device_timeline.h"

#include <algorithm>
#include <random>
#include <vector>

#include "gtest/gtest.h"

namespace bubblewatch {
namespace {

bool ByStart(const KernelSlot& a, const KernelSlot& b) {
  return a.start_ns < b.start_ns;
}

// `runs` sorted runs of random lengths, with many equal starts; index is the
// position in the input, so a stable order is visible.
std::vector<KernelSlot> Runs(std::mt19937_64& rng, int runs) {
  std::vector<KernelSlot> out;
  std::uniform_int_distribution<int64_t> step(0, 3), length(0, 40);
  for (int r = 0; r < runs; ++r) {
    int64_t t = 0;
    for (int64_t i = length(rng); i > 0; --i) {
      t += step(rng);
      out.push_back({t, t + 1 + step(rng), static_cast<uint32_t>(out.size())});
    }
  }
  return out;
}

TEST(SortKernelsByStart, MergesRunsStablyWithAReusedBuffer) {
  std::mt19937_64 rng(5);
  std::vector<KernelSlot> scratch;
  for (int round = 0; round < 300; ++round) {
    std::vector<KernelSlot> kernels = Runs(rng, 1 + round % 9);
    std::vector<KernelSlot> want = kernels;
    std::stable_sort(want.begin(), want.end(), ByStart);
    // Half with the shared buffer (left over from other sizes), half with a
    // local one.
    SortKernelsByStart(kernels, round % 2 == 0 ? &scratch : nullptr);
    ASSERT_EQ(kernels.size(), want.size());
    for (size_t i = 0; i < want.size(); ++i) {
      EXPECT_EQ(kernels[i].start_ns, want[i].start_ns) << "round " << round;
      EXPECT_EQ(kernels[i].end_ns, want[i].end_ns) << "round " << round;
      EXPECT_EQ(kernels[i].index, want[i].index) << "round " << round;
    }
  }
}

TEST(SortKernelsByStart, SortsManyRunsOutright) {
  std::mt19937_64 rng(6);
  std::vector<KernelSlot> kernels = Runs(rng, 200);
  SortKernelsByStart(kernels);
  EXPECT_TRUE(std::is_sorted(kernels.begin(), kernels.end(), ByStart));
}

}  // namespace
}  // namespace bubblewatch
