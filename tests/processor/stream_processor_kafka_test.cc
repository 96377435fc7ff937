// The processor against a real Kafka broker (ctest label `kafka`; ops/test
// starts the broker and passes its address in BUBBLEWATCH_KAFKA_BROKERS):
//   - killing the processor with SIGKILL again and again mid-stream and
//     restarting it yields exactly the same windows as the offline oracle
//     (analyze --window) of the same synthetic fleet;
//   - a full disk under the store stops the processor with a clear error,
//     neither the stored progress nor the group's offsets move past what was
//     written, and a rerun once there is space gives the oracle's windows.
// The protocol's logic on its own (the oracle, late events, dead letters)
// is tested without a broker: partition_task_test.cc.
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
  // Until one life is killed mid-stream, lives climb from the shortest: a
  // life that stored nothing (startup and the group join took it all, as on
  // a loaded machine) makes the next one 150-350 ms longer, a step shorter
  // than the backlog's processing, so that some life ends inside it. A
  // random first life could outlive the whole backlog (the processor reads
  // it in well under a second once joined), and once every window is stored
  // no later kill can land mid-stream. After that, random lives. At least
  // kMinKills lives; more, up to kMaxKills, until one was killed mid-stream.
  // A life that exits on its own ends the campaign.
  constexpr int kMinKills = 5;
  constexpr int kMaxKills = 12;
  std::uniform_int_distribution<int> step_ms(
      absl::ToInt64Milliseconds(testing::Scaled(absl::Milliseconds(150))),
      absl::ToInt64Milliseconds(testing::Scaled(absl::Milliseconds(350))));
  int64_t climb_ms =
      absl::ToInt64Milliseconds(testing::Scaled(absl::Milliseconds(800)));
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
    const int64_t delay = killed_mid_stream ? delay_ms(rng) : climb_ms;
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
    if (stored == 0) climb_ms += step_ms(rng);
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
