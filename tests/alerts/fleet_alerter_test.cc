// FleetAlerter over a store holding the alert state two processor instances
// committed for their own jobs (as `serve --brokers` materializes it from
// the state topic): the fleet rule counts the jobs of both, fires once,
// follows the job list, repeats at its interval and resolves once. Neither
// instance alone would have fired it.
#include "alerts/fleet_alerter.h"

#include <memory>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "storage/window_store.h"
#include "tests/alerts/alert_test_clock.h"
#include "tests/alerts/alert_test_windows.h"
#include "tests/testing/temp_dir.h"

namespace bubblewatch {
namespace {

using alert_test::kT0;
using alert_test::Rules;
using alert_test::Window;
using ::testing::ElementsAre;

constexpr char kJobRule[] = R"(rules:
  - {name: stall, kind: cause_share_above, cause: host_sync, threshold: 30%}
)";
constexpr char kWithFleetRule[] = R"(rules:
  - {name: stall, kind: cause_share_above, cause: host_sync, threshold: 30%}
  - {name: many, kind: fleet, rule: stall, jobs_firing_more_than: 2,
     repeat_interval: 1m}
)";

// One processor instance: its own evaluator, committing its jobs' state.
struct Instance {
  AlertEvaluator ev{Rules(kJobRule), {}};
  void Commit(WindowStore& store) {
    StoreBatch batch;
    batch.alert_states = ev.TakeStateUpdates();
    ASSERT_TRUE(store.Commit(batch).ok());
  }
};

TEST(FleetAlerter, CountsTheJobsOfEveryInstanceAndPagesOnce) {
  testing::TempDir dir;
  auto store = OpenRocksDbWindowStore(dir.path());
  ASSERT_TRUE(store.ok()) << store.status();
  Instance a, b;
  a.ev.OnWindow(Window("job0", 0, 0.5), kT0);
  a.ev.OnWindow(Window("job1", 0, 0.5), kT0);
  b.ev.OnWindow(Window("job2", 0, 0.5), kT0);
  b.ev.OnWindow(Window("job3", 0, 0.0), kT0);  // Healthy.
  a.Commit(**store);
  b.Commit(**store);
  // Instance a alone, with the fleet rule, sees 2 jobs firing: no page.
  AlertEvaluator alone(Rules(kWithFleetRule), {});
  alone.OnWindow(Window("job0", 0, 0.5), kT0);
  for (const AlertEvent& e : alone.OnWindow(Window("job1", 0, 0.5), kT0)) {
    EXPECT_NE(e.rule, "many");
  }

  FleetAlerter alerter(Rules(kWithFleetRule), {}, store->get(), nullptr);
  EXPECT_EQ(alerter.fleet_rules(), 1);
  auto events = alerter.Tick(kT0);
  ASSERT_TRUE(events.ok()) << events.status();
  ASSERT_EQ(events->size(), 1u);
  EXPECT_EQ(events->at(0).rule, "many");
  EXPECT_EQ(events->at(0).status, AlertStatus::kFiring);
  EXPECT_EQ(events->at(0).job, "");
  EXPECT_THAT(events->at(0).jobs, ElementsAre("job0", "job1", "job2"));
  ASSERT_EQ(alerter.Active().size(), 1u);
  // The same condition: nothing new, however often it is evaluated.
  events = alerter.Tick(kT0 + absl::Seconds(2));
  ASSERT_TRUE(events.ok());
  EXPECT_TRUE(events->empty());

  // A fourth job fires on instance b: the list changes, no second page.
  b.ev.OnWindow(Window("job3", 1, 0.5), kT0 + absl::Seconds(10));
  b.Commit(**store);
  events = alerter.Tick(kT0 + absl::Seconds(10));
  ASSERT_TRUE(events.ok());
  EXPECT_TRUE(events->empty());
  ASSERT_EQ(alerter.Active().size(), 1u);
  EXPECT_THAT(alerter.Active()[0].jobs,
              ElementsAre("job0", "job1", "job2", "job3"));
  // Its repeat interval (1m) after it fired, it repeats once.
  events = alerter.Tick(kT0 + absl::Seconds(61));
  ASSERT_TRUE(events.ok());
  ASSERT_EQ(events->size(), 1u);
  EXPECT_EQ(events->at(0).status, AlertStatus::kRepeat);

  // Jobs recover on both instances down to 2 firing: it resolves, once.
  a.ev.OnWindow(Window("job0", 1, 0.0), kT0 + absl::Seconds(70));
  b.ev.OnWindow(Window("job2", 1, 0.0), kT0 + absl::Seconds(70));
  a.Commit(**store);
  b.Commit(**store);
  events = alerter.Tick(kT0 + absl::Seconds(70));
  ASSERT_TRUE(events.ok());
  ASSERT_EQ(events->size(), 1u);
  EXPECT_EQ(events->at(0).status, AlertStatus::kResolved);
  EXPECT_TRUE(alerter.Active().empty());
  events = alerter.Tick(kT0 + absl::Seconds(200));
  ASSERT_TRUE(events.ok());
  EXPECT_TRUE(events->empty());
}

TEST(FleetAlerter, JobRulesAreLeftToTheProcessors) {
  testing::TempDir dir;
  auto store = OpenRocksDbWindowStore(dir.path());
  ASSERT_TRUE(store.ok()) << store.status();
  Instance a;
  a.ev.OnWindow(Window("job0", 0, 0.5), kT0);
  a.Commit(**store);
  // Job rules only: nothing to evaluate, nothing emitted (the job's own
  // alert is the processor's to page).
  FleetAlerter alerter(Rules(kJobRule), {}, store->get(), nullptr);
  EXPECT_EQ(alerter.fleet_rules(), 0);
  auto events = alerter.Tick(kT0 + absl::Hours(1));
  ASSERT_TRUE(events.ok());
  EXPECT_TRUE(events->empty());
  EXPECT_TRUE(alerter.Active().empty());
}

}  // namespace
}  // namespace bubblewatch
