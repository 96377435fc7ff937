#include "alerts/alert_evaluator.h"

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "base/human_duration.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "schemas/state_record.h"
#include "tests/alerts/alert_test_clock.h"
#include "tests/alerts/alert_test_windows.h"
#include "tests/testing/files.h"

namespace bubblewatch {
namespace {

using ::testing::HasSubstr;

using alert_test::kT0;
using alert_test::kWindowNs;
using alert_test::Rules;
using alert_test::Window;

constexpr char kSyncRule[] = R"(rules:
  - name: sync-stall
    kind: cause_share_above
    cause: host_sync
    threshold: 30%
    for: 2
    clear_for: 2
    repeat_interval: 1m
    severity: critical
)";

std::vector<AlertStatus> Statuses(const std::vector<AlertEvent>& events) {
  std::vector<AlertStatus> out;
  for (const AlertEvent& e : events) out.push_back(e.status);
  return out;
}

TEST(AlertEvaluator, FiresOnceAfterKWindowsAndResolvesOnceAfterKClear) {
  AlertEvaluator ev(Rules(kSyncRule), {.dashboard_url = "http://dash:8080"});
  const std::vector<double> shares = {0.1, 0.5, 0.6, 0.7, 0.2,
                                      0.6, 0.1, 0.1, 0.1};
  std::vector<std::pair<int, AlertStatus>> seen;
  for (int i = 0; i < static_cast<int>(shares.size()); ++i) {
    // Windows every 10 s: never a repeat inside the 1 m interval.
    for (const AlertEvent& e :
         ev.OnWindow(Window("j", i, shares[i]), kT0 + absl::Seconds(10 * i))) {
      seen.emplace_back(i, e.status);
    }
  }
  // Fires at the second holding window (i=2); one clear window (i=4) does not
  // resolve; two (i=6,7) do.
  EXPECT_THAT(
      seen, ::testing::ElementsAre(std::make_pair(2, AlertStatus::kFiring),
                                   std::make_pair(7, AlertStatus::kResolved)));
}

// Window `i` of a 4-rank job (10 s of GPU time, busy) whose rank
// `straggler` (on host "node-<rank>") caused `wait_share` of it in waits,
// most of it by data loading, a quarter by compute; `straggler` < 0: the
// ranks ran collectives but nobody was late.
WindowSummary RankWindowOf(const std::string& job, int i, int straggler,
                           double wait_share) {
  WindowSummary w = Window(job, i, 0);
  WindowCollectives& c = w.collectives.emplace();
  for (int r = 0; r < 4; ++r) {
    c.ranks.push_back(RankWindow{
        .rank = r, .host = absl::StrCat("node-", r), .span_ns = kWindowNs / 4});
  }
  if (straggler >= 0) {
    StragglerWindow& s = c.stragglers.emplace_back();
    s.rank = straggler;
    s.wait_caused_ns = static_cast<int64_t>(wait_share * kWindowNs);
    s.compute_ns = s.wait_caused_ns / 4;
    s.causes[static_cast<int>(BubbleCause::kDataLoading)] =
        s.wait_caused_ns - s.compute_ns;
    // The root (docs/semantics.md#root-cause): a third of its wait passed on
    // through the next rank, which only waited; it would have saved a fifth
    // of its wait.
    s.host = absl::StrCat("node-", straggler);
    s.direct_wait_caused_ns = s.wait_caused_ns - s.wait_caused_ns / 3;
    s.via.push_back(Straggler::Via{.rank = (straggler + 1) % 4,
                                   .wait_ns = s.wait_caused_ns / 3});
    s.saved_ns = s.wait_caused_ns / 5;
    // A second, smaller straggler: never the one named. (Read `s` before
    // the vector grows: emplace_back may move it.)
    const int64_t first_wait_ns = s.wait_caused_ns;
    StragglerWindow& t = c.stragglers.emplace_back();
    t.rank = straggler == 0 ? 1 : 0;
    t.wait_caused_ns = first_wait_ns / 10;
    t.comm_ns = t.wait_caused_ns;
  }
  return w;
}

constexpr char kStragglerRule[] = R"(rules:
  - name: straggler
    kind: straggler
    threshold: 5%
    for: 2
    clear_for: 2
    severity: critical
)";

