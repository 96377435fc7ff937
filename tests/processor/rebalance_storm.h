// A rebalance storm against a real broker: processor instances of one
// consumer group, each with its own store and log, join, leave (SIGTERM)
// and die (SIGKILL) one action a second while a producer sends, so that
// partitions move, with and without a clean hand-over, many times over.
// Used by the processor's fault test and by the fleet query
// tier's test, which watches the storm through `serve
// --brokers`.
#ifndef BUBBLEWATCH_TESTS_PROCESSOR_REBALANCE_STORM_H_
#define BUBBLEWATCH_TESTS_PROCESSOR_REBALANCE_STORM_H_

#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/time/time.h"

namespace bubblewatch::testing {

// One processor instance of the storm: its store and its log (appended to
// across restarts).
struct StormMember {
  std::string name;
  std::string store;
  std::string log;
  pid_t pid = -1;
};

// What a storm did, for the test's output and its "was it a storm" checks.
struct StormReport {
  std::vector<std::string> actions;  // "+a" joined, "-a" left, "xa" killed.
  int joins = 0;
  int stops = 0;
  int kills = 0;
  absl::Duration took;

  // "storm of 9.1s: +c xa -b ... (4 joins, 2 stops, 3 kills)".
  std::string Summary() const;
};

class RebalanceStorm {
 public:
  // The process arguments of a member (`process ... --store m.store`).
  using ArgsFn = std::function<std::vector<std::string>(const StormMember&)>;

  // Members named `names`, with stores and logs under `prefix` + "-" +
  // name. Every pid started is appended to `children` (to be killed if the
  // test fails half-way, see KillChildrenOnExit).
  RebalanceStorm(const std::vector<std::string>& names,
                 const std::string& prefix, ArgsFn args,
                 std::vector<pid_t>* children);

  std::vector<StormMember>& members() { return members_; }

  // Starts `m` (its log is appended to).
  void Start(StormMember& m);
  bool Running(const StormMember& m) const;
  // How often `what` occurs in `m`'s log so far.
  size_t CountInLog(const StormMember& m, const std::string& what) const;

  // Up to `max_actions` actions, one a second, while `producer` runs,
  // chosen by `seed`: with two or three members up one leaves or dies,
  // with one up another joins, else either. Each action waits for its
  // effect (a joining member's first assignment, a leaving member's exit)
  // before the next, so that every action really moves partitions. Test
  // failures are recorded for a member that does not react in time.
  StormReport Blow(int max_actions, pid_t producer, uint32_t seed);

  // The calm after the storm: starts every member that is down and waits
  // (up to `timeout` each) for all to exit 0 once idle.
  void Calm(absl::Duration timeout);

  // Across all members' logs: partition assignments, and those that
  // restored their state from the changelog (a hand-over with state).
  size_t Assignments() const;
  size_t Handovers() const;

  // The members' logs, one "log: PATH" line each, for a failure message.
  std::string LogPaths() const;
  // Removes the members' stores and logs.
  void RemoveFiles() const;

 private:
  std::vector<StormMember> members_;
  ArgsFn args_;
  std::vector<pid_t>* children_;
};

}  // namespace bubblewatch::testing

#endif  // BUBBLEWATCH_TESTS_PROCESSOR_REBALANCE_STORM_H_
