#include "storage/window_store.h"

#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "rocksdb/db.h"
#include "storage/rocksdb_window_store.h"
#include "tests/storage/storage_test_util.h"
#include "tests/testing/units.h"

namespace bubblewatch {
namespace {

using ::bubblewatch::testing::TempDir;
using ::bubblewatch::testing_util::kWindowNs;
using ::bubblewatch::testing_util::SampleWindow;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

using testing::kMaxNs;
using testing::kMinNs;

std::unique_ptr<WindowStore> OpenOrDie(const std::string& path) {
  absl::StatusOr<std::unique_ptr<WindowStore>> store =
      OpenRocksDbWindowStore(path);
  EXPECT_TRUE(store.ok()) << store.status();
  return store.ok() ? std::move(store).value() : nullptr;
}

// The windows of `job` as their start times.
std::vector<int64_t> Starts(const WindowStoreReader& store,
                            const std::string& job,
                            absl::Time begin = absl::InfinitePast(),
                            absl::Time end = absl::InfiniteFuture()) {
  absl::StatusOr<std::vector<WindowSummary>> windows =
      store.Scan(job, begin, end);
  EXPECT_TRUE(windows.ok()) << windows.status();
  std::vector<int64_t> out;
  if (!windows.ok()) return out;
  for (const WindowSummary& w : *windows) {
    EXPECT_EQ(w.job, job);
    out.push_back(w.window.start_ns);
  }
  // ScanEncoded returns the same windows, undecoded and 8-byte aligned.
  absl::StatusOr<EncodedWindows> encoded = store.ScanEncoded(job, begin, end);
  EXPECT_TRUE(encoded.ok()) << encoded.status();
  if (!encoded.ok()) return out;
  EXPECT_EQ(encoded->size(), windows->size());
  for (size_t i = 0; i < encoded->size() && i < windows->size(); ++i) {
    EXPECT_EQ(encoded->start_ns(i), (*windows)[i].window.start_ns);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(encoded->bytes(i).data()) % 8, 0u);
    absl::StatusOr<WindowSummary> w = DecodeWindowSummary(encoded->bytes(i));
    EXPECT_TRUE(w.ok()) << w.status();
    std::string diff;
    if (w.ok()) {
      EXPECT_TRUE(SameWindow(*w, (*windows)[i], &diff)) << diff;
    }
  }
  return out;
}

absl::Time Ns(int64_t ns) { return absl::FromUnixNanos(ns); }

StoreBatch WindowsBatch(const std::string& job, std::vector<int64_t> starts) {
  StoreBatch batch;
  for (int64_t s : starts) batch.windows.push_back(SampleWindow(job, s));
  return batch;
}

TEST(WindowStore, InvalidOptionsAreAllReportedAndNothingIsCreated) {
  TempDir dir;
  WindowStoreOptions options;
  EXPECT_TRUE(options.Validate().ok());
  options.block_cache_bytes = 0;
  options.write_buffer_bytes = -1;
  options.max_write_buffers = 1;
  absl::StatusOr<std::unique_ptr<WindowStore>> store =
      OpenRocksDbWindowStore(dir.Sub("store"), options);
  EXPECT_EQ(store.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(store.status().message(),
            "invalid WindowStoreOptions: block_cache_bytes must be >= 1, not "
            "0; write_buffer_bytes must be >= 1, not -1; max_write_buffers "
            "must be >= 2, not 1");
  EXPECT_FALSE(std::filesystem::exists(dir.Sub("store") + "/CURRENT"));
}

TEST(WindowStore, ScanReturnsHalfOpenRangeInStartOrder) {
  TempDir dir;
  auto store = OpenOrDie(dir.path());
  // Committed out of order, across two batches.
  ASSERT_TRUE(store->Commit(WindowsBatch("job", {30, 10, 50})).ok());
  ASSERT_TRUE(store->Commit(WindowsBatch("job", {20, 40})).ok());

  EXPECT_THAT(Starts(*store, "job"), ElementsAre(10, 20, 30, 40, 50));
  EXPECT_THAT(Starts(*store, "job", Ns(20), Ns(40)), ElementsAre(20, 30));
  EXPECT_THAT(Starts(*store, "job", Ns(19), Ns(41)), ElementsAre(20, 30, 40));
  EXPECT_THAT(Starts(*store, "job", Ns(41), Ns(41)), ElementsAre());
  EXPECT_THAT(Starts(*store, "job", Ns(50), Ns(10)), ElementsAre());
  // Sub-nanosecond bounds round the right way.
  EXPECT_THAT(Starts(*store, "job", Ns(19) + absl::Nanoseconds(0.5),
                     Ns(30) + absl::Nanoseconds(0.5)),
              ElementsAre(20, 30));
  EXPECT_THAT(Starts(*store, "unknown"), ElementsAre());
}

TEST(WindowStore, ScanHandlesNegativeAndExtremeTimes) {
  TempDir dir;
  auto store = OpenOrDie(dir.path());
  ASSERT_TRUE(store
                  ->Commit(WindowsBatch("job", {kMaxNs - kWindowNs, -kWindowNs,
                                                kMinNs, 0, kWindowNs}))
                  .ok());
  EXPECT_THAT(
      Starts(*store, "job"),
      ElementsAre(kMinNs, -kWindowNs, 0, kWindowNs, kMaxNs - kWindowNs));
  EXPECT_THAT(Starts(*store, "job", absl::InfinitePast(), Ns(0)),
              ElementsAre(kMinNs, -kWindowNs));
  EXPECT_THAT(Starts(*store, "job", Ns(-kWindowNs), Ns(kWindowNs)),
              ElementsAre(-kWindowNs, 0));
  EXPECT_THAT(Starts(*store, "job", Ns(1), absl::InfiniteFuture()),
              ElementsAre(kWindowNs, kMaxNs - kWindowNs));
  // Bounds beyond the int64 range.
  EXPECT_THAT(Starts(*store, "job", Ns(kMaxNs) + absl::Hours(1),
                     absl::InfiniteFuture()),
              ElementsAre());
  EXPECT_THAT(
      Starts(*store, "job", Ns(kMinNs) - absl::Hours(1), Ns(kMinNs + 1)),
      ElementsAre(kMinNs));
}

TEST(WindowStore, JobsThatArePrefixesOfEachOtherStayApart) {
  TempDir dir;
  auto store = OpenOrDie(dir.path());
  const int64_t kLast = kMaxNs - kWindowNs;  // end_ns must not overflow.
  StoreBatch batch = WindowsBatch("job1", {kMinNs, 0, kLast});
  for (int64_t s : {kMinNs, int64_t{5}, kLast}) {
    batch.windows.push_back(SampleWindow("job10", s));
    batch.windows.push_back(SampleWindow("job", s));
    batch.windows.push_back(SampleWindow("job1\x01", s));
  }
  ASSERT_TRUE(store->Commit(batch).ok());
  EXPECT_THAT(Starts(*store, "job1"), ElementsAre(kMinNs, 0, kLast));
  EXPECT_THAT(Starts(*store, "job10"), ElementsAre(kMinNs, 5, kLast));
  EXPECT_THAT(Starts(*store, "job"), ElementsAre(kMinNs, 5, kLast));
  absl::StatusOr<std::optional<WindowSummary>> latest = store->Latest("job1");
  ASSERT_TRUE(latest.ok() && latest->has_value());
  EXPECT_EQ((*latest)->job, "job1");
  EXPECT_EQ((*latest)->window.start_ns, kLast);
  absl::StatusOr<std::optional<JobInfo>> info = store->Job("job1");
  ASSERT_TRUE(info.ok() && info->has_value());
  EXPECT_EQ((*info)->window_count, 3);
}

TEST(WindowStore, UpsertReplacesAndCountsOnce) {
  TempDir dir;
  auto store = OpenOrDie(dir.path());
  ASSERT_TRUE(store->Commit(WindowsBatch("job", {0, 10, 20})).ok());
  StoreBatch replay;
  replay.windows.push_back(SampleWindow("job", 10, /*salt=*/7));
  replay.windows.push_back(SampleWindow("job", 10, /*salt=*/8));  // Last wins.
  replay.windows.push_back(SampleWindow("job", 5, /*salt=*/9));   // New, old.
  ASSERT_TRUE(store->Commit(replay).ok());

  absl::StatusOr<std::vector<WindowSummary>> windows =
      store->Scan("job", Ns(10), Ns(11));
  ASSERT_TRUE(windows.ok());
  ASSERT_EQ(windows->size(), 1u);
  std::string diff;
  EXPECT_TRUE(SameWindow((*windows)[0], SampleWindow("job", 10, 8), &diff))
      << diff;
  EXPECT_THAT(Starts(*store, "job"), ElementsAre(0, 5, 10, 20));
  absl::StatusOr<std::optional<JobInfo>> info = store->Job("job");
  ASSERT_TRUE(info.ok() && info->has_value());
  EXPECT_EQ((*info)->window_count, 4);
  EXPECT_EQ((*info)->latest_window_start_ns, 20);
}

// A tombstone of the windows topic, as serve's materializer commits it.
TEST(WindowStore, DeletesKeepCountLatestAndNewestCopyRight) {
  TempDir dir;
  auto store = OpenOrDie(dir.path());
  ASSERT_TRUE(store->Commit(WindowsBatch("job", {0, 10, 20, 30})).ok());
  ASSERT_TRUE(store->Commit(WindowsBatch("other", {0})).ok());
  auto info = [&](const std::string& job) {
    absl::StatusOr<std::optional<JobInfo>> i = store->Job(job);
    EXPECT_TRUE(i.ok() && i->has_value());
    return i.ok() && i->has_value() ? **i : JobInfo{};
  };
  auto latest_starts = [&] {
    std::vector<std::pair<std::string, int64_t>> out;
    absl::StatusOr<std::vector<WindowSummary>> all = store->LatestOfEveryJob();
    EXPECT_TRUE(all.ok()) << all.status();
    for (const WindowSummary& w : *all)
      out.push_back({w.job, w.window.start_ns});
    return out;
  };

  // The newest and a middle one go, a missing one is no error; an upsert
  // of an older window in the same batch becomes the newest's neighbour.
  StoreBatch b;
  b.window_deletes = {{.job = "job", .start_ns = 30},
                      {.job = "job", .start_ns = 10},
                      {.job = "job", .start_ns = 99},
                      {.job = "job", .start_ns = 10}};
  b.windows.push_back(SampleWindow("job", 15, /*salt=*/5));
  ASSERT_TRUE(store->Commit(b).ok());
  EXPECT_THAT(Starts(*store, "job"), ElementsAre(0, 15, 20));
  EXPECT_EQ(info("job").window_count, 3);
  EXPECT_EQ(info("job").latest_window_start_ns, 20);
  absl::StatusOr<std::optional<WindowSummary>> newest = store->Latest("job");
  ASSERT_TRUE(newest.ok() && newest->has_value());
  std::string diff;
  EXPECT_TRUE(SameWindow(**newest, SampleWindow("job", 20), &diff)) << diff;
  EXPECT_THAT(latest_starts(),
              ElementsAre(std::pair<std::string, int64_t>{"job", 20},
                          std::pair<std::string, int64_t>{"other", 0}));

  // The newest is deleted and the next newest is this batch's upsert.
  StoreBatch c;
  c.window_deletes = {{.job = "job", .start_ns = 20}};
  c.windows.push_back(SampleWindow("job", 15, /*salt=*/6));
  ASSERT_TRUE(store->Commit(c).ok());
  EXPECT_EQ(info("job").latest_window_start_ns, 15);
  EXPECT_EQ(info("job").window_count, 2);
  absl::StatusOr<std::vector<WindowSummary>> all = store->LatestOfEveryJob();
  ASSERT_TRUE(all.ok());
  ASSERT_EQ(all->size(), 2u);
  EXPECT_TRUE(SameWindow((*all)[0], SampleWindow("job", 15, 6), &diff)) << diff;

  // Every window gone: the job stays known, without windows.
  StoreBatch d;
  d.window_deletes = {{.job = "job", .start_ns = 0},
                      {.job = "job", .start_ns = 15}};
  ASSERT_TRUE(store->Commit(d).ok());
  EXPECT_THAT(Starts(*store, "job"), ElementsAre());
  EXPECT_EQ(info("job").window_count, 0);
  EXPECT_THAT(latest_starts(),
              ElementsAre(std::pair<std::string, int64_t>{"other", 0}));
  // And it comes back as any new job would.
  ASSERT_TRUE(store->Commit(WindowsBatch("job", {40})).ok());
  EXPECT_EQ(info("job").window_count, 1);
  EXPECT_EQ(info("job").latest_window_start_ns, 40);

  // Written and deleted in one batch: refused, nothing written.
  StoreBatch both;
  both.windows.push_back(SampleWindow("job", 50));
  both.window_deletes = {{.job = "job", .start_ns = 50}};
  EXPECT_EQ(store->Commit(both).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(Starts(*store, "job"), ElementsAre(40));
}

TEST(WindowStore, CommittedBatchIsWhollyVisibleAfterReopen) {
  TempDir dir;
  StoreBatch batch = WindowsBatch("job-a", {0, kWindowNs});
  batch.windows.push_back(SampleWindow("job-b", 0));
  batch.jobs.push_back(JobUpdate{.job = "job-a",
                                 .last_event_ns = 2 * kWindowNs,
                                 .last_seen_wall = absl::FromUnixSeconds(1000),
                                 .state = "state-a"});
  batch.progress.push_back(PartitionProgress{.topic = "bubblewatch.events",
                                             .partition = 3,
                                             .resume_offset = 100,
                                             .committed_position = 250,
                                             .state = "jobs-of-3"});
  {
    auto store = OpenOrDie(dir.path());
    ASSERT_TRUE(store->Commit(batch).ok());
  }
  auto store = OpenOrDie(dir.path());
  EXPECT_THAT(Starts(*store, "job-a"), ElementsAre(0, kWindowNs));
  EXPECT_THAT(Starts(*store, "job-b"), ElementsAre(0));
  absl::StatusOr<std::optional<std::string>> state = store->JobState("job-a");
  ASSERT_TRUE(state.ok());
  EXPECT_EQ(*state, "state-a");
  absl::StatusOr<std::optional<PartitionProgress>> progress =
      store->Progress("bubblewatch.events", 3);
  ASSERT_TRUE(progress.ok() && progress->has_value());
  EXPECT_EQ((*progress)->resume_offset, 100);
  EXPECT_EQ((*progress)->committed_position, 250);
  EXPECT_EQ((*progress)->topic, "bubblewatch.events");
  EXPECT_EQ((*progress)->partition, 3);
  EXPECT_EQ((*progress)->state, "jobs-of-3");
}

TEST(WindowStore, ProgressAndStateAreReplacedAndPersist) {
  TempDir dir;
  {
    auto store = OpenOrDie(dir.path());
    StoreBatch b1;
    b1.progress = {{"t", 0, 10, 20}, {"t", 1, 5, 6}};
    b1.jobs.push_back(JobUpdate{.job = "j", .state = std::string("v1\0x", 4)});
    ASSERT_TRUE(store->Commit(b1).ok());
    StoreBatch b2;
    b2.progress = {{"t", 0, 15, 30}};
    b2.jobs.push_back(JobUpdate{.job = "j"});  // State kept.
    ASSERT_TRUE(store->Commit(b2).ok());
  }
  auto store = OpenOrDie(dir.path());
  auto p0 = store->Progress("t", 0);
  auto p1 = store->Progress("t", 1);
  auto p2 = store->Progress("t", 2);
  ASSERT_TRUE(p0.ok() && p0->has_value() && p1.ok() && p1->has_value());
  EXPECT_EQ((*p0)->resume_offset, 15);
  EXPECT_EQ((*p0)->committed_position, 30);
  EXPECT_EQ((*p1)->resume_offset, 5);
  ASSERT_TRUE(p2.ok());
  EXPECT_FALSE(p2->has_value());
  auto state = store->JobState("j");
  ASSERT_TRUE(state.ok());
  EXPECT_EQ(*state, std::string("v1\0x", 4));
  auto none = store->JobState("nobody");
  ASSERT_TRUE(none.ok());
  EXPECT_FALSE(none->has_value());
}

TEST(WindowStore, JobTimesOnlyMoveForward) {
  TempDir dir;
  auto store = OpenOrDie(dir.path());
  StoreBatch b;
  b.jobs.push_back(JobUpdate{.job = "j",
                             .last_event_ns = 500,
                             .last_seen_wall = absl::FromUnixSeconds(50)});
  ASSERT_TRUE(store->Commit(b).ok());
  b.jobs[0].last_event_ns = 400;  // A replay reports older times.
  b.jobs[0].last_seen_wall = absl::FromUnixSeconds(40);
  ASSERT_TRUE(store->Commit(b).ok());
  auto info = store->Job("j");
  ASSERT_TRUE(info.ok() && info->has_value());
  EXPECT_EQ((*info)->last_event_ns, 500);
  EXPECT_EQ((*info)->last_seen_wall, absl::FromUnixSeconds(50));
  EXPECT_EQ((*info)->window_count, 0);
}

// Event times before the epoch are valid: a job whose newest event lies at
// -4.6e18 ns shows that, not 0 (0 stood for "none" once), and a job that
// reported no event shows none.
TEST(WindowStore, JobTimesBeforeTheEpochAreKept) {
  TempDir dir;
  auto store = OpenOrDie(dir.path());
  constexpr int64_t kLongAgo = -4'600'000'000'000'000'000;
  StoreBatch b;
  b.jobs.push_back(JobUpdate{.job = "past", .last_event_ns = kLongAgo});
  b.jobs.push_back(JobUpdate{.job = "silent"});
  ASSERT_TRUE(store->Commit(b).ok());
  b.jobs = {JobUpdate{.job = "past", .last_event_ns = kLongAgo - 10}};
  ASSERT_TRUE(store->Commit(b).ok());
  auto past = store->Job("past");
  ASSERT_TRUE(past.ok() && past->has_value());
  EXPECT_EQ((*past)->last_event_ns, kLongAgo);
  auto silent = store->Job("silent");
  ASSERT_TRUE(silent.ok() && silent->has_value());
  EXPECT_EQ((*silent)->last_event_ns, std::nullopt);
  auto jobs = store->ListJobs();
  ASSERT_TRUE(jobs.ok());
  ASSERT_EQ(jobs->size(), 2u);
  EXPECT_EQ((*jobs)[0].last_event_ns, kLongAgo);
}

TEST(WindowStore, InvalidBatchWritesNothing) {
  TempDir dir;
  auto store = OpenOrDie(dir.path());
  StoreBatch bad = WindowsBatch("good", {0});
  bad.progress.push_back({"t", 0, 1, 2});
  bad.windows.push_back(SampleWindow(std::string("a\0b", 3), 0));
  absl::Status status = store->Commit(bad);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("'\\0'"));

  StoreBatch backwards = WindowsBatch("good", {0});
  backwards.windows[0].window.end_ns = -1;
  EXPECT_EQ(store->Commit(backwards).code(),
            absl::StatusCode::kInvalidArgument);
  StoreBatch no_topic;
  no_topic.progress.push_back({"", 0, 1, 2});
  EXPECT_EQ(store->Commit(no_topic).code(), absl::StatusCode::kInvalidArgument);

  EXPECT_THAT(Starts(*store, "good"), ElementsAre());
  auto progress = store->Progress("t", 0);
  ASSERT_TRUE(progress.ok());
  EXPECT_FALSE(progress->has_value());
  EXPECT_TRUE(store->Commit(StoreBatch{}).ok());
}

TEST(WindowStore, RetentionDeletesOnlyWindowsOlderThanEachJobsNewest) {
  TempDir dir;
  auto store = OpenOrDie(dir.path());
  // "old": 0..90 s, newest 90 s. "new": 1000..1090 s. "gap": 0 and 500 s.
  StoreBatch batch;
  for (int i = 0; i < 10; ++i) {
    batch.windows.push_back(SampleWindow("old", i * kWindowNs));
    batch.windows.push_back(SampleWindow("new", (100 + i) * kWindowNs));
  }
  batch.windows.push_back(SampleWindow("gap", 0));
  batch.windows.push_back(SampleWindow("gap", 50 * kWindowNs));
  ASSERT_TRUE(store->Commit(batch).ok());

  // Keep starts > newest - 30 s: the newest 3 windows of each run.
  absl::StatusOr<RetentionStats> stats =
      store->ApplyRetention(absl::Seconds(30));
  ASSERT_TRUE(stats.ok()) << stats.status();
  EXPECT_EQ(stats->jobs_trimmed, 3);
  EXPECT_EQ(stats->windows_deleted, 7 + 7 + 1);
  EXPECT_THAT(Starts(*store, "old"),
              ElementsAre(7 * kWindowNs, 8 * kWindowNs, 9 * kWindowNs));
  EXPECT_THAT(Starts(*store, "new"),
              ElementsAre(107 * kWindowNs, 108 * kWindowNs, 109 * kWindowNs));
  EXPECT_THAT(Starts(*store, "gap"), ElementsAre(50 * kWindowNs));

  auto jobs = store->ListJobs();
  ASSERT_TRUE(jobs.ok());
  ASSERT_EQ(jobs->size(), 3u);
  EXPECT_EQ((*jobs)[0].job, "gap");
  EXPECT_EQ((*jobs)[0].window_count, 1);
  EXPECT_EQ((*jobs)[1].window_count, 3);
  EXPECT_EQ((*jobs)[2].window_count, 3);

  // A second pass has nothing to do; new windows are counted on top.
  stats = store->ApplyRetention(absl::Seconds(30));
  ASSERT_TRUE(stats.ok());
  EXPECT_EQ(stats->windows_deleted, 0);
  ASSERT_TRUE(store->Commit(WindowsBatch("old", {10 * kWindowNs})).ok());
  auto info = store->Job("old");
  ASSERT_TRUE(info.ok() && info->has_value());
  EXPECT_EQ((*info)->window_count, 4);

  // A replayed window older than everything kept is deleted again.
  ASSERT_TRUE(store->Commit(WindowsBatch("old", {2 * kWindowNs})).ok());
  EXPECT_THAT(Starts(*store, "old"),
              ElementsAre(2 * kWindowNs, 7 * kWindowNs, 8 * kWindowNs,
                          9 * kWindowNs, 10 * kWindowNs));
  stats = store->ApplyRetention(absl::Seconds(30));
  ASSERT_TRUE(stats.ok());
  EXPECT_EQ(stats->windows_deleted, 2);  // 2 and 7 (newest is now 10).
  EXPECT_THAT(Starts(*store, "old"),
              ElementsAre(8 * kWindowNs, 9 * kWindowNs, 10 * kWindowNs));
  info = store->Job("old");
  ASSERT_TRUE(info.ok() && info->has_value());
  EXPECT_EQ((*info)->window_count, 3);

  EXPECT_EQ(store->ApplyRetention(absl::ZeroDuration()).status().code(),
            absl::StatusCode::kInvalidArgument);
  stats = store->ApplyRetention(absl::InfiniteDuration());
  ASSERT_TRUE(stats.ok());
  EXPECT_EQ(stats->windows_deleted, 0);
}

TEST(WindowStore, LatestOfEveryJobAndListJobs) {
  TempDir dir;
  auto store = OpenOrDie(dir.path());
  StoreBatch batch = WindowsBatch("b", {0, kWindowNs, 2 * kWindowNs});
  batch.windows.push_back(SampleWindow("a", -kWindowNs));
  batch.jobs.push_back(JobUpdate{.job = "a",
                                 .last_event_ns = 5,
                                 .last_seen_wall = absl::FromUnixSeconds(7)});
  batch.jobs.push_back(JobUpdate{.job = "quiet"});  // Known, no windows.
  ASSERT_TRUE(store->Commit(batch).ok());

  auto latest = store->LatestOfEveryJob();
  ASSERT_TRUE(latest.ok()) << latest.status();
  ASSERT_EQ(latest->size(), 2u);
  EXPECT_EQ((*latest)[0].job, "a");
  EXPECT_EQ((*latest)[0].window.start_ns, -kWindowNs);
  EXPECT_EQ((*latest)[1].job, "b");
  EXPECT_EQ((*latest)[1].window.start_ns, 2 * kWindowNs);

  auto jobs = store->ListJobs();
  ASSERT_TRUE(jobs.ok());
  ASSERT_EQ(jobs->size(), 3u);
  EXPECT_EQ((*jobs)[0].job, "a");
  EXPECT_EQ((*jobs)[0].last_event_ns, 5);
  EXPECT_EQ((*jobs)[0].last_seen_wall, absl::FromUnixSeconds(7));
  EXPECT_EQ((*jobs)[0].window_count, 1);
  EXPECT_EQ((*jobs)[1].job, "b");
  EXPECT_EQ((*jobs)[1].window_count, 3);
  EXPECT_EQ((*jobs)[1].latest_window_start_ns, 2 * kWindowNs);
  EXPECT_EQ((*jobs)[2].job, "quiet");
  EXPECT_EQ((*jobs)[2].window_count, 0);

  // Replacing the newest window replaces the copy; an older one does not.
  StoreBatch replay;
  replay.windows.push_back(SampleWindow("b", 2 * kWindowNs, /*salt=*/5));
  replay.windows.push_back(SampleWindow("b", 0, /*salt=*/6));
  ASSERT_TRUE(store->Commit(replay).ok());
  latest = store->LatestOfEveryJob();
  ASSERT_TRUE(latest.ok());
  ASSERT_EQ(latest->size(), 2u);
  std::string diff;
  EXPECT_TRUE(
      SameWindow((*latest)[1], SampleWindow("b", 2 * kWindowNs, 5), &diff))
      << diff;

  auto none = store->Latest("quiet");
  ASSERT_TRUE(none.ok());
  EXPECT_FALSE(none->has_value());
  auto unknown = store->Job("nobody");
  ASSERT_TRUE(unknown.ok());
  EXPECT_FALSE(unknown->has_value());
}

TEST(WindowStore, SecondarySeesPrimaryCommitsAfterRefresh) {
  TempDir dir;
  auto primary = OpenOrDie(dir.path());
  ASSERT_TRUE(primary->Commit(WindowsBatch("job", {0})).ok());

  absl::StatusOr<std::unique_ptr<WindowStoreReader>> reader =
      OpenRocksDbWindowStoreReadOnly(dir.path());
  ASSERT_TRUE(reader.ok()) << reader.status();
  EXPECT_THAT(Starts(**reader, "job"), ElementsAre(0));

  StoreBatch later = WindowsBatch("job", {kWindowNs});
  later.progress.push_back({"t", 0, 7, 9});
  ASSERT_TRUE(primary->Commit(later).ok());
  EXPECT_THAT(Starts(**reader, "job"), ElementsAre(0));  // Not yet.
  ASSERT_TRUE((*reader)->Refresh().ok());
  EXPECT_THAT(Starts(**reader, "job"), ElementsAre(0, kWindowNs));
  auto progress = (*reader)->Progress("t", 0);
  ASSERT_TRUE(progress.ok() && progress->has_value());
  EXPECT_EQ((*progress)->committed_position, 9);
  auto jobs = (*reader)->ListJobs();
  ASSERT_TRUE(jobs.ok());
  ASSERT_EQ(jobs->size(), 1u);
  EXPECT_EQ((*jobs)[0].window_count, 2);
  EXPECT_THAT((*reader)->Describe(), HasSubstr("read-only"));
}

TEST(WindowStore, ReadOnlyOpenWorksOnACopiedStore) {
  TempDir dir;
  {
    auto primary = OpenOrDie(dir.Sub("live"));
    ASSERT_TRUE(primary->Commit(WindowsBatch("job", {0, kWindowNs})).ok());
  }
  std::filesystem::copy(dir.Sub("live"), dir.Sub("copy"),
                        std::filesystem::copy_options::recursive);
  absl::StatusOr<std::unique_ptr<WindowStoreReader>> reader =
      OpenRocksDbWindowStoreReadOnly(dir.Sub("copy"));
  ASSERT_TRUE(reader.ok()) << reader.status();
  EXPECT_THAT(Starts(**reader, "job"), ElementsAre(0, kWindowNs));
  EXPECT_TRUE((*reader)->Refresh().ok());
}

TEST(WindowStore, ReadersCleanUpTheirDirectoriesAndDeadReaders) {
  TempDir dir;
  { auto primary = OpenOrDie(dir.path()); }
  // A directory left by a reader that was killed: its pid no longer exists.
  const pid_t child = fork();
  if (child == 0) _exit(0);
  ASSERT_GT(child, 0);
  ASSERT_EQ(waitpid(child, nullptr, 0), child);
  const std::filesystem::path tmp = std::filesystem::temp_directory_path();
  const std::filesystem::path stale =
      tmp / ("bubblewatch-secondary-" + std::to_string(child) + "-dead00");
  std::filesystem::create_directory(stale);
  auto count_own = [&] {
    const std::string own =
        "bubblewatch-secondary-" + std::to_string(getpid()) + "-";
    int n = 0;
    for (const auto& e : std::filesystem::directory_iterator(tmp)) {
      n += e.path().filename().string().rfind(own, 0) == 0;
    }
    return n;
  };
  {
    auto reader = OpenRocksDbWindowStoreReadOnly(dir.path());
    ASSERT_TRUE(reader.ok()) << reader.status();
    EXPECT_FALSE(std::filesystem::exists(stale));
    EXPECT_EQ(count_own(), 1);
  }
  EXPECT_EQ(count_own(), 0);
}

TEST(WindowStore, ReadOnlyOpenOfMissingStoreIsNotFound) {
  TempDir dir;
  absl::StatusOr<std::unique_ptr<WindowStoreReader>> reader =
      OpenRocksDbWindowStoreReadOnly(dir.Sub("nothing-here"));
  ASSERT_FALSE(reader.ok());
  EXPECT_EQ(reader.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(reader.status().message(), HasSubstr("no window store at"));
  // Nothing was created.
  EXPECT_FALSE(std::filesystem::exists(dir.Sub("nothing-here")));
}

TEST(WindowStore, SecondaryRefusesWrites) {
  TempDir dir;
  auto primary = OpenOrDie(dir.path());
  auto secondary = RocksDbWindowStore::Open(
      dir.path(), {}, RocksDbWindowStore::Mode::kSecondary);
  ASSERT_TRUE(secondary.ok()) << secondary.status();
  absl::Status status = (*secondary)->Commit(WindowsBatch("job", {0}));
  EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(status.message(), HasSubstr("read-only"));
  EXPECT_EQ((*secondary)->ApplyRetention(absl::Hours(1)).status().code(),
            absl::StatusCode::kFailedPrecondition);
}

TEST(WindowStore, OpenUnderARegularFileFailsWithAReason) {
  // Tests run as root, for whom chmod does not block writes; a path whose
  // parent is a regular file fails for everyone.
  TempDir dir;
  std::ofstream(dir.Sub("file")) << "not a directory";
  absl::StatusOr<std::unique_ptr<WindowStore>> store =
      OpenRocksDbWindowStore(dir.Sub("file") + "/store");
  ASSERT_FALSE(store.ok());
  EXPECT_EQ(store.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(store.status().message(),
              HasSubstr("opening the window store at"));
  EXPECT_THAT(store.status().message(), HasSubstr("Not a directory"));
}

TEST(WindowStore, OpenInAnUnwritableDirectoryFailsWithAReason) {
  if (geteuid() == 0) {
    GTEST_SKIP() << "root ignores directory permissions; "
                    "OpenUnderARegularFileFailsWithAReason and the "
                    "WindowStoreFaults tests cover write failures";
  }
  TempDir dir;
  std::filesystem::create_directory(dir.Sub("ro"));
  std::filesystem::permissions(
      dir.Sub("ro"),
      std::filesystem::perms::owner_read | std::filesystem::perms::owner_exec);
  absl::StatusOr<std::unique_ptr<WindowStore>> store =
      OpenRocksDbWindowStore(dir.Sub("ro") + "/store");
  std::filesystem::permissions(dir.Sub("ro"),
                               std::filesystem::perms::owner_all);
  ASSERT_FALSE(store.ok());
  EXPECT_EQ(store.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(store.status().message(), HasSubstr("Permission denied"));
}

TEST(WindowStore, SecondWriterIsRefused) {
  TempDir dir;
  auto first = OpenOrDie(dir.path());
  absl::StatusOr<std::unique_ptr<WindowStore>> second =
      OpenRocksDbWindowStore(dir.path());
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(second.status().message(), HasSubstr("lock"));
}

TEST(WindowStore, OpenRefusesAnotherRocksDbDatabase) {
  TempDir dir;
  {
    rocksdb::Options options;
    options.create_if_missing = true;
    rocksdb::DB* raw = nullptr;
    ASSERT_TRUE(rocksdb::DB::Open(options, dir.path(), &raw).ok());
    std::unique_ptr<rocksdb::DB> db(raw);
    rocksdb::ColumnFamilyHandle* cf = nullptr;
    ASSERT_TRUE(db->CreateColumnFamily({}, "users", &cf).ok());
    ASSERT_TRUE(db->DestroyColumnFamilyHandle(cf).ok());
  }
  for (bool read_only : {false, true}) {
    absl::Status status =
        read_only ? OpenRocksDbWindowStoreReadOnly(dir.path()).status()
                  : OpenRocksDbWindowStore(dir.path()).status();
    EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition);
    EXPECT_THAT(status.message(), HasSubstr("not a bubblewatch window store"));
  }
}

TEST(WindowStore, StoreWithoutLatestFamilyIsUpgradedOnOpen) {
  TempDir dir;
  {
    auto store = OpenOrDie(dir.path());
    StoreBatch batch = WindowsBatch("a", {0, kWindowNs});
    batch.windows.push_back(SampleWindow("b", 5 * kWindowNs));
    ASSERT_TRUE(store->Commit(batch).ok());
  }
  {  // Make it look like a store from before `latest` existed.
    std::vector<rocksdb::ColumnFamilyDescriptor> families;
    for (const char* name :
         {"default", "windows", "jobs", "progress", "latest"}) {
      families.emplace_back(name, rocksdb::ColumnFamilyOptions());
    }
    std::vector<rocksdb::ColumnFamilyHandle*> handles;
    rocksdb::DB* raw = nullptr;
    ASSERT_TRUE(rocksdb::DB::Open(rocksdb::DBOptions(), dir.path(), families,
                                  &handles, &raw)
                    .ok());
    std::unique_ptr<rocksdb::DB> db(raw);
    ASSERT_TRUE(db->DropColumnFamily(handles[4]).ok());
    for (auto* h : handles) ASSERT_TRUE(db->DestroyColumnFamilyHandle(h).ok());
  }
  auto expect_latest = [](const WindowStoreReader& store) {
    auto latest = store.LatestOfEveryJob();
    ASSERT_TRUE(latest.ok()) << latest.status();
    ASSERT_EQ(latest->size(), 2u);
    EXPECT_EQ((*latest)[0].window.start_ns, kWindowNs);
    EXPECT_EQ((*latest)[1].window.start_ns, 5 * kWindowNs);
  };
  {  // A read-only instance falls back to seeking.
    auto reader = OpenRocksDbWindowStoreReadOnly(dir.path());
    ASSERT_TRUE(reader.ok()) << reader.status();
    expect_latest(**reader);
  }
  {  // The primary fills the family once.
    auto store = OpenOrDie(dir.path());
    expect_latest(*store);
  }
  auto reader = OpenRocksDbWindowStoreReadOnly(dir.path());
  ASSERT_TRUE(reader.ok());
  expect_latest(**reader);
}

TEST(WindowStore, DescribeReportsMemoryBudgets) {
  TempDir dir;
  WindowStoreOptions options;
  options.block_cache_bytes = 8 << 20;
  options.write_buffer_bytes = 16 << 20;
  absl::StatusOr<std::unique_ptr<WindowStore>> store =
      OpenRocksDbWindowStore(dir.path(), options);
  ASSERT_TRUE(store.ok());
  StoreMemoryUsage m = (*store)->MemoryUsage();
  EXPECT_EQ(m.block_cache_capacity, 8 << 20);
  // windows, jobs, latest: 2 x 16 MiB each; default, progress: 2 x 4 MiB.
  EXPECT_EQ(m.memtable_budget, int64_t{112} << 20);
  EXPECT_THAT((*store)->Describe(), HasSubstr("block cache 8.0 MiB"));
  EXPECT_THAT((*store)->Describe(), HasSubstr("112.0 MiB budget"));
}

}  // namespace
}  // namespace bubblewatch

namespace bubblewatch {
namespace {

TEST(WindowStore, AlertStatesCommitWithWindowsAndSurviveReopen) {
  testing::TempDir dir;
  {
    std::unique_ptr<WindowStore> store = OpenOrDie(dir.path());
    ASSERT_NE(store, nullptr);
    StoreBatch batch;
    batch.windows.push_back(testing_util::SampleWindow("job-a", 0));
    batch.alert_states.push_back({.key = "job-a", .state = "firing"});
    batch.alert_states.push_back({.key = "fleet", .state = "quiet"});
    ASSERT_TRUE(store->Commit(batch).ok());
    StoreBatch remove;
    remove.alert_states.push_back({.key = "fleet", .state = std::nullopt});
    ASSERT_TRUE(store->Commit(remove).ok());
  }
  std::unique_ptr<WindowStore> store = OpenOrDie(dir.path());
  ASSERT_NE(store, nullptr);
  absl::StatusOr<std::vector<std::pair<std::string, std::string>>> states =
      store->AlertStates();
  ASSERT_TRUE(states.ok()) << states.status();
  ASSERT_EQ(states->size(), 1u);
  EXPECT_EQ((*states)[0].first, "job-a");
  EXPECT_EQ((*states)[0].second, "firing");
  // Alert states are not jobs: they never show up as windows or job records.
  absl::StatusOr<std::vector<JobInfo>> jobs = store->ListJobs();
  ASSERT_TRUE(jobs.ok());
  EXPECT_EQ(jobs->size(), 1u);
}

TEST(WindowStore, AlertStateWithEmptyKeyRejectsTheWholeBatch) {
  testing::TempDir dir;
  std::unique_ptr<WindowStore> store = OpenOrDie(dir.path());
  ASSERT_NE(store, nullptr);
  StoreBatch batch;
  batch.windows.push_back(testing_util::SampleWindow("job-a", 0));
  batch.alert_states.push_back({.key = "", .state = "x"});
  EXPECT_EQ(store->Commit(batch).code(), absl::StatusCode::kInvalidArgument);
  absl::StatusOr<std::optional<WindowSummary>> latest = store->Latest("job-a");
  ASSERT_TRUE(latest.ok());
  EXPECT_FALSE(latest->has_value());
}

}  // namespace
}  // namespace bubblewatch
