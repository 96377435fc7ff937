// bubblewatch: finds and explains GPU idle time ("bubbles").
// Dispatches to a subcommand; see `bubblewatch --help`.
#include <cstring>
#include <iostream>
#include <string>

#include "base/logging.h"
#include "cli/commands.h"
#include "cli/exit_codes.h"

namespace {

struct Command {
  const char* name;
  const char* summary;
  int (*run)(int argc, char** argv);
};

// One line per subcommand: the dispatch table and the usage text.
constexpr Command kCommands[] = {
    {"analyze",
     "analyze one trace file (timeline JSON, Kineto/Chrome trace, Nsight "
     "Systems SQLite)",
     bubblewatch::RunAnalyzeCommand},
    {"diff", "compare two traces; --fail-if conditions make it a CI gate",
     bubblewatch::RunDiffCommand},
    {"produce", "send trace files or a synthetic fleet to Kafka",
     bubblewatch::RunProduceCommand},
    {"process",
     "consume events from Kafka into per-job windows in a RocksDB store",
     bubblewatch::RunProcessCommand},
    {"demo",
     "run producer -> processor -> store on an embedded Kafka, print the "
     "worst jobs",
     bubblewatch::RunDemoCommand},
    {"query", "a job's last hour, the fleet's worst jobs, the job list",
     bubblewatch::RunQueryCommand},
    {"serve", "HTTP API, Prometheus metrics and a dashboard over a store",
     bubblewatch::RunServeCommand},
    {"alerts", "check on-call alert rules files (like promtool check rules)",
     bubblewatch::RunAlertsCommand},
    {"topics",
     "create the fleet's Kafka topics (partitions, compaction), describe them",
     bubblewatch::RunTopicsCommand},
};

std::string Usage() {
  std::string out =
      "usage: bubblewatch <command> [options]\n\n"
      "Finds GPU bubbles (idle time between kernels) in profiler traces and "
      "explains each idle\nmicrosecond: host syncs, launch overhead, "
      "allocator calls, copies, data loading, ...\n\ncommands:\n";
  for (const Command& c : kCommands) {
    out += "  " + std::string(c.name) +
           std::string(10 - std::strlen(c.name), ' ') + c.summary + "\n";
  }
  out += "\nRun 'bubblewatch <command> --help' for a command's options.\n";
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  // Before any command runs: spdlog's own default logger writes to stdout,
  // so a command that logs without setting up logging itself (RocksDB's
  // warnings in `query --json`, say) would mix log lines into its output.
  // Commands with --log-level replace the level later.
  if (absl::Status s = bubblewatch::InitLogging("info"); !s.ok()) {
    std::cerr << "bubblewatch: " << s.message() << "\n";
    return bubblewatch::kExitFailure;
  }
  if (argc < 2) {
    std::cerr << Usage();
    return bubblewatch::kExitUsage;
  }
  const char* command = argv[1];
  if (std::strcmp(command, "-h") == 0 || std::strcmp(command, "--help") == 0 ||
      std::strcmp(command, "help") == 0) {
    std::cout << Usage();
    return bubblewatch::kExitOk;
  }
  if (std::strcmp(command, "--version") == 0) {
    std::cout << "bubblewatch " << BUBBLEWATCH_VERSION << "\n";
    return bubblewatch::kExitOk;
  }
  for (const Command& c : kCommands) {
    if (std::strcmp(command, c.name) == 0) return c.run(argc - 1, argv + 1);
  }
  std::cerr << "bubblewatch: unknown command '" << command << "'\n\n"
            << Usage();
  return bubblewatch::kExitUsage;
}