TEST(AlertEvaluator, StragglerFiresOnOneRankForKWindowsAndNamesIt) {
  AlertEvaluator ev(Rules(kStragglerRule), {});
  // (rank, share) per window: under the threshold; rank 2 once then rank 3
  // (another rank restarts the count); rank 3 again: fires; a window
  // without a late rank and one under the threshold: resolves.
  const std::vector<std::pair<int, double>> windows = {
      {2, 0.04}, {2, 0.2}, {3, 0.3},  {3, 0.25}, {3, 0.3},
      {1, 0.5},  {-1, 0},  {3, 0.01}, {3, 0.3}};
  std::vector<std::pair<int, AlertEvent>> seen;
  for (int i = 0; i < static_cast<int>(windows.size()); ++i) {
    for (AlertEvent& e : ev.OnWindow(
             RankWindowOf("big", i, windows[i].first, windows[i].second),
             kT0 + absl::Seconds(10 * i))) {
      seen.emplace_back(i, std::move(e));
    }
  }
  ASSERT_EQ(seen.size(), 2u);
  EXPECT_EQ(seen[0].first, 3);
  const AlertEvent& fired = seen[0].second;
  EXPECT_EQ(fired.status, AlertStatus::kFiring);
  EXPECT_EQ(fired.kind, RuleKind::kStraggler);
  EXPECT_EQ(fired.measure, "straggler_wait_share");
  EXPECT_DOUBLE_EQ(fired.value, 0.25);
  EXPECT_DOUBLE_EQ(fired.threshold, 0.05);
  EXPECT_EQ(fired.straggler_rank, 3);
  EXPECT_EQ(fired.straggler_host, "node-3");
  EXPECT_EQ(fired.straggler_cause, "data_loading");
  EXPECT_EQ(fired.cause, "data_loading");  // The Alertmanager label.
  EXPECT_EQ(fired.window_start_ns, 3 * kWindowNs);
  EXPECT_EQ(fired.host, "node-3");  // The Alertmanager label.
  const int64_t saved_ns = static_cast<int64_t>(0.25 * kWindowNs) / 5;
  EXPECT_EQ(fired.straggler_cost_ns, saved_ns);
  EXPECT_EQ(fired.straggler_of_ns, kWindowNs);
  // Names the root, its host, cause and cost; not the rank it held up.
  EXPECT_THAT(AlertDescription(fired),
              HasSubstr(absl::StrCat(
                  "job big: rank 3 on host node-3 late by data loading; cost "
                  "the job ",
                  HumanDurationWords(saved_ns), " of every ",
                  HumanDurationWords(kWindowNs),
                  " window (its waits 25% of GPU time, threshold 5%)")));
  EXPECT_THAT(AlertDescription(fired), ::testing::Not(HasSubstr("rank 0")));
  // Resolves after two clear windows (6: nobody late, 7: 1 %).
  EXPECT_EQ(seen[1].first, 7);
  EXPECT_EQ(seen[1].second.status, AlertStatus::kResolved);
  EXPECT_EQ(seen[1].second.cause, "data_loading");  // Fixed for its life.
  EXPECT_EQ(seen[1].second.host, "node-3");
  // The event's JSON carries the straggler and reads back.
  absl::StatusOr<AlertEvent> back =
      ParseAlertEventJson(AlertEventToJson(fired));
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->kind, RuleKind::kStraggler);
  EXPECT_EQ(back->straggler_rank, 3);
  EXPECT_EQ(back->straggler_host, "node-3");
  EXPECT_EQ(back->straggler_cause, "data_loading");
  EXPECT_EQ(back->straggler_cost_ns, saved_ns);
  EXPECT_EQ(back->straggler_of_ns, kWindowNs);
  EXPECT_EQ(back->host, "node-3");
}

TEST(AlertEvaluator, StragglerIgnoresSingleRankJobsAndHealthyRanks) {
  AlertEvaluator ev(Rules(kStragglerRule), {});
  for (int i = 0; i < 20; ++i) {
    // A single-rank job, however idle, and a multi-rank job whose late
    // ranks stay under 5 %.
    EXPECT_TRUE(ev.OnWindow(Window("single", i, 0.9), kT0).empty());
    EXPECT_TRUE(
        ev.OnWindow(RankWindowOf("healthy", i, i % 4, 0.049), kT0).empty());
  }
  EXPECT_TRUE(ev.Active().empty());
  // Only the multi-rank job has state for the rule.
  std::vector<std::string> keys;
  for (const AlertStateUpdate& u : ev.TakeStateUpdates()) {
    if (u.state && absl::StrContains(*u.state, "straggler")) {
      keys.push_back(u.key);
    }
  }
  EXPECT_THAT(keys, ::testing::ElementsAre(JobAlertStateKey("healthy")));
}

TEST(AlertEvaluator, FiringStragglerSurvivesARestart) {
  AlertEvaluator ev(Rules(kStragglerRule), {});
  ev.OnWindow(RankWindowOf("big", 0, 2, 0.3), kT0);
  ASSERT_EQ(ev.OnWindow(RankWindowOf("big", 1, 2, 0.3), kT0).size(), 1u);
  std::vector<std::pair<std::string, std::string>> states;
  for (const AlertStateUpdate& u : ev.TakeStateUpdates()) {
    if (u.state) states.emplace_back(u.key, *u.state);
  }
  AlertEvaluator restarted(Rules(kStragglerRule), {});
  ASSERT_TRUE(restarted.Restore(states).ok());
  ASSERT_EQ(restarted.Active().size(), 1u);
  EXPECT_EQ(restarted.Active()[0].straggler_rank, 2);
  EXPECT_EQ(restarted.Active()[0].straggler_host, "node-2");
  // Still firing: no second firing; two clear windows resolve it.
  EXPECT_TRUE(restarted.OnWindow(RankWindowOf("big", 2, 2, 0.3), kT0).empty());
  EXPECT_TRUE(restarted.OnWindow(RankWindowOf("big", 3, -1, 0), kT0).empty());
  std::vector<AlertEvent> e =
      restarted.OnWindow(RankWindowOf("big", 4, -1, 0), kT0);
  ASSERT_EQ(e.size(), 1u);
  EXPECT_EQ(e[0].status, AlertStatus::kResolved);
}

TEST(AlertEvaluator, PayloadCarriesMeasuredValuesCauseBubbleAndLink) {
  AlertEvaluator ev(Rules(kSyncRule), {.dashboard_url = "http://dash:8080"});
  ASSERT_TRUE(ev.OnWindow(Window("train/a", 0, 0.5), kT0).empty());
  std::vector<AlertEvent> e = ev.OnWindow(Window("train/a", 1, 0.42), kT0);
  ASSERT_EQ(e.size(), 1u);
  EXPECT_EQ(e[0].job, "train/a");
  EXPECT_EQ(e[0].rule, "sync-stall");
  EXPECT_EQ(e[0].severity, "critical");
  EXPECT_EQ(e[0].measure, "host_sync_share");
  EXPECT_DOUBLE_EQ(e[0].value, 0.42);
  EXPECT_DOUBLE_EQ(e[0].threshold, 0.3);
  EXPECT_EQ(e[0].window_start_ns, kWindowNs);
  EXPECT_EQ(e[0].dominant_cause, BubbleCause::kHostSync);
  EXPECT_DOUBLE_EQ(e[0].dominant_share, 1.0);
  ASSERT_TRUE(e[0].largest_bubble.has_value());
  EXPECT_EQ(e[0].largest_bubble->blamed, "cudaStreamSynchronize");
  EXPECT_EQ(e[0].largest_bubble->before->name, "conv");
  EXPECT_EQ(e[0].largest_bubble->after->name, "gemm");
  EXPECT_EQ(e[0].dashboard_url, "http://dash:8080/?job=train/a");
  EXPECT_EQ(e[0].starts_at, kT0);
}

