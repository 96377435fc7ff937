// A finished multi-rank job uploaded as users upload it: its rank files sent
// by one `produce` each, one after another, or by one `produce` of them
// all, then one `process`, and the job read back with `query job --json`.
// Every rank lands in the stored windows and the planted straggler is
// named (docs/semantics.md#job-lifecycle, "Multi-rank jobs"). What
// `produce` sends goes through the partition task over the in-memory Kafka
// (tests/processor/task_driver.h) instead of a broker: these were broker
// tests (UploadJobKafka, ctest label kafka) with the same assertions, but
// what they check is the multi-rank logic, not Kafka's
// (docs/architecture.md#testing-the-partition-task).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <limits>
#include <map>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "gtest/gtest.h"
#include "schemas/job_lifecycle.h"
#include "schemas/window_summary.h"
#include "schemas/window_summary_codec.h"
#include "simdjson.h"
#include "storage/window_store.h"
#include "tests/cli/cli_runner.h"
#include "tests/processor/task_driver.h"
#include "tests/testing/temp_dir.h"

namespace bubblewatch {
namespace {

using ::bubblewatch::testing::ProcessOptions;
using ::bubblewatch::testing::ProduceFiles;
using ::bubblewatch::testing::ProduceRecords;
using ::bubblewatch::testing::RunBubblewatch;
using ::bubblewatch::testing::TaskDriver;

// `produce --job JOB [--rank RANK] FILES...` into `driver`'s input topic.
void Produce(TaskDriver& driver, const std::vector<std::string>& files,
             const std::string& job, int rank = -1) {
  absl::StatusOr<std::vector<testing::MemoryRecord>> records =
      ProduceRecords(files, ProduceFiles{.job = job, .rank = rank});
  ASSERT_TRUE(records.ok()) << records.status();
  driver.Send(*records);
}

// `process --windows-topic '' --lateness 3600s` (idle timeout 3 s, exit
// when idle 4 s) with its store in `store`.
TaskDriver Processor(const std::string& store) {
  StreamProcessorOptions options = ProcessOptions();
  options.windows_topic = "";
  options.windower.lateness_ns = int64_t{3600} * 1'000'000'000;
  return TaskDriver(options, store);
}

// Runs `driver` as `process --exit-when-idle` runs; expects no late event
// (the exit summary's "late 0") and closes its store for `query`.
void RunProcess(TaskDriver& driver) {
  ASSERT_TRUE(driver.RunUntilIdle().ok());
  EXPECT_EQ(driver.stats().late_events, 0);
  driver.Kill();  // After its last commit: the store closed as at exit.
}

// Writes a TP 2 × DP 2 job with rank 1 slow (rank-N.json), its truth
// moved out of the directory; returns the rank files.
std::vector<std::string> WriteJob(testing::TempDir& dir) {
  const std::string out = dir.Sub("job");
  const std::string cmd = std::string(MAKE_PARALLEL_JOB) + " --out '" + out +
                          "' --tp 2 --dp 2 --root 1:3:3000:compute";
  EXPECT_EQ(std::system(cmd.c_str()), 0) << cmd;
  std::filesystem::rename(out + "/truth.json", dir.Sub("truth.json"));
  std::vector<std::string> files;
  for (int rank = 0; rank < 4; ++rank) {
    files.push_back(out + "/rank-" + std::to_string(rank) + ".json");
  }
  return files;
}

void ProcessAndCheck(TaskDriver& driver, testing::TempDir& dir,
                     const std::string& job) {
  const std::string store = dir.Sub("store");
  RunProcess(driver);
  if (::testing::Test::HasFailure()) return;
  auto q =
      RunBubblewatch("query job " + job + " --json --store '" + store + "'");
  ASSERT_EQ(q.exit_code, 0) << q.err;
  simdjson::dom::parser parser;
  simdjson::dom::element doc = parser.parse(q.out);
  simdjson::dom::array ranks;
  ASSERT_EQ(doc["ranks"].get(ranks), simdjson::SUCCESS) << q.out;
  EXPECT_EQ(ranks.size(), 4u) << q.out;
  simdjson::dom::array stragglers;
  ASSERT_EQ(doc["stragglers"].get(stragglers), simdjson::SUCCESS) << q.out;
  ASSERT_GE(stragglers.size(), 1u) << q.out;
  EXPECT_EQ(int64_t(stragglers.at(0)["rank"]), 1) << q.out;
}

// Was UploadJobKafka.RankFilesOneProduceEachEndTheJobTogether.
TEST(UploadJob, RankFilesOneProduceEachEndTheJobTogether) {
  testing::TempDir dir;
  const std::vector<std::string> files = WriteJob(dir);
  TaskDriver driver = Processor(dir.Sub("store"));
  for (int rank = 0; rank < 4; ++rank) {
    Produce(driver, {files[rank]}, "up-each", rank);
  }
  ProcessAndCheck(driver, dir, "up-each");
}

// Was UploadJobKafka.RankFilesInOneProduceEndTheJobTogether.
TEST(UploadJob, RankFilesInOneProduceEndTheJobTogether) {
  testing::TempDir dir;
  TaskDriver driver = Processor(dir.Sub("store"));
  Produce(driver, WriteJob(dir), "up-all");
  ProcessAndCheck(driver, dir, "up-all");
}

// The TP×DP jobs of docs/semantics.md#root-cause at 16 and 32 ranks, one
// rank late by data loading, host clocks up to 3 ms apart, uploaded both
// ways: no event late, every rank in ranks[], each rank's comm wait within
// 2 % (or 50 us) of the truth, the root first with its cause and >= 90 % of
// all wait caused, its saved time within 10 % of the truth. The job (about
// 30 ms) falls in one window, so the period's figures are the job's; they
// are compared summed over the job's windows in any case.
struct ParallelTruth {
  std::vector<int64_t> comm_wait_ns;  // By rank.
  int root_rank = -1;
  std::string root_cause;
  int64_t saved_ns = 0;
};

ParallelTruth ReadTruth(const std::string& path) {
  ParallelTruth t;
  simdjson::dom::parser parser;
  simdjson::dom::element doc;
  EXPECT_EQ(parser.load(path).get(doc), simdjson::SUCCESS) << path;
  if (doc.is_null()) return t;
  for (simdjson::dom::element r : doc["ranks"].get_array()) {
    t.comm_wait_ns.push_back(int64_t(r["comm_wait_ns"]));
  }
  simdjson::dom::element root = doc["roots"].at(0);
  t.root_rank = static_cast<int>(int64_t(root["rank"]));
  t.root_cause = std::string(std::string_view(root["cause"]));
  t.saved_ns = int64_t(root["saved_ns"]);
  return t;
}

std::vector<std::string> WriteParallelJob(testing::TempDir& dir, int tp, int dp,
                                          int root) {
  const std::string out = dir.Sub("job");
  const std::string cmd =
      std::string(MAKE_PARALLEL_JOB) + " --out '" + out + "' --tp " +
      std::to_string(tp) + " --dp " + std::to_string(dp) + " --root " +
      std::to_string(root) +
      ":3:3000:data_loading --host-names --max-clock-offset-us 3000";
  EXPECT_EQ(std::system(cmd.c_str()), 0) << cmd;
  std::filesystem::rename(out + "/truth.json", dir.Sub("truth.json"));
  std::vector<std::string> files;
  for (int rank = 0; rank < tp * dp; ++rank) {
    files.push_back(out + "/rank-" + std::to_string(rank) + ".json");
  }
  return files;
}

void ProcessAndCheckTruth(TaskDriver& driver, testing::TempDir& dir,
                          const std::string& job) {
  const ParallelTruth truth = ReadTruth(dir.Sub("truth.json"));
  const std::string store = dir.Sub("store");
  RunProcess(driver);
  if (::testing::Test::HasFailure()) return;
  auto q =
      RunBubblewatch("query job " + job + " --json --store '" + store + "'");
  ASSERT_EQ(q.exit_code, 0) << q.err;
  simdjson::dom::parser parser;
  simdjson::dom::element doc = parser.parse(q.out);
  // Summed over the job's windows: the period's ranks[].
  simdjson::dom::array ranks;
  ASSERT_EQ(doc["ranks"].get(ranks), simdjson::SUCCESS) << q.out;
  ASSERT_EQ(ranks.size(), truth.comm_wait_ns.size());
  double worst = 0;
  for (size_t r = 0; r < ranks.size(); ++r) {
    EXPECT_EQ(int64_t(ranks.at(r)["rank"]), static_cast<int64_t>(r));
    const double got = double(ranks.at(r)["comm_wait_us"]) * 1e3;
    const double want = static_cast<double>(truth.comm_wait_ns[r]);
    const double tolerance = std::max(0.02 * want, 50'000.0);
    worst = std::max(worst, std::abs(got - want) / tolerance);
    EXPECT_NEAR(got, want, tolerance) << "rank " << r;
  }
  simdjson::dom::array stragglers;
  ASSERT_EQ(doc["stragglers"].get(stragglers), simdjson::SUCCESS) << q.out;
  ASSERT_GE(stragglers.size(), 1u) << q.out;
  simdjson::dom::element root = stragglers.at(0);
  EXPECT_EQ(int64_t(root["rank"]), truth.root_rank);
  EXPECT_TRUE(bool(root["root"]));
  EXPECT_EQ(std::string_view(root["cause"]), truth.root_cause);
  double all = 0;
  for (simdjson::dom::element s : stragglers)
    all += double(s["wait_caused_us"]);
  const double caused = double(root["wait_caused_us"]);
  EXPECT_GE(caused, 0.9 * all);
  double saved_us = -1;
  EXPECT_EQ(root["saved_us"].get(saved_us), simdjson::SUCCESS);
  const double want_saved_us = static_cast<double>(truth.saved_ns) / 1e3;
  EXPECT_NEAR(saved_us, want_saved_us, 0.1 * want_saved_us);
  std::printf(
      "%s: %zu ranks, comm wait worst %.2f of its tolerance; root rank %lld "
      "caused %.1f%% of %.0f us; saved %.0f us (truth %.0f us)\n",
      job.c_str(), ranks.size(), worst,
      static_cast<long long>(int64_t(root["rank"])), 100 * caused / all, all,
      saved_us, want_saved_us);
}

void UploadEach(int tp, int dp, int root, const std::string& job) {
  testing::TempDir dir;
  const std::vector<std::string> files = WriteParallelJob(dir, tp, dp, root);
  TaskDriver driver = Processor(dir.Sub("store"));
  for (size_t rank = 0; rank < files.size(); ++rank) {
    Produce(driver, {files[rank]}, job, static_cast<int>(rank));
  }
  ProcessAndCheckTruth(driver, dir, job);
}

void UploadAll(int tp, int dp, int root, const std::string& job) {
  testing::TempDir dir;
  const std::vector<std::string> files = WriteParallelJob(dir, tp, dp, root);
  TaskDriver driver = Processor(dir.Sub("store"));
  Produce(driver, files, job);
  ProcessAndCheckTruth(driver, dir, job);
}

// Was UploadJobKafka.TpDp16RanksOneProduceEachMatchTheTruth.
TEST(UploadJob, TpDp16RanksOneProduceEachMatchTheTruth) {
  UploadEach(4, 4, 9, "tpdp16-each");
}

// Was UploadJobKafka.TpDp16RanksInOneProduceMatchTheTruth.
TEST(UploadJob, TpDp16RanksInOneProduceMatchTheTruth) {
  UploadAll(4, 4, 9, "tpdp16-all");
}

// Was UploadJobKafka.TpDp32RanksOneProduceEachMatchTheTruth.
TEST(UploadJob, TpDp32RanksOneProduceEachMatchTheTruth) {
  UploadEach(8, 4, 21, "tpdp32-each");
}

// Was UploadJobKafka.TpDp32RanksInOneProduceMatchTheTruth.
TEST(UploadJob, TpDp32RanksInOneProduceMatchTheTruth) {
  UploadAll(8, 4, 21, "tpdp32-all");
}

// A 16-rank TP×DP job's rank files uploaded one `produce` each, one after
// another, while the processor is killed at random moments (mid-file:
// after a random share of a file's messages) and restarted with the same
// store; one producer is killed mid-file too (it sent a random prefix of
// its messages), and its `produce` run again. Every stored window, and the
// windows topic's latest record of every window, must equal byte for byte
// those of a clean run of the same upload (one `process`, no kills) into
// a fresh topic and store (docs/semantics.md#job-lifecycle, "Multi-rank
// jobs"; effectively once: docs/process.md).
constexpr int kKillTp = 4, kKillDp = 4, kKillRanks = kKillTp * kKillDp;
constexpr int kKillRoot = 9;
constexpr char kKillJob[] = "tpdp16-kill";
// Processor kills during the upload (each while a rank's file is being
// read), plus one right after the last file.
constexpr int kKillsDuringUpload = 5;

std::vector<std::string> WriteKillJob(testing::TempDir& dir) {
  const std::string out = dir.Sub("job");
  const std::string cmd =
      std::string(MAKE_PARALLEL_JOB) + " --out '" + out + "' --tp " +
      std::to_string(kKillTp) + " --dp " + std::to_string(kKillDp) +
      " --steps 48 --root " + std::to_string(kKillRoot) +
      ":3:3000:data_loading --host-names --max-clock-offset-us 3000";
  EXPECT_EQ(std::system(cmd.c_str()), 0) << cmd;
  std::filesystem::rename(out + "/truth.json", dir.Sub("truth.json"));
  std::vector<std::string> files;
  for (int rank = 0; rank < kKillRanks; ++rank) {
    files.push_back(out + "/rank-" + std::to_string(rank) + ".json");
  }
  return files;
}

// `process --window 30ms --lateness 3600s --idle-timeout 60s
// --exit-when-idle 4s` with windows, dead-letter and state topics. Short
// windows (the job lasts about 170 ms): the job spans several. The
// lateness keeps every rank's events on time although each file starts
// again at the job's beginning; the idle timeout outlasts the upload, so
// windows close by the job's end only.
TaskDriver KillProcessor(const std::string& store) {
  StreamProcessorOptions options = ProcessOptions("upload");
  options.windower.window_ns = 30'000'000;
  options.windower.lateness_ns = int64_t{3600} * 1'000'000'000;
  options.idle_timeout = absl::Seconds(60);
  return TaskDriver(options, store);
}

// `produce --job tpdp16-kill --rank RANK --batch-events 64 [--replay-speed
// SPEED] FILE`: pacing is part of the batching (--linger bounds a paced
// batch's event time), so the killed producer's rerun is paced alike.
std::vector<testing::MemoryRecord> ProduceRank(const std::string& file,
                                               int rank, double speed) {
  absl::StatusOr<std::vector<testing::MemoryRecord>> records =
      ProduceRecords({file}, ProduceFiles{.job = kKillJob,
                                          .rank = rank,
                                          .batch_events = 64,
                                          .replay_speed = speed});
  EXPECT_TRUE(records.ok()) << records.status();
  return records.ok() ? *std::move(records)
                      : std::vector<testing::MemoryRecord>{};
}

// The job ended by its 16 ranks' markers, not by --rank-grace.
void ExpectEndedByAllRanks(TaskDriver& driver, const std::string& log) {
  absl::StatusOr<std::optional<JobInfo>> info = driver.store()->Job(kKillJob);
  ASSERT_TRUE(info.ok()) << info.status();
  ASSERT_TRUE(info->has_value());
  const JobLifecycle& life = (*info)->lifecycle;
  EXPECT_TRUE(life.ended);
  EXPECT_FALSE(life.expired);
  EXPECT_FALSE(life.awaiting_ranks());
  EXPECT_EQ(life.world_size, kKillRanks);
  EXPECT_EQ(life.ended_ranks.size(), size_t{kKillRanks});
  EXPECT_EQ(log.find("none came for --rank-grace"), std::string::npos) << log;
}

std::vector<WindowSummary> CheckedWindows(TaskDriver& driver,
                                          const std::string& what) {
  std::vector<WindowSummary> windows = driver.Stored({kKillJob});
  for (const WindowSummary& w : windows) {
    EXPECT_EQ(w.late_events, 0) << what << " window " << w.window.start_ns;
    EXPECT_EQ(w.closed_by, WindowSummary::ClosedBy::kEndMarker)
        << what << " window " << w.window.start_ns;
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

// The latest record of every window the driver published, by window start;
// every record of a window agrees with the others (identical repeats are
// fine).
std::vector<WindowSummary> LatestPerWindow(TaskDriver& driver,
                                           const std::string& what,
                                           size_t* records) {
  std::vector<WindowSummary> published = driver.Published();
  *records = published.size();
  std::map<std::pair<std::string, int64_t>, WindowSummary> latest;
  for (WindowSummary& w : published) {
    auto key = std::make_pair(w.job, w.window.start_ns);
    if (auto it = latest.find(key); it != latest.end()) {
      std::string diff;
      EXPECT_TRUE(SameWindow(it->second, w, &diff))
          << what << ": window " << w.window.start_ns
          << " published twice, differently: " << diff;
    }
    latest[key] = std::move(w);
  }
  std::vector<WindowSummary> out;
  for (auto& [key, w] : latest) out.push_back(std::move(w));
  return out;
}

// Was UploadJobKillKafka.ProcessorKilledDuringA16RankUploadGivesCleanWindows.
TEST(UploadJob, ProcessorKilledDuringA16RankUploadGivesCleanWindows) {
  testing::TempDir dir;
  const std::vector<std::string> files = WriteKillJob(dir);
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

  // The clean run: the upload at full speed, then one process.
  TaskDriver clean = KillProcessor(dir.Sub("clean-store"));
  for (int rank = 0; rank < kKillRanks; ++rank) {
    clean.Send(ProduceRank(files[rank], rank, 0));
  }
  std::vector<WindowSummary> want;
  {
    testing::LogCapture log;
    ASSERT_TRUE(clean.RunUntilIdle().ok());
    EXPECT_EQ(clean.stats().late_events, 0);
    ExpectEndedByAllRanks(clean, log.text());
    want = CheckedWindows(clean, "clean store");
  }
  ASSERT_GE(want.size(), 5u) << "the job should span several windows";
  clean.Kill();  // After its last commit: the store closed for `query`.

  // The clean run names every rank and the planted root.
  {
    auto q = RunBubblewatch("query job " + std::string(kKillJob) +
                            " --json --store '" + dir.Sub("clean-store") + "'");
    ASSERT_EQ(q.exit_code, 0) << q.err;
    simdjson::dom::parser parser;
    simdjson::dom::element doc = parser.parse(q.out);
    simdjson::dom::array ranks;
    ASSERT_EQ(doc["ranks"].get(ranks), simdjson::SUCCESS) << q.out;
    EXPECT_EQ(ranks.size(), size_t{kKillRanks}) << q.out;
    simdjson::dom::array stragglers;
    ASSERT_EQ(doc["stragglers"].get(stragglers), simdjson::SUCCESS) << q.out;
    ASSERT_GE(stragglers.size(), 1u) << q.out;
    EXPECT_EQ(int64_t(stragglers.at(0)["rank"]), kKillRoot) << q.out;
    EXPECT_TRUE(bool(stragglers.at(0)["root"])) << q.out;
    EXPECT_EQ(std::string_view(stragglers.at(0)["cause"]), "data_loading")
        << q.out;
  }

  // The killed run: the processor reads each file as it is sent.
  testing::LogCapture log;
  TaskDriver driver = KillProcessor(dir.Sub("store"));
  // Which ranks' files see a processor kill, and where; which rank's
  // producer is killed mid-file.
  std::vector<int> order(kKillRanks);
  for (int r = 0; r < kKillRanks; ++r) order[r] = r;
  std::shuffle(order.begin(), order.end(), rng);
  const std::set<int> kill_during(order.begin(),
                                  order.begin() + kKillsDuringUpload);
  const int producer_killed =
      std::uniform_int_distribution<int>(1, kKillRanks - 2)(rng);
  // A share of what is there to read, in 1/16ths (never all of it).
  auto share = [&](int64_t n) {
    return n * std::uniform_int_distribution<int64_t>(1, 15)(rng) / 16;
  };
  // Reads up to `n` of the messages sent, paced as the files are sent
  // (at 0.25x a file takes about 0.7 s): 4 messages per 100 ms of wall
  // time, so that commits (every second) land mid-file and a restart
  // resumes from a snapshot with windows open.
  auto read = [&](int64_t n) {
    while (n > 0) {
      absl::StatusOr<int64_t> unread = driver.Unread();
      ASSERT_TRUE(unread.ok()) << unread.status();
      if (*unread == 0) return;
      const int64_t k = std::min({n, *unread, int64_t{4}});
      ASSERT_TRUE(driver.Poll(k).ok());
      ASSERT_TRUE(driver.Advance(absl::Milliseconds(100)).ok());
      n -= k;
    }
  };
  constexpr int64_t kAll = std::numeric_limits<int64_t>::max();
  int kills = 0;
  for (int rank = 0; rank < kKillRanks; ++rank) {
    // Paced (other batches than the clean run's, which must not change a
    // window either); the killed producer slower still.
    const double speed = rank == producer_killed ? 0.05 : 0.25;
    const std::vector<testing::MemoryRecord> records =
        ProduceRank(files[rank], rank, speed);
    ASSERT_GT(records.size(), 2u);
    if (rank == producer_killed) {
      // It got a prefix through, then ran again from the file's start.
      driver.Send(std::vector<testing::MemoryRecord>(
          records.begin(), records.begin() + share(records.size())));
      ASSERT_NO_FATAL_FAILURE(read(kAll));
    }
    driver.Send(records);
    if (kill_during.contains(rank)) {
      ASSERT_NO_FATAL_FAILURE(read(share(records.size())));
      driver.Kill();
      ++kills;
    }
    ASSERT_NO_FATAL_FAILURE(read(kAll));
  }
  // Once more after the last file's end marker, while the processor may be
  // closing the job's windows.
  driver.Kill();
  ++kills;
  ASSERT_TRUE(driver.RunUntilIdle().ok());
  // The last life's counters (its exit summary's "late 0; ... DLQ 0").
  EXPECT_EQ(driver.stats().late_events, 0);
  EXPECT_TRUE(driver.DeadLetters().empty());
  ExpectEndedByAllRanks(driver, log.text());
  const std::vector<WindowSummary> got = CheckedWindows(driver, "store");
  ExpectSameBytes(got, want, "store after kills");

  size_t clean_records = 0, records = 0;
  ExpectSameBytes(LatestPerWindow(clean, "clean windows topic", &clean_records),
                  want, "clean windows topic");
  ExpectSameBytes(LatestPerWindow(driver, "windows topic", &records), want,
                  "windows topic after kills");
  std::printf(
      "seed %u: %d processor kills (%d mid-file, 1 after the last), producer "
      "of rank %d killed mid-file and rerun; %zu windows compared byte for "
      "byte (store and windows topic: %zu records, clean %zu)\n",
      seed, kills, kKillsDuringUpload, producer_killed, got.size(), records,
      clean_records);
  EXPECT_EQ(kills, kKillsDuringUpload + 1);
}

}  // namespace
}  // namespace bubblewatch
