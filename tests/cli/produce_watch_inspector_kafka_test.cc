// `bubblewatch produce --watch` following growing NCCL Inspector logs,
// against a real Kafka broker (ctest label kafka; ops/test starts the broker
// and passes BUBBLEWATCH_KAFKA_BROKERS): the generator's TP × DP job with a
// planted slow process, verbose and exec-time only, is written into a dump
// directory in pieces cut inside lines while the watcher follows it;
// `process` (the partition task over what the topic holds: the task
// driver, tests/processor/task_driver.h) then stores the job's windows,
// whose waits must be those of the
// generator's truth within 2 % (verbose) or 10 % (exec times only, the
// pooled timeline) per process and whose first straggler must be the
// planted process, with at least 90 % of the wait caused
// (docs/semantics.md#live-inspector-logs). A watcher killed with SIGKILL
// between pieces and restarted must give the same figures (offsets and
// pooled instances resumed exactly once).
#include <signal.h>
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
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "alerts/alert_event.h"
#include "alerts/alert_hook.h"
#include "alerts/alert_rules.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "ingest/synthetic/synthetic_inspector_job.h"
#include "schemas/window_summary.h"
#include "storage/window_store.h"
#include "tests/processor/task_driver.h"
#include "tests/testing/child_process.h"
#include "tests/testing/command_flags.h"
#include "tests/testing/files.h"
#include "tests/testing/kafka_broker.h"
#include "tests/testing/poll.h"
#include "tests/testing/temp_dir.h"
#include "tests/testing/test_time.h"
#include "tests/testing/topic_reader.h"

namespace bubblewatch {
namespace {

namespace fs = std::filesystem;
using testing::Brokers;
using testing::PollUntil;
using testing::ReadFile;
using testing::Unique;

pid_t Spawn(const std::vector<std::string>& args, const std::string& log) {
  return testing::SpawnChild(BUBBLEWATCH_BINARY, args, log,
                             testing::StderrMode::kAppend);
}

int Wait(pid_t pid) { return testing::WaitChild(pid); }

void Append(const std::string& path, absl::string_view bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::app);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

// The acknowledged offset of every log in the watcher's offsets file.
std::map<std::string, int64_t> Offsets(const std::string& dir) {
  std::map<std::string, int64_t> out;
  std::ifstream in(dir + "/.bubblewatch-state/inspector-offsets");
  std::string line;
  std::getline(in, line);  // Version line.
  while (std::getline(in, line)) {
    std::vector<std::string> f = absl::StrSplit(line, '\t');
    int64_t offset = 0;
    if (f.size() > 8 && absl::SimpleAtoi(f[7], &offset)) out[f[0]] = offset;
  }
  return out;
}

// The acknowledged exec-time-only instances of the job in the watcher's
// pool state (-1: none).
int64_t ExecAcked(const std::string& dir, const std::string& job) {
  std::ifstream in(dir + "/.bubblewatch-state/inspector-exec");
  std::string line;
  while (std::getline(in, line)) {
    std::vector<std::string> f = absl::StrSplit(line, '\t');
    int64_t acked = 0;
    if (f.size() >= 4 && f[0] == "job" && f[1] == job &&
        absl::SimpleAtoi(f[2], &acked) && f[3] == "-1") {
      return acked;
    }
  }
  return -1;
}

class ProduceWatchInspectorKafka : public ::testing::TestWithParam<bool> {
 protected:
  void SetUp() override {
    InspectorJobSpec spec;
    spec.tp = 2;
    spec.dp = 2;
    spec.procs_per_host = 2;
    spec.steps = 40;
    spec.plant = 1;
    spec.verbose = GetParam();
    tolerance_ = spec.verbose ? 0.02 : 0.10;
    // Every instance, (communicator, coll_sn): the start-up all-reduce,
    // each TP group's all-gathers, each DP group's all-reduces.
    instances_ = 1 + int64_t{spec.dp} * spec.steps * spec.tp_per_step +
                 int64_t{spec.tp} * spec.steps;
    gen_ = GenerateInspectorJob(spec);
    ASSERT_GT(gen_.truth.planted_wait_us, 0);
    job_ = Unique("812345");
    dir_path_ = dir_.Sub("nccl-inspector-" + job_);
    fs::create_directories(dir_path_);
  }

