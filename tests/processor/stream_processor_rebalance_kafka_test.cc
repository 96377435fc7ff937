// Two processor instances in one consumer group, each with its own store,
// against a real Kafka broker (ctest label `kafka`):
//   - together they split a multi-partition topic, and the union of their
//     stores (and the windows topic) equals the offline oracle with no
//     conflicting duplicates;
//   - one is stopped mid-stream (SIGTERM, or SIGKILL) while the producer is
//     still running; the other takes its partitions over with their job
//     state (the state changelog) and the union still equals the oracle.
#include <signal.h>
#include <sys/wait.h>

#include <algorithm>
#include <filesystem>
#include <map>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "schemas/window_summary.h"
#include "tests/processor/processor_kafka_test_util.h"
#include "tests/testing/command_flags.h"
#include "tests/testing/poll.h"
#include "tests/testing/test_time.h"

namespace bubblewatch {
namespace {

constexpr int kPartitions = 4;

std::vector<std::string> MemberArgs(const std::string& topic,
                                    const std::string& store) {
  std::vector<std::string> args = ProcessArgs(topic, store);
  // Long enough that a survivor is still there when a killed member's
  // session (3 s, testing::GroupSession) expires and its partitions come
  // over.
  // BW_TEST_WITHOUT_STATE_TOPIC=1 turns the changelog off, to see these
  // tests fail without it.
  const bool without = std::getenv("BW_TEST_WITHOUT_STATE_TOPIC") != nullptr;
  testing::SetFlags(
      args, {"--exit-when-idle", testing::ScaledFlag(absl::Seconds(7)),
             "--state-topic", without ? std::string() : topic + ".state",
             "--log-level", "info"});
  return args;
}

std::set<std::string> JobSet(const std::vector<WindowSummary>& windows) {
  std::set<std::string> jobs;
  for (const WindowSummary& w : windows) jobs.insert(w.job);
  return jobs;
}

// The union of both stores and the windows topic against the oracle.
void ExpectUnionEqualsOracle(const std::string& topic,
                             const std::string& store_a,
                             const std::string& store_b,
                             std::vector<WindowSummary>* a_out = nullptr,
                             std::vector<WindowSummary>* b_out = nullptr) {
  std::vector<WindowSummary> want = SortedOracle();
  ASSERT_FALSE(want.empty());
  std::vector<std::string> jobs = JobsOf(want);
  std::vector<WindowSummary> a = StoredWindows(store_a, jobs);
  std::vector<WindowSummary> b = StoredWindows(store_b, jobs);
  std::vector<WindowSummary> stored = UnionWithoutConflicts({a, b}, "stores");
  ExpectSameAnalysis(stored, want);
  for (const WindowSummary& w : stored) {
    EXPECT_EQ(w.late_events, 0) << w.job << " " << w.window.start_ns;
  }
  std::vector<WindowSummary> published = UnionWithoutConflicts(
      {ReadWindowsTopic(topic + ".windows")}, "windows topic");
  ExpectSameAnalysis(published, want);
  // The topic and the stores agree field for field (counters included).
  std::vector<WindowSummary> both =
      UnionWithoutConflicts({stored, published}, "stores vs windows topic");
  EXPECT_EQ(both.size(), want.size());
  if (a_out) *a_out = std::move(a);
  if (b_out) *b_out = std::move(b);
}

TEST(StreamProcessorRebalanceKafka, TwoInstancesSplitThePartitions) {
  std::string topic = Unique("bw-pair");
  std::string store_a = ::testing::TempDir() + "/" + topic + "-a";
  std::string store_b = ::testing::TempDir() + "/" + topic + "-b";
  CreateTopic(topic, kPartitions);
  ASSERT_EQ(RunToEnd(ProduceArgs(topic)), 0);
  pid_t a = Spawn(MemberArgs(topic, store_a));
  pid_t b = Spawn(MemberArgs(topic, store_b));
  EXPECT_EQ(Wait(a), 0);
  EXPECT_EQ(Wait(b), 0);
  std::vector<WindowSummary> in_a, in_b;
  ExpectUnionEqualsOracle(topic, store_a, store_b, &in_a, &in_b);
  EXPECT_FALSE(in_a.empty()) << "instance A got no partition with a job";
  EXPECT_FALSE(in_b.empty()) << "instance B got no partition with a job";
  std::filesystem::remove_all(store_a);
  std::filesystem::remove_all(store_b);
}

class StoppedMidStream : public ::testing::TestWithParam<int> {};

TEST_P(StoppedMidStream, TheOtherInstanceTakesOverWithTheSameResult) {
  const int signal = GetParam();
  std::string topic = Unique(signal == SIGKILL ? "bw-kill" : "bw-stop");
  std::string store_a = ::testing::TempDir() + "/" + topic + "-a";
  std::string store_b = ::testing::TempDir() + "/" + topic + "-b";
  CreateTopic(topic, kPartitions);
  // A live producer: the 35 s fleet replayed at 2x takes about 18 s, ample
  // time for A to finalize two windows per job on a loaded machine (slower
  // when the programs are, test_time.h: A must stop while it still sends).
  std::vector<std::string> produce = ProduceArgs(topic);
  const std::vector<std::string> pace = testing::ScaledReplaySpeed(2);
  testing::SetFlags(produce, pace);
  pid_t producer = Spawn(produce);
  pid_t a = Spawn(MemberArgs(topic, store_a));
  pid_t b = Spawn(MemberArgs(topic, store_b));
  std::vector<WindowSummary> want = SortedOracle();
  // Stop A once it has finalized two windows of each job it holds, while
  // the producer is still sending: then its partitions resume past their
  // first events, and a new owner without A's job state (finalized edge)
  // would store a partial first window that conflicts with A's.
  testing::PollUntil(
      [&] {
        if (!std::filesystem::exists(store_a)) return false;
        std::map<std::string, int> per_job;
        for (const WindowSummary& w : StoredWindows(store_a, JobsOf(want))) {
          ++per_job[w.job];
        }
        return !per_job.empty() &&
               std::all_of(per_job.begin(), per_job.end(),
                           [](const auto& kv) { return kv.second >= 2; });
      },
      absl::Seconds(30), absl::Milliseconds(200));
  int status = 0;
  EXPECT_EQ(waitpid(producer, &status, WNOHANG), 0)
      << "the producer finished before the stop; not mid-stream";
  ::kill(a, signal);
  EXPECT_EQ(Wait(a), signal == SIGKILL ? 128 + SIGKILL : 0);
  size_t stored_by_a = StoredWindows(store_a, JobsOf(want)).size();
  EXPECT_GT(stored_by_a, 0u) << "A stored nothing before it stopped";
  EXPECT_LT(stored_by_a, want.size());
  EXPECT_EQ(Wait(producer), 0);
  EXPECT_EQ(Wait(b), 0);
  std::vector<WindowSummary> in_a, in_b;
  ExpectUnionEqualsOracle(topic, store_a, store_b, &in_a, &in_b);
  // Some job was handed over: its windows are split between the stores.
  std::set<std::string> jobs_a = JobSet(in_a), jobs_b = JobSet(in_b);
  std::vector<std::string> shared;
  std::set_intersection(jobs_a.begin(), jobs_a.end(), jobs_b.begin(),
                        jobs_b.end(), std::back_inserter(shared));
  EXPECT_FALSE(shared.empty()) << "no job moved from A to B";
  std::filesystem::remove_all(store_a);
  std::filesystem::remove_all(store_b);
}

INSTANTIATE_TEST_SUITE_P(Signals, StoppedMidStream,
                         ::testing::Values(SIGTERM, SIGKILL),
                         [](const auto& info) {
                           return info.param == SIGKILL ? "Sigkill" : "Sigterm";
                         });

}  // namespace
}  // namespace bubblewatch
