// Observations against a real Kafka broker (docs/semantics.md#observations;
// ctest label `kafka`): one job produced twice, 20 s of event time apart,
// as two observations without end markers. Processed live (the idle timeout
// closes the first run before the second is sent) and then replayed from
// the topic into a fresh store (the second run's first batch closes the
// first), the stored windows are byte-identical but for why the first run's
// window closed, and the 20 s between the runs is in no window and no
// bubble (issue 22).
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

// The windows of job "observed" in the store at `path` (read-only, while
// a processor may still write it); empty when it cannot be opened yet.
std::vector<WindowSummary> Windows(const std::string& path) {
  absl::StatusOr<std::unique_ptr<WindowStoreReader>> store =
      OpenRocksDbWindowStoreReadOnly(path);
  if (!store.ok()) return {};
  absl::StatusOr<std::vector<WindowSummary>> windows =
      (*store)->Scan("observed", absl::InfinitePast(), absl::InfiniteFuture());
  return windows.ok() ? *std::move(windows) : std::vector<WindowSummary>{};
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
  std::vector<std::string> args = FreshProcess(topic, live, "-live");
  // It must outlive the wait for run 1's windows and run 2's produce.
  for (size_t i = 0; i + 1 < args.size(); ++i) {
    if (args[i] == "--exit-when-idle") {
      args[i + 1] = testing::ScaledFlag(absl::Seconds(15));
    }
  }
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
  for (size_t i = 0; i < a.size(); ++i) {
    WindowSummary want = a[i];
    want.closed_by = b[i].closed_by;
    std::string diff;
    EXPECT_TRUE(SameWindow(want, b[i], &diff)) << i << ": " << diff;
    EXPECT_EQ(EncodeWindowSummary(want), EncodeWindowSummary(b[i])) << i;
  }
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

}  // namespace
}  // namespace bubblewatch
