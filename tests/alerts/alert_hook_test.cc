#include "alerts/alert_hook.h"

#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/alerts/alert_test_clock.h"
#include "tests/testing/files.h"
#include "tests/testing/temp_dir.h"

namespace bubblewatch {
namespace {

using alert_test::kT0;
using alert_test::kWindowNs;

using testing::TempDir;

using testing::WriteFile;

WindowSummary StallWindow(int i, double share) {
  WindowSummary w;
  w.job = "job-a";
  w.window.start_ns = i * kWindowNs;
  w.window.end_ns = (i + 1) * kWindowNs;
  w.window.job.span_ns = kWindowNs;
  w.window.job.bubble_ns = static_cast<int64_t>(share * kWindowNs);
  w.window.job.compute_ns = kWindowNs - w.window.job.bubble_ns;
  w.window.job.attribution[0] = w.window.job.bubble_ns;
  return w;
}

constexpr char kRules[] = R"(rules:
  - {name: stall, kind: cause_share_above, cause: host_sync, threshold: 30%}
)";

struct Fixture {
  TempDir dir;
  std::string rules = dir.path() + "/rules.yaml";
  std::unique_ptr<WindowStore> store;
  std::vector<AlertEvent> seen;

  Fixture() {
    WriteFile(rules, kRules);
    store = *OpenRocksDbWindowStore(dir.path() + "/store");
  }
  std::unique_ptr<AlertHook> Hook() {
    AlertHookOptions options;
    options.rules_path = rules;
    options.on_event = [this](const AlertEvent& e) { seen.push_back(e); };
    absl::StatusOr<AlertRuleSet> set = LoadAlertRulesFile(rules);
    EXPECT_TRUE(set.ok()) << set.status();
    absl::StatusOr<std::unique_ptr<AlertHook>> hook =
        AlertHook::Create(options, *set, store.get(), nullptr);
    EXPECT_TRUE(hook.ok()) << hook.status();
    if (!hook.ok()) return nullptr;
    // The processor assigns job-a's partition, from a snapshot without
    // alert state: the store's own copy is used.
    (*hook)->OnJobsAssigned({"job-a"}, {});
    return *std::move(hook);
  }
  // What the processor does on a commit.
  void Commit(AlertHook& hook, std::vector<WindowSummary> windows,
              absl::Time now) {
    StoreBatch batch;
    batch.windows = std::move(windows);
    ASSERT_TRUE(hook.BeforeCommit(now, batch).ok());
    ASSERT_TRUE(store->Commit(batch).ok());
    hook.AfterCommit(now);
  }
};

TEST(AlertHook, StateIsCommittedWithTheWindowsAndRestored) {
  Fixture f;
  {
    std::unique_ptr<AlertHook> hook = f.Hook();
    StoreBatch batch;
    batch.windows = {StallWindow(0, 0.5)};
    ASSERT_TRUE(hook->BeforeCommit(kT0, batch).ok());
    ASSERT_EQ(batch.alert_states.size(), 1u);
    EXPECT_EQ(batch.alert_states[0].key, "j/job-a");
    EXPECT_TRUE(f.seen.empty()) << "events wait for the commit";
    ASSERT_TRUE(f.store->Commit(batch).ok());
    hook->AfterCommit(kT0);
    ASSERT_EQ(f.seen.size(), 1u);
    EXPECT_EQ(f.seen[0].status, AlertStatus::kFiring);
  }
  // A restarted processor: the alert is active, and the same stall does not
  // fire it again.
  std::unique_ptr<AlertHook> hook = f.Hook();
  ASSERT_EQ(hook->Active().size(), 1u);
  f.Commit(*hook, {StallWindow(1, 0.5)}, kT0 + absl::Seconds(10));
  EXPECT_EQ(f.seen.size(), 1u);
  f.Commit(*hook, {StallWindow(2, 0.0)}, kT0 + absl::Seconds(20));
  ASSERT_EQ(f.seen.size(), 2u);
  EXPECT_EQ(f.seen[1].status, AlertStatus::kResolved);
}

TEST(AlertHook, BadReloadKeepsOldRulesGoodReloadAppliesNewOnes) {
  Fixture f;
  std::unique_ptr<AlertHook> hook = f.Hook();
  f.Commit(*hook, {StallWindow(0, 0.5)}, kT0);
  ASSERT_EQ(hook->Active().size(), 1u);

  WriteFile(f.rules, "rules:\n  - {name: stall, kind: nope}\n");
  hook->RequestReload();
  EXPECT_FALSE(hook->WantsCommit(kT0 + absl::Seconds(1)));
  EXPECT_EQ(hook->Active().size(), 1u) << "the old rules still hold";

  // The rule is gone from a valid file: its alert resolves, and the hook
  // asks for a commit to publish that.
  WriteFile(f.rules,
            "rules:\n  - {name: other, kind: job_silent, duration: 1h}\n");
  hook->RequestReload();
  EXPECT_TRUE(hook->WantsCommit(kT0 + absl::Seconds(2)));
  f.Commit(*hook, {}, kT0 + absl::Seconds(2));
  ASSERT_EQ(f.seen.size(), 2u);
  EXPECT_EQ(f.seen[1].status, AlertStatus::kResolved);
  EXPECT_TRUE(hook->Active().empty());
}

}  // namespace
}  // namespace bubblewatch

