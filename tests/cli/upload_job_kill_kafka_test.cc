// A 16-rank TP×DP job's rank files uploaded one `produce` each, one after
// another, while the processor runs and is SIGKILLed at random moments and
// restarted with the same store and group; one producer is SIGKILLed
// mid-file too, and its `produce` run again. Against a real Kafka broker
// (ctest label kafka). Every stored window, and the windows topic's latest
// record of every window, must equal byte for byte those of a clean run of
// the same upload (one `process`, no kills) into a fresh topic and store
// (docs/semantics.md#job-lifecycle, "Multi-rank jobs"; effectively once:
// docs/process.md).
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <map>
#include <random>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "schemas/window_summary.h"
#include "schemas/window_summary_codec.h"
#include "simdjson.h"
#include "storage/window_store.h"
#include "tests/cli/cli_runner.h"
#include "tests/processor/processor_kafka_test_util.h"
#include "tests/testing/child_process.h"
#include "tests/testing/files.h"
#include "tests/testing/temp_dir.h"
#include "tests/testing/test_time.h"

namespace bubblewatch {
namespace {

using testing::ChildRunning;
using testing::KillChildrenOnExit;
using testing::ReadFile;
using testing::RunBubblewatch;
using testing::WaitChildWithin;

constexpr int kTp = 4, kDp = 4, kRanks = kTp * kDp, kRoot = 9;
constexpr char kJob[] = "tpdp16-kill";
// Processor kills during the upload (each at a random moment while a rank's
// file is being sent), plus one right after the last file.
constexpr int kKillsDuringUpload = 5;
// Small batches, so that a file is many batches and a producer killed
// mid-file has sent some of them; the rerun batches alike (the same
// producer id and sequences, docs/produce.md "Restart-safe").
constexpr char kBatchEvents[] = "64";

pid_t SpawnBubblewatch(const std::vector<std::string>& args,
                       const std::string& log) {
  return testing::SpawnChild(BUBBLEWATCH_BINARY, args, log,
                             testing::StderrMode::kAppend);
}

std::vector<std::string> ProduceRank(const std::string& brokers,
                                     const std::string& topic, int rank,
                                     const std::string& file) {
  return {"produce",
          "--brokers",
          brokers,
          "--topic",
          topic,
          "--job",
          kJob,
          "--rank",
          std::to_string(rank),
          "--batch-events",
          kBatchEvents,
          "--log-level",
          "error",
          file};
}

// Short windows (the job lasts about 170 ms): the job spans several. The
// lateness keeps every rank's events on time although each file starts
// again at the job's beginning; the idle timeout outlasts the gaps between
// files and the restarts, so windows close by the job's end only.
std::vector<std::string> ProcessUpload(const std::string& brokers,
                                       const std::string& topic,
                                       const std::string& store) {
  using testing::ScaledFlag;
  using testing::ScaledMs;
  return {"process", "--brokers", brokers, "--topic", topic, "--group",
          topic + "-group", "--store", store, "--window", "30ms", "--lateness",
          "3600s", "--idle-timeout", ScaledFlag(absl::Seconds(60)),
          "--exit-when-idle", ScaledFlag(absl::Seconds(4)), "--windows-topic",
          topic + ".windows", "--dlq-topic", topic + ".dlq", "--state-topic",
          topic + ".state", "--log-level", "info",
          // A restarted member takes its killed predecessor's place at once.
          "-X", "group.instance.id=" + topic + "-member", "-X",
          "session.timeout.ms=" + ScaledMs(absl::Seconds(6)), "-X",
          "heartbeat.interval.ms=" + ScaledMs(absl::Seconds(1))};
}

std::vector<std::string> WriteJob(testing::TempDir& dir) {
  const std::string out = dir.Sub("job");
  const std::string cmd =
      std::string(MAKE_PARALLEL_JOB) + " --out '" + out + "' --tp " +
      std::to_string(kTp) + " --dp " + std::to_string(kDp) +
      " --steps 48 --root " + std::to_string(kRoot) +
      ":3:3000:data_loading --host-names --max-clock-offset-us 3000";
  EXPECT_EQ(std::system(cmd.c_str()), 0) << cmd;
  std::filesystem::rename(out + "/truth.json", dir.Sub("truth.json"));
  std::vector<std::string> files;
  for (int rank = 0; rank < kRanks; ++rank) {
    files.push_back(out + "/rank-" + std::to_string(rank) + ".json");
  }
  return files;
}

// The job ended by its 16 ranks' markers, not by --rank-grace.
void ExpectEndedByAllRanks(const std::string& store, const std::string& log) {
  absl::StatusOr<std::unique_ptr<WindowStoreReader>> reader =
      OpenRocksDbWindowStoreReadOnly(store);
  ASSERT_TRUE(reader.ok()) << reader.status();
  absl::StatusOr<std::optional<JobInfo>> info = (*reader)->Job(kJob);
  ASSERT_TRUE(info.ok()) << info.status();
  ASSERT_TRUE(info->has_value()) << store;
  const JobLifecycle& life = (*info)->lifecycle;
  EXPECT_TRUE(life.ended) << store;
  EXPECT_FALSE(life.expired) << store;
  EXPECT_FALSE(life.awaiting_ranks()) << store;
  EXPECT_EQ(life.world_size, kRanks) << store;
  EXPECT_EQ(life.ended_ranks.size(), size_t{kRanks}) << store;
  EXPECT_EQ(log.find("none came for --rank-grace"), std::string::npos) << log;
}

std::vector<WindowSummary> CheckedWindows(const std::string& store) {
  std::vector<WindowSummary> windows = StoredWindows(store, {kJob});
  for (const WindowSummary& w : windows) {
    EXPECT_EQ(w.late_events, 0) << store << " window " << w.window.start_ns;
    EXPECT_EQ(w.closed_by, WindowSummary::ClosedBy::kEndMarker)
        << store << " window " << w.window.start_ns;
  }
  return windows;
}

// `got` equals `want` byte for byte (their encodings), window by window.
void ExpectSameBytes(const std::vector<WindowSummary>& got,
                     const std::vector<WindowSummary>& want,
                     const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i) {
    if (EncodeWindowSummary(got[i]) == EncodeWindowSummary(want[i])) continue;
    std::string diff;
    SameWindow(got[i], want[i], &diff);
    ADD_FAILURE() << what << ": window " << got[i].window.start_ns
                  << " differs from the clean run's " << want[i].window.start_ns
                  << ": " << diff;
  }
}

// The latest record of every window in `topic`, by window start.
std::vector<WindowSummary> LatestPerWindow(const std::string& topic,
                                           const std::string& brokers,
                                           size_t* records) {
  std::vector<WindowSummary> published = ReadWindowsTopic(topic, brokers);
  *records = published.size();
  // Every record of a window agrees (identical repeats are fine).
  UnionWithoutConflicts({published}, topic);
  std::map<std::pair<std::string, int64_t>, WindowSummary> latest;
  for (WindowSummary& w : published) {
    latest[{w.job, w.window.start_ns}] = std::move(w);
  }
  std::vector<WindowSummary> out;
  for (auto& [key, w] : latest) out.push_back(std::move(w));
  return out;
}

TEST(UploadJobKillKafka, ProcessorKilledDuringA16RankUploadGivesCleanWindows) {
  const absl::Time began = absl::Now();
  const std::string brokers = testing::Brokers();
  ASSERT_FALSE(HasFailure());
  testing::TempDir dir;
  const std::vector<std::string> files = WriteJob(dir);
  ASSERT_FALSE(HasFailure());

  const char* seed_env = std::getenv("BUBBLEWATCH_KILL_SEED");
  const uint32_t seed =
      seed_env != nullptr
          ? static_cast<uint32_t>(std::strtoul(seed_env, nullptr, 10))
          : static_cast<uint32_t>(
                std::chrono::system_clock::now().time_since_epoch().count());
  std::cout << "kill seed " << seed << " (BUBBLEWATCH_KILL_SEED=" << seed
            << " replays it)" << std::endl;
  RecordProperty("kill_seed", std::to_string(seed));
  std::mt19937 rng(seed);

  // The clean run: the upload, then one process.
  const std::string clean_topic = testing::Unique("it-upload-clean");
  const std::string clean_store = dir.Sub("clean-store");
  const std::string clean_log = dir.Sub("clean-process.stderr");
  for (int rank = 0; rank < kRanks; ++rank) {
    const pid_t p =
        SpawnBubblewatch(ProduceRank(brokers, clean_topic, rank, files[rank]),
                         dir.Sub("clean-produce.stderr"));
    ASSERT_GT(p, 0);
    ASSERT_EQ(WaitChildWithin(p, absl::Seconds(60)), 0)
        << ReadFile(dir.Sub("clean-produce.stderr"));
  }
  {
    const pid_t p = SpawnBubblewatch(
        ProcessUpload(brokers, clean_topic, clean_store), clean_log);
    ASSERT_GT(p, 0);
    ASSERT_EQ(WaitChildWithin(p, absl::Seconds(120)), 0) << ReadFile(clean_log);
  }
  const std::string clean_err = ReadFile(clean_log);
  EXPECT_NE(clean_err.find("; late 0;"), std::string::npos) << clean_err;
  ExpectEndedByAllRanks(clean_store, clean_err);
  const std::vector<WindowSummary> want = CheckedWindows(clean_store);
  ASSERT_GE(want.size(), 5u) << "the job should span several windows";

  // The clean run names every rank and the planted root.
  {
    auto q = RunBubblewatch("query job " + std::string(kJob) +
                            " --json --store '" + clean_store + "'");
    ASSERT_EQ(q.exit_code, 0) << q.err;
    simdjson::dom::parser parser;
    simdjson::dom::element doc = parser.parse(q.out);
    simdjson::dom::array ranks;
    ASSERT_EQ(doc["ranks"].get(ranks), simdjson::SUCCESS) << q.out;
    EXPECT_EQ(ranks.size(), size_t{kRanks}) << q.out;
    simdjson::dom::array stragglers;
    ASSERT_EQ(doc["stragglers"].get(stragglers), simdjson::SUCCESS) << q.out;
    ASSERT_GE(stragglers.size(), 1u) << q.out;
    EXPECT_EQ(int64_t(stragglers.at(0)["rank"]), kRoot) << q.out;
    EXPECT_TRUE(bool(stragglers.at(0)["root"])) << q.out;
    EXPECT_EQ(std::string_view(stragglers.at(0)["cause"]), "data_loading")
        << q.out;
  }

  // The killed run: the processor runs from before the first file.
  const std::string topic = testing::Unique("it-upload-kill");
  const std::string store = dir.Sub("store");
  const std::string log = dir.Sub("process.stderr");
  const std::string produce_log = dir.Sub("produce.stderr");
  const std::vector<std::string> process = ProcessUpload(brokers, topic, store);
  std::vector<pid_t> children;
  KillChildrenOnExit kill_on_exit(&children);
  pid_t processor = SpawnBubblewatch(process, log);
  ASSERT_GT(processor, 0);  // kill(-1) would kill every process we may signal.
  children.push_back(processor);

  // Which ranks' files see a processor kill, and when; which rank's
  // producer is killed mid-file.
  std::vector<int> order(kRanks);
  for (int r = 0; r < kRanks; ++r) order[r] = r;
  std::shuffle(order.begin(), order.end(), rng);
  const std::set<int> kill_during(order.begin(),
                                  order.begin() + kKillsDuringUpload);
  const int producer_killed =
      std::uniform_int_distribution<int>(1, kRanks - 2)(rng);
  std::uniform_int_distribution<int> kill_after_ms(100, 600);
  int kills = 0, kills_while_sending = 0, producer_kills_mid_file = 0;

  auto kill_processor = [&] {
    ASSERT_GT(processor, 0);
    ::kill(processor, SIGKILL);
    const int code = WaitChildWithin(processor, absl::Seconds(30));
    // It may have exited by itself only if it was idle past
    // --exit-when-idle, which the upload does not leave it.
    EXPECT_EQ(code, 128 + SIGKILL) << ReadFile(log);
    ++kills;
    processor = SpawnBubblewatch(process, log);
    ASSERT_GT(processor, 0);
    children.push_back(processor);
  };

  for (int rank = 0; rank < kRanks; ++rank) {
    std::vector<std::string> produce =
        ProduceRank(brokers, topic, rank, files[rank]);
    // Paced (each file about 0.7 s), so that kills land while files are
    // being sent; the clean run sends at full speed, other batches of the
    // same events, which must not change a window either.
    if (rank != producer_killed) {
      produce.insert(produce.end() - 1, {"--replay-speed", "0.25x"});
    } else {
      // Sent slowly (the ~170 ms job in about 3.5 s of wall time), so that
      // the kill lands mid-file. The rerun is paced alike: pacing is part
      // of the batching (--linger bounds a paced batch's event time), and
      // other batching is another producer id whose batches count again
      // (docs/produce.md, "Restart-safe, exactly once").
      produce.insert(produce.end() - 1, {"--replay-speed", "0.05x"});
      const pid_t p = SpawnBubblewatch(produce, produce_log);
      ASSERT_GT(p, 0);
      children.push_back(p);
      absl::SleepFor(absl::Milliseconds(
          std::uniform_int_distribution<int>(800, 2000)(rng)));
      if (ChildRunning(p)) {
        ::kill(p, SIGKILL);
        ++producer_kills_mid_file;
      }
      WaitChildWithin(p, absl::Seconds(60));
    }
    const pid_t p = SpawnBubblewatch(produce, produce_log);
    ASSERT_GT(p, 0);
    children.push_back(p);
    if (kill_during.count(rank) > 0) {
      absl::SleepFor(absl::Milliseconds(kill_after_ms(rng)));
      kills_while_sending += ChildRunning(p) ? 1 : 0;
      ASSERT_NO_FATAL_FAILURE(kill_processor());
    }
    ASSERT_EQ(WaitChildWithin(p, absl::Seconds(60)), 0)
        << ReadFile(produce_log);
  }
  // Once more after the last file's end marker, while the processor may be
  // closing the job's windows.
  absl::SleepFor(absl::Milliseconds(kill_after_ms(rng)));
  ASSERT_NO_FATAL_FAILURE(kill_processor());
  EXPECT_EQ(WaitChildWithin(processor, absl::Seconds(120)), 0) << ReadFile(log);

  const std::string err = ReadFile(log);
  // The last life's exit summary: "...; late N; duplicates N; DLQ N".
  const size_t summary = err.rfind(" windows written");
  ASSERT_NE(summary, std::string::npos) << err;
  EXPECT_NE(err.find("; late 0;", summary), std::string::npos) << err;
  EXPECT_NE(err.find("; DLQ 0", summary), std::string::npos) << err;
  ExpectEndedByAllRanks(store, err);
  const std::vector<WindowSummary> got = CheckedWindows(store);
  ExpectSameBytes(got, want, "store after kills");

  size_t clean_records = 0, records = 0;
  ExpectSameBytes(
      LatestPerWindow(clean_topic + ".windows", brokers, &clean_records), want,
      "clean windows topic");
  ExpectSameBytes(LatestPerWindow(topic + ".windows", brokers, &records), want,
                  "windows topic after kills");

  std::printf(
      "seed %u: %d processor kills (%d while a file was being sent, 1 after "
      "the last), producer of rank %d killed mid-file %d time(s) and rerun; "
      "%zu windows compared byte for byte (store and windows topic: %zu "
      "records, clean %zu); %s\n",
      seed, kills, kills_while_sending, producer_killed,
      producer_kills_mid_file, got.size(), records, clean_records,
      absl::FormatDuration(
          absl::Trunc(absl::Now() - began, absl::Milliseconds(100)))
          .c_str());
  if (HasFailure() || std::getenv("BUBBLEWATCH_TEST_KEEP_LOGS") != nullptr) {
    // The temporary directory goes with the test: keep the logs.
    const std::string keep = ::testing::TempDir() + "/" + topic + ".logs";
    std::filesystem::create_directories(keep);
    for (const std::string& f : {log, produce_log, clean_log}) {
      std::filesystem::copy_file(
          f, keep + "/" + std::filesystem::path(f).filename().string(),
          std::filesystem::copy_options::overwrite_existing);
    }
    std::cout << "logs: " << keep << "\n";
  }
  EXPECT_EQ(kills, kKillsDuringUpload + 1);
  EXPECT_EQ(producer_kills_mid_file, 1) << "the producer finished first";
}

}  // namespace
}  // namespace bubblewatch