TEST(AlertEvaluator, RepeatsOnlyAtTheIntervalWhileFiring) {
  AlertEvaluator ev(Rules(kSyncRule), {});
  ev.OnWindow(Window("j", 0, 0.5), kT0);
  ASSERT_EQ(ev.OnWindow(Window("j", 1, 0.5), kT0).size(), 1u);
  EXPECT_TRUE(ev.OnTick(kT0 + absl::Seconds(59)).empty());
  EXPECT_THAT(Statuses(ev.OnTick(kT0 + absl::Seconds(60))),
              ::testing::ElementsAre(AlertStatus::kRepeat));
  EXPECT_TRUE(ev.OnTick(kT0 + absl::Seconds(100)).empty());
  EXPECT_THAT(Statuses(ev.OnTick(kT0 + absl::Seconds(121))),
              ::testing::ElementsAre(AlertStatus::kRepeat));
}

TEST(AlertEvaluator, ReplayedWindowIsIgnored) {
  AlertEvaluator ev(Rules(kSyncRule), {});
  ev.OnWindow(Window("j", 0, 0.5), kT0);
  EXPECT_TRUE(ev.OnWindow(Window("j", 0, 0.5), kT0).empty());
  EXPECT_EQ(ev.OnWindow(Window("j", 1, 0.5), kT0).size(), 1u);
  EXPECT_TRUE(ev.OnWindow(Window("j", 1, 0.5), kT0).empty());
}

TEST(AlertEvaluator, RestoredStateNeitherRefiresNorForgets) {
  AlertEvaluator first(Rules(kSyncRule), {});
  first.OnWindow(Window("j", 0, 0.5), kT0);
  first.OnWindow(Window("j", 1, 0.5), kT0);
  std::vector<std::pair<std::string, std::string>> stored;
  for (const AlertStateUpdate& u : first.TakeStateUpdates()) {
    ASSERT_TRUE(u.state.has_value());
    stored.emplace_back(u.key, *u.state);
  }
  AlertEvaluator second(Rules(kSyncRule), {});
  ASSERT_TRUE(second.Restore(stored).ok());
  ASSERT_EQ(second.Active().size(), 1u);
  EXPECT_EQ(second.Active()[0].starts_at, kT0);
  EXPECT_EQ(second.Active()[0].largest_bubble->blamed, "cudaStreamSynchronize");
  // Still holding: no second firing. Then two clear windows resolve it.
  EXPECT_TRUE(second.OnWindow(Window("j", 2, 0.5), kT0).empty());
  EXPECT_TRUE(second.OnWindow(Window("j", 3, 0.0), kT0).empty());
  std::vector<AlertEvent> resolved = second.OnWindow(Window("j", 4, 0.0), kT0);
  ASSERT_EQ(resolved.size(), 1u);
  EXPECT_EQ(resolved[0].status, AlertStatus::kResolved);
  EXPECT_EQ(resolved[0].starts_at, kT0);
}

TEST(AlertEvaluator, CorruptStateIsReportedNotFatal) {
  AlertEvaluator ev(Rules(kSyncRule), {});
  absl::Status s = ev.Restore({{"j/x", "garbage"}});
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(s.message(), ::testing::HasSubstr("j/x"));
}

TEST(AlertEvaluator, UtilizationBelowAndBubbleLongerThan) {
  AlertEvaluator ev(Rules(R"(rules:
  - {name: low, kind: utilization_below, threshold: 60%, for: 1}
  - {name: long, kind: bubble_longer_than, duration: 3s}
)"),
                    {});
  // Utilization 50 % < 60 % and a 5 s bubble > 3 s: both fire.
  std::vector<AlertEvent> e = ev.OnWindow(Window("j", 0, 0.5), kT0);
  ASSERT_EQ(e.size(), 2u);
  EXPECT_EQ(e[0].rule, "low");
  EXPECT_DOUBLE_EQ(e[0].value, 0.5);
  EXPECT_EQ(e[1].rule, "long");
  EXPECT_DOUBLE_EQ(e[1].value, 5.0);
  // 80 % utilization, 2 s bubble: neither holds, both resolve.
  std::vector<AlertEvent> r = ev.OnWindow(Window("j", 1, 0.2), kT0);
  EXPECT_THAT(Statuses(r), ::testing::ElementsAre(AlertStatus::kResolved,
                                                  AlertStatus::kResolved));
}