namespace bubblewatch {
namespace {

TEST(AlertHook, SilenceFollowsTheJobsLatestEventTimeNotReplays) {
  Fixture f;
  WriteFile(f.rules,
            "rules:\n  - {name: quiet, kind: job_silent, duration: 30s}\n");
  std::unique_ptr<AlertHook> hook = f.Hook();
  StoreBatch batch;
  batch.jobs.push_back(JobUpdate{.job = "job-a", .last_event_ns = 100});
  ASSERT_TRUE(hook->BeforeCommit(kT0, batch).ok());
  ASSERT_TRUE(f.store->Commit(batch).ok());
  hook->AfterCommit(kT0);
  // A job update that does not move the event time (an idle close) is not
  // activity.
  for (int s : {10, 20}) {
    StoreBatch same;
    same.jobs.push_back(JobUpdate{.job = "job-a", .last_event_ns = 100});
    ASSERT_TRUE(hook->BeforeCommit(kT0 + absl::Seconds(s), same).ok());
    ASSERT_TRUE(f.store->Commit(same).ok());
    hook->AfterCommit(kT0 + absl::Seconds(s));
  }
  EXPECT_FALSE(hook->WantsCommit(kT0 + absl::Seconds(30)));
  ASSERT_TRUE(hook->WantsCommit(kT0 + absl::Seconds(31)));
  f.Commit(*hook, {}, kT0 + absl::Seconds(31));
  ASSERT_EQ(f.seen.size(), 1u);
  EXPECT_EQ(f.seen[0].status, AlertStatus::kFiring);
  EXPECT_EQ(f.seen[0].measure, "silent_s");

  // After a restart, a replay that re-reports the stored event time does not
  // resolve it; a newer event does.
  hook = f.Hook();
  ASSERT_EQ(hook->Active().size(), 1u);
  StoreBatch replay;
  replay.jobs.push_back(JobUpdate{.job = "job-a", .last_event_ns = 100});
  ASSERT_TRUE(hook->BeforeCommit(kT0 + absl::Seconds(40), replay).ok());
  hook->AfterCommit(kT0 + absl::Seconds(40));
  EXPECT_EQ(f.seen.size(), 1u);
  StoreBatch fresh;
  fresh.jobs.push_back(JobUpdate{.job = "job-a", .last_event_ns = 200});
  ASSERT_TRUE(hook->BeforeCommit(kT0 + absl::Seconds(41), fresh).ok());
  hook->AfterCommit(kT0 + absl::Seconds(41));
  ASSERT_EQ(f.seen.size(), 2u);
  EXPECT_EQ(f.seen[1].status, AlertStatus::kResolved);
}

}  // namespace
}  // namespace bubblewatch

