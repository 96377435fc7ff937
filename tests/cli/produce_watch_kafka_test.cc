// `bubblewatch produce --watch` against a real Kafka broker (ctest label
// kafka; ops/test starts the broker and passes BUBBLEWATCH_KAFKA_BROKERS):
//   - a directory filled with real trace files one by one, some written
//     partially first, ends up exactly once as windows in the processor's
//     store: the same windows as sending each file once with plain
//     `produce FILE`;
//   - a watcher killed with SIGKILL in the middle of a file and restarted
//     resends that file (same producer id and sequences), and the stored
//     windows still equal the reference.
// What the broker is needed for is the watcher's producer (idempotent,
// gapless, killed mid-file). What the topic then holds is processed by the
// partition task over the in-memory Kafka (tests/processor/task_driver.h),
// and so is the reference (what `produce FILE` sends each file as): the
// processor's side of a resend is PartitionTask.ResentFilesCountOnce...
// (docs/architecture.md#testing-the-partition-task).
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "schemas/event_batch_codec.h"
#include "schemas/window_summary.h"
#include "storage/window_store.h"
#include "tests/processor/task_driver.h"
#include "tests/testing/child_process.h"
#include "tests/testing/command_flags.h"
#include "tests/testing/files.h"
#include "tests/testing/kafka_broker.h"
#include "tests/testing/poll.h"
#include "tests/testing/temp_dir.h"
#include "tests/testing/topic_reader.h"

extern char** environ;

namespace bubblewatch {
namespace {

namespace fs = std::filesystem;

const std::string kReal = std::string(BUBBLEWATCH_TESTDATA_DIR) + "/real";
constexpr int kBatchEvents = 200;

struct TraceFile {
  std::string source;  // Under tests/testdata/real.
  std::string name;    // Its name in the watched directory.
  std::string job;
  int rank;
};

// Real traces, named the way bubblewatch_torch names them. The two
// "sampled" ranks share a job, so their relative order matters and is the
// same in every run.
const std::vector<TraceFile>& Files() {
  static const auto* files = new std::vector<TraceFile>{
      {"hta/sampled_rank-0.json.gz", "sampled.rank0.1.pt.trace.json.gz",
       "sampled", 0},
      {"hta/sampled_rank-1.json.gz", "sampled.rank1.1.pt.trace.json.gz",
       "sampled", 1},
      {"hta/benchmark_result_2869224_1695835535_trace.json.gz",
       "bench.rank0.1.pt.trace.json.gz", "bench", 0},
      {"nsys/healthy_1pct.sqlite", "nsys-healthy.rank0.1.sqlite",
       "nsys-healthy", 0},
      {"hta/nccl_data.json.gz", "nccl.rank0.1.pt.trace.json", "nccl", 0},
  };
  return *files;
}
// The file the kill lands in: 67k events, 340 batches of 200.
const TraceFile kBig{"hta/rank0.json.gz", "big.rank0.1.pt.trace.json.gz", "big",
                     0};

using testing::Brokers;
using testing::PollUntil;
using testing::ReadFile;
using testing::Unique;
using testing::WriteFile;

// Starts `bubblewatch ARGS...` with stderr appended to `log`.
pid_t Spawn(const std::vector<std::string>& args, const std::string& log) {
  return testing::SpawnChild(BUBBLEWATCH_BINARY, args, log,
                             testing::StderrMode::kAppend);
}

int Wait(pid_t pid) { return testing::WaitChild(pid); }

std::vector<std::string> WatchArgs(const std::string& topic,
                                   const std::string& dir,
                                   const std::string& sent,
                                   std::vector<std::string> extra = {}) {
  std::vector<std::string> args = {"produce",
                                   "--brokers",
                                   Brokers(),
                                   "--topic",
                                   topic,
                                   "--watch",
                                   dir,
                                   "--after-send",
                                   "move:" + sent,
                                   "--settle",
                                   "1s",
                                   "--batch-events",
                                   std::to_string(kBatchEvents),
                                   "--log-level",
                                   "info"};
  testing::SetFlags(args, extra);
  return args;
}

// The jobs of the files (Files() and kBig).
std::vector<std::string> Jobs() {
  std::set<std::string> jobs = {kBig.job};
  for (const TraceFile& f : Files()) jobs.insert(f.job);
  return {jobs.begin(), jobs.end()};
}

// `process --lateness 5s --idle-timeout 3s --windows-topic '' --rank-grace
// 0s --exit-when-idle 4s` over `partitions` partitions, its store in
// `store`. The files are lone ranks of larger jobs (world sizes 2 to 128):
// waiting for ranks that never come, they would close by --rank-grace or
// by the idle timeout after the order their jobs share a partition in,
// which the watcher and the reference send differently
// (docs/semantics.md#job-lifecycle, "Multi-rank jobs").
testing::TaskDriver Processor(const std::string& store, int partitions = 1) {
  StreamProcessorOptions options = testing::ProcessOptions();
  options.windows_topic = "";
  options.rank_grace = absl::ZeroDuration();
  return testing::TaskDriver(options, store, partitions);
}

// The windows of every job in `driver`'s store, each job having some.
std::vector<WindowSummary> StoredWindows(testing::TaskDriver& driver) {
  std::vector<WindowSummary> out;
  for (const std::string& job : Jobs()) {
    std::vector<WindowSummary> windows = driver.Stored({job});
    EXPECT_FALSE(windows.empty()) << "no windows of job " << job;
    for (WindowSummary& w : windows) out.push_back(std::move(w));
  }
  return out;
}

// What `process --exit-when-idle 4s` stores of everything TOPIC holds.
std::vector<WindowSummary> Process(const std::string& topic,
                                   const std::string& store) {
  auto messages = testing::ReadTopic(Brokers(), topic, 1, absl::Seconds(30));
  EXPECT_TRUE(messages.ok()) << messages.status();
  if (!messages.ok()) return {};
  int partitions = 1;
  for (const auto& m : *messages) {
    partitions = std::max(partitions, m.partition + 1);
  }
  testing::TaskDriver driver = Processor(store, partitions);
  for (const auto& m : *messages) driver.Send(m.key, m.value, m.partition);
  const absl::Status done = driver.RunUntilIdle();
  EXPECT_TRUE(done.ok()) << done;
  return StoredWindows(driver);
}

void ExpectSameWindows(const std::vector<WindowSummary>& got,
                       const std::vector<WindowSummary>& want) {
  ASSERT_FALSE(want.empty());
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    std::string diff;
    EXPECT_TRUE(SameWindow(got[i], want[i], &diff))
        << got[i].job << " window " << got[i].window.start_ns << ": " << diff;
  }
}

class ProduceWatchKafka : public ::testing::Test {
 protected:
  // The reference: every file sent once by plain `produce FILE`, per job in
  // the same order as the watcher sends them, then processed.
  static void SetUpTestSuite() {
    reference_dir_ = new testing::TempDir();
    testing::TaskDriver driver = Processor(reference_dir_->Sub("store"));
    std::vector<TraceFile> all = Files();
    all.push_back(kBig);
    for (const TraceFile& f : all) {
      // `produce --job JOB --rank RANK --batch-events 200 FILE`.
      auto records = testing::ProduceRecords(
          {kReal + "/" + f.source},
          {.job = f.job, .rank = f.rank, .batch_events = kBatchEvents});
      ASSERT_TRUE(records.ok()) << f.source << ": " << records.status();
      driver.Send(*records);
    }
    const absl::Status done = driver.RunUntilIdle();
    ASSERT_TRUE(done.ok()) << done;
    reference_ = new std::vector<WindowSummary>(StoredWindows(driver));
  }
  static void TearDownTestSuite() {
    delete reference_;
    delete reference_dir_;
  }

