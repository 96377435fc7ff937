// The alerting flags of `bubblewatch process` (--rules, --alertmanager,
// --dashboard-url, --alerts-topic, --alertmanager-resend) and their wiring:
// an AlertHook on the processor's commit path and an AlertmanagerClient,
// with the rules reloaded on SIGHUP. Kept apart from process_command.cc so
// that command stays about consuming.
#ifndef BUBBLEWATCH_CLI_PROCESS_ALERTS_H_
#define BUBBLEWATCH_CLI_PROCESS_ALERTS_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "alerts/alert_hook.h"
#include "alerts/alertmanager_client.h"
#include "cli/command_line.h"
#include "storage/window_store.h"

namespace bubblewatch {

struct ProcessAlertFlags {
  std::string rules_path;
  std::string alertmanager_url;
  std::string dashboard_url;
  std::string alerts_topic = "bubblewatch.alerts";
  absl::Duration alertmanager_resend = absl::Minutes(1);
};

// Registers the flags on `cl`.
void AddProcessAlertFlags(CommandLine& cl, ProcessAlertFlags& flags);

// Everything alerting needs while the processor runs. Destroy after the
// processor (the hook is its observer); the client's destructor makes one
// last delivery attempt.
struct ProcessAlerts {
  std::unique_ptr<AlertmanagerClient> alertmanager;
  std::unique_ptr<AlertHook> hook;
};

// Builds the alerting of `process` when --rules is given (else an empty
// ProcessAlerts; --alertmanager without --rules is a usage error the caller
// reports). Errors: the rules file's validation errors, a bad URL, the
// store's or Kafka's errors.
absl::StatusOr<ProcessAlerts> SetUpProcessAlerts(
    const ProcessAlertFlags& flags, const std::string& brokers,
    const std::vector<std::string>& kafka_properties,
    const WindowStoreReader* store);

// Installs a SIGHUP handler that asks `hook` to reload its rules (null: none).
void ReloadRulesOnSighup(AlertHook* hook);

}  // namespace bubblewatch

#endif  // BUBBLEWATCH_CLI_PROCESS_ALERTS_H_