// The generated summary and the description (Alertmanager and the topic)
// write times as RFC 3339 and durations in words, never epoch ns.
TEST(AlertEvaluator, GeneratedTextHasRfc3339TimesAndDurationsInWords) {
  AlertEvaluator ev(Rules(R"(rules:
  - {name: long, kind: bubble_longer_than, duration: 5s}
  - {name: silent, kind: job_silent, duration: 5m}
  - {name: sync, kind: cause_share_above, cause: host_sync, threshold: 10%}
)"),
                    {});
  ev.OnJobActivity("j", kT0);
  std::vector<AlertEvent> fired = ev.OnWindow(Window("j", 1, 0.6), kT0);
  ASSERT_EQ(fired.size(), 2u);
  const AlertEvent& long_bubble = fired[0].rule == "long" ? fired[0] : fired[1];
  const AlertEvent& sync = fired[0].rule == "long" ? fired[1] : fired[0];
  EXPECT_EQ(long_bubble.summary,
            "long of j: largest bubble 6 seconds (threshold 5 seconds)");
  EXPECT_EQ(AlertDescription(long_bubble),
            "largest bubble 6 seconds (threshold 5 seconds) in the window of "
            "10 seconds from 1970-01-01T00:00:10Z, utilization 40.0%");
  EXPECT_EQ(sync.summary,
            "sync of j: host_sync 60% of GPU time (threshold 10%)");
  EXPECT_THAT(AlertEventToJson(sync),
              HasSubstr("\"description\":\"host_sync 60% of GPU time "
                        "(threshold 10%) in the window of 10 seconds from "
                        "1970-01-01T00:00:10Z, utilization 40.0%\""));
  ASSERT_TRUE(sync.largest_bubble.has_value());
  EXPECT_EQ(AlertLargestBubbleText(*sync.largest_bubble),
            "6 seconds on device 0 at 1970-01-01T00:00:10.000001Z, cause "
            "host_sync, blamed on cudaStreamSynchronize; after kernel conv; "
            "before kernel gemm");

  std::vector<AlertEvent> silent =
      ev.OnTick(kT0 + absl::Minutes(5) + absl::Seconds(12));
  ASSERT_EQ(silent.size(), 1u);
  EXPECT_EQ(silent[0].summary,
            "silent of j: silent for 5 minutes 12 seconds (threshold 5 "
            "minutes)");
}

TEST(AlertEvaluator, SilenceFiresAfterTAndResolvesOnActivity) {
  AlertEvaluator ev(Rules(R"(rules:
  - {name: silent, kind: job_silent, duration: 30s}
)"),
                    {});
  ev.OnJobActivity("j", kT0);
  EXPECT_TRUE(ev.OnTick(kT0 + absl::Seconds(30)).empty());
  std::vector<AlertEvent> fired = ev.OnTick(kT0 + absl::Seconds(31));
  ASSERT_EQ(fired.size(), 1u);
  EXPECT_EQ(fired[0].measure, "silent_s");
  EXPECT_DOUBLE_EQ(fired[0].value, 31.0);
  EXPECT_TRUE(ev.OnTick(kT0 + absl::Seconds(40)).empty());
  EXPECT_THAT(Statuses(ev.OnJobActivity("j", kT0 + absl::Seconds(45))),
              ::testing::ElementsAre(AlertStatus::kResolved));
}

// A multi-rank job waiting for its other ranks' files
// (docs/semantics.md#job-lifecycle) is silent on purpose: no job_silent, also
// after a restart; once the grace ends it (or a rank comes back and the job
// sends again without waiting), silence counts again.
TEST(AlertEvaluator, AJobWaitingForItsRanksIsNotSilent) {
  const auto rules = Rules(R"(rules:
  - {name: silent, kind: job_silent, duration: 30s}
)");
  AlertEvaluator ev(rules, {});
  ev.OnJobActivity("j", kT0);
  JobLifecycle waiting;
  waiting.world_size = 4;
  waiting.ended_ranks = {0};
  waiting.awaiting_ranks_since_ns = 12'000'000'000;
  ev.OnJobLifecycle("j", waiting, kT0);
  EXPECT_TRUE(ev.OnTick(kT0 + absl::Minutes(9)).empty());

  std::vector<std::pair<std::string, std::string>> stored;
  for (const AlertStateUpdate& u : ev.TakeStateUpdates()) {
    ASSERT_TRUE(u.state.has_value());
    stored.emplace_back(u.key, *u.state);
  }
  AlertEvaluator restored(rules, {});
  ASSERT_TRUE(restored.Restore(stored).ok());
  EXPECT_TRUE(restored.OnTick(kT0 + absl::Minutes(9)).empty())
      << "the restored state still waits";

  JobLifecycle sending = waiting;  // Not waiting any more, and not ended.
  sending.awaiting_ranks_since_ns = std::nullopt;
  restored.OnJobLifecycle("j", sending, kT0);
  std::vector<AlertEvent> fired = restored.OnTick(kT0 + absl::Minutes(10));
  ASSERT_EQ(fired.size(), 1u);
  EXPECT_EQ(fired[0].rule, "silent");
}

TEST(AlertEvaluator, FleetRuleFiresOneGroupedAlert) {
  AlertEvaluator ev(Rules(R"(rules:
  - {name: stall, kind: cause_share_above, cause: host_sync, threshold: 30%}
  - {name: many, kind: fleet, rule: stall, jobs_firing_more_than: 2}
)"),
                    {});
  int fleet_firings = 0;
  for (int j = 0; j < 5; ++j) {
    for (const AlertEvent& e :
         ev.OnWindow(Window("job" + std::to_string(j), 0, 0.5), kT0)) {
      if (e.rule == "many") {
        ++fleet_firings;
        EXPECT_EQ(e.status, AlertStatus::kFiring);
        EXPECT_EQ(e.jobs.size(), 3u);
        EXPECT_EQ(e.job, "");
      }
    }
  }
  EXPECT_EQ(fleet_firings, 1);
  // Jobs recover one by one; the fleet alert resolves once, at <= 2.
  std::vector<AlertStatus> fleet;
  for (int j = 0; j < 5; ++j) {
    for (const AlertEvent& e :
         ev.OnWindow(Window("job" + std::to_string(j), 1, 0.0), kT0)) {
      if (e.rule == "many") fleet.push_back(e.status);
    }
  }
  EXPECT_THAT(fleet, ::testing::ElementsAre(AlertStatus::kResolved));
}

TEST(AlertEvaluator, ReloadResolvesAlertsOfRemovedRules) {
  AlertEvaluator ev(Rules(kSyncRule), {});
  ev.OnWindow(Window("j", 0, 0.5), kT0);
  ev.OnWindow(Window("j", 1, 0.5), kT0);
  ASSERT_EQ(ev.Active().size(), 1u);
  std::vector<AlertEvent> e = ev.SetRules(
      Rules("rules:\n  - {name: other, kind: job_silent, duration: 1m}\n"),
      kT0);
  ASSERT_EQ(e.size(), 1u);
  EXPECT_EQ(e[0].status, AlertStatus::kResolved);
  EXPECT_TRUE(ev.Active().empty());
}

}  // namespace
}  // namespace bubblewatch