namespace bubblewatch {
namespace {

TEST(AlertHook, RestartWithoutTheRuleResolvesItsAlert) {
  Fixture f;
  {
    std::unique_ptr<AlertHook> hook = f.Hook();
    f.Commit(*hook, {StallWindow(0, 0.5)}, kT0);
    ASSERT_EQ(hook->Active().size(), 1u);
  }
  WriteFile(f.rules,
            "rules:\n  - {name: other, kind: job_silent, duration: 1h}\n");
  std::unique_ptr<AlertHook> hook = f.Hook();
  EXPECT_TRUE(hook->Active().empty());
  ASSERT_TRUE(hook->WantsCommit(kT0 + absl::Seconds(1)));
  f.Commit(*hook, {}, kT0 + absl::Seconds(1));
  ASSERT_EQ(f.seen.size(), 2u);
  EXPECT_EQ(f.seen[1].status, AlertStatus::kResolved);
  EXPECT_EQ(f.seen[1].rule, "stall");
}

TEST(AlertHook, FinishedJobsStateLeavesTheStore) {
  Fixture f;
  WriteFile(f.rules,
            "rules:\n  - {name: quiet, kind: job_silent, duration: 30s, "
            "forget_after: 5m}\n");
  std::unique_ptr<AlertHook> hook = f.Hook();
  StoreBatch batch;
  batch.jobs.push_back(JobUpdate{.job = "job-a", .last_event_ns = 100});
  ASSERT_TRUE(hook->BeforeCommit(kT0, batch).ok());
  ASSERT_TRUE(f.store->Commit(batch).ok());
  hook->AfterCommit(kT0);
  ASSERT_TRUE(hook->WantsCommit(kT0 + absl::Seconds(31)));
  f.Commit(*hook, {}, kT0 + absl::Seconds(31));
  ASSERT_EQ(f.store->AlertStates()->size(), 1u);
  ASSERT_EQ(f.seen.size(), 1u);
  // Without Alertmanager, the committed resolution is delivered: the job's
  // state is deleted in the same commit.
  ASSERT_TRUE(hook->WantsCommit(kT0 + absl::Minutes(6)));
  f.Commit(*hook, {}, kT0 + absl::Minutes(6));
  ASSERT_EQ(f.seen.size(), 2u);
  EXPECT_EQ(f.seen[1].status, AlertStatus::kResolved);
  EXPECT_EQ(f.seen[1].job, "job-a");
  absl::StatusOr<std::vector<std::pair<std::string, std::string>>> states =
      f.store->AlertStates();
  ASSERT_TRUE(states.ok());
  EXPECT_TRUE(states->empty());
  EXPECT_FALSE(hook->WantsCommit(kT0 + absl::Hours(2)));
  hook = f.Hook();
  EXPECT_TRUE(hook->Active().empty());
}

// A fleet of processors (docs/alerts.md#fleet-wide-alerts): job-a's
// partition moves from instance A to instance B with the alert state A
// committed in the partition snapshot. B goes on with the firing alert
// (no second firing for the same stall) and resolves it; A forgets the job
// silently (no job_silent for a job it no longer reads).
TEST(AlertHook, AJobsAlertStateMovesWithItsPartition) {
  constexpr char kFleetRules[] = R"(rules:
  - {name: stall, kind: cause_share_above, cause: host_sync, threshold: 30%,
     clear_for: 1}
  - {name: quiet, kind: job_silent, duration: 30s}
)";
  Fixture a, b;
  WriteFile(a.rules, kFleetRules);
  WriteFile(b.rules, kFleetRules);
  std::unique_ptr<AlertHook> on_a = a.Hook();
  std::unique_ptr<AlertHook> on_b = b.Hook();
  on_b->OnJobsRevoked({"job-a"});  // B starts without the partition.
  StoreBatch batch;
  batch.windows = {StallWindow(0, 0.5)};
  batch.jobs.push_back(JobUpdate{.job = "job-a", .last_event_ns = 100});
  ASSERT_TRUE(on_a->BeforeCommit(kT0, batch).ok());
  ASSERT_TRUE(a.store->Commit(batch).ok());
  on_a->AfterCommit(kT0);
  ASSERT_EQ(a.seen.size(), 1u);
  // What the processor keeps in job-a's partition snapshot.
  std::map<std::string, std::string> snapshot;
  for (const AlertStateUpdate& u : batch.alert_states) {
    if (u.job == "job-a" && u.state) snapshot[u.job] = *u.state;
  }
  ASSERT_EQ(snapshot.size(), 1u) << "the job's state names its job";

  // The rebalance: A commits and drops the job; B adopts its state.
  on_a->OnJobsRevoked({"job-a"});
  EXPECT_TRUE(on_a->Active().empty());
  ASSERT_TRUE(on_a->WantsCommit(kT0 + absl::Seconds(1)));
  a.Commit(*on_a, {}, kT0 + absl::Seconds(1));
  EXPECT_TRUE(a.store->AlertStates()->empty()) << "A's copy is deleted";
  on_b->OnJobsAssigned({"job-a"}, snapshot);
  ASSERT_EQ(on_b->Active().size(), 1u);
  EXPECT_EQ(on_b->Active()[0].starts_at, a.seen[0].starts_at);

  // The stall goes on at B: nothing fires again; it clears: one resolution.
  b.Commit(*on_b, {StallWindow(1, 0.5)}, kT0 + absl::Seconds(10));
  EXPECT_TRUE(b.seen.empty());
  b.Commit(*on_b, {StallWindow(2, 0.0)}, kT0 + absl::Seconds(20));
  ASSERT_EQ(b.seen.size(), 1u);
  EXPECT_EQ(b.seen[0].status, AlertStatus::kResolved);
  EXPECT_EQ(b.seen[0].rule, "stall");

  // A, long after: no job_silent for job-a, nothing at all.
  if (on_a->WantsCommit(kT0 + absl::Minutes(5))) {
    a.Commit(*on_a, {}, kT0 + absl::Minutes(5));
  }
  EXPECT_EQ(a.seen.size(), 1u);
}

}  // namespace
}  // namespace bubblewatch
