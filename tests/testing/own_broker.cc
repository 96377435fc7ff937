#include "tests/testing/own_broker.h"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "tests/testing/files.h"
#include "tests/testing/poll.h"

extern char** environ;

namespace bubblewatch::testing {
namespace {

std::string ShellQuote(const std::string& s) {
  return absl::StrCat("'", absl::StrReplaceAll(s, {{"'", "'\\''"}}), "'");
}

bool Alive(pid_t pid) { return kill(pid, 0) == 0; }

}  // namespace

int PortAboveSharedBroker(int offset) {
  int shared = 39092;
  if (const char* brokers = std::getenv("BUBBLEWATCH_KAFKA_BROKERS")) {
    absl::string_view text(brokers);
    const size_t colon = text.rfind(':');
    int parsed = 0;
    if (colon != absl::string_view::npos &&
        absl::SimpleAtoi(text.substr(colon + 1), &parsed) && parsed > 0 &&
        parsed < 65000) {
      shared = parsed;
    }
  }
  return shared + offset;
}

OwnBroker::OwnBroker(int port, const std::string& name,
                     const std::string& kafka_version)
    : port_(port),
      state_dir_(absl::StrCat(::testing::TempDir(), "/bw-kafka-", name, "-",
                              getpid())),
      kafka_version_(kafka_version),
      ops_(absl::StrCat(BUBBLEWATCH_REPO_ROOT, "/ops/kafka/")) {}

OwnBroker::~OwnBroker() {
  if (std::getenv("BUBBLEWATCH_TEST_KEEP_BROKER") != nullptr) return;
  Stop();
  // The broker's log stays only when it can explain a failure.
  if (!::testing::Test::HasFailure()) {
    std::error_code ignored;
    std::filesystem::remove_all(state_dir_, ignored);
  }
}

bool OwnBroker::Start() {
  for (int attempt = 0; attempt < 3; ++attempt) {
    const std::string version =
        kafka_version_.empty() ? ""
                               : absl::StrCat("BUBBLEWATCH_KAFKA_VERSION=",
                                              ShellQuote(kafka_version_), " ");
    if (std::system(absl::StrCat(version, ops_, "start --port ", port_,
                                 " --state-dir ", ShellQuote(state_dir_),
                                 " >/dev/null")
                        .c_str()) == 0) {
      return true;
    }
  }
  return false;
}

void OwnBroker::Stop() {
  std::system(absl::StrCat(ops_, "stop --port ", port_, " --state-dir ",
                           ShellQuote(state_dir_), " >/dev/null 2>&1")
                  .c_str());
  // Whatever the pid file says, the broker this test started must go. It is
  // our child: waitpid both tells whether it runs and reaps it.
  if (relaunched_pid_ > 0) {
    auto running = [&] {
      return waitpid(relaunched_pid_, nullptr, WNOHANG) == 0;
    };
    if (running()) {
      kill(relaunched_pid_, SIGTERM);
      if (!PollUntil([&] { return !running(); }, absl::Seconds(30))) {
        kill(relaunched_pid_, SIGKILL);
        PollUntil([&] { return !running(); }, absl::Seconds(10));
      }
    }
    relaunched_pid_ = 0;
  }
}

std::string OwnBroker::brokers() const {
  return absl::StrCat("127.0.0.1:", port_);
}

size_t OwnBroker::CountStarted() const {
  const std::string log = ReadFile(log_file());
  size_t count = 0;
  for (size_t at = log.find("Kafka Server started"); at != std::string::npos;
       at = log.find("Kafka Server started", at + 1)) {
    ++count;
  }
  return count;
}

bool OwnBroker::Restart(int signal, absl::Duration* down_for,
                        std::string* error) {
  int pid_number = 0;
  if (!absl::SimpleAtoi(absl::StripAsciiWhitespace(ReadFile(pid_file())),
                        &pid_number)) {
    *error = "no broker.pid";
    return false;
  }
  const pid_t pid = pid_number;
  std::string cmdline = ReadFile(absl::StrCat("/proc/", pid, "/cmdline"));
  std::vector<std::string> argv;
  for (absl::string_view arg : absl::StrSplit(cmdline, '\0')) {
    if (!arg.empty()) argv.emplace_back(arg);
  }
  if (argv.empty()) {
    *error = "cannot read the broker's command line";
    return false;
  }
  const absl::Time stopped = absl::Now();
  kill(pid, signal);
  // A relaunched broker is our child and must be reaped to be gone; the
  // first one was started by ops/kafka/start in its own session.
  auto gone = [&] {
    if (pid == relaunched_pid_) {
      return waitpid(pid, nullptr, WNOHANG) == pid;
    }
    return !Alive(pid);
  };
  if (!PollUntil(gone, absl::Seconds(60))) {
    kill(pid, SIGKILL);
    PollUntil(gone, absl::Seconds(10));
  }
  const size_t started_before = CountStarted();
  // The same command line, in its own session, output appended to the log.
  std::vector<char*> spawn_argv;
  for (std::string& a : argv) spawn_argv.push_back(a.data());
  spawn_argv.push_back(nullptr);
  posix_spawn_file_actions_t files;
  posix_spawn_file_actions_init(&files);
  posix_spawn_file_actions_addopen(&files, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&files, 1, log_file().c_str(),
                                   O_WRONLY | O_APPEND | O_CREAT, 0644);
  posix_spawn_file_actions_adddup2(&files, 1, 2);
  posix_spawnattr_t attributes;
  posix_spawnattr_init(&attributes);
  posix_spawnattr_setflags(&attributes, POSIX_SPAWN_SETSID);
  pid_t new_pid = 0;
  const int spawned = posix_spawnp(&new_pid, spawn_argv[0], &files, &attributes,
                                   spawn_argv.data(), environ);
  posix_spawn_file_actions_destroy(&files);
  posix_spawnattr_destroy(&attributes);
  if (spawned != 0) {
    *error = absl::StrCat("could not relaunch the broker: errno ", spawned);
    return false;
  }
  relaunched_pid_ = new_pid;
  // ops/kafka/stop finds it by this file.
  std::ofstream(pid_file(), std::ios::trunc) << new_pid << "\n";
  if (!PollUntil([&] { return CountStarted() > started_before; },
                 absl::Seconds(90))) {
    *error = "the restarted broker did not log 'Kafka Server started'";
    return false;
  }
  *down_for = absl::Now() - stopped;
  return true;
}

}  // namespace bubblewatch::testing
