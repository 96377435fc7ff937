// Helpers shared by the storage tests: a sample window with every field set.
#ifndef BUBBLEWATCH_TESTS_STORAGE_STORAGE_TEST_UTIL_H_
#define BUBBLEWATCH_TESTS_STORAGE_STORAGE_TEST_UTIL_H_

#include <cstdint>
#include <string>

#include "gtest/gtest.h"
#include "schemas/window_summary.h"
#include "tests/testing/temp_dir.h"

namespace bubblewatch::testing_util {

inline constexpr int64_t kWindowNs = 10'000'000'000;  // 10 s.

// A window of `job` starting at `start_ns` with every field non-default;
// `salt` varies the numbers so that two windows differ.
inline WindowSummary SampleWindow(const std::string& job, int64_t start_ns,
                                  int64_t salt = 1) {
  WindowSummary s;
  s.job = job;
  WindowAnalysis& w = s.window;
  w.start_ns = start_ns;
  w.end_ns = start_ns + kWindowNs;
  auto stats = [&](int64_t k) {
    UtilizationStats u;
    u.span_ns = 9'000'000'000 + k;
    u.compute_ns = 4'000'000'000 + k;
    u.bubble_ns = 5'000'000'000;
    u.largest_bubble_ns = 800'000'000 + k;
    u.largest_bubble_start_ns = start_ns + 1'000 + k;
    u.culprit_before_bubble =
        KernelRef{.name = "conv2d_fwd_" + std::to_string(k),
                  .start_ns = start_ns + 10,
                  .end_ns = start_ns + 1'000 + k,
                  .stream = 7};
    for (int i = 0; i < kNumBubbleCauses; ++i) {
      u.attribution[i] = (i + 1) * 1'000'000 + k;
    }
    return u;
  };
  w.job = stats(salt);
  for (int32_t d = 0; d < 2; ++d) {
    w.devices.push_back(DeviceWindow{
        .device = d, .stats = stats(salt * 10 + d), .kernels = 1000 + d});
  }
  BubbleReport b;
  b.device = 1;
  b.start_ns = start_ns + 1'000;
  b.end_ns = start_ns + 801'000 + salt;
  b.before = KernelRef{"conv2d_fwd", start_ns, start_ns + 1'000, 7};
  b.after = KernelRef{"relu_fwd", b.end_ns, b.end_ns + 5, 8};
  b.attribution[static_cast<int>(BubbleCause::kHostSync)] = 790'000;
  b.attribution[static_cast<int>(BubbleCause::kLaunchOverhead)] = 10'000 + salt;
  b.cause = BubbleCause::kHostSync;
  b.blamed = "cudaStreamSynchronize";
  w.top_bubbles.push_back(b);
  BubbleReport bare;  // No kernels around it, nothing blamed.
  bare.device = 0;
  bare.start_ns = start_ns + 5;
  bare.end_ns = start_ns + 6;
  bare.cause = BubbleCause::kUnattributed;
  bare.attribution[static_cast<int>(BubbleCause::kUnattributed)] = 1;
  w.top_bubbles.push_back(bare);
  s.gpu_events = 2000 + salt;
  s.cpu_events = 3000 + salt;
  s.late_events = 4 + salt;
  s.closed_by = WindowSummary::ClosedBy::kIdleTimeout;
  s.host_skew_ns = 180'000'000'000 + salt;
  return s;
}

// The shared TempDir (tests/testing/temp_dir.h) under the name storage tests
// have used; new code names bubblewatch::testing::TempDir.
using ::bubblewatch::testing::TempDir;

}  // namespace bubblewatch::testing_util

#endif  // BUBBLEWATCH_TESTS_STORAGE_STORAGE_TEST_UTIL_H_