  std::vector<std::string> WatchArgs(const std::string& topic) {
    // Exec-time only: the last instances go once the logs stopped growing
    // for --inspector-pool-idle (default 15 s). Well above the 1.5 s
    // between pieces, so a job between pieces is never taken to have ended.
    return {"produce",
            "--brokers",
            Brokers(),
            "--topic",
            topic,
            "--watch",
            dir_path_,
            "--settle",
            "1s",
            "--inspector-pool-idle",
            testing::ScaledFlag(absl::Seconds(4)),
            "--log-level",
            "info"};
  }

  // Writes piece `k` of `pieces` of every log (cut at byte positions, so
  // inside lines).
  void WritePiece(int k, int pieces) {
    for (const InspectorJobFile& f : gen_.files) {
      const size_t from = f.text.size() * k / pieces;
      const size_t to = f.text.size() * (k + 1) / pieces;
      Append(dir_path_ + "/" + f.name,
             absl::string_view(f.text).substr(from, to - from));
    }
  }

  // Every log read and acknowledged; exec-time only: every instance sent
  // from the pool (the last dumps once the logs stopped growing).
  bool AllAcknowledged() {
    const std::map<std::string, int64_t> offsets = Offsets(dir_path_);
    for (const InspectorJobFile& f : gen_.files) {
      auto it = offsets.find(f.name);
      if (it == offsets.end() ||
          it->second != static_cast<int64_t>(f.text.size())) {
        return false;
      }
    }
    return GetParam() || ExecAcked(dir_path_, job_) == instances_;
  }

