// Starting and reaping child processes (the bubblewatch binary, ops scripts)
// from integration tests, which kill them with signals at chosen moments.
#ifndef BUBBLEWATCH_TESTS_TESTING_CHILD_PROCESS_H_
#define BUBBLEWATCH_TESTS_TESTING_CHILD_PROCESS_H_

#include <sys/types.h>

#include <string>
#include <vector>

namespace bubblewatch::testing {

// How a child's standard error is kept.
enum class StderrMode { kTruncate, kAppend };

// Starts `binary ARGS...` (argv[0] = binary) with this process's
// environment; with `stderr_path`, the child's standard error goes to that
// file. Returns the pid, or -1 (with a test failure recorded) if it could
// not start. The child is SIGKILLed if the calling thread ends first (the
// test process died): call it from the test's own thread.
pid_t SpawnChild(const std::string& binary,
                 const std::vector<std::string>& args,
                 const std::string& stderr_path = "",
                 StderrMode mode = StderrMode::kTruncate);

// Waits for `pid`; returns its exit code, or 128 + the signal that ended it.
int WaitChild(pid_t pid);

}  // namespace bubblewatch::testing

#endif  // BUBBLEWATCH_TESTS_TESTING_CHILD_PROCESS_H_
