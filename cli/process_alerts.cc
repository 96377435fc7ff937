#include "cli/process_alerts.h"

#include <atomic>
#include <csignal>

#include "base/status_macros.h"

namespace bubblewatch {
namespace {

// Atomic for the same reason as process_command.cc's g_processor: SIGHUP
// may be handled on any thread while main sets or clears this.
std::atomic<AlertHook*> g_hook{nullptr};

void OnSighup(int) {
  if (AlertHook* hook = g_hook.load(); hook != nullptr) hook->RequestReload();
}

}  // namespace

void AddProcessAlertFlags(CommandLine& cl, ProcessAlertFlags& flags) {
  cl.AddString("rules", &flags.rules_path, "FILE",
               "on-call alert rules (YAML, see ops/alerts/rules.example.yaml); "
               "reloaded on SIGHUP");
  cl.AddString("alertmanager", &flags.alertmanager_url, "URL",
               "post alerts to this Alertmanager (v2 API), e.g. "
               "http://127.0.0.1:9093");
  cl.AddString("dashboard-url", &flags.dashboard_url, "URL",
               "base URL of `bubblewatch serve`; alerts link to URL/?job=JOB");
  cl.AddString("alerts-topic", &flags.alerts_topic, "TOPIC",
               "where alert events are published (\"\" = nowhere)");
  cl.AddDuration("alertmanager-resend", &flags.alertmanager_resend, "DURATION",
                 "re-post active alerts to Alertmanager this often (keep it "
                 "below its resolve_timeout)");
}

absl::StatusOr<ProcessAlerts> SetUpProcessAlerts(
    const ProcessAlertFlags& flags, const std::string& brokers,
    const std::vector<std::string>& kafka_properties,
    const WindowStoreReader* store) {
  ProcessAlerts alerts;
  if (flags.rules_path.empty()) return alerts;
  ASSIGN_OR_RETURN(AlertRuleSet rules, LoadAlertRulesFile(flags.rules_path));
  if (!flags.alertmanager_url.empty()) {
    AlertmanagerOptions am;
    am.url = flags.alertmanager_url;
    am.resend_interval = flags.alertmanager_resend;
    ASSIGN_OR_RETURN(alerts.alertmanager, AlertmanagerClient::Create(am));
  }
  AlertHookOptions options;
  options.rules_path = flags.rules_path;
  options.evaluator.dashboard_url = flags.dashboard_url;
  while (!options.evaluator.dashboard_url.empty() &&
         options.evaluator.dashboard_url.back() == '/') {
    options.evaluator.dashboard_url.pop_back();
  }
  if (!flags.alerts_topic.empty()) {
    options.brokers = brokers;
    options.kafka_properties = kafka_properties;
    options.topic = flags.alerts_topic;
  }
  ASSIGN_OR_RETURN(alerts.hook,
                   AlertHook::Create(std::move(options), std::move(rules),
                                     store, alerts.alertmanager.get()));
  return alerts;
}

void ReloadRulesOnSighup(AlertHook* hook) {
  g_hook.store(hook);
  std::signal(SIGHUP, hook != nullptr ? OnSighup : SIG_DFL);
}

}  // namespace bubblewatch
