#include "tests/testing/child_process.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "tests/testing/poll.h"

extern char** environ;

namespace bubblewatch::testing {

namespace {

// A child that did not start leaves no pid to signal, and callers kill what
// SpawnChild returns: kill(-1, SIGKILL) as root kills every process on the
// machine (the shell, the broker, other tests). So not starting ends the test
// process here, with the reason; its other children die with it
// (PR_SET_PDEATHSIG).
[[noreturn]] void CannotStart(const std::string& binary,
                              const std::string& why) {
  std::fprintf(stderr, "SpawnChild: cannot start %s: %s\n", binary.c_str(),
               why.c_str());
  std::fflush(stderr);
  std::abort();
}

}  // namespace

pid_t SpawnChild(const std::string& binary,
                 const std::vector<std::string>& args,
                 const std::string& stderr_path, StderrMode mode) {
  // Everything the child needs is built before fork: between fork and exec
  // it may only make async-signal-safe calls.
  std::vector<std::string> storage = {binary};
  storage.insert(storage.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (std::string& a : storage) argv.push_back(a.data());
  argv.push_back(nullptr);
  const int flags =
      O_WRONLY | O_CREAT | (mode == StderrMode::kAppend ? O_APPEND : O_TRUNC);
  // The exec's failure comes back through this pipe (closed on a successful
  // exec), so that "cannot start" stays a test failure here.
  int report[2];
  if (pipe2(report, O_CLOEXEC) != 0) {
    CannotStart(binary, absl::StrCat("pipe: ", std::strerror(errno)));
  }
  const pid_t parent = getpid();
  const pid_t pid = fork();
  if (pid == 0) {
    // Not posix_spawn: the child must die with this process. A test ended
    // without its destructors (a sanitizer's halt_on_error, a crash) would
    // otherwise leave its children running, or SIGSTOPped, holding ctest's
    // output pipe, and ctest waits for them forever.
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(127);  // Died before prctl took effect.
    int err = 0;
    if (!stderr_path.empty()) {
      const int fd = open(stderr_path.c_str(), flags | O_CLOEXEC, 0644);
      if (fd < 0 || dup2(fd, STDERR_FILENO) < 0) err = errno;
    }
    if (err == 0) {
      execve(binary.c_str(), argv.data(), environ);
      err = errno;
    }
    [[maybe_unused]] ssize_t n = write(report[1], &err, sizeof err);
    _exit(127);
  }
  close(report[1]);
  if (pid < 0) {
    close(report[0]);
    CannotStart(binary, absl::StrCat("fork: ", std::strerror(errno)));
  }
  int err = 0;
  ssize_t n;
  do {
    n = read(report[0], &err, sizeof err);
  } while (n < 0 && errno == EINTR);
  close(report[0]);
  if (n > 0) {
    WaitChild(pid);
    CannotStart(binary, std::strerror(err));
  }
  return pid;
}

int WaitChild(pid_t pid) {
  int status = 0;
  if (pid <= 0 || waitpid(pid, &status, 0) != pid) return -1;
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

bool ChildRunning(pid_t pid) {
  siginfo_t info{};
  return waitid(P_PID, pid, &info, WEXITED | WNOHANG | WNOWAIT) == 0 &&
         info.si_pid == 0;
}

int WaitChildWithin(pid_t pid, absl::Duration timeout) {
  int code = -1;
  const bool ended = PollUntil(
      [&] {
        int status = 0;
        const pid_t done = waitpid(pid, &status, WNOHANG);
        if (done < 0) {
          ADD_FAILURE() << "pid " << pid << " is not a child to wait for";
          return true;
        }
        if (done != pid) return false;
        code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
        return true;
      },
      timeout, absl::Milliseconds(100));
  if (ended) return code;
  ::kill(pid, SIGKILL);
  WaitChild(pid);
  return -1;
}

KillChildrenOnExit::~KillChildrenOnExit() {
  for (pid_t pid : *pids_) {
    if (pid > 0 && ChildRunning(pid)) {
      ::kill(pid, SIGKILL);
      ::kill(pid, SIGCONT);
      WaitChild(pid);
    }
  }
}

}  // namespace bubblewatch::testing