  // Processes the topic and checks the stored windows against the truth.
  void CheckStoredWindows(const std::string& topic) {
    const std::string store = dir_.Sub("store");
    // The straggler rule of ops/alerts/rules.example.yaml.
    const std::string rules = dir_.Sub("rules.yaml");
    std::ofstream(rules) << "rules:\n  - name: straggler\n    kind: straggler\n"
                            "    threshold: 5%\n    for: 1\n";
    // `process --lateness 5s --idle-timeout 3s --windows-topic '' --rules
    // RULES --exit-when-idle 4s` over what the topic holds, through the
    // partition task over the in-memory Kafka (the broker is needed for
    // the watcher's producer, not the processor's logic:
    // docs/architecture.md#testing-the-partition-task), with the alert
    // hook `--rules` wires; the events it commits are those it publishes.
    auto messages = testing::ReadTopic(Brokers(), topic, 1, absl::Seconds(30));
    ASSERT_TRUE(messages.ok()) << messages.status();
    int partitions = 1;
    for (const auto& m : *messages) {
      partitions = std::max(partitions, m.partition + 1);
    }
    StreamProcessorOptions options = testing::ProcessOptions();
    options.windows_topic = "";
    testing::TaskDriver driver(options, store, partitions);
    std::vector<AlertEvent> committed;
    driver.set_observer_factory(
        [&](WindowStore& s) -> absl::StatusOr<std::unique_ptr<CommitObserver>> {
          absl::StatusOr<AlertRuleSet> parsed = LoadAlertRulesFile(rules);
          if (!parsed.ok()) return parsed.status();
          AlertHookOptions hook;
          hook.rules_path = rules;
          hook.on_event = [&](const AlertEvent& e) { committed.push_back(e); };
          absl::StatusOr<std::unique_ptr<AlertHook>> made = AlertHook::Create(
              std::move(hook), *std::move(parsed), &s, nullptr);
          if (!made.ok()) return made.status();
          return std::unique_ptr<CommitObserver>(*std::move(made));
        });
    for (const auto& m : *messages) driver.Send(m.key, m.value, m.partition);
    const absl::Status processed = driver.RunUntilIdle();
    ASSERT_TRUE(processed.ok()) << processed;
    std::vector<WindowSummary> stored = driver.Stored({job_});
    driver.Kill();  // After its last commit: the store closed for `query`.
    const std::vector<WindowSummary>* windows = &stored;
    ASSERT_FALSE(windows->empty());

    // Summed over the job's windows, as `query job` does.
    std::map<int32_t, int64_t> wait_ns;
    std::map<int32_t, std::string> host;
    // Every pid a rank or straggler row named (all windows must agree).
    std::map<int32_t, std::set<int64_t>> pids;
    std::map<int32_t, std::set<int64_t>> straggler_pids;
    std::map<int32_t, int64_t> caused_ns;
    int64_t unmatched = 0;
    for (const WindowSummary& w : *windows) {
      ASSERT_TRUE(w.collectives.has_value()) << w.window.start_ns;
      unmatched += w.collectives->unmatched;
      for (const RankWindow& r : w.collectives->ranks) {
        wait_ns[r.rank] += r.comm_wait_ns;
        host[r.rank] = r.host.str();
        pids[r.rank].insert(r.pid);
      }
      for (const StragglerWindow& s : w.collectives->stragglers) {
        caused_ns[s.rank] += s.wait_caused_ns;
        straggler_pids[s.rank].insert(s.pid);
      }
    }
    std::cerr << windows->size() << " windows, " << unmatched
              << " unmatched instances\n";
    ASSERT_EQ(wait_ns.size(), gen_.files.size());
    int64_t waited = 0;
    for (const auto& [rank, ns] : wait_ns) {
      const int64_t truth_ns = gen_.truth.wait_us[rank] * 1000;
      waited += ns;
      std::cerr << "rank " << rank << " on " << host[rank] << ": waited " << ns
                << " ns, truth " << truth_ns << " ns\n";
      EXPECT_LE(std::abs(ns - truth_ns), tolerance_ * truth_ns)
          << "rank " << rank << ": " << ns << " ns, truth " << truth_ns;
      EXPECT_EQ(host[rank], gen_.truth.hosts[rank]);
      // The process (host, pid) of the generator's truth, live.
      EXPECT_EQ(pids[rank], std::set<int64_t>{gen_.truth.pids[rank]})
          << "rank " << rank;
    }
    for (const auto& [rank, seen] : straggler_pids) {
      EXPECT_EQ(seen, std::set<int64_t>{gen_.truth.pids[rank]})
          << "straggler rank " << rank;
    }
    int32_t first = -1;
    for (const auto& [rank, ns] : caused_ns) {
      if (first < 0 || ns > caused_ns[first]) first = rank;
    }
    ASSERT_GE(first, 0) << "no straggler stored";
    EXPECT_EQ(first, 1);
    const int64_t planted_ns = gen_.truth.planted_wait_us * 1000;
    std::cerr << "straggler rank " << first << " caused " << caused_ns[first]
              << " ns of " << waited << " ns waited (planted " << planted_ns
              << " ns)\n";
    EXPECT_GE(caused_ns[first], 0.9 * planted_ns);
    EXPECT_GE(caused_ns[first], 0.9 * waited);

    // The straggler rule fired for the planted process on its host.
    ASSERT_FALSE(committed.empty());
    const AlertEvent* alert = &committed.front();
    std::cerr << "alert: " << alert->summary << "\n";
    EXPECT_EQ(alert->job, job_);
    EXPECT_EQ(alert->status, AlertStatus::kFiring);
    ASSERT_TRUE(alert->straggler_rank.has_value());
    EXPECT_EQ(*alert->straggler_rank, 1);
    EXPECT_EQ(alert->straggler_host, gen_.truth.hosts[1]);
    // `query job` (what the dashboard and the HTTP API call too) names the
    // planted process as the job's root straggler, on its host.
    const std::string out = dir_.Sub("query.json");
    ASSERT_EQ(
        std::system((std::string(BUBBLEWATCH_BINARY) + " query job '" + job_ +
                     "' --store '" + store + "' --json > '" + out + "'")
                        .c_str()),
        0);
    std::string json = ReadFile(out);
    json.erase(std::remove_if(json.begin(), json.end(),
                              [](char c) { return c == ' ' || c == '\n'; }),
               json.end());
    const size_t at = json.find("\"stragglers\":[{");
    ASSERT_NE(at, std::string::npos) << json;
    const std::string root = json.substr(at, json.find('}', at) - at);
    std::cerr << "query job: " << root << "}\n";
    EXPECT_THAT(root, ::testing::HasSubstr("\"rank\":1,")) << root;
    EXPECT_THAT(json.substr(at), ::testing::HasSubstr("\"root\":true"));
    EXPECT_THAT(json.substr(at),
                ::testing::HasSubstr("\"host\":\"" + gen_.truth.hosts[1]));
    // The root's host and pid: the first after the root's cause split.
    const size_t host_at = json.find("\"host\":", at);
    ASSERT_NE(host_at, std::string::npos);
    EXPECT_EQ(json.substr(host_at, json.find(",\"direct", host_at) - host_at),
              "\"host\":\"" + gen_.truth.hosts[1] +
                  "\",\"pid\":" + std::to_string(gen_.truth.pids[1]));
    // Every rank of the job's ranks[] names its process.
    const size_t ranks_at = json.find("\"ranks\":[{");
    ASSERT_NE(ranks_at, std::string::npos) << json;
    for (size_t r = 0; r < gen_.truth.pids.size(); ++r) {
      const size_t row =
          json.find("{\"rank\":" + std::to_string(r) + ",", ranks_at);
      ASSERT_NE(row, std::string::npos) << "rank " << r;
      const std::string fields = json.substr(row, json.find('}', row) - row);
      EXPECT_THAT(fields, ::testing::HasSubstr(
                              "\"pid\":" + std::to_string(gen_.truth.pids[r])))
          << fields;
    }
  }

