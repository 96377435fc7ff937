// AlertEvaluator: the on-call rules applied to a job's finalized windows, as a
// pure state machine (no I/O, no clock of its own: callers pass wall time).
//
// Per (job, rule) it counts consecutive windows in which the condition holds
// and in which it is clear. Hysteresis:
//   - fires ONCE when the condition held for `for` consecutive windows;
//   - while firing, emits a repeat only when `repeat_interval` passed since
//     the last event of that alert;
//   - resolves ONCE after the condition was clear for `clear_for`
//     consecutive windows (job_silent: as soon as the job sends again; fleet:
//     as soon as at most N jobs fire the counted rule).
// A window whose span is 0 (no GPU data) leaves utilization and cause-share
// counters as they were: it says nothing either way.
// Windows of a job must come in start order; one not after the last seen is
// ignored (a replay), so feeding a window twice never fires twice.
//
// Job lifecycle (docs/semantics.md#job-lifecycle): once a job's phase is
// ended (its producers sent their end markers, or --job-expiry), every
// alert of the job firing resolves; job_silent fires only for a job whose
// phase is active (never for an ended one, nor between the snapshots of a
// duty cycle, paused).
//
// job_silent rules with `forget_after`: a job silent that long has finished;
// all its alerts resolve and its state is dropped (deleted from the store)
// once those resolutions are delivered. It comes back as a new job if it
// sends again.
//
// The state is serialized per job (and per fleet rule) by TakeStateUpdates
// for the caller to commit with the windows that produced it; Restore loads
// it back, so a restart neither re-fires nor forgets an active alert.
// Each emitted event stays in the state as "undelivered" until the caller
// reports it delivered (MarkDelivered, e.g. once Alertmanager accepted it):
// ToDeliver lists what a restarted processor must (re-)send, so a resolution
// that could not reach Alertmanager before a crash is not lost.
// Thread safety: none; one thread drives it.
#ifndef BUBBLEWATCH_ALERTS_ALERT_EVALUATOR_H_
#define BUBBLEWATCH_ALERTS_ALERT_EVALUATOR_H_

#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "alerts/alert_event.h"
#include "alerts/alert_rules.h"
#include "schemas/job_lifecycle.h"
#include "schemas/window_summary.h"
#include "storage/window_store.h"

namespace bubblewatch {

struct AlertEvaluatorOptions {
  // Base URL of `bubblewatch serve`'s dashboard; alerts link to
  // BASE/?job=JOB. Empty: no link.
  std::string dashboard_url;
};

class AlertEvaluator {
 public:
  AlertEvaluator(AlertRuleSet rules, AlertEvaluatorOptions options);

  // Replaces the rules (a SIGHUP reload). Alerts of rules that are gone
  // resolve now; rules kept by name keep their state.
  std::vector<AlertEvent> SetRules(AlertRuleSet rules, absl::Time now);

  // One finalized window of `window.job`.
  std::vector<AlertEvent> OnWindow(const WindowSummary& window, absl::Time now);

  // The job's latest event time advanced at wall time `now`.
  std::vector<AlertEvent> OnJobActivity(absl::string_view job, absl::Time now);

  // The processor committed the job's lifecycle (schemas/job_lifecycle.h).
  // Once the job's phase (PhaseAt, with the silence since its last
  // activity) is ended, every alert of the job firing resolves, once, and
  // its windows are no longer evaluated until it runs again (a lifecycle
  // not ended). Checked here and on every tick.
  std::vector<AlertEvent> OnJobLifecycle(absl::string_view job,
                                         const JobLifecycle& lifecycle,
                                         absl::Time now);

  // Wall-clock tick: silences, repeats due, fleet counts.
  std::vector<AlertEvent> OnTick(absl::Time now);

  // The fleet rules alone, over a fleet whose job rules other evaluators
  // run (`serve --brokers --rules`: the processors of a group each evaluate
  // their own jobs, and serve reads what they committed): `firing` is every
  // job alert firing now, the union of those evaluators' Active(). Fires,
  // changes, resolves and repeats the fleet alerts as OnTick does; this
  // evaluator's own jobs (none, in that use) are not counted.
  std::vector<AlertEvent> OnFleetTick(const std::vector<AlertEvent>& firing,
                                      absl::Time now);

  // Every alert firing now, as its latest event (status kFiring or kRepeat).
  std::vector<AlertEvent> Active() const;

  // What a delivery target that knows nothing must get: Active() plus every
  // resolution not yet marked delivered.
  std::vector<AlertEvent> ToDeliver() const;

  // `e` (an event this evaluator emitted, matched by rule, job and sent_at)
  // reached its target: it is no longer undelivered (a state change to
  // commit). A later event of the same alert is not affected.
  void MarkDelivered(const AlertEvent& e);

  // True when TakeStateUpdates has something to return.
  bool HasStateUpdates() const { return !dirty_.empty(); }

  // The serialized state of every job or fleet rule changed since the last
  // call (a nullopt state deletes a key no longer needed).
  std::vector<AlertStateUpdate> TakeStateUpdates();

