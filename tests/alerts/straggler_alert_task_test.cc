// The `straggler` rule's false-alert target, without a broker: what
// `produce --synthetic` sends goes through the partition task over the
// in-memory Kafka (tests/processor/task_driver.h) with the alert hook that
// `process --rules` wires (alerts/alert_hook.h), and the store is read back
// with the binary's `query`. This was a broker test
// (StragglerAlertKafka.NoFalseAlertOnFiftyHealthyMultiRankJobs, ctest
// label kafka) with the same assertions; what it checks is the rule and
// the collective analysis, not Kafka or Alertmanager. The alerts the hook
// commits are what it publishes to the alerts topic; those still active at
// the end are what it keeps sending Alertmanager. The delivery itself stays
// on the broker (StragglerAlertKafka.NamesThePlantedRank...,
// docs/architecture.md#testing-the-partition-task).
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "alerts/alert_event.h"
#include "alerts/alert_hook.h"
#include "alerts/alert_rules.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "ingest/synthetic/synthetic_fleet.h"
#include "simdjson.h"
#include "tests/alerts/straggler_truth.h"
#include "tests/processor/task_driver.h"
#include "tests/testing/files.h"
#include "tests/testing/temp_dir.h"

namespace bubblewatch {
namespace {

using testing::ProcessOptions;
using testing::TaskDriver;

// Was StragglerAlertKafka.NoFalseAlertOnFiftyHealthyMultiRankJobs.
// The target "no straggler is reported in healthy jobs (0 false
// alerts over 30 min of event time on 50 healthy multi-rank jobs)": 50 jobs
// of `produce --synthetic --scenario lockstep` (2, 3 and 4 ranks; matched
// all-reduces on every rank, natural jitter, no rank late), 30 min of event
// time at 10 events/s per GPU (2.7 s steps; 16-event batches), processed
// with the example rules (ops/alerts/rules.example.yaml and its `straggler`
// rule), plus a copy of that rule that never resolves:
//   - no straggler alert for any healthy job, committed or still active,
//     although the processor stored a collective analysis for (nearly)
//     every one of their windows (`query fleet --json`: the rule did look),
//     and no stored window of theirs names a straggler (their straggler
//     wait is 0: docs/semantics.md#stragglers); five of the 4-rank jobs
//     are TP x DP (a host per TP group);
//   - one planted straggler job in the same run (the straggler scenario,
//     4 ranks, 40 s) fires once under each rule, naming its planted rank,
//     and is active under the rule that does not resolve: the same run can
//     fail.
TEST(StragglerAlertTask, NoFalseAlertOnFiftyHealthyMultiRankJobs) {
  const std::string run = absl::StrCat(getpid());
  const std::string held = absl::StrCat("straggler-held-", run);
  testing::TempDir dir;
  const std::string rules_path = dir.Sub("rules.yaml");
  {
    // The example file as it is (its rules list comes last), and its
    // straggler rule again under another name, never resolving.
    const std::string example =
        testing::ReadFile(std::string(BUBBLEWATCH_TESTDATA_DIR) +
                          "/../../ops/alerts/rules.example.yaml");
    ASSERT_THAT(example, ::testing::HasSubstr("kind: straggler\n"));
    std::ofstream(rules_path) << example << "\n  - name: " << held
                              << "\n    kind: straggler\n    threshold: 5%\n"
                                 "    for: 1\n    clear_for: 100000\n";
  }
  // `process --rules --idle-timeout 3s --exit-when-idle 5s` (its default
  // lateness, 2 s), the alerts published to no broker.
  StreamProcessorOptions options = ProcessOptions();
  options.windows_topic = "";
  options.windower.lateness_ns = 2'000'000'000;
  options.exit_when_idle = absl::Seconds(5);
  const std::string store = dir.Sub("store");
  TaskDriver driver(options, store);
  std::vector<AlertEvent> events;  // Committed, in order.
  AlertHook* hook = nullptr;
  driver.set_observer_factory(
      [&](WindowStore& s) -> absl::StatusOr<std::unique_ptr<CommitObserver>> {
        absl::StatusOr<AlertRuleSet> rules = LoadAlertRulesFile(rules_path);
        if (!rules.ok()) return rules.status();
        AlertHookOptions hook_options;
        hook_options.rules_path = rules_path;
        hook_options.on_event = [&](const AlertEvent& e) {
          events.push_back(e);
        };
        absl::StatusOr<std::unique_ptr<AlertHook>> made = AlertHook::Create(
            std::move(hook_options), *std::move(rules), &s, nullptr);
        if (!made.ok()) return made.status();
        hook = made->get();
        return std::unique_ptr<CommitObserver>(*std::move(made));
      });

  std::set<std::string> healthy;
  for (const auto& [gpus, jobs] :
       {std::pair{2, 17}, std::pair{3, 17}, std::pair{4, 16}}) {
    const std::string prefix = absl::StrCat("lockstep", gpus, "-", run);
    // `produce --synthetic --scenario lockstep --duration 30m --rate 10
    // --seed 20 --batch-events 16 --no-end-marker`: 1.6 s of a rank per
    // batch, under the 2 s lateness, so that a rank's first batch does not
    // close windows before the job's other ranks have sent theirs (a
    // stream not yet seen holds no watermark back,
    // docs/semantics.md#watermark).
    SyntheticFleetOptions fleet;
    fleet.scenario = SyntheticScenario::kLockstep;
    fleet.job_prefix = prefix;
    fleet.jobs = jobs;
    fleet.gpus_per_job = gpus;
    fleet.duration = absl::Minutes(30);
    fleet.events_per_second_per_gpu = 10;
    fleet.seed = 20;
    BatchingOptions batching;
    batching.max_events = 16;
    ASSERT_TRUE(driver.SendFleet(fleet, batching, /*end_markers=*/false).ok());
    for (int j = 0; j < jobs; ++j) {
      healthy.insert(absl::StrFormat("%s-%03d", prefix, j));
    }
  }
  ASSERT_EQ(healthy.size(), 50u);
  // `produce --synthetic --scenario straggler --jobs 1 --gpus-per-job 4
  // --duration 40s --seed 20 --truth FILE --no-end-marker`.
  SyntheticFleetOptions planted_fleet;
  planted_fleet.scenario = SyntheticScenario::kStraggler;
  planted_fleet.job_prefix = absl::StrCat("planted-", run);
  planted_fleet.jobs = 1;
  planted_fleet.gpus_per_job = 4;
  planted_fleet.duration = absl::Seconds(40);
  planted_fleet.seed = 20;
  {
    absl::StatusOr<std::vector<SyntheticJob>> jobs =
        GenerateSyntheticFleet(planted_fleet);
    ASSERT_TRUE(jobs.ok()) << jobs.status();
    ASSERT_TRUE(WriteSyntheticTruthFile(*jobs, dir.Sub("truth.jsonl")).ok());
  }
  ASSERT_TRUE(driver.SendFleet(planted_fleet, {}, /*end_markers=*/false).ok());
  const std::map<std::string, testing::StragglerTruth> truth =
      testing::ReadStragglerTruth(dir.Sub("truth.jsonl"));
  ASSERT_EQ(truth.size(), 1u);
  const testing::StragglerTruth& planted = truth.begin()->second;

  const absl::Status processed = driver.RunUntilIdle();
  ASSERT_TRUE(processed.ok()) << processed;
  ASSERT_NE(hook, nullptr);
  // What the hook still holds firing: what it keeps sending Alertmanager.
  const std::vector<AlertEvent> active = hook->Active();
  driver.Kill();  // After the last commit: the store closed, for `query`.

  // The planted job fires under both straggler rules; no healthy job
  // under either. Other rules' alerts are counted, not asserted.
  std::map<std::string, int> planted_firings;  // By rule.
  std::map<std::string, int> healthy_firings;  // By rule.
  for (const AlertEvent& e : events) {
    if (e.status != AlertStatus::kFiring) continue;
    if (e.job == planted.job) {
      ++planted_firings[e.rule];
      if (e.kind == RuleKind::kStraggler) {
        EXPECT_EQ(e.straggler_rank, planted.rank);
        EXPECT_EQ(e.straggler_cause, planted.cause);
      }
    } else if (healthy.contains(e.job)) {
      ++healthy_firings[e.rule];
      EXPECT_NE(e.kind, RuleKind::kStraggler)
          << "a healthy job fired " << e.rule << ": " << AlertEventToJson(e);
    }
  }
  EXPECT_EQ(planted_firings["straggler"], 1);
  EXPECT_EQ(planted_firings[held], 1);

  // The rule did look at the healthy jobs: the processor stored their
  // windows with a collective analysis (30 min: 180 windows of 10 s, the
  // last one or two partial).
  const std::string fleet_json = testing::QueryOutput(
      absl::StrCat("query fleet --store '", store,
                   "' --top 100 --by straggler_wait --json"));
  simdjson::dom::parser parser;
  simdjson::dom::element fleet = parser.parse(fleet_json);
  int64_t healthy_windows = 0;
  int64_t healthy_collective_windows = 0;
  int64_t healthy_straggler_wait_us = 0;
  std::set<std::string> seen;
  for (simdjson::dom::element row : fleet["top"].get_array()) {
    const std::string job = std::string(std::string_view(row["job"]));
    if (!healthy.contains(job)) continue;
    seen.insert(job);
    int64_t collective_windows = 0;
    if (row["period"]["collective_windows"].get(collective_windows) !=
        simdjson::SUCCESS) {
      collective_windows = 0;
    }
    EXPECT_GE(collective_windows, 178) << job;
    healthy_windows += int64_t(row["period"]["windows"]);
    healthy_collective_windows += collective_windows;
    double wait_us = 0;
    if (row["period"]["straggler_wait_us"].get(wait_us) == simdjson::SUCCESS) {
      healthy_straggler_wait_us += static_cast<int64_t>(wait_us);
    }
  }
  EXPECT_EQ(seen.size(), healthy.size());
  // No window of a healthy job names a straggler
  // (docs/semantics.md#stragglers: the windows' threshold), so none of
  // their wait is a straggler's.
  EXPECT_EQ(healthy_straggler_wait_us, 0);
  // A third of the 4-rank jobs are TP x DP (j mod 3 = 2: 5 of 16).
  int tensor_data_jobs = 0;
  for (int j = 0; j < 16; ++j) {
    tensor_data_jobs +=
        testing::JobHosts(store, absl::StrFormat("lockstep4-%s-%03d", run, j))
            .size() >= 2;
  }
  EXPECT_EQ(tensor_data_jobs, 5);

  // Still firing at the end: under the held rule exactly the planted job;
  // under neither rule a healthy job.
  std::set<std::string> held_active;
  int healthy_active = 0;
  for (const AlertEvent& e : active) {
    if (e.rule == held) held_active.insert(e.job);
    if ((e.rule == "straggler" || e.rule == held) && healthy.contains(e.job)) {
      ++healthy_active;
      ADD_FAILURE() << e.rule << " still firing for " << e.job;
    }
  }
  EXPECT_EQ(held_active, std::set<std::string>{planted.job});
  int healthy_straggler_firings = 0;
  std::map<std::string, int> other_firings;
  for (const auto& [name, n] : healthy_firings) {
    if (name == "straggler" || name == held) {
      healthy_straggler_firings += n;
    } else {
      other_firings[name] = n;
    }
  }
  std::printf(
      "50 healthy lockstep jobs (149 ranks, %d of them TP x DP), 30 min of "
      "event time: %lld "
      "windows, %lld with a collective analysis, straggler wait %.3f s in "
      "all; straggler alerts fired: %d, still firing at the end: %d; "
      "other rules fired on them: %s\n",
      tensor_data_jobs, static_cast<long long>(healthy_windows),
      static_cast<long long>(healthy_collective_windows),
      static_cast<double>(healthy_straggler_wait_us) / 1e6,
      healthy_straggler_firings, healthy_active,
      other_firings.empty()
          ? "none"
          : absl::StrJoin(other_firings, ", ", absl::PairFormatter("="))
                .c_str());
  std::printf(
      "planted straggler %s (rank %lld, %s): fired straggler %d, %s %d\n",
      planted.job.c_str(), static_cast<long long>(planted.rank),
      planted.cause.c_str(), planted_firings["straggler"], held.c_str(),
      planted_firings[held]);
}

}  // namespace
}  // namespace bubblewatch
