// bubblewatch: finds and explains GPU idle time ("bubbles").
// Dispatches to a subcommand; see `bubblewatch --help`.
#include <cstring>
#include <iostream>

#include "cli/commands.h"
#include "cli/exit_codes.h"

namespace {

constexpr char kUsage[] =
    "usage: bubblewatch <command> [options]\n"
    "\n"
    "Finds GPU bubbles (idle time between kernels) in profiler traces and "
    "explains each idle\nmicrosecond: host syncs, launch overhead, "
    "allocator calls, copies, data loading, ...\n"
    "\n"
    "commands:\n"
    "  analyze   analyze one trace file (timeline JSON, Kineto/Chrome trace, "
    "Nsight Systems SQLite)\n"
    "\n"
    "Run 'bubblewatch <command> --help' for a command's options.\n";

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::cerr << kUsage;
    return bubblewatch::kExitUsage;
  }
  const char* command = argv[1];
  if (std::strcmp(command, "-h") == 0 || std::strcmp(command, "--help") == 0 ||
      std::strcmp(command, "help") == 0) {
    std::cout << kUsage;
    return bubblewatch::kExitOk;
  }
  if (std::strcmp(command, "--version") == 0) {
    std::cout << "bubblewatch " << BUBBLEWATCH_VERSION << "\n";
    return bubblewatch::kExitOk;
  }
  if (std::strcmp(command, "analyze") == 0) {
    return bubblewatch::RunAnalyzeCommand(argc - 1, argv + 1);
  }
  std::cerr << "bubblewatch: unknown command '" << command << "'\n\n" << kUsage;
  return bubblewatch::kExitUsage;
}
