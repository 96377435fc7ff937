// `bubblewatch serve --brokers` against the real test broker (ctest label
// kafka; an earlier review): a processor on a 4-partition events topic
// publishes its windows; a serve started before the windows topic exists
// (it waits for it) and a second replica started afterwards, each with a
// store of its own, answer /api/v1/fleet and every job's windows with the
// very bytes `serve --store` gives over the processor's own store, the
// jobs' states and the alerts the processor's rules have firing included
// (from the processors' state topic). A serve
// killed with SIGKILL comes back with the same answers, re-applying
// nothing (its offsets are in its store). With two processor instances in
// one group, one serve shows exactly the union of their stores; with three
// on 12 partitions and 200 jobs in a rebalance storm, it still does, and
// that union equals one instance's windows.
#include <iostream>
#include <map>
#include <memory>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "httplib.h"
#include "simdjson.h"
#include "storage/window_store.h"
#include "tests/cli/cli_runner.h"
#include "tests/cli/serve_process.h"
#include "tests/processor/rebalance_storm.h"
#include "tests/testing/child_process.h"
#include "tests/testing/command_flags.h"
#include "tests/testing/files.h"
#include "tests/testing/kafka_broker.h"
#include "tests/testing/poll.h"
#include "tests/testing/temp_dir.h"
#include "tests/testing/test_time.h"

