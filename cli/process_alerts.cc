#include "cli/process_alerts.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <csignal>

#include "absl/strings/str_join.h"
#include "base/logging.h"
#include "base/status_macros.h"
#include "cli/config_file.h"
#include "spdlog/spdlog.h"

namespace bubblewatch {
namespace {

// Atomic for the same reason as process_command.cc's g_processor: SIGHUP
// may be handled on any thread while main sets or clears this.
std::atomic<AlertHook*> g_hook{nullptr};

void OnSighup(int) {
  if (AlertHook* hook = g_hook.load(); hook != nullptr) hook->RequestReload();
}

// Without rules there is no hook to reload on the processor thread; only
// write(2) is safe here. SIGHUP is still caught, never left at its default
// (which ends the process): `systemctl reload` sends it to every processor
// (ExecReload in ops/systemd/), rules or not.
void OnSighupWithoutRules(int) {
  static constexpr char kLine[] =
      "bubblewatch process: SIGHUP: started without --rules, so there are no "
      "alert rules to reload\n";
  [[maybe_unused]] ssize_t n = write(STDERR_FILENO, kLine, sizeof(kLine) - 1);
}

void OnSighupWithoutRulesWithConfig(int) {
  static constexpr char kLine[] =
      "bubblewatch process: SIGHUP: started without --rules, so there are no "
      "alert rules to reload; rules added to the config file take effect at "
      "the next restart\n";
  [[maybe_unused]] ssize_t n = write(STDERR_FILENO, kLine, sizeof(kLine) - 1);
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
    const WindowStoreReader* store,
    std::function<std::string(const std::string&)> rules_path_on_reload) {
  ProcessAlerts alerts;
  if (flags.rules_path.empty()) return alerts;
  ASSIGN_OR_RETURN(AlertRuleSet rules, LoadAlertRulesFile(flags.rules_path));
  for (const AlertRule& rule : rules.rules) {
    if (rule.kind != RuleKind::kFleet) continue;
    spdlog::info(
        "fleet rule {} counts this instance's jobs only: with more than one "
        "processor in the group, evaluate it in `serve --brokers --rules` "
        "(docs/alerts.md#fleet-wide-alerts)",
        rule.name);
  }
  if (!flags.alertmanager_url.empty()) {
    AlertmanagerOptions am;
    am.url = flags.alertmanager_url;
    am.resend_interval = flags.alertmanager_resend;
    ASSIGN_OR_RETURN(alerts.alertmanager, AlertmanagerClient::Create(am));
  }
  AlertHookOptions options;
  options.rules_path = flags.rules_path;
  options.rules_path_on_reload = std::move(rules_path_on_reload);
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

std::function<std::string(const std::string&)> RulesPathFromConfigOnReload(
    const CommandLine& cl) {
  if (cl.config_path().empty()) return nullptr;
  const std::vector<ConfigSetting> at_start = cl.config_settings();
  return [&cl, at_start](const std::string& current) -> std::string {
    const std::string& path = cl.config_path();
    absl::StatusOr<std::vector<ConfigSetting>> now = cl.ReadConfigFile();
    if (!now.ok()) {
      spdlog::error(
          "config: re-reading it on SIGHUP failed, nothing of it applied: {}",
          std::string(now.status().message()));
      return current;
    }
    std::vector<std::string> restart;
    for (const std::string& key : ChangedConfigKeys(at_start, *now)) {
      if (key != "rules") restart.push_back(key);
    }
    if (!restart.empty()) {
      spdlog::warn(
          "config {}: {} changed since the start; not applied, needs a "
          "restart",
          path, absl::StrJoin(restart, ", "));
    }
    auto rules = std::find_if(now->begin(), now->end(),
                              [](const auto& s) { return s.key == "rules"; });
    if (rules == now->end() || rules->values.front().empty()) {
      spdlog::warn(
          "config {}: no 'rules' any more; reloading {} (alerting off takes "
          "a restart)",
          path, current);
      return current;
    }
    if (cl.GivenOnCommandLine("rules")) {
      if (rules->values.front() != current) {
        spdlog::warn(
            "config {}: 'rules' is {}, but --rules on the command line wins; "
            "reloading {}",
            path, rules->values.front(), current);
      }
      return current;
    }
    return rules->values.front();
  };
}

void ReloadRulesOnSighup(AlertHook* hook, bool with_config) {
  g_hook.store(hook);
  if (hook != nullptr) {
    std::signal(SIGHUP, OnSighup);
  } else {
    std::signal(SIGHUP, with_config ? OnSighupWithoutRulesWithConfig
                                    : OnSighupWithoutRules);
  }
}

}  // namespace bubblewatch
