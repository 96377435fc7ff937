// The processor against a real Kafka broker (ctest label `kafka`; ops/test
// starts the broker and passes its address in BUBBLEWATCH_KAFKA_BROKERS):
//   - stored windows equal the offline oracle (analyze --window) of the same
//     synthetic fleet;
//   - killing the processor with SIGKILL again and again mid-stream and
//     restarting it yields exactly the same windows;
//   - malformed messages go to the dead-letter topic with their reason;
//   - a full disk under the store stops the processor with a clear error,
//     neither the stored progress nor the group's offsets move past what was
//     written, and a rerun once there is space gives the oracle's windows.
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/mount.h>
#include <sys/statvfs.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "analysis/bubble_analyzer.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "ingest/event_producer.h"
#include "ingest/synthetic/synthetic_fleet.h"
#include "kafka/kafka_config.h"
#include "kafka/kafka_handles.h"
#include "schemas/event_batch_codec.h"
#include "storage/window_store.h"
#include "tests/processor/processor_kafka_test_util.h"
#include "tests/testing/command_flags.h"
#include "tests/testing/files.h"
#include "tests/testing/test_time.h"

namespace bubblewatch {
namespace {

TEST(StreamProcessorKafka, StoredWindowsEqualTheOracleAndThePlantedTruth) {
  std::string topic = Unique("bw-oracle");
  std::string store = ::testing::TempDir() + "/" + topic;
  ASSERT_EQ(RunToEnd(ProduceArgs(topic)), 0);
  ASSERT_EQ(RunToEnd(ProcessArgs(topic, store)), 0);
  std::vector<WindowSummary> want = OracleWindows();
  std::vector<WindowSummary> got = StoredWindows(store, JobsOf(want));
  ASSERT_FALSE(want.empty());
  ExpectSameAnalysis(got, want);
  for (const WindowSummary& w : got) EXPECT_EQ(w.late_events, 0);

  // Accuracy against the planted ground truth: per job, device and window,
  // the time attributed to each cause is within 5 % of the window's bubble
  // time of what the generator planted.
  absl::StatusOr<std::vector<SyntheticJob>> fleet =
      GenerateSyntheticFleet(Fleet());
  ASSERT_TRUE(fleet.ok());
  int checked = 0;
  for (const SyntheticJob& job : *fleet) {
    for (const TruthWindow& truth : job.truth) {
      const DeviceWindow* stored = nullptr;
      for (const WindowSummary& w : got) {
        if (w.job != job.job || w.window.start_ns != truth.window_start_ns)
          continue;
        for (const DeviceWindow& d : w.window.devices) {
          if (d.device == truth.device) stored = &d;
        }
      }
      ASSERT_NE(stored, nullptr) << job.job << " device " << truth.device
                                 << " window " << truth.window_start_ns;
      const double tolerance = 0.05 * static_cast<double>(truth.bubble_ns);
      EXPECT_EQ(stored->stats.compute_ns, truth.compute_ns);
      for (int c = 0; c < kNumBubbleCauses; ++c) {
        EXPECT_LE(std::abs(static_cast<double>(stored->stats.attribution[c] -
                                               truth.cause_ns[c])),
                  tolerance)
            << job.job << " (" << SyntheticScenarioName(job.scenario)
            << ") device " << truth.device << " window "
            << truth.window_start_ns << " cause "
            << BubbleCauseName(static_cast<BubbleCause>(c));
      }
      ++checked;
    }
  }
  EXPECT_GT(checked, 10);
  std::filesystem::remove_all(store);
}

TEST(StreamProcessorKafka, KilledAgainAndAgainGivesTheSameWindows) {
  std::string topic = Unique("bw-crash");
  std::string store = ::testing::TempDir() + "/" + topic;
  ASSERT_EQ(RunToEnd(ProduceArgs(topic)), 0);
  std::vector<WindowSummary> want = OracleWindows();
  std::mt19937 rng(99);
  // Long enough for a window to be stored, short enough to land before
  // the last: both in wall time, so scaled to the processor's speed.
  std::uniform_int_distribution<int> delay_ms(
      absl::ToInt64Milliseconds(testing::Scaled(absl::Milliseconds(800))),
      absl::ToInt64Milliseconds(testing::Scaled(absl::Milliseconds(2500))));
  // On a loaded machine a life can die before it stores anything (startup
  // and the group join take longer), so each life that stored nothing makes
  // the next ones longer. At least kMinKills lives; more, up to kMaxKills,
  // until one was killed mid-stream. A life that outlived its delay and
  // finished the stream ends the campaign: no later kill can land mid-stream.
  constexpr int kMinKills = 5;
  constexpr int kMaxKills = 12;
  double stretch = 1.0;
  bool killed_mid_stream = false;
  std::string lives;  // "delay ms: exit status, windows stored" per life.
  for (int kill = 0;
       kill < kMaxKills && (kill < kMinKills || !killed_mid_stream); ++kill) {
    // Static membership: a restarted member takes its predecessor's place
    // at once instead of waiting for the killed one's session to expire.
    std::vector<std::string> args = ProcessArgs(topic, store);
    testing::SetFlags(args, {"-X", "group.instance.id=crash-member"});
    pid_t pid = Spawn(args);
    // A random run time, not a wait for a condition: the kills must land
    // at different points of the stream.
    const int64_t delay = static_cast<int64_t>(delay_ms(rng) * stretch);
    std::this_thread::sleep_for(std::chrono::milliseconds(delay));
    ::kill(pid, SIGKILL);
    const int status = Wait(pid);
    const size_t stored = std::filesystem::exists(store)
                              ? StoredWindows(store, JobsOf(want)).size()
                              : 0;
    absl::StrAppend(&lives, delay, " ms: exit ", status, ", ", stored, "/",
                    want.size(), " windows; ");
    if (status == 0) {
      EXPECT_EQ(stored, want.size()) << "a life exited 0 mid-stream";
      break;
    }
    EXPECT_EQ(status, 128 + SIGKILL) << lives;
    killed_mid_stream |= stored > 0 && stored < want.size();
    if (stored == 0) stretch *= 1.3;
  }
  EXPECT_TRUE(killed_mid_stream)
      << "no kill landed between the first and the last window: " << lives;
  std::vector<std::string> args = ProcessArgs(topic, store);
  testing::SetFlags(args, {"-X", "group.instance.id=crash-member"});
  ASSERT_EQ(RunToEnd(args), 0);
  std::vector<WindowSummary> got = StoredWindows(store, JobsOf(want));
  ExpectSameAnalysis(got, want);
  for (const WindowSummary& w : got) {
    EXPECT_EQ(w.late_events, 0) << "a replay was counted as late";
  }
  std::filesystem::remove_all(store);
}

// Event time, per docs/semantics.md#watermark and #late-events: an event
// behind its host's newest one by less than the lateness still lands in its
// window, which is not final yet; an event for a window that is already final
// is counted as late in that window (stored and published again with the
// count), never dropped silently and never added to the finished analysis.
TEST(StreamProcessorKafka, LateEventsUpdateOpenWindowsAndAreCountedOnceFinal) {
  std::string topic = Unique("bw-late");
  std::string store = ::testing::TempDir() + "/" + topic;
  constexpr int64_t kBase = int64_t{1'767'225'600} * 1'000'000'000;
  constexpr int64_t kSec = 1'000'000'000;
  constexpr int64_t kKernel = 100'000'000;  // 100 ms each.
  Trace t;
  NameInterner names(&t);
  NameId k = names.Intern("gemm");
  // Send order, one batch each: on time for [0, 10 s); 11 s holds the
  // watermark at 9 s (lateness 2 s); 9.5 s arrives out of order but within
  // the lateness; 13 s moves the watermark to 11 s and closes [0, 10 s);
  // 5 s is then behind a final window: late; 25 s closes [10 s, 20 s).
  std::vector<int64_t> starts_s10 = {10, 20,  30, 40,  50, 60, 70,
                                     80, 110, 95, 130, 50, 250};
  for (int64_t s10 : starts_s10) {
    const int64_t start = kBase + s10 * kSec / 10;
    t.gpu.push_back(
        GpuActivity{.start_ns = start, .end_ns = start + kKernel, .name = k});
  }
  KafkaConfig config(Brokers());
  EventProducerOptions options;
  options.topic = topic;
  absl::StatusOr<std::unique_ptr<EventProducer>> producer =
      EventProducer::Create(config, options);
  ASSERT_TRUE(producer.ok()) << producer.status();
  ASSERT_TRUE((*producer)->WaitUntilReachable(absl::Seconds(30)).ok());
  EventBatchEncoder encoder(&t);
  BatchHeader header{.job = "job-late", .host = "h", .producer_id = 9};
  for (size_t i = 0; i < t.gpu.size(); ++i) {
    std::span<const uint8_t> bytes = encoder.Encode(header, i, i + 1, 0, 0);
    std::vector<uint8_t> copy(bytes.begin(), bytes.end());
    ASSERT_TRUE((*producer)->Send("job-late", copy, 1).ok());
    ++header.sequence;
  }
  ASSERT_TRUE((*producer)->Flush(absl::Seconds(30)).ok());

  std::vector<std::string> args = ProcessArgs(topic, store);
  testing::SetFlags(args, {"--lateness", "2s"});
  ASSERT_EQ(RunToEnd(args), 0);
  std::vector<WindowSummary> windows = StoredWindows(store, {"job-late"});
  ASSERT_EQ(windows.size(), 3u);  // [0, 10), [10, 20), [20, 30) s.
  // [0, 10 s): the eight on-time kernels and the one within the lateness;
  // the late one is counted, not analyzed.
  EXPECT_EQ(windows[0].window.start_ns, kBase);
  EXPECT_EQ(windows[0].window.job.compute_ns, 9 * kKernel);
  EXPECT_EQ(windows[0].gpu_events, 9);
  EXPECT_EQ(windows[0].late_events, 1);
  EXPECT_EQ(windows[1].window.job.compute_ns, 2 * kKernel);
  EXPECT_EQ(windows[1].late_events, 0);
  EXPECT_EQ(windows[2].window.job.compute_ns, 1 * kKernel);
  EXPECT_EQ(windows[2].late_events, 0);
  // The windows topic carries the update too: the newest version of the
  // first window has the late count.
  int64_t published_late = -1;
  for (const WindowSummary& w : ReadWindowsTopic(topic + ".windows")) {
    if (w.window.start_ns == kBase) published_late = w.late_events;
  }
  EXPECT_EQ(published_late, 1);
  std::filesystem::remove_all(store);
}

TEST(StreamProcessorKafka, MalformedMessagesGoToTheDeadLetterTopicWithReasons) {
  std::string topic = Unique("bw-dlq");
  std::string store = ::testing::TempDir() + "/" + topic;
  KafkaConfig config(Brokers());
  EventProducerOptions options;
  options.topic = topic;
  absl::StatusOr<std::unique_ptr<EventProducer>> producer =
      EventProducer::Create(config, options);
  ASSERT_TRUE(producer.ok()) << producer.status();
  ASSERT_TRUE((*producer)->WaitUntilReachable(absl::Seconds(30)).ok());

  // 1. Not a FlatBuffer at all.
  std::string garbage = "this is not an EventBatch";
  ASSERT_TRUE((*producer)
                  ->Send("job-bad",
                         {reinterpret_cast<const uint8_t*>(garbage.data()),
                          garbage.size()},
                         0)
                  .ok());
  // 2. An event that ends before it starts; 3. events decades apart; 4. a
  // good batch of the same job, which must still be processed.
  Trace t;
  NameInterner names(&t);
  t.gpu.push_back(GpuActivity{.start_ns = 2'000'000'000,
                              .end_ns = 1'000'000'000,
                              .name = names.Intern("backwards")});
  t.gpu.push_back(GpuActivity{
      .start_ns = 1'000, .end_ns = 2'000, .name = names.Intern("early")});
  t.gpu.push_back(
      GpuActivity{.start_ns = int64_t{40} * 365 * 86400 * 1'000'000'000,
                  .end_ns = int64_t{40} * 365 * 86400 * 1'000'000'000 + 1,
                  .name = names.Intern("decades_later")});
  t.gpu.push_back(GpuActivity{.start_ns = 5'000'000'000,
                              .end_ns = 5'000'100'000,
                              .name = names.Intern("good")});
  EventBatchEncoder encoder(&t);
  BatchHeader header{.job = "job-bad", .host = "h", .producer_id = 7};
  for (auto [begin, end] :
       {std::pair{0, 1}, std::pair{1, 3}, std::pair{3, 4}}) {
    std::span<const uint8_t> bytes = encoder.Encode(header, begin, end, 0, 0);
    std::vector<uint8_t> copy(bytes.begin(), bytes.end());
    ASSERT_TRUE((*producer)->Send("job-bad", copy, end - begin).ok());
    ++header.sequence;
  }
  ASSERT_TRUE((*producer)->Flush(absl::Seconds(30)).ok());

  ASSERT_EQ(RunToEnd(ProcessArgs(topic, store)), 0);
  std::vector<std::string> reasons = ReadErrorHeaders(topic + ".dlq", 3);
  ASSERT_EQ(reasons.size(), 3u);
  EXPECT_THAT(reasons[0], ::testing::StartsWith("undecodable: "));
  EXPECT_THAT(reasons[1], ::testing::StartsWith("end_before_start: "));
  EXPECT_THAT(reasons[2], ::testing::StartsWith("timestamps_out_of_range: "));
  // The good batch made it: one window of job-bad.
  std::vector<WindowSummary> windows = StoredWindows(store, {"job-bad"});
  ASSERT_EQ(windows.size(), 1u);
  EXPECT_EQ(windows[0].window.job.compute_ns, 100'000);
  std::filesystem::remove_all(store);
}

// A tmpfs of its own for a store, unmounted on destruction. Tests run as root
// in CI, where chmod cannot make a directory unwritable; a small file system
// that a filler file fills up can fail writes for real.
class SmallFileSystem {
 public:
  explicit SmallFileSystem(const std::string& path, const std::string& size)
      : path_(path) {
    std::filesystem::create_directories(path_);
    const std::string options = "size=" + size;
    if (mount("tmpfs", path_.c_str(), "tmpfs", 0, options.c_str()) == 0) {
      mounted_ = true;
    } else {
      error_ = std::strerror(errno);
    }
  }
  ~SmallFileSystem() {
    if (mounted_) umount2(path_.c_str(), MNT_DETACH);
    std::filesystem::remove_all(path_);
  }
  bool mounted() const { return mounted_; }
  const std::string& error() const { return error_; }

  // Writes a filler file so that `leave_bytes` stay free.
  void Fill(uint64_t leave_bytes) {
    struct statvfs st;
    ASSERT_EQ(statvfs(path_.c_str(), &st), 0);
    const uint64_t free = static_cast<uint64_t>(st.f_bavail) * st.f_frsize;
    ASSERT_GT(free, leave_bytes);
    std::ofstream filler(path_ + "/filler", std::ios::binary);
    std::string chunk(free - leave_bytes, 'x');
    ASSERT_TRUE(filler.write(chunk.data(), chunk.size()));
  }
  void Unfill() { std::filesystem::remove(path_ + "/filler"); }

 private:
  std::string path_;
  bool mounted_ = false;
  std::string error_;
};

using testing::ReadFile;

TEST(StreamProcessorKafka, FullDiskStopsProcessingAndARerunCatchesUp) {
  std::string topic = Unique("bw-full");
  SmallFileSystem fs(::testing::TempDir() + "/" + topic + "-fs", "8m");
  if (!fs.mounted()) {
    GTEST_SKIP() << "cannot mount a tmpfs to fill (needs root and "
                    "CAP_SYS_ADMIN): "
                 << fs.error();
  }
  const std::string store = ::testing::TempDir() + "/" + topic + "-fs/store";
  const std::string log = ::testing::TempDir() + "/" + topic + ".stderr";
  ASSERT_EQ(RunToEnd(ProduceArgs(topic)), 0);
  std::vector<WindowSummary> want = OracleWindows();

  // Leave room for the store's files (two 24 KB OPTIONS files) and a few
  // commits, not for all of them: the write-ahead log of the whole topic is
  // about 92 KB. (Filling the disk while the processor runs does not fail
  // writes: RocksDB preallocates the WAL, so only the next file would fail.)
  fs.Fill(/*leave_bytes=*/128 << 10);
  pid_t pid = Spawn(ProcessArgs(topic, store), log);
  EXPECT_EQ(Wait(pid), 1) << ReadFile(log);
  const std::string err = ReadFile(log);
  EXPECT_THAT(err, ::testing::HasSubstr("cannot write windows to the store, "
                                        "stopping before offsets move"));
  EXPECT_THAT(err, ::testing::HasSubstr("space"));

  fs.Unfill();
  // Nothing moved past what the store holds: the group's offsets are at or
  // below the stored resume offsets, and the store holds fewer windows than
  // a finished run.
  size_t stored_before = StoredWindows(store, JobsOf(want)).size();
  EXPECT_LT(stored_before, want.size()) << "the disk filled too late";
  std::cout << "windows stored before the disk filled: " << stored_before
            << " of " << want.size() << "\n";
  ExpectGroupOffsetsWithinStoredProgress(store, topic, topic + "-group");

  // Space again: the rerun resumes and ends with a clean run's windows.
  ASSERT_EQ(RunToEnd(ProcessArgs(topic, store)), 0);
  ExpectSameAnalysis(StoredWindows(store, JobsOf(want)), want);
  std::filesystem::remove(log);
}

}  // namespace
}  // namespace bubblewatch