namespace bubblewatch {
namespace {

using ::bubblewatch::testing::RunBubblewatch;
using ::bubblewatch::testing::ServeProcess;
using ::testing::HasSubstr;

// The reply to `path` as "STATUS BODY". Unless `whole`, without the
// lifecycle of the fleet's ranked jobs ("state", "last_seen"): that comes
// from the processor's job state, which a store merged from windows alone
// (the union oracle) lacks; every other byte must agree.
std::string Body(const ServeProcess& s, const std::string& path,
                 bool whole = false) {
  httplib::Client client(s.url());
  client.set_read_timeout(30);
  auto r = client.Get(path);
  if (!r) return "<no answer>";
  static const std::regex kLifecycle(
      R"re(,"state":"[a-z]+","last_seen":"[^"]*")re");
  return std::to_string(r->status) + " " +
         (whole ? r->body : std::regex_replace(r->body, kLifecycle, ""));
}

// The paths whose bodies must agree: the fleet (two periods and orders)
// and every job's windows and devices.
std::vector<std::string> Paths(const std::vector<std::string>& jobs) {
  std::vector<std::string> paths = {"/api/v1/fleet",
                                    "/api/v1/fleet?last=24h&top=100",
                                    "/api/v1/fleet?by=bubble_ratio&last=5m"};
  for (const std::string& j : jobs) {
    paths.push_back("/api/v1/jobs/" + j + "/windows?last=24h");
    paths.push_back("/api/v1/jobs/" + j + "/devices?last=1h");
  }
  return paths;
}

std::map<std::string, std::string> Bodies(const ServeProcess& s,
                                          const std::vector<std::string>& paths,
                                          bool whole = false) {
  std::map<std::string, std::string> out;
  for (const std::string& p : paths) out[p] = Body(s, p, whole);
  return out;
}

// True when /healthz says serve has applied everything on the windows
// topic and, when it follows one, on the state topic (lag 0).
bool CaughtUp(const ServeProcess& s) {
  static const std::regex kWindows(R"re(,"lag_messages":0[,}])re");
  static const std::regex kState(R"re("state_lag_messages":0[,}])re");
  const std::string health = Body(s, "/healthz");
  return std::regex_search(health, kWindows) &&
         (health.find("\"state_topic\"") == std::string::npos ||
          std::regex_search(health, kState));
}

// Polls until `s` has caught up and answers as `want`; returns whether it
// did.
bool CatchesUp(const ServeProcess& s,
               const std::map<std::string, std::string>& want,
               bool whole = false) {
  std::vector<std::string> paths;
  for (const auto& [p, body] : want) paths.push_back(p);
  return testing::PollUntil(
      [&] { return CaughtUp(s) && Bodies(s, paths, whole) == want; },
      absl::Seconds(90), absl::Milliseconds(200));
}

// One line per path that differs, for the failure message.
std::string Differences(const std::map<std::string, std::string>& want,
                        const std::map<std::string, std::string>& got) {
  std::string out;
  for (const auto& [p, body] : want) {
    auto it = got.find(p);
    const std::string other = it == got.end() ? "<missing>" : it->second;
    if (other != body) {
      // From a little before the first byte that differs: bodies share
      // long prefixes.
      size_t at = 0;
      while (at < body.size() && at < other.size() && body[at] == other[at]) {
        ++at;
      }
      const size_t from = at < 120 ? 0 : at - 120;
      out += absl::StrCat(p, "\n  (first difference at byte ", at, ")\n  want ",
                          body.substr(from, 400), "\n  got  ",
                          other.substr(from, 400), "\n");
    }
  }
  return out;
}

TEST(ServeBrokers, ReplicasAnswerAsTheProcessorsStoreAndSurviveSigkill) {
  const std::string brokers = testing::Brokers();
  ASSERT_FALSE(HasFailure());
  const std::string topic = testing::Unique("it-serve-brokers");
  const std::string windows = topic + ".windows";
  ASSERT_NO_FATAL_FAILURE(testing::CreateTopic(topic, 4, brokers));
  testing::TempDir dir;
  // Rules that fire on the synthetic fleet's sync and dataloader jobs (no
  // fleet rule: its state is each instance's own, not in the state topic).
  const std::string rules = dir.Sub("rules.yaml");
  testing::WriteFile(rules, R"(rules:
  - name: host-sync-stall
    kind: cause_share_above
    cause: host_sync
    threshold: 10%
    for: 1
    clear_for: 2
    severity: critical
  - name: data-loading-stall
    kind: cause_share_above
    cause: data_loading
    threshold: 10%
    for: 2
    clear_for: 2
    severity: warning
)");

  // Replica 1 starts first: the windows topic does not exist yet.
  const std::string serve_args = " --brokers " + brokers + " --windows-topic " +
                                 windows + " --state-topic " + topic +
                                 ".state --listen 127.0.0.1:0 --log-level info";
  auto first = ServeProcess::StartCommand("serve --store '" +
                                          dir.Sub("serve1") + "'" + serve_args);
  ASSERT_NE(first, nullptr);

  auto produce = RunBubblewatch(
      "produce --brokers " + brokers + " --topic " + topic +
      " --synthetic --jobs 8 --gpus-per-job 2 --duration 40s --rate 400"
      // Without end markers the jobs stay active and their alerts firing,
      // so that there is something to show.
      " --no-end-marker --log-level error");
  ASSERT_EQ(produce.exit_code, 0) << produce.err;
  auto process = RunBubblewatch(
      "process --brokers " + brokers + " --topic " + topic + " --group " +
          topic + " --windows-topic " + windows + " --state-topic " + topic +
          ".state --dlq-topic " + topic + ".dlq --rules '" + rules +
          "' --alerts-topic '' --idle-timeout 1s --exit-when-idle 3s "
          "--log-level info --store '" +
          dir.Sub("processor") + "'",
      ".", /*kill_after_s=*/300);
  ASSERT_EQ(process.exit_code, 0) << process.err;
  EXPECT_THAT(process.err,
              HasSubstr("created windows topic " + windows + ": 4 partitions"));

  // The oracle: `serve --store` over the processor's own store.
  auto oracle = ServeProcess::Start(dir.Sub("processor"));
  ASSERT_NE(oracle, nullptr);
  simdjson::dom::parser parser;
  const std::string jobs_body = Body(*oracle, "/api/v1/jobs");
  ASSERT_EQ(jobs_body.substr(0, 4), "200 ") << jobs_body;
  std::vector<std::string> jobs;
  for (simdjson::dom::element j :
       parser.parse(jobs_body.substr(4))["jobs"].get_array()) {
    jobs.emplace_back(std::string_view(j["job"]));
  }
  ASSERT_EQ(jobs.size(), 8u) << jobs_body;
  // Every byte, the jobs' lifecycle and the alerts included.
  std::vector<std::string> paths = Paths(jobs);
  paths.push_back("/api/v1/jobs");
  paths.push_back("/api/v1/alerts");
  const std::map<std::string, std::string> want =
      Bodies(*oracle, paths, /*whole=*/true);
  for (const auto& [p, body] : want) {
    ASSERT_EQ(body.substr(0, 4), "200 ") << p << ": " << body;
  }
  // Something to compare: alerts firing, jobs with a lifecycle and times.
  EXPECT_THAT(want.at("/api/v1/alerts"),
              HasSubstr("\"rule\":\"host-sync-stall\""));
  EXPECT_THAT(want.at("/api/v1/alerts"),
              HasSubstr("\"rule\":\"data-loading-stall\""));
  EXPECT_THAT(want.at("/api/v1/fleet"), HasSubstr("\"last_seen\":\"20"));

  EXPECT_TRUE(CatchesUp(*first, want, /*whole=*/true))
      << Differences(want, Bodies(*first, paths, /*whole=*/true))
      << first->Log();
  // The same jobs, each with the processor's window count.
  auto first_jobs = Body(*first, "/api/v1/jobs");
  for (simdjson::dom::element j :
       parser.parse(jobs_body.substr(4))["jobs"].get_array()) {
    EXPECT_THAT(first_jobs,
                HasSubstr("\"job\":\"" +
                          std::string(std::string_view(j["job"])) + "\""));
  }
  EXPECT_THAT(first->Log(), HasSubstr("does not exist (yet)"));

  // A second replica, started after the fact, from the topic alone.
  auto second = ServeProcess::StartCommand(
      "serve --store '" + dir.Sub("serve2") + "'" + serve_args);
  ASSERT_NE(second, nullptr);
  EXPECT_TRUE(CatchesUp(*second, want, /*whole=*/true))
      << Differences(want, Bodies(*second, paths, /*whole=*/true))
      << second->Log();
  EXPECT_EQ(Body(*second, "/api/v1/fleet"), Body(*first, "/api/v1/fleet"));
  EXPECT_EQ(Body(*second, "/api/v1/fleet?last=24h&top=100"),
            Body(*first, "/api/v1/fleet?last=24h&top=100"));

  // kill -9 and restart on the same store: the same answers, and nothing
  // applied again (it resumes at the offsets stored with the windows).
  first->Kill();
  auto restarted = ServeProcess::StartCommand(
      "serve --store '" + dir.Sub("serve1") + "'" + serve_args);
  ASSERT_NE(restarted, nullptr);
  EXPECT_TRUE(CatchesUp(*restarted, want, /*whole=*/true))
      << Differences(want, Bodies(*restarted, paths, /*whole=*/true))
      << restarted->Log();
  // The lag is absent from /metrics until serve has learned every
  // partition's high watermark, which may come a moment after the bodies.
  const std::string lag_sample =
      "\nbubblewatch_serve_lag_messages{topic=\"" + windows + "\"} ";
  std::string metrics;
  testing::PollUntil(
      [&] {
        metrics = Body(*restarted, "/metrics");
        return metrics.find(lag_sample) != std::string::npos;
      },
      absl::Seconds(20), absl::Milliseconds(200));
  EXPECT_THAT(metrics, HasSubstr("\nbubblewatch_serve_windows_applied_total{"
                                 "topic=\"" +
                                 windows + "\"} 0\n"));
  EXPECT_THAT(metrics, HasSubstr(lag_sample + "0\n"));
  // Nor a snapshot: it compares the next ones with those stored.
  EXPECT_THAT(metrics, HasSubstr("\nbubblewatch_serve_snapshots_applied_total{"
                                 "topic=\"" +
                                 topic + ".state\"} 0\n"));
  EXPECT_THAT(restarted->Log(), HasSubstr("from the store"));
}

// The windows of `stores` (processor stores, read-only) committed into one
// new store at `path`: the union a fleet-wide view must show.
// `windows_per_store` gets each store's window count.
void MergeStores(const std::vector<std::string>& stores,
                 const std::string& path,
                 std::vector<size_t>* windows_per_store) {
  auto merged = OpenRocksDbWindowStore(path);
  ASSERT_TRUE(merged.ok()) << merged.status();
  for (const std::string& dir : stores) {
    windows_per_store->push_back(0);
    auto store = OpenRocksDbWindowStoreReadOnly(dir);
    ASSERT_TRUE(store.ok()) << dir << ": " << store.status();
    auto jobs = (*store)->ListJobs();
    ASSERT_TRUE(jobs.ok()) << jobs.status();
    for (const JobInfo& j : *jobs) {
      auto windows =
          (*store)->Scan(j.job, absl::InfinitePast(), absl::InfiniteFuture());
      ASSERT_TRUE(windows.ok()) << windows.status();
      if (windows->empty()) continue;
      windows_per_store->back() += windows->size();
      StoreBatch batch;
      batch.windows = *std::move(windows);
      ASSERT_TRUE((*merged)->Commit(batch).ok());
    }
  }
}

TEST(ServeBrokers, OneServeShowsTheUnionOfTwoProcessorInstances) {
  const std::string brokers = testing::Brokers();
  ASSERT_FALSE(HasFailure());
  const std::string topic = testing::Unique("it-serve-pair");
  const std::string windows = topic + ".windows";
  ASSERT_NO_FATAL_FAILURE(testing::CreateTopic(topic, 4, brokers));
  ASSERT_NO_FATAL_FAILURE(testing::CreateTopic(windows, 4, brokers));
  testing::TempDir dir;
  auto serve = ServeProcess::StartCommand(
      "serve --store '" + dir.Sub("serve") + "' --brokers " + brokers +
      " --windows-topic " + windows + " --state-topic " + topic +
      ".state --listen 127.0.0.1:0");
  ASSERT_NE(serve, nullptr);
  // Two members of one group split the partitions (and rebalance as the
  // second joins); serve follows the windows topic while they run. The
  // fleet is sent paced (40 s of event time in 10 s), so that both members
  // own partitions while events still come: sent at once, the first member
  // could finish it before the second joined.
  auto member = [&](const std::string& name, testing::CliResult* out) {
    *out = RunBubblewatch(
        "process --brokers " + brokers + " --topic " + topic + " --group " +
            topic + " --windows-topic " + windows + " --state-topic " + topic +
            ".state --dlq-topic " + topic +
            ".dlq --idle-timeout 1s --exit-when-idle 10s --log-level info"
            " --store '" +
            dir.Sub(name) + "'",
        ".", /*kill_after_s=*/300);
  };
  testing::CliResult a, b;
  std::thread ta(member, "a", &a), tb(member, "b", &b);
  auto produce = RunBubblewatch(
      "produce --brokers " + brokers + " --topic " + topic +
      " --synthetic --jobs 12 --gpus-per-job 1 --duration 40s --rate 300"
      " --replay-speed 4x --log-level error");
  ta.join();
  tb.join();
  ASSERT_EQ(produce.exit_code, 0) << produce.err;
  ASSERT_EQ(a.exit_code, 0) << a.err;
  ASSERT_EQ(b.exit_code, 0) << b.err;
  std::vector<size_t> per_store;
  ASSERT_NO_FATAL_FAILURE(
      MergeStores({dir.Sub("a"), dir.Sub("b")}, dir.Sub("union"), &per_store));
  // Both instances finalized windows: the union is of two stores.
  EXPECT_GT(per_store.at(0), 0u) << a.err;
  EXPECT_GT(per_store.at(1), 0u) << b.err;
  auto oracle = ServeProcess::Start(dir.Sub("union"));
  ASSERT_NE(oracle, nullptr);
  simdjson::dom::parser parser;
  const std::string jobs_body = Body(*oracle, "/api/v1/jobs");
  ASSERT_EQ(jobs_body.substr(0, 4), "200 ") << jobs_body;
  std::vector<std::string> jobs;
  for (simdjson::dom::element j :
       parser.parse(jobs_body.substr(4))["jobs"].get_array()) {
    jobs.emplace_back(std::string_view(j["job"]));
  }
  ASSERT_EQ(jobs.size(), 12u) << jobs_body;
  const std::map<std::string, std::string> want = Bodies(*oracle, Paths(jobs));
  EXPECT_TRUE(CatchesUp(*serve, want))
      << Differences(want, Bodies(*serve, Paths(jobs))) << serve->Log();
}

// The check of the fleet query tier at scale: 3 processor instances
// on 12 partitions with 200 jobs, in a rebalance storm (rebalance_storm.h:
// members join, leave and are killed while the producer sends), watched by
// one `serve --brokers` started before it all. Once the storm is over,
// serve must show exactly the union of the instances' stores, byte for
// byte, including every window of the jobs whose partition moved between
// instances (a job's whole history, wherever it was computed), and the
// union must equal one instance's windows over the same topic.
TEST(ServeBrokers, ShowsTheWholeFleetThroughARebalanceStorm) {
  constexpr int kPartitions = 12;
  constexpr int kJobs = 200;
  constexpr int kActions = 8;
  const std::string brokers = testing::Brokers();
  ASSERT_FALSE(HasFailure());
  const std::string topic = testing::Unique("it-serve-storm");
  const std::string windows = topic + ".windows";
  ASSERT_NO_FATAL_FAILURE(testing::CreateTopic(topic, kPartitions, brokers));
  ASSERT_NO_FATAL_FAILURE(testing::CreateTopic(windows, kPartitions, brokers));
  testing::TempDir dir;
  auto serve = ServeProcess::StartCommand(
      "serve --store '" + dir.Sub("serve") + "' --brokers " + brokers +
      " --windows-topic " + windows + " --state-topic " + topic +
      ".state --listen 127.0.0.1:0");
  ASSERT_NE(serve, nullptr);

  // The fleet at 1x (slower when the programs are, test_time.h): 40 s of
  // event time, so that the storm happens while events flow.
  std::vector<std::string> produce = {"produce",
                                      "--brokers",
                                      brokers,
                                      "--topic",
                                      topic,
                                      "--synthetic",
                                      "--jobs",
                                      std::to_string(kJobs),
                                      "--gpus-per-job",
                                      "1",
                                      "--duration",
                                      "40s",
                                      "--rate",
                                      "300",
                                      "--scenario",
                                      "mix",
                                      "--seed",
                                      "21",
                                      "--log-level",
                                      "error"};
  testing::SetFlags(produce, testing::ScaledReplaySpeed(1));
  std::vector<pid_t> children;
  testing::KillChildrenOnExit kill_on_exit(&children);
  const pid_t producer = testing::SpawnChild(BUBBLEWATCH_BINARY, produce);
  children.push_back(producer);

  // A member's session (3 s, testing::GroupSession) expires well before
  // the survivors go idle (7 s), so that a killed member's partitions
  // always find a new owner.
  // The idle timeout (60 s) outlasts every pause of the storm: decisions
  // taken on wall time (a job or a stream counted as silent) are outside
  // the exactly-once guarantee (docs/semantics.md), and the single-instance
  // oracle below must see the same windows. Every job ends with its end
  // marker, which closes its windows in partition order, and then the
  // members can exit when idle.
  auto process_args = [&](const std::string& group, const std::string& topics,
                          const std::string& store) {
    return std::vector<std::string>{
        "process",
        "--brokers",
        brokers,
        "--topic",
        topic,
        "--group",
        group,
        "--windows-topic",
        topics + ".windows",
        "--state-topic",
        topics + ".state",
        "--dlq-topic",
        topics + ".dlq",
        "--store",
        store,
        "--idle-timeout",
        testing::ScaledFlag(absl::Seconds(60)),
        "--exit-when-idle",
        testing::ScaledFlag(absl::Seconds(7)),
        "--log-level",
        "info",
        "-X",
        "session.timeout.ms=" + testing::GroupSessionMs(),
        "-X",
        "heartbeat.interval.ms=" + testing::GroupHeartbeatMs()};
  };
  testing::RebalanceStorm storm(
      {"a", "b", "c"}, dir.Sub("member"),
      [&](const testing::StormMember& m) {
        return process_args(topic, topic, m.store);
      },
      &children);
  std::vector<testing::StormMember>& members = storm.members();
  storm.Start(members[0]);
  storm.Start(members[1]);
  // One instance alone over the same topic (its own group and topics),
  // beside the storm: the oracle that the storm changed nothing in any
  // window. It decides nothing on wall time (the idle timeout above), so
  // reading the topic as it is produced stores what reading it afterwards
  // would; beside the storm, it costs no run of its own after it.
  const std::string single = topic + "-single";
  const std::string alone_log = dir.Sub("single.stderr");
  const pid_t alone = testing::SpawnChild(
      BUBBLEWATCH_BINARY, process_args(single, single, dir.Sub("single")),
      alone_log);
  children.push_back(alone);
  // The storm begins once serve shows every job: from then on a partition
  // that moves carries finalized windows behind it.
  ASSERT_TRUE(testing::PollUntil(
      [&] {
        const std::string body = Body(*serve, "/api/v1/jobs");
        size_t n = 0;
        for (size_t at = body.find("\"job\":"); at != std::string::npos;
             at = body.find("\"job\":", at + 1)) {
          ++n;
        }
        return n >= kJobs;
      },
      absl::Seconds(60), absl::Milliseconds(500)))
      << "serve did not show every job within 60 s\n"
      << serve->Log();
  const testing::StormReport report = storm.Blow(kActions, producer, 2121);
  EXPECT_EQ(testing::WaitChildWithin(producer, absl::Seconds(120)), 0);
  storm.Calm(absl::Seconds(120));
  ASSERT_FALSE(HasFailure()) << storm.LogPaths();

  // The union of the instances' stores, served by `serve --store`: what
  // serve --brokers must show, byte for byte.
  std::vector<size_t> per_store;
  std::vector<std::string> stores;
  for (const testing::StormMember& m : members) stores.push_back(m.store);
  ASSERT_NO_FATAL_FAILURE(MergeStores(stores, dir.Sub("union"), &per_store));
  // Jobs with windows in more than one store: their partition moved, and
  // serve must still show their whole history.
  std::map<std::string, int> stores_per_job;
  for (const std::string& path : stores) {
    auto store = OpenRocksDbWindowStoreReadOnly(path);
    ASSERT_TRUE(store.ok()) << store.status();
    auto jobs = (*store)->ListJobs();
    ASSERT_TRUE(jobs.ok()) << jobs.status();
    for (const JobInfo& j : *jobs) ++stores_per_job[j.job];
  }
  int moved = 0;
  for (const auto& [job, n] : stores_per_job) moved += n > 1 ? 1 : 0;
  auto oracle = ServeProcess::Start(dir.Sub("union"));
  ASSERT_NE(oracle, nullptr);
  simdjson::dom::parser parser;
  const std::string jobs_body = Body(*oracle, "/api/v1/jobs");
  ASSERT_EQ(jobs_body.substr(0, 4), "200 ") << jobs_body.substr(0, 300);
  std::vector<std::string> jobs;
  for (simdjson::dom::element j :
       parser.parse(jobs_body.substr(4))["jobs"].get_array()) {
    jobs.emplace_back(std::string_view(j["job"]));
  }
  ASSERT_EQ(jobs.size(), static_cast<size_t>(kJobs));
  const std::map<std::string, std::string> want = Bodies(*oracle, Paths(jobs));
  EXPECT_TRUE(CatchesUp(*serve, want))
      << Differences(want, Bodies(*serve, Paths(jobs))) << serve->Log();

  // The instance alone, started with the storm: the same windows.
  EXPECT_EQ(testing::WaitChildWithin(alone, absl::Seconds(180)), 0)
      << testing::ReadFile(alone_log);
  auto one = ServeProcess::Start(dir.Sub("single"));
  ASSERT_NE(one, nullptr);
  const std::map<std::string, std::string> got = Bodies(*one, Paths(jobs));
  EXPECT_TRUE(got == want) << Differences(want, got);

  std::cout << report.Summary() << "; " << storm.Assignments()
            << " partition assignments, " << storm.Handovers()
            << " with state from the changelog; windows per store: "
            << absl::StrJoin(per_store, ", ") << "; " << moved << " of "
            << kJobs << " jobs moved between instances\n";
  EXPECT_GE(report.kills + report.stops, 2) << "not much of a storm";
  EXPECT_GE(storm.Handovers(), 3u) << "partitions did not move with state";
  EXPECT_GT(moved, 0) << "no job's windows are split across instances";
}

TEST(ServeBrokers, UsageErrors) {
  EXPECT_EQ(RunBubblewatch("serve").exit_code, 2);
  EXPECT_EQ(RunBubblewatch("serve --store x --windows-topic t").exit_code, 2);
  auto state = RunBubblewatch("serve --store x --state-topic s");
  EXPECT_EQ(state.exit_code, 2);
  EXPECT_THAT(state.err, HasSubstr("--state-topic"));
  auto same = RunBubblewatch(
      "serve --brokers 127.0.0.1:1 --store x --windows-topic t "
      "--state-topic t");
  EXPECT_EQ(same.exit_code, 2);
  EXPECT_THAT(same.err, HasSubstr("the same topic"));
  EXPECT_EQ(RunBubblewatch("serve --brokers embedded").exit_code, 2);
  auto twice = RunBubblewatch("serve --brokers a:1 --brokers b:1 --store x");
  EXPECT_EQ(twice.exit_code, 2);
  EXPECT_THAT(twice.err, HasSubstr("'--brokers' given more than once"));
}

}  // namespace
}  // namespace bubblewatch
