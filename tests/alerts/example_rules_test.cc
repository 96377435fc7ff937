// The example rules (ops/alerts/rules.example.yaml) on the synthetic fleet:
// each scenario job's windows, as the processor stores them (the offline
// analysis with 10 s windows is its oracle, docs/semantics.md#windows), go
// through the evaluator in time order. The sync, dataloader and alloc jobs
// must fire their cause's rule, and the healthy jobs must fire nothing: rules
// that page on the fleet `produce --synthetic` sends, not only on a demo.
#include <map>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "alerts/alert_evaluator.h"
#include "alerts/alert_rules.h"
#include "analysis/bubble_analyzer.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "ingest/synthetic/synthetic_fleet.h"

namespace bubblewatch {
namespace {

using ::testing::Contains;
using ::testing::IsEmpty;
using ::testing::Not;

const char kExampleRules[] =
    BUBBLEWATCH_TESTDATA_DIR "/../../ops/alerts/rules.example.yaml";

struct FleetRun {
  // Rules fired per job, and each window's cause shares for failure output.
  std::map<std::string, std::set<std::string>> fired;
  std::map<std::string, std::string> scenario;
  std::map<std::string, std::string> shares;
};

// The fleet `produce --synthetic --scenario mix` sends (its default event
// rate: the planted incidents' share of each step depends on it), `jobs`
// jobs of `gpus` GPUs, 40 s.
FleetRun RunExampleRules(int jobs, int gpus, uint64_t seed) {
  FleetRun run;
  absl::StatusOr<AlertRuleSet> rules = LoadAlertRulesFile(kExampleRules);
  EXPECT_TRUE(rules.ok()) << rules.status();
  if (!rules.ok()) return run;
  SyntheticFleetOptions options;
  options.jobs = jobs;  // Mix: job j runs scenario j % 6.
  options.gpus_per_job = gpus;
  options.duration = absl::Seconds(40);
  options.events_per_second_per_gpu = 20000;
  options.scenario = SyntheticScenario::kMix;
  options.seed = seed;
  absl::StatusOr<std::vector<SyntheticJob>> fleet =
      GenerateSyntheticFleet(options);
  EXPECT_TRUE(fleet.ok()) << fleet.status();
  if (!fleet.ok()) return run;

  // Every job's windows, then all of them in window order, as a processor
  // finalizes them while the fleet runs.
  std::map<int64_t, std::vector<WindowSummary>> by_start;
  for (const SyntheticJob& job : *fleet) {
    run.scenario[job.job] = std::string(SyntheticScenarioName(job.scenario));
    AnalyzerOptions analyzer;
    analyzer.window_ns = 10'000'000'000;
    analyzer.top_bubbles_per_window = 3;
    absl::StatusOr<Analysis> analysis =
        AnalyzeTrace(job.MergedTrace(), analyzer);
    EXPECT_TRUE(analysis.ok()) << analysis.status();
    if (!analysis.ok()) return run;
    for (const WindowAnalysis& w : analysis->windows) {
      WindowSummary s;
      s.job = job.job;
      s.window = w;
      std::string& text = run.shares[job.job];
      absl::StrAppendFormat(
          &text, "\n    window %d: util %.1f%%",
          (w.start_ns - options.start_time_ns) / 1'000'000'000,
          100 * w.job.utilization());
      for (BubbleCause c : kAllBubbleCauses) {
        const int64_t ns = w.job.attribution[static_cast<int>(c)];
        if (w.job.span_ns > 0 && ns * 1000 >= w.job.span_ns) {
          absl::StrAppendFormat(&text, " %s %.2f%%", BubbleCauseName(c),
                                100.0 * ns / w.job.span_ns);
        }
      }
      by_start[w.start_ns].push_back(std::move(s));
    }
  }
  AlertEvaluator evaluator(*std::move(rules), AlertEvaluatorOptions{});
  const absl::Time t0 = absl::FromUnixNanos(options.start_time_ns);
  for (const auto& [start, windows] : by_start) {
    // Wall time follows event time: a window closes when it ends.
    const absl::Time now =
        t0 + absl::Nanoseconds(start - options.start_time_ns + 10'000'000'000);
    for (const WindowSummary& w : windows) {
      for (const AlertEvent& e : evaluator.OnJobActivity(w.job, now)) {
        if (e.status == AlertStatus::kFiring) run.fired[e.job].insert(e.rule);
      }
      for (const AlertEvent& e : evaluator.OnWindow(w, now)) {
        if (e.status == AlertStatus::kFiring) run.fired[e.job].insert(e.rule);
      }
    }
  }
  return run;
}

void ExpectEachCauseJobFiresItsRule(const FleetRun& run) {
  // The rule each scenario must fire; every other cause rule must stay quiet
  // on it, and healthy jobs fire nothing at all.
  const std::map<std::string, std::string> want = {
      {"sync", "host-sync-stall"},
      {"dataloader", "data-loading-stall"},
      {"alloc", "allocator-churn"},
  };
  const std::set<std::string> cause_rules = {
      "host-sync-stall", "data-loading-stall", "allocator-churn"};
  std::set<std::string> scenarios_seen;
  for (const auto& [job, scenario] : run.scenario) {
    scenarios_seen.insert(scenario);
    const auto it = run.fired.find(job);
    const std::set<std::string> fired =
        it == run.fired.end() ? std::set<std::string>{} : it->second;
    const std::string where =
        absl::StrCat(job, " (", scenario, "):", run.shares.at(job));
    if (scenario == "healthy") {
      EXPECT_THAT(fired, IsEmpty()) << where;
      continue;
    }
    const auto rule = want.find(scenario);
    for (const std::string& r : cause_rules) {
      if (rule != want.end() && r == rule->second) {
        EXPECT_THAT(fired, Contains(r)) << where;
      } else {
        EXPECT_THAT(fired, Not(Contains(r))) << where;
      }
    }
  }
  EXPECT_THAT(scenarios_seen, Contains("healthy"));
  EXPECT_THAT(scenarios_seen, Contains("sync"));
  EXPECT_THAT(scenarios_seen, Contains("dataloader"));
  EXPECT_THAT(scenarios_seen, Contains("alloc"));
}

TEST(ExampleRules, FireOnTheSyntheticFleetsCauseJobsOnly) {
  ExpectEachCauseJobFiresItsRule(RunExampleRules(12, 1, 1));
}

// Another seed and GPU count: the thresholds are not tuned to one run.
TEST(ExampleRules, FireTheSameAtAnotherSeed) {
  ExpectEachCauseJobFiresItsRule(RunExampleRules(6, 2, 7));
}

}  // namespace
}  // namespace bubblewatch