  // Loads states written by TakeStateUpdates. Errors: kDataLoss naming the
  // key that does not parse (the others are loaded).
  absl::Status Restore(
      const std::vector<std::pair<std::string, std::string>>& states);

  // Fleet of processors (docs/alerts.md#fleet-wide-alerts): a job's rules
  // are evaluated only by the owner of its input partition, from the state
  // its previous owner committed. AdoptJob replaces the job's state with
  // `blob` (TakeStateUpdates output for that job; nullopt: a job without
  // alert state, from scratch) and emits nothing: what the previous owner
  // emitted stays emitted. The job's state is then to be committed (written
  // back, or deleted when there is none). kDataLoss when the blob does not
  // parse (the job then starts from scratch).
  absl::Status AdoptJob(absl::string_view job,
                        std::optional<absl::string_view> blob);
  // Forgets the job without emitting anything (its partition moved to
  // another owner, which goes on from the committed state); its state is to
  // be deleted (TakeStateUpdates).
  void DropJob(absl::string_view job);

  const AlertRuleSet& rules() const { return rules_; }

 private:
  struct RuleState {
    bool firing = false;
    int hold = 0;   // Consecutive windows the condition held.
    int clear = 0;  // Consecutive windows it was clear.
    absl::Time last_sent = absl::InfinitePast();
    AlertEvent last;  // The latest details (the event sent, once firing).
    // The latest emitted event until MarkDelivered confirms it.
    std::optional<AlertEvent> undelivered;
  };
  struct JobAlerts {
    absl::flat_hash_map<std::string, RuleState> rules;  // By rule name.
    absl::Time last_activity = absl::InfinitePast();
    int64_t last_window_start_ns = INT64_MIN;
    // Silent past a forget_after: kept only while it has undelivered events.
    bool forgotten = false;
    // What the processor last said about the job's lifecycle.
    JobLifecycle lifecycle;
    // Its phase reached ended and its alerts were resolved for it.
    bool ended = false;
  };

  const AlertRule* FindRule(absl::string_view name) const;
  void Fill(const AlertRule& rule, absl::string_view job, AlertEvent& e) const;
  void Emit(RuleState& s, AlertStatus status, absl::Time now,
            std::vector<AlertEvent>& out);
  void EvaluateFleet(absl::Time now, std::vector<AlertEvent>& out);
  // The fleet rules, each over the jobs `jobs_firing` says fire its rule.
  void EvaluateFleetOver(
      const std::function<std::vector<std::string>(const AlertRule&)>&
          jobs_firing,
      absl::Time now, std::vector<AlertEvent>& out);
  void Repeats(absl::Time now, std::vector<AlertEvent>& out);
  void FleetRepeats(absl::Time now, std::vector<AlertEvent>& out);
  // Resolves the job's firing alerts when its phase is ended (once).
  void CheckEnded(absl::string_view job_id, JobAlerts& job, absl::Time now,
                  std::vector<AlertEvent>& out);
  // Resolves every alert of the job and drops what has nothing undelivered;
  // returns true when nothing is left (the caller erases the job).
  bool Forget(absl::string_view job_id, JobAlerts& job, absl::Time now,
              std::vector<AlertEvent>& out);
  std::string SerializeJob(const JobAlerts& j) const;
  std::string SerializeFleet(const RuleState& s) const;
  // A StateRecord's AlertStateRecord (kDataLoss naming `key` if malformed),
  // and the text format written before it.
  static absl::StatusOr<JobAlerts> DecodeAlertState(absl::string_view blob,
                                                    absl::string_view key);
  static absl::StatusOr<JobAlerts> DecodeLegacyAlertState(
      absl::string_view blob);

  AlertRuleSet rules_;
  AlertEvaluatorOptions options_;
  absl::flat_hash_map<std::string, JobAlerts> jobs_;
  absl::flat_hash_map<std::string, RuleState> fleet_;  // By fleet rule name.
  absl::flat_hash_set<std::string> dirty_;             // State keys to write.
};

// The state keys: "j/" + job and "f/" + fleet rule.
std::string JobAlertStateKey(absl::string_view job);
std::string FleetAlertStateKey(absl::string_view rule);

// What the committed alert state (WindowStoreReader::AlertStates) says, for
// readers of the store that run no rules of their own (serve/: the alert
// state of each job on the dashboard). It is as current as the store: the
// processor commits the state with the windows that changed it.
struct StoredAlerts {
  // Every alert firing, as its latest event (AlertEvaluator::Active).
  std::vector<AlertEvent> firing;
  // The jobs that have alert state: the processor's rules evaluated them
  // (firing or not), in job order.
  std::vector<std::string> evaluated_jobs;
  // Keys whose blob does not parse; their alerts are left out.
  std::vector<std::string> unreadable_keys;
};

// Reads `states` as written by AlertEvaluator::TakeStateUpdates. Never fails:
// blobs that do not parse are listed, the others read.
StoredAlerts ReadStoredAlerts(
    const std::vector<std::pair<std::string, std::string>>& states);

}  // namespace bubblewatch

#endif  // BUBBLEWATCH_ALERTS_ALERT_EVALUATOR_H_
