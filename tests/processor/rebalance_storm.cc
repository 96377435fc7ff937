#include "tests/processor/rebalance_storm.h"

#include <signal.h>

#include <filesystem>
#include <random>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "tests/testing/child_process.h"
#include "tests/testing/files.h"
#include "tests/testing/poll.h"

namespace bubblewatch::testing {

std::string StormReport::Summary() const {
  return absl::StrCat(
      "storm of ",
      absl::FormatDuration(absl::Trunc(took, absl::Milliseconds(100))), ": ",
      absl::StrJoin(actions, " "), " (", joins, " joins, ", stops, " stops, ",
      kills, " kills)");
}

RebalanceStorm::RebalanceStorm(const std::vector<std::string>& names,
                               const std::string& prefix, ArgsFn args,
                               std::vector<pid_t>* children)
    : args_(std::move(args)), children_(children) {
  for (const std::string& name : names) {
    members_.push_back(StormMember{.name = name,
                                   .store = prefix + "-" + name,
                                   .log = prefix + "-" + name + ".stderr"});
  }
}

void RebalanceStorm::Start(StormMember& m) {
  m.pid = SpawnChild(BUBBLEWATCH_BINARY, args_(m), m.log, StderrMode::kAppend);
  children_->push_back(m.pid);
}

bool RebalanceStorm::Running(const StormMember& m) const {
  return m.pid > 0 && ChildRunning(m.pid);
}

size_t RebalanceStorm::CountInLog(const StormMember& m,
                                  const std::string& what) const {
  const std::string text = ReadFile(m.log);
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos;
       at = text.find(what, at + what.size())) {
    ++n;
  }
  return n;
}

StormReport RebalanceStorm::Blow(int max_actions, pid_t producer,
                                 uint32_t seed) {
  StormReport report;
  for (const StormMember& m : members_) report.joins += Running(m) ? 1 : 0;
  const absl::Time began = absl::Now();
  std::mt19937 rng(seed);
  for (int i = 0; i < max_actions && ChildRunning(producer); ++i) {
    // The storm's pace, not a wait for a condition: one action a second.
    absl::SleepFor(absl::Seconds(1));
    std::vector<StormMember*> up, down;
    for (StormMember& m : members_) (Running(m) ? up : down).push_back(&m);
    const bool join =
        up.size() <= 1 ||
        (!down.empty() && up.size() < members_.size() && rng() % 2 == 0);
    if (join) {
      StormMember& m = *down[rng() % down.size()];
      const size_t assigned_before = CountInLog(m, "info assigned ");
      Start(m);
      ++report.joins;
      report.actions.push_back("+" + m.name);
      EXPECT_TRUE(PollUntil(
          [&] {
            return CountInLog(m, "info assigned ") > assigned_before ||
                   !Running(m);
          },
          absl::Seconds(20), absl::Milliseconds(200)))
          << m.name << " got no partition within 20 s of joining";
      EXPECT_TRUE(Running(m)) << ReadFile(m.log);
    } else {
      StormMember& m = *up[rng() % up.size()];
      const int signal = rng() % 2 == 0 ? SIGKILL : SIGTERM;
      ::kill(m.pid, signal);
      const int code = WaitChildWithin(m.pid, absl::Seconds(60));
      EXPECT_EQ(code, signal == SIGKILL ? 128 + SIGKILL : 0)
          << m.name << ": " << ReadFile(m.log);
      m.pid = -1;
      (signal == SIGKILL ? report.kills : report.stops)++;
      report.actions.push_back((signal == SIGKILL ? "x" : "-") + m.name);
    }
  }
  report.took = absl::Now() - began;
  return report;
}

void RebalanceStorm::Calm(absl::Duration timeout) {
  for (StormMember& m : members_) {
    if (!Running(m)) Start(m);
  }
  for (StormMember& m : members_) {
    EXPECT_EQ(WaitChildWithin(m.pid, timeout), 0)
        << m.name << ": " << ReadFile(m.log);
    m.pid = -1;
  }
}

size_t RebalanceStorm::Assignments() const {
  size_t n = 0;
  for (const StormMember& m : members_) n += CountInLog(m, "info assigned ");
  return n;
}

size_t RebalanceStorm::Handovers() const {
  size_t n = 0;
  for (const StormMember& m : members_) {
    n += CountInLog(m, "state from changelog");
  }
  return n;
}

std::string RebalanceStorm::LogPaths() const {
  std::string out;
  for (const StormMember& m : members_)
    absl::StrAppend(&out, "log: ", m.log, "\n");
  return out;
}

void RebalanceStorm::RemoveFiles() const {
  for (const StormMember& m : members_) {
    std::filesystem::remove_all(m.store);
    std::filesystem::remove(m.log);
  }
}

}  // namespace bubblewatch::testing