namespace bubblewatch {
namespace {

TEST(AlertEvaluator, CauseIsFixedWhileTheAlertLives) {
  AlertEvaluator ev(Rules(R"(rules:
  - {name: low, kind: utilization_below, threshold: 90%, for: 1}
)"),
                    {});
  std::vector<AlertEvent> fired = ev.OnWindow(Window("j", 0, 0.5), kT0);
  ASSERT_EQ(fired.size(), 1u);
  EXPECT_EQ(fired[0].cause, "host_sync");
  // The next window's bubbles are all memcpy: the payload says so, the
  // cause (Alertmanager's label) stays.
  WindowSummary w = Window("j", 1, 0.5);
  w.window.job.attribution = {};
  w.window.job.attribution[static_cast<int>(BubbleCause::kMemcpy)] =
      w.window.job.bubble_ns;
  ASSERT_TRUE(ev.OnWindow(w, kT0).empty());
  std::vector<AlertEvent> repeat = ev.OnTick(kT0 + absl::Hours(2));
  ASSERT_EQ(repeat.size(), 1u);
  EXPECT_EQ(repeat[0].dominant_cause, BubbleCause::kMemcpy);
  EXPECT_EQ(repeat[0].cause, "host_sync");
}

TEST(AlertEvaluator, ActivityOfJobsWithoutSilenceRulesIsNotRewritten) {
  AlertEvaluator ev(Rules(R"(rules:
  - {name: silent, kind: job_silent, duration: 1m, jobs: {prefix: "watched-"}}
)"),
                    {});
  ev.OnJobActivity("watched-1", kT0);
  ev.OnJobActivity("other-1", kT0);
  std::vector<AlertStateUpdate> updates = ev.TakeStateUpdates();
  ASSERT_EQ(updates.size(), 1u);
  EXPECT_EQ(updates[0].key, "j/watched-1");
}

std::vector<std::pair<std::string, std::string>> Stored(AlertEvaluator& ev) {
  std::vector<std::pair<std::string, std::string>> out;
  for (const AlertStateUpdate& u : ev.TakeStateUpdates()) {
    EXPECT_TRUE(u.state.has_value()) << u.key;
    if (u.state) out.emplace_back(u.key, *u.state);
  }
  return out;
}

TEST(AlertEvaluator, UndeliveredResolutionSurvivesRestartUntilDelivered) {
  AlertEvaluator first(Rules(kSyncRule), {});
  first.OnWindow(Window("j", 0, 0.5), kT0);
  std::vector<AlertEvent> fired = first.OnWindow(Window("j", 1, 0.5), kT0);
  ASSERT_EQ(fired.size(), 1u);
  first.MarkDelivered(fired[0]);
  first.OnWindow(Window("j", 2, 0.0), kT0 + absl::Seconds(10));
  std::vector<AlertEvent> resolved =
      first.OnWindow(Window("j", 3, 0.0), kT0 + absl::Seconds(20));
  ASSERT_EQ(resolved.size(), 1u);
  ASSERT_EQ(resolved[0].status, AlertStatus::kResolved);
  // Marking the older firing again does not count for the resolution.
  first.MarkDelivered(fired[0]);
  ASSERT_EQ(first.ToDeliver().size(), 1u);

  // A restart before the resolution was delivered: it is still to deliver.
  AlertEvaluator second(Rules(kSyncRule), {});
  ASSERT_TRUE(second.Restore(Stored(first)).ok());
  EXPECT_TRUE(second.Active().empty());
  std::vector<AlertEvent> to_deliver = second.ToDeliver();
  ASSERT_EQ(to_deliver.size(), 1u);
  EXPECT_EQ(to_deliver[0].status, AlertStatus::kResolved);
  EXPECT_EQ(to_deliver[0].ends_at, kT0 + absl::Seconds(20));
  EXPECT_EQ(to_deliver[0].starts_at, kT0);
  // A condition holding again for one window (for: 2) does not lose it.
  second.OnWindow(Window("j", 4, 0.5), kT0 + absl::Seconds(30));
  ASSERT_EQ(second.ToDeliver().size(), 1u);
  EXPECT_EQ(second.ToDeliver()[0].status, AlertStatus::kResolved);

  // Delivered: the mark is a state change, and a third start has nothing.
  second.TakeStateUpdates();
  second.MarkDelivered(to_deliver[0]);
  EXPECT_TRUE(second.ToDeliver().empty());
  ASSERT_TRUE(second.HasStateUpdates());
  AlertEvaluator third(Rules(kSyncRule), {});
  ASSERT_TRUE(third.Restore(Stored(second)).ok());
  EXPECT_TRUE(third.ToDeliver().empty());
}

// The text alert state written before schemas/state.fbs
// (tests/testdata/state/README.md): job train-a's sync-stall fired, was
// delivered, and resolved undelivered; fleet rule "many" fired over five
// jobs, delivered neither.
std::string LegacyState(const std::string& name) {
  return testing::ReadFile(
      absl::StrCat(BUBBLEWATCH_TESTDATA_DIR, "/state/", name));
}

TEST(AlertEvaluator, OldTextStatesStillRestoreAndAreRewrittenAsRecords) {
  const std::string job = LegacyState("alert_job_state_v1.txt");
  const std::string fleet = LegacyState("alert_fleet_state_v1.txt");
  ASSERT_FALSE(job.empty());
  ASSERT_FALSE(fleet.empty());
  AlertEvaluator ev(Rules(R"(rules:
  - {name: sync-stall, kind: cause_share_above, cause: host_sync,
     threshold: 30%, for: 2, clear_for: 2}
  - {name: stall, kind: cause_share_above, cause: host_sync, threshold: 30%}
  - {name: many, kind: fleet, rule: stall, jobs_firing_more_than: 2}
)"),
                    {});
  ASSERT_TRUE(ev.Restore({{"j/train-a", job}, {"f/many", fleet}}).ok());
  std::vector<AlertEvent> active = ev.Active();
  ASSERT_EQ(active.size(), 1u);
  EXPECT_EQ(active[0].rule, "many");
  std::vector<AlertEvent> to_deliver = ev.ToDeliver();
  ASSERT_EQ(to_deliver.size(), 2u);
  for (const AlertEvent& e : to_deliver) {
    if (e.rule == "sync-stall") {
      EXPECT_EQ(e.status, AlertStatus::kResolved);
      EXPECT_EQ(e.job, "train-a");
      EXPECT_EQ(e.ends_at, kT0 + absl::Seconds(20));
    } else {
      EXPECT_EQ(e.rule, "many");
      EXPECT_EQ(e.status, AlertStatus::kRepeat);  // Its latest details.
      EXPECT_EQ(e.jobs.size(), 5u);
    }
  }
  // The next write of the job's state is a StateRecord.
  ev.MarkDelivered(to_deliver[0]);
  ev.MarkDelivered(to_deliver[1]);
  std::vector<AlertStateUpdate> updates = ev.TakeStateUpdates();
  ASSERT_FALSE(updates.empty());
  for (const AlertStateUpdate& u : updates) {
    if (u.state) {
      EXPECT_TRUE(IsStateRecord(*u.state)) << u.key;
    }
  }
}

TEST(AlertEvaluator, StateWithoutDeliveryMarksStillLoads) {
  // The text state as written before delivery marks existed (6 fields per
  // rule, 3 in the header): everything in it counts as delivered.
  std::string old;
  for (absl::string_view line :
       absl::StrSplit(LegacyState("alert_job_state_v1.txt"), '\n')) {
    if (line.empty()) continue;
    std::vector<absl::string_view> f = absl::StrSplit(line, '\t');
    f.pop_back();
    absl::StrAppend(&old, absl::StrJoin(f, "\t"), "\n");
  }
  AlertEvaluator ev(Rules(kSyncRule), {});
  ASSERT_TRUE(ev.Restore({{"j/train-a", old}}).ok()) << old;
  EXPECT_TRUE(ev.Active().empty());
  EXPECT_TRUE(ev.ToDeliver().empty());
}

TEST(AlertEvaluator, StatesAreDeterministicVersionedRecords) {
  // Two rules of one job, reached in different orders: equal bytes.
  const std::string rules = R"(rules:
  - {name: a-stall, kind: cause_share_above, cause: host_sync, threshold: 30%}
  - {name: b-stall, kind: cause_share_above, cause: host_sync, threshold: 40%}
)";
  AlertEvaluator first(Rules(rules), {});
  AlertEvaluator second(Rules(rules), {});
  first.OnWindow(Window("j", 0, 0.5), kT0);
  second.OnWindow(Window("j", 0, 0.5), kT0);
  std::vector<std::pair<std::string, std::string>> a = Stored(first);
  std::vector<std::pair<std::string, std::string>> b = Stored(second);
  ASSERT_EQ(a.size(), 1u);
  EXPECT_EQ(a, b);
  EXPECT_TRUE(IsStateRecord(a[0].second));
  // And it restores to the same state, which writes the same bytes.
  AlertEvaluator restored(Rules(rules), {});
  ASSERT_TRUE(restored.Restore(a).ok());
  EXPECT_EQ(restored.Active().size(), 2u);
  restored.OnWindow(Window("j", 1, 0.5), kT0);
  first.OnWindow(Window("j", 1, 0.5), kT0);
  EXPECT_EQ(Stored(restored), Stored(first));
}

TEST(AlertEvaluator, ARecordOfAnotherKindIsDataLossNotFatal) {
  // A watch-state record under an alert key: verified, refused by body.
  flatbuffers::FlatBufferBuilder builder;
  auto body = fb::CreateWatchStateRecord(builder);
  const std::string wrong =
      FinishStateRecord(builder, fb::StateBody::WatchStateRecord, body.Union());
  AlertEvaluator ev(Rules(kSyncRule), {});
  absl::Status s = ev.Restore({{"j/x", wrong}});
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(s.message(), ::testing::HasSubstr("j/x"));
}

constexpr char kForgetRules[] = R"(rules:
  - {name: silent, kind: job_silent, duration: 30s, forget_after: 2m}
  - {name: sync-stall, kind: cause_share_above, cause: host_sync,
     threshold: 30%}
)";

