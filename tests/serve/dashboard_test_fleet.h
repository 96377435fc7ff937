// The store behind the dashboard's tests (tests/serve for the API it reads,
// tests/cli/dashboard_browser_test.cc for the pages): query_test::WriteFleet
// plus what the job and fleet pages show beyond it, with figures simple
// enough to check by hand and by pixel colour:
//   "steady": 2 devices, windows 370..399 (the last 5 min of the fleet),
//             device 0 9.96 s busy of 10 s, device 1 9.97 s: bubbles of 0.4 %
//             and 0.3 % (all host_sync but 1 ms launch_overhead each) that a
//             0..100 % axis draws ~1 px high;
//             kernel and blamed names far wider than a 1400 px page.
//   "wide":   16 devices, windows 370..399; device 3 is 1 s busy (10 %), the
//             others 9.5 s (95 %): a heat map with one dark row.
//   "stale":  windows 397..399, last seen kStaleFor before the store was
//             written.
//   "ranks":  kRanks ranks (one device each), windows 370..399, each with a
//             collective analysis (RankWindows): rank r busy (9 - r/2) s of
//             10 s, a comm wait of 3 s for each rank but the straggler, who
//             waits 0.5 s; the straggler is kStragglerA in windows 370..379,
//             none in 380..389 (every rank waits 1 s), kStragglerB in
//             390..399.
//   "observed": 1 device, windows 390..399 of one observation
//             [kObservedFrom, kObservedTo) (docs/semantics.md#observations):
//             window 390 observed from 2.5 s on (75 %), 391..398 whole,
//             399 up to 6 s (60 %, the job's tail); the device is busy 90 %
//             of each window's observed time.
//   alert state: the rule kAlertRule evaluated by the real AlertEvaluator on
//             the latest windows of beta (20 %: firing), gamma (60 %: clear)
//             and steady (99.6 %: clear); the other jobs have none.
#ifndef BUBBLEWATCH_TESTS_SERVE_DASHBOARD_TEST_FLEET_H_
#define BUBBLEWATCH_TESTS_SERVE_DASHBOARD_TEST_FLEET_H_

#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "alerts/alert_evaluator.h"
#include "alerts/alert_rules.h"
#include "analysis/window_accumulator.h"
#include "storage/window_store.h"
#include "tests/storage/query_test_windows.h"

namespace bubblewatch::dashboard_test {

using query_test::kSecond;
using query_test::kT0;
using query_test::kWindow;

inline constexpr int kWideDevices = 16;
inline constexpr int kWideSlowDevice = 3;
inline constexpr int kRanks = 4;
inline constexpr int kStragglerA = 2;
inline constexpr int kStragglerB = 1;
inline constexpr absl::Duration kStaleFor = absl::Hours(2);
inline constexpr char kAlertRule[] = R"(rules:
  - name: low-util
    kind: utilization_below
    threshold: 50%
    for: 1
    severity: critical
)";

// Names wider than the page: what real templated kernels and Python stacks
// look like.
inline std::string LongName(const std::string& head) {
  std::string name = head;
  while (name.size() < 220) name += "<cutlass::gemm::GemmShape<128, 256, 64>>";
  return name;
}

// Window `index` of `job`, one device per entry of `compute` (ns busy of the
// 10 s span): each device's bubble is 1 ms launch_overhead and the rest
// host_sync (all of it host_sync below 1 ms); the job figures are the sums;
// the top bubble is the largest device bubble.
inline WindowSummary DeviceWindows(const std::string& job, int64_t index,
                                   const std::vector<int64_t>& compute) {
  WindowSummary s;
  s.job = job;
  s.window.start_ns = kT0 + index * kWindow;
  s.window.end_ns = s.window.start_ns + kWindow;
  const int64_t ms = 1'000'000;
  int largest = 0;
  for (int d = 0; d < static_cast<int>(compute.size()); ++d) {
    UtilizationStats u;
    u.span_ns = kWindow;
    u.compute_ns = compute[d];
    u.bubble_ns = kWindow - compute[d];
    const int64_t launch = std::min(u.bubble_ns, ms);
    u.attribution[static_cast<int>(BubbleCause::kLaunchOverhead)] = launch;
    u.attribution[static_cast<int>(BubbleCause::kHostSync)] =
        u.bubble_ns - launch;
    u.largest_bubble_ns = u.bubble_ns;
    u.largest_bubble_start_ns = s.window.start_ns + compute[d];
    s.window.devices.push_back(
        DeviceWindow{.device = d, .stats = u, .kernels = 100});
    if (u.largest_bubble_ns >
        s.window.devices[largest].stats.largest_bubble_ns) {
      largest = d;
    }
    AddDeviceStats(u, s.window.job);
  }
  const UtilizationStats& top = s.window.devices[largest].stats;
  BubbleReport b;
  b.device = largest;
  b.start_ns = top.largest_bubble_start_ns;
  b.end_ns = s.window.end_ns;
  b.before = KernelRef{LongName("void cutlass::Kernel<"), s.window.start_ns,
                       b.start_ns, 7};
  b.after = KernelRef{LongName("void flash_fwd_kernel<"), b.end_ns,
                      b.end_ns + 1000, 7};
  b.attribution = top.attribution;
  b.cause = *DominantCause(top.attribution);
  b.blamed = LongName("aten::item / cudaStreamSynchronize in train.py:88 ");
  s.window.top_bubbles.push_back(b);
  s.window.job.culprit_before_bubble = *b.before;
  s.gpu_events = 100 * static_cast<int64_t>(compute.size());
  s.cpu_events = 200;
  return s;
}

