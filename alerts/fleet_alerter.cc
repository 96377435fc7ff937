#include "alerts/fleet_alerter.h"

#include <algorithm>
#include <string>
#include <utility>

#include "absl/strings/str_join.h"
#include "spdlog/spdlog.h"

namespace bubblewatch {
namespace {

int CountFleetRules(const AlertRuleSet& rules) {
  return static_cast<int>(std::count_if(
      rules.rules.begin(), rules.rules.end(),
      [](const AlertRule& r) { return r.kind == RuleKind::kFleet; }));
}

}  // namespace

FleetAlerter::FleetAlerter(AlertRuleSet rules,
                           const FleetAlerterOptions& options,
                           const WindowStoreReader* store,
                           AlertmanagerClient* alertmanager)
    : options_(options),
      store_(store),
      alertmanager_(alertmanager),
      fleet_rules_(CountFleetRules(rules)),
      evaluator_(std::move(rules), options.evaluator) {}

absl::StatusOr<std::vector<AlertEvent>> FleetAlerter::Tick(absl::Time now) {
  absl::StatusOr<std::vector<std::pair<std::string, std::string>>> states =
      store_->AlertStates();
  if (!states.ok()) return states.status();
  const StoredAlerts stored = ReadStoredAlerts(*states);
  std::vector<AlertEvent> events = evaluator_.OnFleetTick(stored.firing, now);
  for (const AlertEvent& e : events) {
    spdlog::info("fleet alert {} {}: {} jobs firing (more than {}): {}", e.rule,
                 std::string(AlertStatusName(e.status)), e.jobs.size(),
                 e.threshold, absl::StrJoin(e.jobs, ","));
  }
  if (alertmanager_ != nullptr) {
    if (!events.empty()) alertmanager_->Send(events);
    for (const AlertEvent& e : alertmanager_->TakeDelivered()) {
      evaluator_.MarkDelivered(e);
    }
  }
  // Nothing is persisted (see the header): the state only lives here.
  evaluator_.TakeStateUpdates();
  absl::MutexLock lock(&mu_);
  active_ = evaluator_.Active();
  return events;
}

void FleetAlerter::Run() {
  while (true) {
    absl::StatusOr<std::vector<AlertEvent>> ticked = Tick(absl::Now());
    if (!ticked.ok()) {
      spdlog::warn("fleet rules not evaluated: {}", ticked.status().ToString());
    }
    absl::MutexLock lock(&stop_mu_);
    if (stop_mu_.AwaitWithTimeout(absl::Condition(&stop_), options_.interval)) {
      return;
    }
  }
}

void FleetAlerter::Stop() {
  absl::MutexLock lock(&stop_mu_);
  stop_ = true;
}

std::vector<AlertEvent> FleetAlerter::Active() const {
  absl::MutexLock lock(&mu_);
  return active_;
}

}  // namespace bubblewatch
