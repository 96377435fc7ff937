// Hand-written windows with round numbers for the query tests (storage/
// window_queries, `bubblewatch query`, the HTTP API, the dashboard), and a
// small fleet store built from them, so expected figures can be computed by
// hand.
#ifndef BUBBLEWATCH_TESTS_STORAGE_QUERY_TEST_WINDOWS_H_
#define BUBBLEWATCH_TESTS_STORAGE_QUERY_TEST_WINDOWS_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "flatbuffers/flatbuffers.h"
#include "schemas/state_record.h"
#include "schemas/window_summary.h"
#include "storage/window_store.h"

namespace bubblewatch::query_test {

inline constexpr int64_t kSecond = 1'000'000'000;
inline constexpr int64_t kWindow = 10 * kSecond;
// 2025-11-29T10:00:00Z, a multiple of the window.
inline constexpr int64_t kT0 = 1'764'410'400 * kSecond;

// One 10 s window of `job` (one device, span = the whole window) with
// `compute` ns busy; the bubble is split between `cause` (all but 1 ms) and
// launch_overhead (1 ms), and its largest bubble is one top bubble after
// "gemm_<index>" blamed on "cudaStreamSynchronize".
inline WindowSummary MakeWindow(const std::string& job, int64_t index,
                                int64_t compute,
                                BubbleCause cause = BubbleCause::kHostSync) {
  WindowSummary s;
  s.job = job;
  s.window.start_ns = kT0 + index * kWindow;
  s.window.end_ns = s.window.start_ns + kWindow;
  UtilizationStats& u = s.window.job;
  u.span_ns = kWindow;
  u.compute_ns = compute;
  u.bubble_ns = kWindow - compute;
  const int64_t ms = 1'000'000;
  if (u.bubble_ns >= ms) {
    u.attribution[static_cast<int>(BubbleCause::kLaunchOverhead)] += ms;
    u.attribution[static_cast<int>(cause)] += u.bubble_ns - ms;
  } else {
    u.attribution[static_cast<int>(cause)] += u.bubble_ns;
  }
  u.largest_bubble_ns = u.bubble_ns;
  u.largest_bubble_start_ns = s.window.start_ns + compute;
  const std::string before = "gemm_" + std::to_string(index);
  u.culprit_before_bubble =
      KernelRef{before, s.window.start_ns, u.largest_bubble_start_ns, 7};
  s.window.devices.push_back(
      DeviceWindow{.device = 0, .stats = u, .kernels = 5});
  if (u.bubble_ns > 0) {
    BubbleReport b;
    b.device = 0;
    b.start_ns = u.largest_bubble_start_ns;
    b.end_ns = s.window.end_ns;
    b.before = u.culprit_before_bubble;
    b.after = KernelRef{"relu", b.end_ns, b.end_ns + 1000, 7};
    b.attribution = u.attribution;
    b.cause = *DominantCause(u.attribution);
    b.blamed = "cudaStreamSynchronize";
    s.window.top_bubbles.push_back(b);
  }
  s.gpu_events = 10;
  s.cpu_events = 20;
  return s;
}

// Utilization of window `i` of job "alpha": (i % 10 + 1) / 10 of its span.
inline int64_t AlphaCompute(int64_t i) { return (i % 10 + 1) * kSecond; }

// The fleet of the CLI/HTTP tests. Latest windows (index 399 unless said):
//   alpha:  400 windows, compute AlphaCompute(i), host_sync; latest 100 %.
//   beta:   30 windows (0..29), 2 s compute, launch_overhead dominant.
//   gamma:  20 windows (380..399), 6 s compute, data_loading.
//   "odd/job \"x\"": 3 windows (397..399), 9 s compute, allocator — a
//           name that needs escaping in URLs, JSON and metric labels.
inline absl::Status WriteFleet(WindowStore& store) {
  StoreBatch batch;
  auto add = [&](const std::string& job, int64_t first, int64_t last,
                 auto compute, BubbleCause cause) {
    for (int64_t i = first; i <= last; ++i) {
      batch.windows.push_back(MakeWindow(job, i, compute(i), cause));
    }
    batch.jobs.push_back(JobUpdate{.job = job,
                                   .last_event_ns = kT0 + (last + 1) * kWindow,
                                   .last_seen_wall = absl::Now()});
  };
  add("alpha", 0, 399, AlphaCompute, BubbleCause::kHostSync);
  add(
      "beta", 0, 29, [](int64_t) { return 2 * kSecond; },
      BubbleCause::kLaunchOverhead);
  add(
      "gamma", 380, 399, [](int64_t) { return 6 * kSecond; },
      BubbleCause::kDataLoading);
  add(
      "odd/job \"x\"", 397, 399, [](int64_t) { return 9 * kSecond; },
      BubbleCause::kAllocator);
  return store.Commit(batch);
}

// Creates a store at `path` holding WriteFleet's windows.
inline absl::Status WriteFleetStore(const std::string& path) {
  absl::StatusOr<std::unique_ptr<WindowStore>> store =
      OpenRocksDbWindowStore(path);
  if (!store.ok()) return store.status();
  return WriteFleet(**store);
}

// The fleet of WriteFleet with gamma ended by its end markers: its stored
// state (a JobStateRecord) says so (docs/semantics.md#job-lifecycle), and
// that its producers sent bad input: 1 batch after an end marker, 2
// overlapping observations, 1 going backwards
// (docs/semantics.md#observations).
inline absl::Status WriteFleetStoreWithGammaEnded(const std::string& path) {
  absl::StatusOr<std::unique_ptr<WindowStore>> store =
      OpenRocksDbWindowStore(path);
  if (!store.ok()) return store.status();
  if (absl::Status s = WriteFleet(**store); !s.ok()) return s;
  flatbuffers::FlatBufferBuilder builder;
  fb::JobStateRecordBuilder record(builder);
  record.add_ended(true);
  record.add_batches_after_end(1);
  record.add_overlapping_observations(2);
  record.add_observations_backwards(1);
  auto body = record.Finish();
  StoreBatch batch;
  batch.jobs.push_back(
      JobUpdate{.job = "gamma",
                .state = FinishStateRecord(
                    builder, fb::StateBody::JobStateRecord, body.Union())});
  return (*store)->Commit(batch);
}

}  // namespace bubblewatch::query_test

#endif  // BUBBLEWATCH_TESTS_STORAGE_QUERY_TEST_WINDOWS_H_
