// Observations against a real Kafka broker (docs/semantics.md#observations;
// ctest label `kafka`): one job produced twice, 20 s of event time apart,
// as two observations without end markers. Processed live (the idle timeout
// closes the first run before the second is sent) and then replayed from
// the topic into a fresh store (the second run's first batch closes the
// first), the stored windows are byte-identical but for why the first run's
// window closed, and the 20 s between the runs is in no window and no
// bubble. Also: a duty cycle (3 s snapshots every 60 s of one
// job, each sent once the last one's window closed) stores one window per
// snapshot, none between, live as replayed, and the job learns its cadence;
// a `produce FILE` killed mid-file and run again stores what one clean run
// stores (the resent batches are counted duplicates).
#include <signal.h>
#include <unistd.h>

#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "schemas/window_summary_codec.h"
#include "storage/window_store.h"
#include "tests/processor/processor_kafka_test_util.h"
#include "tests/testing/command_flags.h"
#include "tests/testing/files.h"
#include "tests/testing/poll.h"
#include "tests/testing/test_time.h"
#include "tests/testing/units.h"

namespace bubblewatch {
namespace {

using testing::kS;
constexpr int64_t kMs = 1'000'000;

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

std::vector<std::string> Produce(const std::string& topic,
                                 const std::string& file) {
  return {"produce",     "--brokers", Brokers(),  "--topic",
          topic,         "--job",     "observed", "--no-end-marker",
          "--log-level", "error",     file};
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

// ProcessArgs with its own group, store and state and windows topics: a
// processor that knows nothing of an earlier one.
std::vector<std::string> FreshProcess(const std::string& topic,
                                      const std::string& store,
                                      const std::string& tag) {
  std::vector<std::string> args = ProcessArgs(topic, store);
  for (size_t i = 0; i + 1 < args.size(); ++i) {
    if (args[i] == "--group" || args[i] == "--windows-topic" ||
        args[i] == "--state-topic" || args[i] == "--dlq-topic") {
      args[i + 1] += tag;
    }
  }
  return args;
}

// FreshProcess tagged "-live", kept running while the test waits for
// windows between sends (it exits 15 s, scaled, after the last batch).
std::vector<std::string> LiveProcess(const std::string& topic,
                                     const std::string& store) {
  std::vector<std::string> args = FreshProcess(topic, store, "-live");
  testing::SetFlags(
      args, {"--exit-when-idle", testing::ScaledFlag(absl::Seconds(15))});
  return args;
}

// The windows of job "observed" in the store at `path` (read-only, while
// a processor may still write it); empty when it cannot be opened yet.
std::vector<WindowSummary> Windows(const std::string& path,
                                   const std::string& job = "observed") {
  absl::StatusOr<std::unique_ptr<WindowStoreReader>> store =
      OpenRocksDbWindowStoreReadOnly(path);
  if (!store.ok()) return {};
  absl::StatusOr<std::vector<WindowSummary>> windows =
      (*store)->Scan(job, absl::InfinitePast(), absl::InfiniteFuture());
  return windows.ok() ? *std::move(windows) : std::vector<WindowSummary>{};
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

TEST(ObservationsKafka, TwoRunsApartReplayIntoAFreshStoreAlikeButWhyClosed) {
  const std::string topic = Unique("bw-observed");
  const std::string dir = ::testing::TempDir() + "/" + topic;
  std::filesystem::create_directories(dir);
  testing::WriteFile(dir + "/run1.json", RunTrace(0));
  testing::WriteFile(dir + "/run2.json", RunTrace(23));
  ASSERT_EQ(RunToEnd(Produce(topic, dir + "/run1.json")), 0);

  // Live: the processor closes the first run by its idle timeout (3 s
  // scaled), then the second run is sent.
  const std::string live = dir + "/live";
  // It must outlive the wait for run 1's windows and run 2's produce.
  const std::vector<std::string> args = LiveProcess(topic, live);
  const pid_t pid = Spawn(args);
  ASSERT_TRUE(testing::PollUntil([&] { return !Windows(live).empty(); },
                                 absl::Seconds(60), absl::Milliseconds(200)))
      << "run 1 was never closed live";
  ASSERT_EQ(RunToEnd(Produce(topic, dir + "/run2.json")), 0);
  ASSERT_EQ(Wait(pid), 0);

  // Replay: the whole topic into a fresh store.
  const std::string fresh = dir + "/fresh";
  ASSERT_EQ(RunToEnd(FreshProcess(topic, fresh, "-fresh")), 0);

  const std::vector<WindowSummary> a = Windows(live);
  const std::vector<WindowSummary> b = Windows(fresh);
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
  EXPECT_EQ(a[1].window.start_ns, 20 * kS);
  for (const WindowSummary& w : a) {
    // 29 kernels of 50 ms, 28 gaps of 50 ms: the 20 s between the runs is
    // neither span nor bubble.
    EXPECT_EQ(w.window.job.compute_ns, 1450 * kMs);
    EXPECT_EQ(w.window.job.bubble_ns, 1400 * kMs);
    EXPECT_EQ(w.window.job.span_ns, 2850 * kMs);
    // Observed: the run's covered time, from its first launch call (20 us
    // before the first kernel) to its last kernel's end.
    ASSERT_TRUE(w.observed_ns.has_value());
    EXPECT_EQ(*w.observed_ns, 2850 * kMs + 20'000);
  }
}

// A duty cycle: 3 s snapshots of one job every 60 s of event time, each
// sent (as its own observation, no end marker) once the processor has
// closed the last one's window by its idle timeout, as a profiler that
// takes a snapshot every minute would. Live and replayed into a fresh
// store: one window per snapshot, byte-identical but for why they closed,
// the 57 s between them in no window and no bubble; the job learned the
// cadence (its gaps between snapshots) and reads paused, not active.
TEST(ObservationsKafka, DutyCycleSnapshotsStoreOneWindowEachLiveAsReplayed) {
  constexpr int kSnapshots = 4;
  const std::string topic = Unique("bw-duty");
  const std::string dir = ::testing::TempDir() + "/" + topic;
  std::filesystem::create_directories(dir);
  for (int i = 0; i < kSnapshots; ++i) {
    testing::WriteFile(absl::StrCat(dir, "/snap", i, ".json"),
                       RunTrace(60 * i));
  }
  const std::string live = dir + "/live";
  const std::vector<std::string> args = LiveProcess(topic, live);
  const pid_t pid = Spawn(args);
  for (int i = 0; i < kSnapshots; ++i) {
    ASSERT_EQ(RunToEnd(Produce(topic, absl::StrCat(dir, "/snap", i, ".json"))),
              0);
    ASSERT_TRUE(testing::PollUntil(
        [&] { return Windows(live).size() == static_cast<size_t>(i + 1); },
        absl::Seconds(60), absl::Milliseconds(200)))
        << "snapshot " << i << " was never closed live";
  }
  ASSERT_EQ(Wait(pid), 0);
  const std::string fresh = dir + "/fresh";
  ASSERT_EQ(RunToEnd(FreshProcess(topic, fresh, "-fresh")), 0);

  const std::vector<WindowSummary> a = Windows(live);
  const std::vector<WindowSummary> b = Windows(fresh);
  ASSERT_EQ(a.size(), static_cast<size_t>(kSnapshots));
  ExpectSameButWhyClosed(a, b);
  for (int i = 0; i < kSnapshots; ++i) {
    const WindowSummary& w = a[i];
    EXPECT_EQ(w.window.start_ns, 60 * i * kS);
    EXPECT_EQ(w.window.job.compute_ns, 1450 * kMs) << i;
    EXPECT_EQ(w.window.job.bubble_ns, 1400 * kMs) << i;
    ASSERT_TRUE(w.observed_ns.has_value());
    EXPECT_EQ(*w.observed_ns, 2850 * kMs + 20'000) << i;
    // Replayed, the next snapshot's observation closed each but the last.
    if (i + 1 < kSnapshots) {
      EXPECT_EQ(ClosedByName(b[i].closed_by), "observation_end") << i;
    }
  }
  // The job's lifecycle, as both stores keep it: a gap of 57 s (from one
  // snapshot's last kernel to the next one's first launch) per pause.
  for (const std::string& path : {live, fresh}) {
    auto store = OpenRocksDbWindowStoreReadOnly(path);
    ASSERT_TRUE(store.ok()) << store.status();
    auto job = (*store)->Job("observed");
    ASSERT_TRUE(job.ok() && job->has_value()) << path;
    const JobLifecycle& life = (*job)->lifecycle;
    EXPECT_FALSE(life.ended) << path;
    ASSERT_EQ(life.gaps_ns.size(), static_cast<size_t>(kSnapshots - 1)) << path;
    for (int64_t gap : life.gaps_ns) {
      EXPECT_GE(gap, 57 * kS) << path;
      EXPECT_LE(gap, 58 * kS) << path;
    }
    // Silent for less than a cadence after the last snapshot: paused.
    EXPECT_EQ(PhaseAt(life, absl::Seconds(30)), JobPhase::kPaused) << path;
  }
}

// `produce FILE` killed with SIGKILL mid-file, then run again to its end:
// the second run resends the file from its start under the same producer
// id (a hash of the content), so the processor counts the batches the
// first run got through as duplicates and stores exactly what one clean
// run of the file stores (checked against a second topic that got the file
// once).
TEST(ObservationsKafka, ProducerRestartedMidFileStoresWhatOneRunStores) {
  const std::string topic = Unique("bw-restart");
  const std::string clean = topic + "-clean";
  const std::string dir = ::testing::TempDir() + "/" + topic;
  std::filesystem::create_directories(dir);
  const std::string file = dir + "/steady.json";
  testing::WriteFile(file, SteadyTrace(40));  // 8,000 events.
  // The same command each time (its batching is part of the producer id):
  // 40 s of events sent in about 8 s, time to kill it halfway.
  auto produce = [&](const std::string& to) {
    return std::vector<std::string>{
        "produce", "--brokers",   Brokers(),        "--topic", to,
        "--job",   "restarted",   "--batch-events", "100",     "--replay-speed",
        "5x",      "--log-level", "error",          file};
  };
  const pid_t first = Spawn(produce(topic));
  absl::SleepFor(testing::Scaled(absl::Seconds(3)));
  ASSERT_EQ(kill(first, SIGKILL), 0);
  Wait(first);
  ASSERT_EQ(RunToEnd(produce(topic)), 0);
  ASSERT_EQ(RunToEnd(produce(clean)), 0);

  const std::string restarted_store = dir + "/restarted";
  const std::string clean_store = dir + "/clean";
  const std::string log = dir + "/process.log";
  std::vector<std::string> args = ProcessArgs(topic, restarted_store);
  testing::SetFlags(args, {"--log-level", "info"});
  ASSERT_EQ(Wait(Spawn(args, log)), 0);
  ASSERT_EQ(RunToEnd(ProcessArgs(clean, clean_store)), 0);
  const std::vector<WindowSummary> got = Windows(restarted_store, "restarted");
  const std::vector<WindowSummary> want = Windows(clean_store, "restarted");
  ASSERT_EQ(want.size(), 4u) << "40 s in 10 s windows";
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    std::string diff;
    EXPECT_TRUE(SameWindow(want[i], got[i], &diff)) << i << ": " << diff;
    EXPECT_EQ(EncodeWindowSummary(want[i]), EncodeWindowSummary(got[i])) << i;
  }
  // The killed run got some batches through, which came again.
  const std::string text = testing::ReadFile(log);
  const size_t at = text.rfind("duplicates ");
  ASSERT_NE(at, std::string::npos) << text;
  EXPECT_NE(text.substr(at, 13), "duplicates 0;") << text.substr(at, 40);
}

}  // namespace
}  // namespace bubblewatch