// The straggler of window `index` of "ranks", or -1 for none.
inline int PlantedStraggler(int64_t index) {
  if (index >= 370 && index < 380) return kStragglerA;
  if (index >= 390 && index < 400) return kStragglerB;
  return -1;
}

// The rank the straggler of window `index` held up (its via), or -1.
inline int HeldUpRank(int64_t index) {
  const int straggler = PlantedStraggler(index);
  return straggler < 0 ? -1 : (straggler + 1) % kRanks;
}

// Window `index` of the multi-rank job "ranks" (see the top of this file):
// the device figures of DeviceWindows plus a collective analysis whose
// straggler, when there is one, caused every other rank's wait.
inline WindowSummary RankWindows(int64_t index) {
  std::vector<int64_t> compute;
  for (int r = 0; r < kRanks; ++r)
    compute.push_back(9 * kSecond - r * kSecond / 2);
  WindowSummary s = DeviceWindows("ranks", index, compute);
  const int straggler = PlantedStraggler(index);
  WindowCollectives c;
  c.kernels = 40 * kRanks;
  c.matched = 40;
  c.used = 40;
  int64_t caused = 0;
  for (int r = 0; r < kRanks; ++r) {
    RankWindow rank;
    rank.rank = r;
    rank.host = r < kRanks / 2 ? "host-a" : "host-b";
    rank.pid = 5000 + r;  // A process as Inspector logs name it.
    rank.device = r;
    rank.span_ns = kWindow;
    rank.compute_ns = compute[r];
    rank.comm_ns = 4 * kSecond;
    rank.comm_wait_ns = straggler < 0    ? 1 * kSecond
                        : r == straggler ? kSecond / 2
                                         : 3 * kSecond;
    rank.comm_exposed_ns = rank.comm_wait_ns;
    if (r != straggler) caused += rank.comm_wait_ns;
    c.ranks.push_back(rank);
  }
  if (straggler >= 0) {
    c.ranks[straggler].wait_caused_ns = caused;
    c.ranks[straggler].arrived_last = 40;
    Straggler st;
    st.rank = straggler;
    st.wait_caused_ns = caused;
    st.arrived_last = 40;
    st.causes[static_cast<int>(BubbleCause::kDataLoading)] = caused;
    // The root blame (docs/semantics.md#root-cause): the next rank's wait
    // passed through it, held up by the straggler.
    st.host = c.ranks[straggler].host.str();
    st.via.push_back(
        Straggler::Via{.rank = HeldUpRank(index), .wait_ns = 3 * kSecond});
    st.direct_wait_caused_ns = caused - 3 * kSecond;
    st.saved_ns = kSecond;
    c.stragglers.push_back(st);
  }
  // Each rank's timeline (docs/state.md#rank-timelines), its totals its
  // figures: 5 steps of compute, wait and a bubble (data_loading on the
  // straggler, host_sync elsewhere), from r ms into the window.
  for (const RankWindow& r : c.ranks) {
    RankTimeline& t = c.timelines.emplace_back();
    t.start_us = r.rank * 1000;
    const uint8_t bubble = static_cast<uint8_t>(
        BubbleState(r.rank == straggler ? BubbleCause::kDataLoading
                                        : BubbleCause::kHostSync));
    const uint32_t compute_us =
        static_cast<uint32_t>((r.compute_ns - r.comm_exposed_ns) / 5000);
    const uint32_t wait_us = static_cast<uint32_t>(r.comm_wait_ns / 5000);
    const uint32_t bubble_us =
        static_cast<uint32_t>((r.span_ns - r.compute_ns) / 5000);
    for (int step = 0; step < 5; ++step) {
      t.segments.push_back(
          {static_cast<uint8_t>(TimelineState::kCompute), compute_us});
      t.segments.push_back(
          {static_cast<uint8_t>(TimelineState::kWait), wait_us});
      t.segments.push_back({bubble, bubble_us});
    }
  }
  s.collectives = std::move(c);
  return s;
}