TEST(AlertEvaluator, FinishedJobResolvesAfterForgetAfterAndIsDropped) {
  AlertEvaluator ev(Rules(kForgetRules), {});
  ev.OnJobActivity("done", kT0);
  ASSERT_EQ(ev.OnWindow(Window("done", 0, 0.5), kT0).size(), 1u);
  ASSERT_EQ(ev.OnTick(kT0 + absl::Seconds(31)).size(), 1u);
  ASSERT_EQ(ev.Active().size(), 2u);
  for (const AlertEvent& e : ev.ToDeliver()) ev.MarkDelivered(e);
  ev.TakeStateUpdates();
  EXPECT_TRUE(ev.OnTick(kT0 + absl::Seconds(120)).empty());

  // Past forget_after: both alerts of the job resolve, once.
  std::vector<AlertEvent> gone = ev.OnTick(kT0 + absl::Seconds(121));
  EXPECT_THAT(Statuses(gone), ::testing::ElementsAre(AlertStatus::kResolved,
                                                     AlertStatus::kResolved));
  EXPECT_TRUE(ev.Active().empty());
  EXPECT_TRUE(ev.OnTick(kT0 + absl::Hours(5)).empty()) << "no re-firing";
  // Until the resolutions are delivered, the job's state (with them) stays.
  std::vector<AlertStateUpdate> updates = ev.TakeStateUpdates();
  ASSERT_EQ(updates.size(), 1u);
  ASSERT_TRUE(updates[0].state.has_value());
  AlertEvaluator restarted(Rules(kForgetRules), {});
  ASSERT_TRUE(restarted.Restore({{updates[0].key, *updates[0].state}}).ok());
  EXPECT_EQ(restarted.ToDeliver().size(), 2u);
  EXPECT_TRUE(restarted.OnTick(kT0 + absl::Hours(6)).empty());

  // Delivered: the job is dropped and its key deleted.
  for (const AlertEvent& e : gone) ev.MarkDelivered(e);
  updates = ev.TakeStateUpdates();
  ASSERT_EQ(updates.size(), 1u);
  EXPECT_EQ(updates[0].key, "j/done");
  EXPECT_FALSE(updates[0].state.has_value());
  EXPECT_TRUE(ev.ToDeliver().empty());

  // Sending again makes it a new job: silence fires again later.
  ev.OnJobActivity("done", kT0 + absl::Hours(7));
  EXPECT_EQ(ev.OnTick(kT0 + absl::Hours(7) + absl::Seconds(31)).size(), 1u);
}

