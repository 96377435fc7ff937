// FleetAlerter: the fleet rules of a group of processors, evaluated once for
// the whole fleet by `bubblewatch serve --brokers --rules` (docs/alerts.md,
// "Fleet-wide alerts").
//
// Why here: in a consumer group each processor evaluates only the jobs of
// the partitions it owns, so a `fleet` rule ("more than N jobs firing R")
// in the processors counts a part of the fleet per instance, and pages per
// instance or not at all. `serve --brokers` holds every job's committed
// alert state (the processors' state topic, serve/window_materializer.h),
// so it counts the whole fleet's firing alerts, whichever instance owns
// each job, through rebalances and restarts of the processors.
//
// Promises:
//   - Every `interval`, the fleet rules of `rules` (job rules are the
//     processors' and are not evaluated here) are evaluated over the job
//     alerts firing in the store (ReadStoredAlerts): a fleet alert fires,
//     changes its job list, repeats and resolves as AlertEvaluator's fleet
//     rules do in one processor.
//   - Events go to `alertmanager` (when given), which re-posts active
//     alerts and retries until delivered. Replicas of serve evaluating the
//     same rules post alerts with the same labels, which Alertmanager keeps
//     as one alert (as for HA pairs of Prometheus): one page per condition
//     however many replicas run.
//   - The fleet rules' state is in memory: a restarted serve evaluates
//     afresh and posts a condition that still holds again, under the same
//     labels (Alertmanager updates the alert it holds, no second page).
//
// Thread safety: Tick and Run on one thread; Stop and Active from any.
#ifndef BUBBLEWATCH_ALERTS_FLEET_ALERTER_H_
#define BUBBLEWATCH_ALERTS_FLEET_ALERTER_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "alerts/alert_evaluator.h"
#include "alerts/alert_event.h"
#include "alerts/alert_rules.h"
#include "alerts/alertmanager_client.h"
#include "storage/window_store.h"

namespace bubblewatch {

struct FleetAlerterOptions {
  absl::Duration interval = absl::Seconds(2);
  AlertEvaluatorOptions evaluator;  // The dashboard link of the alerts.
};

class FleetAlerter {
 public:
  // `store` and `alertmanager` (may be null) must outlive it.
  FleetAlerter(AlertRuleSet rules, const FleetAlerterOptions& options,
               const WindowStoreReader* store,
               AlertmanagerClient* alertmanager);

  // The number of fleet rules in the set (0: nothing to evaluate).
  int fleet_rules() const { return fleet_rules_; }

  // One evaluation at `now`; returns the events it emitted. Errors: the
  // store could not be read (nothing is evaluated then).
  absl::StatusOr<std::vector<AlertEvent>> Tick(absl::Time now);

  // Ticks every interval until Stop(); a failed tick is logged and retried
  // at the next.
  void Run();
  void Stop();

  // The fleet alerts firing now (for /api/v1/alerts).
  std::vector<AlertEvent> Active() const;

 private:
  const FleetAlerterOptions options_;
  const WindowStoreReader* const store_;
  AlertmanagerClient* const alertmanager_;
  const int fleet_rules_;
  AlertEvaluator evaluator_;  // Tick's thread only.
  absl::Mutex stop_mu_;
  bool stop_ ABSL_GUARDED_BY(stop_mu_) = false;
  mutable absl::Mutex mu_;
  std::vector<AlertEvent> active_ ABSL_GUARDED_BY(mu_);
};

}  // namespace bubblewatch

#endif  // BUBBLEWATCH_ALERTS_FLEET_ALERTER_H_
