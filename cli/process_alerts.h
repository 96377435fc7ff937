// The alerting flags of `bubblewatch process` (--rules, --alertmanager,
// --dashboard-url, --alerts-topic, --alertmanager-resend) and their wiring:
// an AlertHook on the processor's commit path and an AlertmanagerClient,
// with the rules reloaded on SIGHUP (and, with --config, the rules path
// taken from the re-read config file). Kept apart from process_command.cc so
// that command stays about consuming.
#ifndef BUBBLEWATCH_CLI_PROCESS_ALERTS_H_
#define BUBBLEWATCH_CLI_PROCESS_ALERTS_H_

#include <functional>
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
// reports). `rules_path_on_reload` (may be empty) becomes the hook's
// AlertHookOptions::rules_path_on_reload. Errors: the rules file's
// validation errors, a bad URL, the store's or Kafka's errors.
absl::StatusOr<ProcessAlerts> SetUpProcessAlerts(
    const ProcessAlertFlags& flags, const std::string& brokers,
    const std::vector<std::string>& kafka_properties,
    const WindowStoreReader* store,
    std::function<std::string(const std::string&)> rules_path_on_reload = {});

// For a `process` started with --config (else empty): on each reload, reads
// the config file again and returns the rules path to load: the file's
// `rules`, unless --rules was given on the command line (which wins, as at
// start) or the file has none any more (then the current one; one line
// says so). Keys other than `rules` whose values differ from those `cl`
// applied at start are named in one warning line ("... changed; they take
// effect at the next restart"), never their values, and not applied. A
// file that no longer reads or validates is logged as one error and
// changes nothing. `cl` must outlive the returned function, which runs on
// the processor thread.
std::function<std::string(const std::string&)> RulesPathFromConfigOnReload(
    const CommandLine& cl);

// Installs a SIGHUP handler that asks `hook` to reload its rules. Without a
// hook (no --rules at start): the default action (SIGHUP ends the process),
// or, for a process started with --config (`with_config`), one line on
// stderr saying that alert rules added since need a restart.
void ReloadRulesOnSighup(AlertHook* hook, bool with_config);

}  // namespace bubblewatch

#endif  // BUBBLEWATCH_CLI_PROCESS_ALERTS_H_