  testing::TempDir dir_;
  double tolerance_ = 0.02;
  int64_t instances_ = 0;
  InspectorJobLogs gen_;
  std::string job_;
  std::string dir_path_;
};

TEST_P(ProduceWatchInspectorKafka, GrowingLogsGiveTheTruthsWaitsAndStraggler) {
  const std::string topic = Unique("bw-watch-inspector");
  const std::string log = dir_.Sub("watch.log");
  const pid_t watcher = Spawn(WatchArgs(topic), log);
  constexpr int kPieces = 6;
  for (int k = 0; k < kPieces; ++k) {
    WritePiece(k, kPieces);
    // The logs grow while the watcher follows them: each piece is taken
    // before the next is written (not a wait for a condition).
    std::this_thread::sleep_for(std::chrono::milliseconds(1500));
  }
  ASSERT_TRUE(PollUntil([&] { return AllAcknowledged(); }, absl::Seconds(90)))
      << ReadFile(log);
  ::kill(watcher, SIGTERM);
  ASSERT_EQ(Wait(watcher), 0) << ReadFile(log);
  EXPECT_THAT(ReadFile(log), ::testing::HasSubstr("Inspector logs: 4 followed"))
      << ReadFile(log);
  CheckStoredWindows(topic);
}

TEST_P(ProduceWatchInspectorKafka, KilledBetweenPiecesAndRestartedCountsOnce) {
  const std::string topic = Unique("bw-watch-inspector-kill");
  const std::string log = dir_.Sub("watch.log");
  constexpr int kPieces = 4;
  pid_t watcher = Spawn(WatchArgs(topic), log);
  for (int k = 0; k < kPieces; ++k) {
    WritePiece(k, kPieces);
    std::this_thread::sleep_for(std::chrono::milliseconds(1500));
    if (k == 1) {
      ASSERT_GT(watcher, 0);
      ::kill(watcher, SIGKILL);
      EXPECT_EQ(Wait(watcher), 128 + SIGKILL);
      watcher = Spawn(WatchArgs(topic), log);
    }
  }
  ASSERT_TRUE(PollUntil([&] { return AllAcknowledged(); }, absl::Seconds(90)))
      << ReadFile(log);
  ASSERT_GT(watcher, 0);
  ::kill(watcher, SIGTERM);
  ASSERT_EQ(Wait(watcher), 0) << ReadFile(log);
  CheckStoredWindows(topic);
}

INSTANTIATE_TEST_SUITE_P(Logs, ProduceWatchInspectorKafka,
                         ::testing::Values(true, false),
                         [](const ::testing::TestParamInfo<bool>& info) {
                           return info.param ? "Verbose" : "ExecTimeOnly";
                         });

}  // namespace
}  // namespace bubblewatch
