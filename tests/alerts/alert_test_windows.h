// What the alert unit tests feed evaluators: rules from YAML, and windows
// with a chosen share of host-sync bubble.
#ifndef BUBBLEWATCH_TESTS_ALERTS_ALERT_TEST_WINDOWS_H_
#define BUBBLEWATCH_TESTS_ALERTS_ALERT_TEST_WINDOWS_H_

#include <cstdint>
#include <string>

#include "alerts/alert_rules.h"
#include "gtest/gtest.h"
#include "schemas/bubble_cause.h"
#include "schemas/window_summary.h"
#include "tests/alerts/alert_test_clock.h"

namespace bubblewatch::alert_test {

inline AlertRuleSet Rules(const std::string& yaml) {
  absl::StatusOr<AlertRuleSet> set = ParseAlertRules(yaml, "test.yaml");
  EXPECT_TRUE(set.ok()) << set.status();
  return set.ok() ? *set : AlertRuleSet{};
}

// Window `i` of `job`: 10 s of GPU time, `sync_share` of it host_sync bubble,
// the rest busy; the largest bubble follows kernel "conv" and is blamed on
// cudaStreamSynchronize.
inline WindowSummary Window(const std::string& job, int i, double sync_share) {
  WindowSummary w;
  w.job = job;
  w.window.start_ns = i * kWindowNs;
  w.window.end_ns = (i + 1) * kWindowNs;
  UtilizationStats& s = w.window.job;
  s.span_ns = kWindowNs;
  s.bubble_ns = static_cast<int64_t>(sync_share * kWindowNs);
  s.compute_ns = s.span_ns - s.bubble_ns;
  s.attribution[static_cast<int>(BubbleCause::kHostSync)] = s.bubble_ns;
  s.largest_bubble_ns = s.bubble_ns;
  s.largest_bubble_start_ns = w.window.start_ns + 1000;
  if (s.bubble_ns > 0) {
    BubbleReport b;
    b.start_ns = s.largest_bubble_start_ns;
    b.end_ns = b.start_ns + s.bubble_ns;
    b.before = KernelRef{.name = "conv", .start_ns = 0, .end_ns = b.start_ns};
    b.after =
        KernelRef{.name = "gemm", .start_ns = b.end_ns, .end_ns = b.end_ns + 5};
    b.cause = BubbleCause::kHostSync;
    b.blamed = "cudaStreamSynchronize";
    b.attribution[0] = s.bubble_ns;
    w.window.top_bubbles.push_back(b);
  }
  return w;
}

}  // namespace bubblewatch::alert_test

#endif  // BUBBLEWATCH_TESTS_ALERTS_ALERT_TEST_WINDOWS_H_
