// Starting and reaping child processes (the bubblewatch binary, ops scripts)
// from integration tests, which kill them with signals at chosen moments.
#ifndef BUBBLEWATCH_TESTS_TESTING_CHILD_PROCESS_H_
#define BUBBLEWATCH_TESTS_TESTING_CHILD_PROCESS_H_

#include <sys/types.h>

#include <string>
#include <vector>

#include "absl/time/time.h"

namespace bubblewatch::testing {

// How a child's standard error is kept.
enum class StderrMode { kTruncate, kAppend };

// Starts `binary ARGS...` (argv[0] = binary) with this process's
// environment; with `stderr_path`, the child's standard error goes to that
// file. Returns the pid; if it could not start, aborts the test process
// with the reason (never -1: a caller's kill(-1, SIGKILL) as root would kill
// every process on the machine). The child is SIGKILLed if the calling thread
// ends first (the test process died): call it from the test's own thread.
pid_t SpawnChild(const std::string& binary,
                 const std::vector<std::string>& args,
                 const std::string& stderr_path = "",
                 StderrMode mode = StderrMode::kTruncate);

// Waits for `pid`; returns its exit code, or 128 + the signal that ended it.
int WaitChild(pid_t pid);

// True while `pid` (a child) has not exited. Does not reap it, so that
// WaitChild or WaitChildWithin still gets its exit code.
bool ChildRunning(pid_t pid);

// Waits up to `timeout` (scaled, test_time.h) for `pid`; then kills it with
// SIGKILL, so that a hung child fails the test instead of hanging it.
// Returns WaitChild's code, or -1 if it had to be killed.
int WaitChildWithin(pid_t pid, absl::Duration timeout);

// Kills (SIGKILL) and reaps, on destruction, each of `pids` still running:
// a failed assertion must not leave children behind (a SIGSTOPped one
// among them). `pids` may grow after construction.
class KillChildrenOnExit {
 public:
  explicit KillChildrenOnExit(std::vector<pid_t>* pids) : pids_(pids) {}
  KillChildrenOnExit(const KillChildrenOnExit&) = delete;
  KillChildrenOnExit& operator=(const KillChildrenOnExit&) = delete;
  ~KillChildrenOnExit();

 private:
  std::vector<pid_t>* pids_;
};

}  // namespace bubblewatch::testing

#endif  // BUBBLEWATCH_TESTS_TESTING_CHILD_PROCESS_H_