  void SetUp() override {
    ASSERT_NE(reference_, nullptr);
    ASSERT_FALSE(reference_->empty());
    watched_ = dir_.Sub("watched");
    sent_ = dir_.Sub("sent");
    fs::create_directories(watched_);
  }

  bool Sent(const TraceFile& f) const {
    return fs::exists(sent_ + "/" + f.name);
  }

  // Copies `f` in through a hidden temporary name and a rename (as a careful
  // writer does), then waits until the watcher moved it to sent/.
  void CopyInAndWait(const TraceFile& f) {
    const std::string tmp = watched_ + "/." + f.name + ".tmp";
    if (f.name.ends_with(".json") && !f.source.ends_with(".json")) {
      // Stored gzipped, watched as plain JSON.
      ASSERT_EQ(std::system(("gzip -dc '" + kReal + "/" + f.source + "' > '" +
                             tmp + "'")
                                .c_str()),
                0);
    } else {
      fs::copy_file(kReal + "/" + f.source, tmp);
    }
    fs::rename(tmp, watched_ + "/" + f.name);
    ASSERT_TRUE(PollUntil([&] { return Sent(f); }, absl::Seconds(60)))
        << f.name;
  }

  std::string Log() const { return ReadFile(dir_.Sub("watch.log")); }

  static testing::TempDir* reference_dir_;
  static std::vector<WindowSummary>* reference_;
  testing::TempDir dir_;
  std::string watched_;
  std::string sent_;
};

testing::TempDir* ProduceWatchKafka::reference_dir_ = nullptr;
std::vector<WindowSummary>* ProduceWatchKafka::reference_ = nullptr;

TEST_F(ProduceWatchKafka, FilesCopiedInOneByOneEndUpExactlyOnce) {
  const std::string topic = Unique("bw-watch-fill");
  const pid_t watcher =
      Spawn(WatchArgs(topic, watched_, sent_), dir_.Sub("watch.log"));
  std::vector<TraceFile> all = Files();
  all.push_back(kBig);
  for (size_t i = 0; i < all.size(); ++i) {
    const TraceFile& f = all[i];
    if (i % 2 == 1) {
      // Written in two parts straight under its final name, with a pause
      // longer than --settle in between: the watcher must wait for the rest
      // (no gzip trailer yet / no closing '}').
      const std::string bytes = ReadFile(kReal + "/" + f.source);
      const std::string path = watched_ + "/" + f.name;
      WriteFile(path, absl::string_view(bytes).substr(0, bytes.size() * 2 / 3));
      // Time passing is the point: nothing may happen in it.
      std::this_thread::sleep_for(std::chrono::milliseconds(2500));
      EXPECT_TRUE(fs::exists(path)) << f.name << " taken while partial";
      EXPECT_FALSE(Sent(f));
      WriteFile(path, bytes);
      ASSERT_TRUE(PollUntil([&] { return Sent(f); }, absl::Seconds(60)))
          << f.name << Log();
    } else {
      CopyInAndWait(f);
    }
  }
  // A broken file is set aside and the watcher goes on.
  WriteFile(watched_ + "/junk.rank0.1.pt.trace.json", "{\"not\": \"a trace\"}");
  ASSERT_TRUE(PollUntil(
      [&] {
        return fs::exists(watched_ +
                          "/.bubblewatch-rejected/junk.rank0.1.pt.trace.json");
      },
      absl::Seconds(30)))
      << Log();
  ::kill(watcher, SIGTERM);
  EXPECT_EQ(Wait(watcher), 0) << Log();
  EXPECT_THAT(Log(), ::testing::HasSubstr("6 files sent"));
  EXPECT_THAT(Log(), ::testing::HasSubstr("not a trace: 1"));

  ExpectSameWindows(Process(topic, dir_.Sub("store")), *reference_);
}

TEST_F(ProduceWatchKafka, KilledMidFileAndRestartedGivesTheSameWindows) {
  const std::string topic = Unique("bw-watch-kill");
  // One batch per request and one request in flight, so that the big file
  // takes seconds to deliver and the kill lands inside it.
  const std::vector<std::string> slow = {
      "--linger", "10ms",
      "-X",       "batch.num.messages=1",
      "-X",       "max.in.flight.requests.per.connection=1"};
  const pid_t first =
      Spawn(WatchArgs(topic, watched_, sent_, slow), dir_.Sub("watch.log"));
  fs::copy_file(kReal + "/" + kBig.source, watched_ + "/" + kBig.name);
  // Kill once the broker holds some of its batches. The watcher runs in
  // 10 ms slices and is frozen (SIGSTOP) while the broker is asked how much
  // it holds: one slice delivers a few of the file's hundreds of batches
  // (one in flight at a time), so the kill lands inside the file however
  // fast this machine delivers it.
  int64_t stored_before_kill = 0;
  ASSERT_TRUE(PollUntil(
      [&] {
        ::kill(first, SIGCONT);
        // The slice the watcher runs for (not a wait for a condition).
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
        ::kill(first, SIGSTOP);
        auto n =
            testing::StoredMessageCount(Brokers(), topic, absl::Seconds(2));
        stored_before_kill = n.ok() ? *n : 0;
        return stored_before_kill > 0;
      },
      absl::Seconds(120)))
      << Log();
  std::cerr << "batches stored before the kill: " << stored_before_kill << "\n";
  ::kill(first, SIGKILL);
  EXPECT_EQ(Wait(first), 128 + SIGKILL);
  ASSERT_FALSE(Sent(kBig)) << "the kill landed after the file was sent";
  ASSERT_THAT(ReadFile(watched_ + "/.bubblewatch-state/watch-state"),
              ::testing::Not(::testing::HasSubstr(kBig.name)));

  // Restart: it resends the big file, then takes the others.
  const pid_t second =
      Spawn(WatchArgs(topic, watched_, sent_), dir_.Sub("watch.log"));
  ASSERT_TRUE(PollUntil([&] { return Sent(kBig); }, absl::Seconds(120)))
      << Log();
  for (const TraceFile& f : Files()) CopyInAndWait(f);
  ::kill(second, SIGTERM);
  EXPECT_EQ(Wait(second), 0) << Log();

  // The topic holds the big file's first batches twice, with the same
  // producer id and sequence numbers.
  auto messages = testing::ReadTopic(Brokers(), topic, 1, absl::Seconds(30));
  ASSERT_TRUE(messages.ok()) << messages.status();
  std::map<std::pair<uint64_t, uint64_t>, int> copies;
  std::set<uint64_t> big_producers;
  for (const auto& m : *messages) {
    auto b = DecodeEventBatch(std::span<const uint8_t>(
        reinterpret_cast<const uint8_t*>(m.value.data()), m.value.size()));
    ASSERT_TRUE(b.ok());
    ++copies[{b->header.producer_id, b->header.sequence}];
    if (b->header.job == kBig.job) big_producers.insert(b->header.producer_id);
  }
  EXPECT_EQ(big_producers.size(), 1u) << "the resend changed the producer id";
  int resent = 0;
  for (const auto& [key, n] : copies) resent += n - 1;
  EXPECT_GT(resent, 0) << "nothing was resent: the kill did not land mid-file";

  ExpectSameWindows(Process(topic, dir_.Sub("store")), *reference_);
}

}  // namespace
}  // namespace bubblewatch
