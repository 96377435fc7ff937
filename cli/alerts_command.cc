// `bubblewatch alerts check FILE...`: validates rules files the way
// `promtool check rules` does, for CI and before a SIGHUP reload.
#include <iostream>
#include <optional>
#include <string>
#include <vector>

#include "alerts/alert_rules.h"
#include "cli/command_line.h"
#include "cli/commands.h"
#include "cli/exit_codes.h"

namespace bubblewatch {

int RunAlertsCommand(int argc, char** argv) {
  CommandLine cl(
      "bubblewatch alerts check RULES.yaml...",
      "Checks on-call rules files: YAML syntax, known kinds, causes and "
      "keys, thresholds that\ncan happen (shares within 0..100 %, K >= 1, "
      "positive durations), regexes that compile,\nunique names. Prints one "
      "line per problem as FILE:LINE:COL: problem.\n\nExit codes: 0 all "
      "valid, 1 a file has problems, 2 usage error.");
  std::vector<std::string> positional;
  if (std::optional<int> exit = cl.ParseOrExit(argc, argv, &positional)) {
    return *exit;
  }
  if (positional.size() < 2 || positional[0] != "check") {
    std::cerr << "bubblewatch alerts: expected 'check RULES.yaml...'\n"
                 "Try 'bubblewatch alerts --help'.\n";
    return kExitUsage;
  }
  int exit = kExitOk;
  for (size_t i = 1; i < positional.size(); ++i) {
    absl::StatusOr<AlertRuleSet> rules = LoadAlertRulesFile(positional[i]);
    if (!rules.ok()) {
      std::cerr << rules.status().message() << "\n";
      exit = kExitFailure;
      continue;
    }
    std::cout << positional[i] << ": SUCCESS: " << rules->rules.size()
              << " rules found\n";
  }
  return exit;
}

}  // namespace bubblewatch
