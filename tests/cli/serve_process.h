// Runs `bubblewatch serve` (or `process --http`) as a child process on a free
// loopback port for end-to-end tests (CLI --server mode, the dashboard in a
// browser, the processor's HTTP API), and stops it when the test ends.
#ifndef BUBBLEWATCH_TESTS_CLI_SERVE_PROCESS_H_
#define BUBBLEWATCH_TESTS_CLI_SERVE_PROCESS_H_

#include <signal.h>
#include <sys/prctl.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <memory>
#include <string>

#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "tests/testing/files.h"
#include "tests/testing/poll.h"

namespace bubblewatch::testing {

class ServeProcess {
 public:
  // Starts `bubblewatch serve --store STORE --listen 127.0.0.1:0 EXTRA`;
  // see StartCommand.
  static std::unique_ptr<ServeProcess> Start(const std::string& store,
                                             const std::string& extra = "") {
    return StartCommand("serve --store '" + store + "' --listen 127.0.0.1:0 " +
                        extra);
  }

  // Starts `bubblewatch ARGS` (stderr to a log file) and waits, polling for
  // up to 60 s, for the log line naming its URL ("listening on URL ..." from
  // serve, "serving HTTP on URL" from process). Returns nullptr (after a test
  // failure) if it exits or does not come up.
  static std::unique_ptr<ServeProcess> StartCommand(const std::string& args) {
    static std::atomic<int> counter{0};  // Tests start servers from threads.
    const std::string log = ::testing::TempDir() + "/serve_" +
                            std::to_string(getpid()) + "_" +
                            std::to_string(counter.fetch_add(1)) + ".log";
    const std::string cmd = std::string("exec ") + BUBBLEWATCH_BINARY + " " +
                            args + " 2>'" + log + "'";
    const pid_t parent = getpid();
    pid_t pid = fork();
    if (pid == 0) {
      // A test process that dies (a sanitizer report ends it at once) must
      // not leave a server behind holding ctest's output pipe open: the
      // server (exec'd in place of sh) dies with the thread that started it.
      prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (getppid() != parent) _exit(127);  // It died before the prctl.
      execl("/bin/sh", "sh", "-c", cmd.c_str(), static_cast<char*>(nullptr));
      _exit(127);
    }
    auto p = std::unique_ptr<ServeProcess>(new ServeProcess(pid, log));
    bool exited = false;
    const bool up = PollUntil(
        [&] {
          const std::string text = p->Log();
          for (const std::string marker :
               {"listening on ", "serving HTTP on "}) {
            const size_t at = text.find(marker);
            if (at == std::string::npos) continue;
            const size_t begin = at + marker.size();
            const size_t end = text.find_first_of(" \n", begin);
            if (end == std::string::npos) continue;
            p->url_ = text.substr(begin, end - begin);
            return true;
          }
          int status = 0;
          exited = waitpid(pid, &status, WNOHANG) == pid;
          return exited;
        },
        absl::Seconds(60), absl::Milliseconds(20));
    if (exited) {
      p->pid_ = -1;
      ADD_FAILURE() << "bubblewatch " << args << " exited: " << p->Log();
      return nullptr;
    }
    if (up) return p;
    ADD_FAILURE() << "bubblewatch " << args << " did not come up: " << p->Log();
    return nullptr;
  }

  // Stops the process (SIGTERM) and expects a clean exit.
  ~ServeProcess() {
    if (pid_ > 0) {
      kill(pid_, SIGTERM);
      int status = 0;
      waitpid(pid_, &status, 0);
      EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0)
          << "did not stop cleanly: " << Log();
    }
    std::remove(log_.c_str());
  }

  // Kills the process with SIGKILL (a crash: nothing of it runs after) and
  // waits for it; the destructor then expects nothing more.
  void Kill() {
    if (pid_ <= 0) return;
    kill(pid_, SIGKILL);
    int status = 0;
    waitpid(pid_, &status, 0);
    EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL) << Log();
    pid_ = -1;
  }

  // Sends `signal` (e.g. SIGHUP) to the running process; false if it is
  // not running.
  bool Signal(int signal) { return pid_ > 0 && kill(pid_, signal) == 0; }

  // "http://127.0.0.1:PORT".
  const std::string& url() const { return url_; }
  // What it wrote on stderr so far.
  std::string Log() const { return ReadFile(log_); }

 private:
  ServeProcess(pid_t pid, std::string log) : pid_(pid), log_(std::move(log)) {}
  pid_t pid_;
  std::string log_;
  std::string url_;
};

}  // namespace bubblewatch::testing

#endif  // BUBBLEWATCH_TESTS_CLI_SERVE_PROCESS_H_
