// The `straggler` rule end to end against REAL servers (ctest label `kafka`;
// ops/test starts the broker and an Alertmanager and passes
// BUBBLEWATCH_KAFKA_BROKERS and BUBBLEWATCH_ALERTMANAGER_URL): a synthetic
// fleet of 4-rank jobs with planted stragglers that come and go (`produce
// --synthetic --scenario straggler --truth`; two of them TP 2 x DP 2 jobs
// whose root holds up its TP peer, then the DP all-reduces), beside healthy
// 4-GPU jobs, goes through `process --rules ... --alertmanager ...`:
//   - each straggler job fires exactly one straggler alert, naming the
//     planted rank, its host and the planted cause, from a window that ends
//     after the planted start (never in the healthy steps before it) and at
//     most two windows after it; the detection latency (event time from
//     the planted start to the end of the alert's window, plus the
//     lateness) is at most a window + the lateness + 1 s, and printed as
//     a distribution;
//   - the healthy jobs fire nothing;
//   - Alertmanager lists exactly the alerts still firing, with the planted
//     cause as their `cause` label; the others resolved by hysteresis
//     (`clear_for`) after the straggler went away.
// The false-alert target (50 healthy multi-rank jobs, no straggler alert)
// is the rule's and the analysis's logic, not the delivery's: it runs
// without a broker, StragglerAlertTask in straggler_alert_task_test.cc.
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "alerts/alert_event.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "simdjson.h"
#include "tests/alerts/alert_kafka_fixture.h"
#include "tests/alerts/straggler_truth.h"
#include "tests/testing/child_process.h"
#include "tests/testing/files.h"
#include "tests/testing/kafka_broker.h"
#include "tests/testing/poll.h"
#include "tests/testing/temp_dir.h"
#include "tests/testing/topic_reader.h"

