// Observations (docs/semantics.md#observations) through the partition task
// over the in-memory Kafka (task_driver.h): what `produce FILE` sends, as
// it sends it, with a simulated wall clock. Each test here was a broker
// test (ObservationsKafka, ctest label kafka) with the same assertions;
// what they check is the processor's logic, not Kafka's
// (docs/architecture.md#testing-the-partition-task).
//   - One job produced twice, 20 s of event time apart, as two
//     observations without end markers: processed live (the idle timeout
//     closes the first run before the second is sent) and replayed into a
//     fresh store (the second run's first batch closes the first), the
//     stored windows are byte-identical but for why the first run's window
//     closed, and the 20 s between the runs is in no window and no bubble.
//   - A duty cycle (3 s snapshots every 60 s, each sent once the last
//     one's window closed) stores one window per snapshot, none between,
//     live as replayed, and the job learns its cadence.
//   - A `produce FILE` killed mid-file and run again stores what one clean
//     run stores (the resent batches are counted duplicates).
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "schemas/job_lifecycle.h"
#include "schemas/window_summary.h"
#include "schemas/window_summary_codec.h"
#include "tests/processor/task_driver.h"
#include "tests/testing/files.h"
#include "tests/testing/temp_dir.h"

namespace bubblewatch {
namespace {

using testing::MemoryRecord;
using testing::ProcessOptions;
using testing::ProduceFiles;
using testing::ProduceRecords;
using testing::TaskDriver;

constexpr int64_t kSeconds = 1'000'000'000;
constexpr int64_t kMillis = 1'000'000;

// A seed-timeline trace: 29 kernels of 50 ms every 100 ms over
// [from_s + 0.1 s, from_s + 3 s), each after a 10 us launch call.
std::string RunTrace(int64_t from_s) {
  std::string gpu, cpu;
  for (int64_t ms = from_s * 1000 + 100; ms < (from_s + 3) * 1000; ms += 100) {
    absl::StrAppend(&gpu, gpu.empty() ? "" : ",\n",
                    "{\"name\": \"step\", \"start_us\": ", ms * 1000,
                    ", \"end_us\": ", (ms + 50) * 1000, ", \"stream\": 7}");
    absl::StrAppend(&cpu, cpu.empty() ? "" : ",\n",
                    "{\"name\": \"cudaLaunchKernel\", \"start_us\": ",
                    ms * 1000 - 20, ", \"end_us\": ", ms * 1000 - 10, "}");
  }
  return absl::StrCat("{\"gpu_kernels\": [", gpu, "],\n\"cpu_events\": [", cpu,
                      "]}\n");
}

// A steady trace of `seconds` s: a 5 ms kernel every 10 ms after a 10 us
// launch call (2 events per 10 ms).
std::string SteadyTrace(int64_t seconds) {
  std::string gpu, cpu;
  for (int64_t us = 100; us < seconds * 1'000'000; us += 10'000) {
    absl::StrAppend(&gpu, gpu.empty() ? "" : ",\n",
                    "{\"name\": \"step\", \"start_us\": ", us,
                    ", \"end_us\": ", us + 5000, ", \"stream\": 7}");
    absl::StrAppend(&cpu, cpu.empty() ? "" : ",\n",
                    "{\"name\": \"cudaLaunchKernel\", \"start_us\": ", us - 20,
                    ", \"end_us\": ", us - 10, "}");
  }
  return absl::StrCat("{\"gpu_kernels\": [", gpu, "],\n\"cpu_events\": [", cpu,
                      "]}\n");
}

// What `produce --job observed --no-end-marker FILE` sends.
std::vector<MemoryRecord> Observation(const std::string& file) {
  absl::StatusOr<std::vector<MemoryRecord>> records = ProduceRecords(
      {file}, ProduceFiles{.job = "observed", .end_markers = false});
  EXPECT_TRUE(records.ok()) << records.status();
  return records.ok() ? *std::move(records) : std::vector<MemoryRecord>{};
}

// Lets simulated wall time pass (ticking) until `driver` stores `n`
// windows of job "observed": the idle timeout closing a run live.
bool WaitForWindows(TaskDriver& driver, size_t n) {
  for (int i = 0; i < 600; ++i) {  // 60 s.
    if (driver.Stored({"observed"}).size() == n) return true;
    if (!driver.Advance(absl::Milliseconds(100)).ok()) return false;
  }
  return driver.Stored({"observed"}).size() == n;
}

// Expects `b` to hold `a`'s windows byte for byte, but for why they closed
// (a wall-clock idle timeout live, partition order on a replay).
void ExpectSameButWhyClosed(const std::vector<WindowSummary>& a,
                            const std::vector<WindowSummary>& b) {
  ASSERT_EQ(b.size(), a.size());
  for (size_t i = 0; i < a.size(); ++i) {
    WindowSummary want = a[i];
    want.closed_by = b[i].closed_by;
    std::string diff;
    EXPECT_TRUE(SameWindow(want, b[i], &diff)) << i << ": " << diff;
    EXPECT_EQ(EncodeWindowSummary(want), EncodeWindowSummary(b[i])) << i;
  }
}

// Was ObservationsKafka.TwoRunsApartReplayIntoAFreshStoreAlikeButWhyClosed.
TEST(ObservationsTask, TwoRunsApartReplayIntoAFreshStoreAlikeButWhyClosed) {
  testing::TempDir dir;
  testing::WriteFile(dir.Sub("run1.json"), RunTrace(0));
  testing::WriteFile(dir.Sub("run2.json"), RunTrace(23));

  // Live: the processor closes the first run by its idle timeout, then the
  // second run is sent.
  TaskDriver live(ProcessOptions(), dir.Sub("live"));
  live.Send(Observation(dir.Sub("run1.json")));
  ASSERT_TRUE(live.Poll().ok());
  ASSERT_TRUE(WaitForWindows(live, 1)) << "run 1 was never closed live";
  live.Send(Observation(dir.Sub("run2.json")));
  ASSERT_TRUE(live.RunUntilIdle().ok());

  // Replay: the whole topic into a fresh store.
  TaskDriver fresh(ProcessOptions(), dir.Sub("fresh"));
  fresh.Send(live.Input());
  ASSERT_TRUE(fresh.RunUntilIdle().ok());

  const std::vector<WindowSummary> a = live.Stored({"observed"});
  const std::vector<WindowSummary> b = fresh.Stored({"observed"});
  ASSERT_EQ(a.size(), 2u) << "one 10 s window per run, none between them";
  ASSERT_EQ(b.size(), a.size());
  // Live, wall time closed run 1 (its idle timeout); replayed, partition
  // order did (run 2's observation). Run 2 went idle in both.
  EXPECT_EQ(ClosedByName(a[0].closed_by), "idle_timeout");
  EXPECT_EQ(ClosedByName(b[0].closed_by), "observation_end");
  EXPECT_EQ(ClosedByName(a[1].closed_by), "idle_timeout");
  EXPECT_EQ(ClosedByName(b[1].closed_by), "idle_timeout");
  ExpectSameButWhyClosed(a, b);
  EXPECT_EQ(a[0].window.start_ns, 0);
  EXPECT_EQ(a[1].window.start_ns, 20 * kSeconds);
  for (const WindowSummary& w : a) {
    // 29 kernels of 50 ms, 28 gaps of 50 ms: the 20 s between the runs is
    // neither span nor bubble.
    EXPECT_EQ(w.window.job.compute_ns, 1450 * kMillis);
    EXPECT_EQ(w.window.job.bubble_ns, 1400 * kMillis);
    EXPECT_EQ(w.window.job.span_ns, 2850 * kMillis);
    // Observed: the run's covered time, from its first launch call (20 us
    // before the first kernel) to its last kernel's end.
    ASSERT_TRUE(w.observed_ns.has_value());
    EXPECT_EQ(*w.observed_ns, 2850 * kMillis + 20'000);
  }
}

// Was ObservationsKafka.DutyCycleSnapshotsStoreOneWindowEachLiveAsReplayed.
// A duty cycle: 3 s snapshots of one job every 60 s of event time, each
// sent (as its own observation, no end marker) once the processor has
// closed the last one's window by its idle timeout, as a profiler that
// takes a snapshot every minute would. Live and replayed into a fresh
// store: one window per snapshot, byte-identical but for why they closed,
// the 57 s between them in no window and no bubble; the job learned the
// cadence (its gaps between snapshots) and reads paused, not active.
TEST(ObservationsTask, DutyCycleSnapshotsStoreOneWindowEachLiveAsReplayed) {
  constexpr int kSnapshots = 4;
  testing::TempDir dir;
  TaskDriver live(ProcessOptions(), dir.Sub("live"));
  for (int i = 0; i < kSnapshots; ++i) {
    const std::string file = dir.Sub(absl::StrCat("snap", i, ".json"));
    testing::WriteFile(file, RunTrace(60 * i));
    live.Send(Observation(file));
    ASSERT_TRUE(live.Poll().ok());
    ASSERT_TRUE(WaitForWindows(live, i + 1))
        << "snapshot " << i << " was never closed live";
  }
  ASSERT_TRUE(live.RunUntilIdle().ok());
  TaskDriver fresh(ProcessOptions(), dir.Sub("fresh"));
  fresh.Send(live.Input());
  ASSERT_TRUE(fresh.RunUntilIdle().ok());

  const std::vector<WindowSummary> a = live.Stored({"observed"});
  const std::vector<WindowSummary> b = fresh.Stored({"observed"});
  ASSERT_EQ(a.size(), static_cast<size_t>(kSnapshots));
  ExpectSameButWhyClosed(a, b);
  for (int i = 0; i < kSnapshots; ++i) {
    const WindowSummary& w = a[i];
    EXPECT_EQ(w.window.start_ns, 60 * i * kSeconds);
    EXPECT_EQ(w.window.job.compute_ns, 1450 * kMillis) << i;
    EXPECT_EQ(w.window.job.bubble_ns, 1400 * kMillis) << i;
    ASSERT_TRUE(w.observed_ns.has_value());
    EXPECT_EQ(*w.observed_ns, 2850 * kMillis + 20'000) << i;
    // Replayed, the next snapshot's observation closed each but the last.
    if (i + 1 < kSnapshots) {
      EXPECT_EQ(ClosedByName(b[i].closed_by), "observation_end") << i;
    }
  }
  // The job's lifecycle, as both stores keep it: a gap of 57 s (from one
  // snapshot's last kernel to the next one's first launch) per pause.
  for (TaskDriver* driver : {&live, &fresh}) {
    const std::string name = driver == &live ? "live" : "fresh";
    auto job = driver->store()->Job("observed");
    ASSERT_TRUE(job.ok() && job->has_value()) << name;
    const JobLifecycle& life = (*job)->lifecycle;
    EXPECT_FALSE(life.ended) << name;
    ASSERT_EQ(life.gaps_ns.size(), static_cast<size_t>(kSnapshots - 1)) << name;
    for (int64_t gap : life.gaps_ns) {
      EXPECT_GE(gap, 57 * kSeconds) << name;
      EXPECT_LE(gap, 58 * kSeconds) << name;
    }
    // Silent for less than a cadence after the last snapshot: paused.
    EXPECT_EQ(PhaseAt(life, absl::Seconds(30)), JobPhase::kPaused) << name;
  }
}

// Was ObservationsKafka.ProducerRestartedMidFileStoresWhatOneRunStores.
// `produce FILE` killed mid-file, then run again to its end: the second
// run resends the file from its start under the same producer id (a hash
// of the content), so the processor counts the batches the first run got
// through as duplicates and stores exactly what one clean run of the file
// stores (checked against a second topic that got the file once).
TEST(ObservationsTask, ProducerRestartedMidFileStoresWhatOneRunStores) {
  testing::TempDir dir;
  const std::string file = dir.Sub("steady.json");
  testing::WriteFile(file, SteadyTrace(40));  // 8,000 events.
  // The same command each time (its batching is part of the producer id):
  // --batch-events 100 --replay-speed 5x.
  absl::StatusOr<std::vector<MemoryRecord>> run = ProduceRecords(
      {file},
      ProduceFiles{.job = "restarted", .batch_events = 100, .replay_speed = 5});
  ASSERT_TRUE(run.ok()) << run.status();
  ASSERT_GT(run->size(), 10u);
  // The killed run got some batches through: the first half.
  const std::vector<MemoryRecord> killed(run->begin(),
                                         run->begin() + run->size() / 2);

  TaskDriver restarted(ProcessOptions(), dir.Sub("restarted"));
  restarted.Send(killed);
  restarted.Send(*run);
  ASSERT_TRUE(restarted.RunUntilIdle().ok());
  TaskDriver clean(ProcessOptions("clean"), dir.Sub("clean"));
  clean.Send(*run);
  ASSERT_TRUE(clean.RunUntilIdle().ok());

  const std::vector<WindowSummary> got = restarted.Stored({"restarted"});
  const std::vector<WindowSummary> want = clean.Stored({"restarted"});
  ASSERT_EQ(want.size(), 4u) << "40 s in 10 s windows";
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    std::string diff;
    EXPECT_TRUE(SameWindow(want[i], got[i], &diff)) << i << ": " << diff;
    EXPECT_EQ(EncodeWindowSummary(want[i]), EncodeWindowSummary(got[i])) << i;
  }
  // The batches that came again were counted (the exit summary's
  // "duplicates N").
  EXPECT_GT(restarted.stats().duplicate_batches, 0);
}

}  // namespace
}  // namespace bubblewatch