// The windows and the observation of "observed".
inline constexpr int64_t kObservedFirst = 390;
inline constexpr int64_t kObservedLast = 399;
inline constexpr int64_t kObservedFrom =
    kT0 + kObservedFirst * kWindow + 2'500'000'000;
inline constexpr int64_t kObservedTo =
    kT0 + kObservedLast * kWindow + 6'000'000'000;

// Window `index` of "observed": its observed time is its overlap with the
// observation, the device's span that time, 90 % of it busy (host_sync
// but 1 ms launch_overhead, as DeviceWindows).
inline WindowSummary ObservedWindow(int64_t index) {
  const int64_t start = kT0 + index * kWindow;
  const int64_t from = std::max(start, kObservedFrom);
  const int64_t to = std::min(start + kWindow, kObservedTo);
  const int64_t observed = to - from;
  WindowSummary s = DeviceWindows("observed", index, {observed / 10 * 9});
  UtilizationStats& u = s.window.devices[0].stats;
  u.span_ns = observed;
  u.bubble_ns = observed - u.compute_ns;
  const int64_t ms = 1'000'000;
  u.attribution = {};
  u.attribution[static_cast<int>(BubbleCause::kLaunchOverhead)] = ms;
  u.attribution[static_cast<int>(BubbleCause::kHostSync)] = u.bubble_ns - ms;
  u.largest_bubble_ns = u.bubble_ns;
  u.largest_bubble_start_ns = from + u.compute_ns;
  s.window.job = UtilizationStats{};
  AddDeviceStats(u, s.window.job);
  s.window.job.culprit_before_bubble = s.window.top_bubbles[0].before;
  BubbleReport& b = s.window.top_bubbles[0];
  b.start_ns = u.largest_bubble_start_ns;
  b.end_ns = to;
  b.attribution = u.attribution;
  s.observed_ns = observed;
  return s;
}

inline absl::Status WriteDashboardFleet(WindowStore& store) {
  if (absl::Status s = query_test::WriteFleet(store); !s.ok()) return s;
  StoreBatch batch;
  const absl::Time now = absl::Now();
  auto job = [&](const std::string& name, int64_t last, absl::Time seen) {
    batch.jobs.push_back(JobUpdate{.job = name,
                                   .last_event_ns = kT0 + (last + 1) * kWindow,
                                   .last_seen_wall = seen});
  };
  for (int64_t i = 370; i <= 399; ++i) {
    batch.windows.push_back(
        DeviceWindows("steady", i, {9'960'000'000, 9'970'000'000}));
    std::vector<int64_t> wide(kWideDevices, 9'500'000'000);
    wide[kWideSlowDevice] = 1 * kSecond;
    batch.windows.push_back(DeviceWindows("wide", i, wide));
    batch.windows.push_back(RankWindows(i));
  }
  for (int64_t i = 397; i <= 399; ++i) {
    batch.windows.push_back(query_test::MakeWindow("stale", i, 5 * kSecond));
  }
  for (int64_t i = kObservedFirst; i <= kObservedLast; ++i) {
    batch.windows.push_back(ObservedWindow(i));
  }
  job("observed", kObservedLast, now);
  job("steady", 399, now);
  job("wide", 399, now);
  job("ranks", 399, now);
  job("stale", 399, now - kStaleFor);

  absl::StatusOr<AlertRuleSet> rules = ParseAlertRules(kAlertRule, "test");
  if (!rules.ok()) return rules.status();
  AlertEvaluator alerts(*std::move(rules), {});
  alerts.OnWindow(query_test::MakeWindow("beta", 29, 2 * kSecond), now);
  alerts.OnWindow(query_test::MakeWindow("gamma", 399, 6 * kSecond), now);
  alerts.OnWindow(batch.windows[3 * 29], now);  // steady, window 399.
  batch.alert_states = alerts.TakeStateUpdates();
  return store.Commit(batch);
}

inline absl::Status WriteDashboardFleetStore(const std::string& path) {
  absl::StatusOr<std::unique_ptr<WindowStore>> store =
      OpenRocksDbWindowStore(path);
  if (!store.ok()) return store.status();
  return WriteDashboardFleet(**store);
}

}  // namespace bubblewatch::dashboard_test

#endif  // BUBBLEWATCH_TESTS_SERVE_DASHBOARD_TEST_FLEET_H_
