// Runs the built `bubblewatch` binary in a shell and captures what it prints,
// for end-to-end CLI tests.
#ifndef BUBBLEWATCH_TESTS_CLI_CLI_RUNNER_H_
#define BUBBLEWATCH_TESTS_CLI_CLI_RUNNER_H_

#include <sys/wait.h>

#include <atomic>
#include <cstdio>
#include <string>

#include "gtest/gtest.h"
#include "tests/testing/files.h"

namespace bubblewatch::testing {

struct CliResult {
  int exit_code = -1;
  std::string out;  // stdout
  std::string err;  // stderr
};

// Runs `bubblewatch ARGS` with the working directory `cwd`. With
// `kill_after_s` > 0 the command is killed (SIGKILL; exit_code 137) after that
// many seconds, for a test whose failure would be a command that never ends.
inline CliResult RunBubblewatch(const std::string& args,
                                const std::string& cwd = ".",
                                int kill_after_s = 0) {
  // Atomic: tests run commands from several threads at once (a `serve`
  // beside its queries), and two equal names would swap their outputs
  // (ThreadSanitizer found the plain int's race).
  static std::atomic<int> counter{0};
  std::string base = ::testing::TempDir() + "/cli_" + std::to_string(getpid()) +
                     "_" + std::to_string(counter.fetch_add(1));
  const std::string kill =
      kill_after_s > 0 ? "timeout -s KILL " + std::to_string(kill_after_s) + " "
                       : std::string();
  std::string cmd = "cd '" + cwd + "' && " + kill + BUBBLEWATCH_BINARY + " " +
                    args + " >'" + base + ".out' 2>'" + base + ".err'";
  int status = std::system(cmd.c_str());
  CliResult r;
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  r.out = ReadFile(base + ".out");
  r.err = ReadFile(base + ".err");
  std::remove((base + ".out").c_str());
  std::remove((base + ".err").c_str());
  return r;
}

// Writes `content` to a fresh temp file and returns its path.
inline std::string WriteTempFile(const std::string& name,
                                 const std::string& content) {
  std::string path = ::testing::TempDir() + "/" + name;
  WriteFile(path, content);
  return path;
}

}  // namespace bubblewatch::testing

#endif  // BUBBLEWATCH_TESTS_CLI_CLI_RUNNER_H_