TEST(AlertEvaluator, JobWithoutAlertsIsDroppedAtOnceAndOthersAreKept) {
  AlertEvaluator ev(Rules(R"(rules:
  - {name: silent, kind: job_silent, duration: 30s, forget_after: 1m,
     jobs: {prefix: "batch-"}}
)"),
                    {});
  ev.OnJobActivity("batch-1", kT0);
  ev.OnJobActivity("serve-1", kT0);
  ev.OnTick(kT0 + absl::Seconds(31));  // Only batch-1 matches.
  ASSERT_EQ(ev.Active().size(), 1u);
  for (const AlertEvent& e : ev.ToDeliver()) ev.MarkDelivered(e);
  ev.TakeStateUpdates();
  std::vector<AlertEvent> gone = ev.OnTick(kT0 + absl::Seconds(61));
  ASSERT_EQ(gone.size(), 1u);
  EXPECT_EQ(gone[0].job, "batch-1");
  EXPECT_EQ(gone[0].status, AlertStatus::kResolved);
  EXPECT_DOUBLE_EQ(gone[0].value, 61.0);
  ev.MarkDelivered(gone[0]);
  std::vector<AlertStateUpdate> updates = ev.TakeStateUpdates();
  ASSERT_EQ(updates.size(), 1u);
  EXPECT_EQ(updates[0].key, "j/batch-1");
  EXPECT_FALSE(updates[0].state.has_value());
}

TEST(AlertEvaluator, ResolutionOfARemovedRuleIsKeptUntilDelivered) {
  AlertEvaluator ev(Rules(kSyncRule), {});
  ev.OnWindow(Window("j", 0, 0.5), kT0);
  ASSERT_EQ(ev.OnWindow(Window("j", 1, 0.5), kT0).size(), 1u);
  for (const AlertEvent& e : ev.ToDeliver()) ev.MarkDelivered(e);
  ev.TakeStateUpdates();
  const std::string other =
      "rules:\n  - {name: other, kind: job_silent, duration: 1m}\n";
  std::vector<AlertEvent> resolved =
      ev.SetRules(Rules(other), kT0 + absl::Seconds(5));
  ASSERT_EQ(resolved.size(), 1u);
  EXPECT_EQ(resolved[0].status, AlertStatus::kResolved);

  // A restart (with the new rules) before delivery still has it to deliver.
  AlertEvaluator restarted(Rules(other), {});
  ASSERT_TRUE(restarted.Restore(Stored(ev)).ok());
  EXPECT_TRUE(restarted.SetRules(Rules(other), kT0 + absl::Seconds(6)).empty());
  ASSERT_EQ(restarted.ToDeliver().size(), 1u);
  EXPECT_EQ(restarted.ToDeliver()[0].rule, "sync-stall");
  // Nothing of the old rule fires or repeats meanwhile.
  EXPECT_TRUE(
      restarted.OnWindow(Window("j", 2, 0.9), kT0 + absl::Hours(2)).empty());
  EXPECT_TRUE(restarted.OnTick(kT0 + absl::Hours(3)).empty());

  // Delivered: the old rule's state is gone from the stored blob.
  restarted.TakeStateUpdates();
  restarted.MarkDelivered(resolved[0]);
  EXPECT_TRUE(restarted.ToDeliver().empty());
  std::vector<std::pair<std::string, std::string>> stored = Stored(restarted);
  ASSERT_EQ(stored.size(), 1u);
  EXPECT_THAT(stored[0].second,
              ::testing::Not(::testing::HasSubstr("sync-stall")));
}

TEST(AlertEvaluator, StoredAlertsReadWhatTheProcessorCommitted) {
  AlertEvaluator ev(Rules(kSyncRule), {});
  for (int i = 0; i < 2; ++i) ev.OnWindow(Window("stuck", i, 0.5), kT0);
  ev.OnWindow(Window("fine", 0, 0.1), kT0);
  std::vector<std::pair<std::string, std::string>> states;
  for (const AlertStateUpdate& u : ev.TakeStateUpdates()) {
    states.emplace_back(u.key, *u.state);
  }
  states.emplace_back("j/broken", "not a state");
  const StoredAlerts stored = ReadStoredAlerts(states);
  ASSERT_EQ(stored.firing.size(), 1u);
  EXPECT_EQ(stored.firing[0].job, "stuck");
  EXPECT_EQ(stored.firing[0].rule, "sync-stall");
  EXPECT_EQ(stored.firing[0].status, AlertStatus::kFiring);
  EXPECT_THAT(stored.evaluated_jobs, ::testing::ElementsAre("fine", "stuck"));
  EXPECT_THAT(stored.unreadable_keys, ::testing::ElementsAre("j/broken"));
  // It evaluates nothing again: with no state there is nothing.
  EXPECT_TRUE(ReadStoredAlerts({}).firing.empty());
}