namespace bubblewatch {
namespace {

constexpr int64_t kWindowNs = 10'000'000'000;
constexpr int64_t kLatenessNs = 2'000'000'000;  // process's default.

using testing::AlertingProcessArgs;
using testing::RequiredEnv;
using testing::RunBubblewatch;

// job -> cause label of Alertmanager's unresolved alerts named `alertname`;
// `hosts`, when given, gets job -> their `host` label.
std::map<std::string, std::string> ListedAlerts(
    const std::string& url, const std::string& alertname,
    std::map<std::string, std::string>* hosts = nullptr) {
  std::map<std::string, std::string> out;
  for (const testing::ListedAlert& a :
       testing::ListAlertmanagerAlerts(url, alertname)) {
    if (a.job.empty()) continue;
    out[a.job] = a.cause;
    if (hosts != nullptr) (*hosts)[a.job] = a.host;
  }
  return out;
}

TEST(StragglerAlertKafka, NamesThePlantedRankWithinTwoWindowsAndNoneHealthy) {
  const std::string brokers = testing::Brokers();
  const std::string alertmanager = RequiredEnv("BUBBLEWATCH_ALERTMANAGER_URL");
  ASSERT_FALSE(HasFailure());
  const std::string topic = testing::Unique("it-straggler-alert");
  // Alertmanager outlives the test: a name of this run's own.
  const std::string rule = absl::StrCat("straggler-", getpid());
  // The same rule, but one that never resolves within the run: what
  // Alertmanager must still hold at the end.
  const std::string held = absl::StrCat("straggler-held-", getpid());
  testing::TempDir dir;
  const std::string rules = dir.Sub("rules.yaml");
  std::ofstream(rules) << "rules:\n  - name: " << rule
                       << "\n    kind: straggler\n    threshold: 5%\n"
                          "    for: 1\n    clear_for: 2\n"
                       << "  - name: " << held
                       << "\n    kind: straggler\n    threshold: 5%\n"
                          "    for: 1\n    clear_for: 1000\n";
  // No end markers: an ended job resolves its alerts, and this test wants
  // the rule's own hysteresis to resolve them.
  const std::string truth_file = dir.Sub("truth.jsonl");
  ASSERT_EQ(RunBubblewatch({"produce",
                            "--brokers",
                            brokers,
                            "--topic",
                            topic,
                            "--synthetic",
                            "--scenario",
                            "straggler",
                            "--job",
                            "strag",
                            "--jobs",
                            "6",
                            "--gpus-per-job",
                            "4",
                            "--duration",
                            "60s",
                            "--seed",
                            "5",
                            "--truth",
                            truth_file,
                            "--no-end-marker",
                            "--log-level",
                            "error"}),
            0);
  ASSERT_EQ(RunBubblewatch({"produce",
                            "--brokers",
                            brokers,
                            "--topic",
                            topic,
                            "--synthetic",
                            "--scenario",
                            "healthy",
                            "--job",
                            "healthy",
                            "--jobs",
                            "2",
                            "--gpus-per-job",
                            "4",
                            "--duration",
                            "30s",
                            "--seed",
                            "5",
                            "--no-end-marker",
                            "--log-level",
                            "error"}),
            0);
  const std::map<std::string, testing::StragglerTruth> truth =
      testing::ReadStragglerTruth(truth_file);
  ASSERT_EQ(truth.size(), 6u);

  const std::string store = dir.Sub("store");
  ASSERT_EQ(RunBubblewatch(
                AlertingProcessArgs(brokers, topic, store, rules, alertmanager,
                                    {"--exit-when-idle", "5s", "--dlq-topic",
                                     topic + ".dlq", "--log-level", "warn"})),
            0);
  // The scenario's TP x DP jobs (j mod 3 = 2: strag-002, strag-005; TP 2 x
  // DP 2, a host per TP group) are among them.
  int tensor_data_jobs = 0;
  for (const auto& [job, t] : truth) {
    tensor_data_jobs += testing::JobHosts(store, job).size() >= 2;
  }
  EXPECT_EQ(tensor_data_jobs, 2);

  absl::StatusOr<std::vector<testing::ConsumedMessage>> messages =
      testing::ReadTopic(brokers, topic + ".alerts", truth.size(),
                         absl::Seconds(60));
  ASSERT_TRUE(messages.ok()) << messages.status();
  std::map<std::string, std::vector<AlertEvent>> by_job;
  std::map<std::string, int> held_events;
  for (const testing::ConsumedMessage& m : *messages) {
    absl::StatusOr<AlertEvent> e = ParseAlertEventJson(m.value);
    ASSERT_TRUE(e.ok()) << e.status() << ": " << m.value;
    if (e->rule == held) {
      EXPECT_TRUE(truth.contains(e->job)) << "a healthy job fired: " << e->job;
      EXPECT_EQ(e->status, AlertStatus::kFiring) << e->job;
      ++held_events[e->job];
    }
    if (e->rule == rule) by_job[e->job].push_back(*std::move(e));
  }
  std::vector<double> latency_s;
  std::set<std::string> still_firing;
  int resolved = 0;
  for (const auto& [job, t] : truth) {
    SCOPED_TRACE(absl::StrCat(job, ": rank ", t.rank, " on ", t.host, ", ",
                              t.cause, " from ", t.start_ns, " to ", t.end_ns));
    const std::vector<AlertEvent>& events = by_job[job];
    ASSERT_FALSE(events.empty());
    int firings = 0;
    for (const AlertEvent& e : events) {
      if (e.status == AlertStatus::kFiring) ++firings;
    }
    EXPECT_EQ(firings, 1);
    const AlertEvent& fired = events.front();
    EXPECT_EQ(fired.status, AlertStatus::kFiring);
    EXPECT_EQ(fired.kind, RuleKind::kStraggler);
    EXPECT_EQ(fired.straggler_rank, t.rank);
    EXPECT_EQ(fired.straggler_host, t.host);
    EXPECT_EQ(fired.straggler_cause, t.cause);
    EXPECT_EQ(fired.cause, t.cause);
    // The root's machine labels it; its cost is stated.
    EXPECT_EQ(fired.host, t.host);
    EXPECT_GE(fired.straggler_cost_ns, 0);
    EXPECT_THAT(AlertDescription(fired),
                ::testing::HasSubstr(absl::StrCat("rank ", t.rank, " on host ",
                                                  t.host, " late by ")));
    // Not from the healthy steps before the straggler started, and at most
    // two windows after it.
    EXPECT_GT(fired.window_end_ns, t.start_ns);
    EXPECT_LE(fired.window_end_ns - t.start_ns, 2 * kWindowNs);
    // Detected within a window + the lateness + 1 s of event time.
    EXPECT_LE(fired.window_end_ns + kLatenessNs - t.start_ns,
              kWindowNs + kLatenessNs + 1'000'000'000);
    latency_s.push_back(
        static_cast<double>(fired.window_end_ns + kLatenessNs - t.start_ns) /
        1e9);
    std::printf(
        "%s: rank %lld %s, fired from window [%.1f, %.1f) s after "
        "the start, %.3g of GPU time; %zu events\n",
        job.c_str(), static_cast<long long>(t.rank), t.cause.c_str(),
        static_cast<double>(fired.window_start_ns - t.start_ns) / 1e9,
        static_cast<double>(fired.window_end_ns - t.start_ns) / 1e9,
        fired.value, events.size());
    if (events.back().status == AlertStatus::kResolved) {
      ++resolved;
      // Resolved by hysteresis, after the straggler went away.
      EXPECT_GT(events.back().window_start_ns, t.end_ns - kWindowNs);
    } else {
      still_firing.insert(job);
    }
  }
  for (const auto& [job, events] : by_job) {
    EXPECT_TRUE(truth.contains(job)) << "a healthy job fired: " << job;
  }
  std::sort(latency_s.begin(), latency_s.end());
  std::printf(
      "straggler detection latency (event time, window end + "
      "lateness - planted start), s: %s\n",
      absl::StrJoin(latency_s, " ").c_str());
  std::printf("resolved by clear_for: %d of %zu; TP x DP jobs: %d\n", resolved,
              truth.size(), tensor_data_jobs);

  // Alertmanager holds exactly the alerts still firing, labelled with the
  // planted cause (the processor posts from a background thread): every
  // job under the held rule, those not resolved under the other.
  std::set<std::string> straggler_jobs;
  for (const auto& [job, t] : truth) {
    straggler_jobs.insert(job);
    EXPECT_EQ(held_events[job], 1) << job;
  }
  for (const auto& [alert_name, want_jobs] :
       {std::pair{held, straggler_jobs}, std::pair{rule, still_firing}}) {
    // Named copies: clang 14 refuses a lambda capture of a structured
    // binding (C++20 allows it; gcc 12 does).
    const std::string& name = alert_name;
    const std::set<std::string>& want = want_jobs;
    std::map<std::string, std::string> listed;
    std::map<std::string, std::string> hosts;
    const bool settled = testing::PollUntil(
        [&] {
          hosts.clear();
          listed = ListedAlerts(alertmanager, name, &hosts);
          std::set<std::string> jobs;
          for (const auto& [job, cause] : listed) jobs.insert(job);
          return jobs == want;
        },
        absl::Seconds(30), absl::Milliseconds(500));
    EXPECT_TRUE(settled) << name << ": listed " << listed.size() << ", firing "
                         << want.size();
    for (const auto& [job, cause] : listed) {
      if (truth.contains(job)) {
        EXPECT_EQ(cause, truth.at(job).cause) << job;
        // Routed per machine: the root's host.
        EXPECT_EQ(hosts[job], truth.at(job).host) << job;
      }
    }
  }
}

}  // namespace
}  // namespace bubblewatch
