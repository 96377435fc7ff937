// AlertHook: on-call alerting inside `bubblewatch process`. It plugs into the
// StreamProcessor's commit path (processor/commit_observer.h) and:
//   - feeds every finalized window, and every advance of a job's latest
//     event time, to an AlertEvaluator; ticks it for silences and repeats;
//   - adds the evaluator's changed state to the batch being committed, so
//     alert state and windows are durable together (a restart neither
//     re-fires nor loses an active alert);
//   - publishes each event to the alerts topic (key = job, or "fleet" for a
//     fleet alert; JSON value of AlertEventToJson) and waits for the
//     broker's acknowledgement BEFORE the commit: an event is never lost; a
//     crash between the two re-derives and re-publishes it (at least once);
//   - after the commit, hands the events to the AlertmanagerClient (whose
//     own thread delivers them) and to an optional callback;
//   - records what Alertmanager accepted as delivered in the alert state
//     (committed with the next batch); on start it re-sends the active
//     alerts AND the resolutions not yet delivered, so a resolution held
//     back by an unreachable Alertmanager survives a processor restart.
//     Without an Alertmanager, an event is delivered once Kafka acked it.
// In a consumer group (docs/alerts.md#fleet-wide-alerts) a job's rules are
// evaluated only by the instance that owns the job's input partition: its
// alert state rides in the partition's snapshot (AlertStateUpdate::job), is
// adopted from it on assignment (OnJobsAssigned; the state the previous
// owner committed, so nothing fires again and no hold count restarts) and
// dropped, silently, on revocation (OnJobsRevoked; the next owner goes on).
// Rules are reloaded on the processor thread after RequestReload (SIGHUP),
// from the path rules_path_on_reload returns when set (`process --config`
// takes a changed path from its config file); a file that does not validate
// keeps the old rules and path and logs every error.
#ifndef BUBBLEWATCH_ALERTS_ALERT_HOOK_H_
#define BUBBLEWATCH_ALERTS_ALERT_HOOK_H_

#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "alerts/alert_evaluator.h"
#include "alerts/alertmanager_client.h"
#include "kafka/kafka_handles.h"
#include "processor/commit_observer.h"
#include "storage/window_store.h"

namespace bubblewatch {

struct AlertHookOptions {
  std::string rules_path;  // Re-read on reload.
  // If set, called on the processor thread at each reload with the current
  // rules path; returns the path to load (the current one if unchanged).
  std::function<std::string(const std::string& current)> rules_path_on_reload;
  AlertEvaluatorOptions evaluator;
  // Kafka for the alerts topic; empty brokers = don't publish.
  std::string brokers;
  std::vector<std::string> kafka_properties;
  std::string topic = "bubblewatch.alerts";
  // How often silences and repeats are checked (wall time).
  absl::Duration tick_interval = absl::Seconds(1);
  // Called on the processor thread with each event once it is committed.
  std::function<void(const AlertEvent&)> on_event;
};

class AlertHook final : public CommitObserver {
 public:
  // Restores the alert state from `store` and re-sends active alerts to
  // `alertmanager` (may be null). `store` and `alertmanager` must outlive
  // the hook. Errors: the store's; Kafka configuration errors.
  static absl::StatusOr<std::unique_ptr<AlertHook>> Create(
      AlertHookOptions options, AlertRuleSet rules,
      const WindowStoreReader* store, AlertmanagerClient* alertmanager);
  ~AlertHook() override;

  // Async-signal-safe: the next WantsCommit reloads the rules file.
  void RequestReload() { reload_.store(true); }

  bool WantsCommit(absl::Time now) override;
  absl::Status BeforeCommit(absl::Time now, StoreBatch& batch) override;
  void AfterCommit(absl::Time now) override;
  void OnJobsAssigned(
      const std::vector<std::string>& jobs,
      const std::map<std::string, std::string>& job_states) override;
  void OnJobsRevoked(const std::vector<std::string>& jobs) override;

  // Every alert firing now.
  std::vector<AlertEvent> Active() const { return evaluator_.Active(); }

 private:
  AlertHook(AlertHookOptions options, AlertRuleSet rules,
            AlertmanagerClient* alertmanager);
  void Reload(absl::Time now);
  absl::Status Publish(const std::vector<AlertEvent>& events);

  AlertHookOptions options_;
  AlertEvaluator evaluator_;
  AlertmanagerClient* alertmanager_;
  RdKafkaPtr producer_;  // Null when not publishing.
  std::atomic<bool> reload_{false};
  absl::Time last_tick_ = absl::InfinitePast();
  // By job; none: no event yet.
  absl::flat_hash_map<std::string, std::optional<EventNs>> last_event_ns_;
  // The store's per-job alert states ("j/" keys) not yet claimed by an
  // assignment, by job: used for a job whose restored snapshot has no alert
  // state (one written before snapshots carried it).
  absl::flat_hash_map<std::string, std::string> local_job_states_;
  std::vector<AlertEvent> pending_;     // Not yet in a committed batch.
  std::vector<AlertEvent> committing_;  // In the batch being committed.
  // Delivery reports (callback on the hook's own rd_kafka_poll/flush).
  int64_t undelivered_ = 0;
  std::string delivery_error_;
  friend void AlertHookDeliveryReport(rd_kafka_t*, const rd_kafka_message_t*,
                                      void*);
};

}  // namespace bubblewatch

#endif  // BUBBLEWATCH_ALERTS_ALERT_HOOK_H_