// The job lifecycle (docs/semantics.md#job-lifecycle).
constexpr char kLifecycleRules[] = R"(rules:
  - name: sync-stall
    kind: cause_share_above
    cause: host_sync
    threshold: 30%
    for: 2
    clear_for: 2
    repeat_interval: 1h
  - {name: silent, kind: job_silent, duration: 30s}
)";

JobLifecycle Ended() {
  JobLifecycle l;
  l.ended = true;
  return l;
}

TEST(AlertEvaluator, AnEndedJobsAlertsResolveOnceAndItIsNeverSilent) {
  AlertEvaluator ev(Rules(kLifecycleRules), {});
  ev.OnJobActivity("j", kT0);
  ev.OnWindow(Window("j", 0, 0.6), kT0);
  std::vector<AlertEvent> fired = ev.OnWindow(Window("j", 1, 0.6), kT0);
  ASSERT_EQ(Statuses(fired), std::vector{AlertStatus::kFiring});
  // The end marker: the firing cause alert resolves, with its end time.
  const absl::Time end = kT0 + absl::Seconds(2);
  std::vector<AlertEvent> resolved = ev.OnJobLifecycle("j", Ended(), end);
  ASSERT_EQ(Statuses(resolved), std::vector{AlertStatus::kResolved});
  EXPECT_EQ(resolved[0].rule, "sync-stall");
  EXPECT_EQ(resolved[0].ends_at, end);
  EXPECT_TRUE(ev.Active().empty());
  // Said again, nothing more; silence of an ended job is no alert; a late
  // window of it does not fire again.
  EXPECT_TRUE(ev.OnJobLifecycle("j", Ended(), end).empty());
  EXPECT_TRUE(ev.OnTick(end + absl::Hours(1)).empty());
  EXPECT_TRUE(ev.OnWindow(Window("j", 2, 0.9), end).empty());
  EXPECT_TRUE(ev.OnWindow(Window("j", 3, 0.9), end).empty());
  // The state survives a restart: still ended, still quiet.
  AlertEvaluator restarted(Rules(kLifecycleRules), {});
  std::vector<std::pair<std::string, std::string>> states;
  for (AlertStateUpdate& u : ev.TakeStateUpdates()) {
    if (u.state) states.emplace_back(u.key, *u.state);
  }
  ASSERT_TRUE(restarted.Restore(states).ok());
  EXPECT_TRUE(restarted.OnTick(end + absl::Hours(2)).empty());
  // A new run: its windows count again.
  restarted.OnJobLifecycle("j", JobLifecycle(), end + absl::Hours(3));
  restarted.OnJobActivity("j", end + absl::Hours(3));
  restarted.OnWindow(Window("j", 10, 0.6), end + absl::Hours(3));
  EXPECT_EQ(
      Statuses(restarted.OnWindow(Window("j", 11, 0.6), end + absl::Hours(3))),
      std::vector{AlertStatus::kFiring});
}

TEST(AlertEvaluator, SilentFiresForAnActiveJobThatStopsWithoutAMarker) {
  AlertEvaluator ev(Rules(kLifecycleRules), {});
  ev.OnJobActivity("j", kT0);
  ev.OnJobLifecycle("j", JobLifecycle(), kT0);
  EXPECT_TRUE(ev.OnTick(kT0 + absl::Seconds(30)).empty());
  std::vector<AlertEvent> e = ev.OnTick(kT0 + absl::Seconds(31));
  ASSERT_EQ(e.size(), 1u);
  EXPECT_EQ(e[0].rule, "silent");
  EXPECT_EQ(e[0].status, AlertStatus::kFiring);
}

TEST(AlertEvaluator, SilentWaitsOutTheDutyCycleOfAPausedJob) {
  AlertEvaluator ev(Rules(kLifecycleRules), {});
  JobLifecycle cycle;  // Snapshots every ~60 s.
  cycle.NoteGap(58'000'000'000);
  cycle.NoteGap(58'000'000'000);
  ev.OnJobActivity("j", kT0);
  ev.OnJobLifecycle("j", cycle, kT0);
  // Paused between snapshots: no job-silent, though past its 30 s.
  for (int s = 31; s <= 116; s += 5) {
    EXPECT_TRUE(ev.OnTick(kT0 + absl::Seconds(s)).empty()) << s << " s";
  }
  // Overdue (more than two gaps): active and silent.
  std::vector<AlertEvent> e = ev.OnTick(kT0 + absl::Seconds(117));
  ASSERT_EQ(e.size(), 1u);
  EXPECT_EQ(e[0].rule, "silent");
  // A duty cycle whose last snapshot ended with a marker ends when no
  // snapshot follows: never silent, and its alerts resolve then.
  AlertEvaluator done(Rules(kLifecycleRules), {});
  cycle.ended = true;
  done.OnJobActivity("d", kT0);
  done.OnWindow(Window("d", 0, 0.6), kT0);
  done.OnWindow(Window("d", 1, 0.6), kT0);
  EXPECT_TRUE(done.OnJobLifecycle("d", cycle, kT0).empty()) << "paused";
  EXPECT_EQ(done.Active().size(), 1u);
  EXPECT_TRUE(done.OnTick(kT0 + absl::Seconds(116)).empty());
  std::vector<AlertEvent> r = done.OnTick(kT0 + absl::Seconds(117));
  ASSERT_EQ(Statuses(r), std::vector{AlertStatus::kResolved});
  EXPECT_EQ(r[0].rule, "sync-stall");
  EXPECT_TRUE(done.OnTick(kT0 + absl::Hours(1)).empty());
}

}  // namespace
}  // namespace bubblewatch
