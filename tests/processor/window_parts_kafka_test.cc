// `bubblewatch process --stage merge` against a real broker
// (docs/process.md#stage-2): the hosts' window parts of a split job
// (split_job_parts.h), produced to a parts topic interleaved across hosts
// with stage-1 republishes, become the single-stage windows in the store
// and on the windows topic; killed (SIGKILL) mid-stream and started again,
// it gives the same windows, and every copy of a window on the topic is the
// same bytes; killed, and replaced by an instance with an empty store, the
// new one restores the job records from the state topic and the two stores
// hold the uninterrupted run's windows; the same when the partition moves
// to such an instance of the group in a rebalance.
#include <signal.h>

#include <chrono>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "kafka/kafka_config.h"
#include "kafka/kafka_handles.h"
#include "schemas/window_summary_codec.h"
#include "storage/window_store.h"
#include "tests/processor/processor_kafka_test_util.h"
#include "tests/processor/split_job_parts.h"
#include "tests/testing/temp_dir.h"
#include "tests/testing/test_time.h"

namespace bubblewatch {
namespace {

using testing::ExpectSingleStageWindows;
using testing::Interleave;
using testing::kSplitJob;
using testing::Sent;
using testing::SplitJob;
using testing::TheSplitJob;

// Produces `values` (key: the job) to partition 0 of `topic`, in order.
void ProduceParts(const std::string& topic,
                  const std::vector<std::string>& values) {
  KafkaConfig config(Brokers());
  config.Set("enable.idempotence", "true");
  absl::StatusOr<RdKafkaPtr> producer =
      NewKafkaClient(RD_KAFKA_PRODUCER, config);
  ASSERT_TRUE(producer.ok()) << producer.status();
  for (const std::string& value : values) {
    rd_kafka_resp_err_t err = rd_kafka_producev(
        producer->get(), RD_KAFKA_V_TOPIC(topic.c_str()),
        RD_KAFKA_V_PARTITION(0),
        RD_KAFKA_V_KEY(kSplitJob, std::char_traits<char>::length(kSplitJob)),
        RD_KAFKA_V_VALUE(const_cast<char*>(value.data()), value.size()),
        RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY), RD_KAFKA_V_END);
    ASSERT_EQ(err, RD_KAFKA_RESP_ERR_NO_ERROR) << rd_kafka_err2str(err);
  }
  ASSERT_EQ(rd_kafka_flush(producer->get(), 60'000),
            RD_KAFKA_RESP_ERR_NO_ERROR);
}

std::vector<std::string> PartValues(const SplitJob& job,
                                    const std::vector<Sent>& sent) {
  std::vector<std::string> out;
  for (const Sent& s : sent) out.push_back(job.parts.at(s.host)[s.index]);
  return out;
}

std::vector<std::string> MergeArgs(
    const std::string& topic, const std::string& store,
    absl::Duration idle_timeout = absl::Seconds(3)) {
  return {"process",
          "--stage",
          "merge",
          "--brokers",
          Brokers(),
          "--topic",
          topic,
          "--group",
          topic + "-group",
          "--store",
          store,
          "--windows-topic",
          topic + ".windows",
          "--dlq-topic",
          topic + ".dlq",
          "--state-topic",
          topic + ".state",
          "--idle-timeout",
          testing::ScaledFlag(idle_timeout),
          "--exit-when-idle",
          testing::ScaledFlag(absl::Seconds(4)),
          "--log-level",
          "warn",
          "-X",
          "session.timeout.ms=" + testing::GroupSessionMs(),
          "-X",
          "heartbeat.interval.ms=" + testing::GroupHeartbeatMs()};
}

std::vector<WindowSummary> StoredWindows(const std::string& store_dir) {
  absl::StatusOr<std::unique_ptr<WindowStoreReader>> store =
      OpenRocksDbWindowStoreReadOnly(store_dir);
  if (!store.ok()) return {};
  absl::StatusOr<std::vector<WindowSummary>> windows =
      (*store)->Scan(kSplitJob, absl::InfinitePast(), absl::InfiniteFuture());
  EXPECT_TRUE(windows.ok()) << windows.status();
  return windows.ok() ? *std::move(windows) : std::vector<WindowSummary>{};
}

// The store holds the single-stage windows, and the windows topic the
// same windows: each copy of a window the same bytes as the stored one.
void ExpectStoreAndTopic(const std::string& topic,
                         const std::string& store_dir) {
  const std::vector<WindowSummary> stored = StoredWindows(store_dir);
  ExpectSingleStageWindows(stored);
  std::map<int64_t, std::string> by_start;
  for (const WindowSummary& w : stored) {
    by_start[w.window.start_ns] = EncodeWindowSummary(w);
  }
  const std::vector<WindowSummary> published =
      ReadWindowsTopic(topic + ".windows");
  EXPECT_GE(published.size(), stored.size());
  std::map<int64_t, int> copies;
  for (const WindowSummary& w : published) {
    ++copies[w.window.start_ns];
    auto it = by_start.find(w.window.start_ns);
    ASSERT_NE(it, by_start.end())
        << "published, not stored: " << w.window.start_ns;
    EXPECT_EQ(EncodeWindowSummary(w), it->second)
        << "window " << w.window.start_ns << " published differently";
  }
  EXPECT_EQ(copies.size(), stored.size());
}

TEST(WindowPartsKafka, MergeStageStoresTheSingleStageWindows) {
  const SplitJob& job = TheSplitJob();
  const std::string topic = Unique("parts");
  ASSERT_NO_FATAL_FAILURE(CreateTopic(topic, 1));
  ASSERT_NO_FATAL_FAILURE(
      ProduceParts(topic, PartValues(job, Interleave(job, 31))));
  testing::TempDir dir;
  ASSERT_EQ(RunToEnd(MergeArgs(topic, dir.Sub("store"))), 0);
  ExpectStoreAndTopic(topic, dir.Sub("store"));
}

TEST(WindowPartsKafka, KilledMidStreamAndRestartedGivesTheSameWindows) {
  const SplitJob& job = TheSplitJob();
  const std::string topic = Unique("parts-kill");
  ASSERT_NO_FATAL_FAILURE(CreateTopic(topic, 1));
  const std::vector<std::string> values = PartValues(job, Interleave(job, 32));
  const size_t half = values.size() / 2;
  ASSERT_NO_FATAL_FAILURE(ProduceParts(
      topic, std::vector<std::string>(values.begin(), values.begin() + half)));
  testing::TempDir dir;
  const std::string store = dir.Sub("store");
  // Killed once it has stored a window, with windows still open.
  const pid_t first = Spawn(MergeArgs(topic, store), dir.Sub("first.log"));
  const auto deadline =
      std::chrono::steady_clock::now() +
      absl::ToChronoSeconds(testing::Scaled(absl::Seconds(60)));
  while (StoredWindows(store).empty() &&
         std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  ASSERT_FALSE(StoredWindows(store).empty()) << "no window before the kill";
  ASSERT_EQ(kill(first, SIGKILL), 0);
  EXPECT_EQ(Wait(first), 128 + SIGKILL);
  ASSERT_LT(StoredWindows(store).size(), job.single.size());
  ASSERT_NO_FATAL_FAILURE(ProduceParts(
      topic, std::vector<std::string>(values.begin() + half, values.end())));
  ASSERT_EQ(RunToEnd(MergeArgs(topic, store)), 0);
  ExpectStoreAndTopic(topic, store);
}

// Windows by start: their encodings, each copy the same bytes.
void AddWindows(const std::vector<WindowSummary>& windows,
                std::map<int64_t, std::string>& out) {
  for (const WindowSummary& w : windows) {
    auto [it, inserted] =
        out.try_emplace(w.window.start_ns, EncodeWindowSummary(w));
    EXPECT_TRUE(inserted || it->second == EncodeWindowSummary(w))
        << "window " << w.window.start_ns << " differs between copies";
  }
}

// The windows of an uninterrupted `process --stage merge` over `values`,
// on a topic of its own (`name`), by window start.
std::map<int64_t, std::string> UninterruptedWindows(
    const std::vector<std::string>& values, const std::string& name,
    const std::string& store_dir) {
  const std::string clean = Unique(name);
  CreateTopic(clean, 1);
  ProduceParts(clean, values);
  EXPECT_EQ(RunToEnd(MergeArgs(clean, store_dir)), 0);
  std::map<int64_t, std::string> want;
  AddWindows(StoredWindows(store_dir), want);
  return want;
}

// Waits (up to a scaled minute) until `store_dir` holds `n` windows.
void AwaitStoredWindows(const std::string& store_dir, size_t n) {
  const auto deadline =
      std::chrono::steady_clock::now() +
      absl::ToChronoSeconds(testing::Scaled(absl::Seconds(60)));
  while (StoredWindows(store_dir).size() < n &&
         std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  ASSERT_GE(StoredWindows(store_dir).size(), n) << "too few windows stored";
}

// `got` has the windows of `want`, the same bytes, and no other (compared
// window by window: the bytes are too long to print).
void ExpectSameWindows(const std::map<int64_t, std::string>& got,
                       const std::map<int64_t, std::string>& want) {
  std::vector<int64_t> got_starts, want_starts;
  for (const auto& [start, bytes] : got) got_starts.push_back(start);
  for (const auto& [start, bytes] : want) want_starts.push_back(start);
  EXPECT_EQ(got_starts, want_starts);
  for (const auto& [start, bytes] : want) {
    auto it = got.find(start);
    EXPECT_TRUE(it != got.end() && it->second == bytes)
        << "window " << start << " differs from the uninterrupted run's";
  }
}

// Instance A is killed (SIGKILL) with a window open whose job has a host
// that ended below the resume offset; instance B, with an empty store,
// takes the partition over and knows that host only from the state topic.
TEST(WindowPartsKafka, AnEmptyInstanceTakesOverFromTheStateTopic) {
  const SplitJob& job = TheSplitJob();
  int64_t cut = 0;
  const std::vector<std::string> values = testing::AHostEndsEarly(job, 2, cut);
  testing::TempDir dir;
  const std::map<int64_t, std::string> want =
      UninterruptedWindows(values, "parts-clean", dir.Sub("clean"));
  ASSERT_GT(want.size(), 3u);

  const std::string topic = Unique("parts-move");
  ASSERT_NO_FATAL_FAILURE(CreateTopic(topic, 1));
  ASSERT_NO_FATAL_FAILURE(ProduceParts(
      topic, std::vector<std::string>(values.begin(), values.begin() + cut)));
  // A: no idle timeout in sight, so the open window stays open until the
  // kill, after its windows before the cut are stored and a commit or two
  // more went by (their state-topic records acknowledged).
  const std::string store_a = dir.Sub("a");
  const pid_t a =
      Spawn(MergeArgs(topic, store_a, absl::Seconds(600)), dir.Sub("a.log"));
  ASSERT_NO_FATAL_FAILURE(AwaitStoredWindows(store_a, 3));
  std::this_thread::sleep_for(
      absl::ToChronoMilliseconds(testing::Scaled(absl::Seconds(3))));
  ASSERT_EQ(kill(a, SIGKILL), 0);
  EXPECT_EQ(Wait(a), 128 + SIGKILL);
  std::map<int64_t, std::string> got;
  AddWindows(StoredWindows(store_a), got);

  // B: an empty store, the rest of the parts.
  ASSERT_NO_FATAL_FAILURE(ProduceParts(
      topic, std::vector<std::string>(values.begin() + cut, values.end())));
  const std::string store_b = dir.Sub("b");
  ASSERT_EQ(RunToEnd(MergeArgs(topic, store_b)), 0);
  const std::vector<WindowSummary> b = StoredWindows(store_b);
  EXPECT_FALSE(b.empty());
  AddWindows(b, got);
  ExpectSameWindows(got, want);
  // Every copy on the windows topic is the window's bytes.
  for (const WindowSummary& w : ReadWindowsTopic(topic + ".windows")) {
    auto it = want.find(w.window.start_ns);
    ASSERT_NE(it, want.end()) << "published: " << w.window.start_ns;
    EXPECT_EQ(EncodeWindowSummary(w), it->second);
  }
}

// Two instances of one group: B, with an empty store, joins while A owns
// the partition (a window open whose job has a host that ended below the
// resume offset); A stops (SIGTERM: it commits, then leaves the group), the
// rebalance hands the partition to B, which restores from the state topic.
TEST(WindowPartsKafka, ARebalanceToAnEmptyInstanceGivesTheSameWindows) {
  const SplitJob& job = TheSplitJob();
  int64_t cut = 0;
  const std::vector<std::string> values = testing::AHostEndsEarly(job, 2, cut);
  testing::TempDir dir;
  const std::map<int64_t, std::string> want =
      UninterruptedWindows(values, "parts-clean2", dir.Sub("clean"));
  ASSERT_GT(want.size(), 3u);

  const std::string topic = Unique("parts-rebalance");
  ASSERT_NO_FATAL_FAILURE(CreateTopic(topic, 1));
  ASSERT_NO_FATAL_FAILURE(ProduceParts(
      topic, std::vector<std::string>(values.begin(), values.begin() + cut)));
  // No idle timeout in sight for A, and B's long after the parts it reads:
  // only the parts close windows (without A's job records, B's would wait
  // for a host it does not know, then close by the idle timeout).
  const std::string store_a = dir.Sub("a");
  const pid_t a =
      Spawn(MergeArgs(topic, store_a, absl::Seconds(600)), dir.Sub("a.log"));
  ASSERT_NO_FATAL_FAILURE(AwaitStoredWindows(store_a, 3));
  const std::string store_b = dir.Sub("b");
  const pid_t b =
      Spawn(MergeArgs(topic, store_b, absl::Seconds(15)), dir.Sub("b.log"));
  // B joined (and got nothing: one partition, kept by A).
  std::this_thread::sleep_for(
      absl::ToChronoMilliseconds(testing::Scaled(absl::Seconds(3))));
  ASSERT_EQ(kill(a, SIGTERM), 0);
  EXPECT_EQ(Wait(a), 0);
  std::map<int64_t, std::string> got;
  AddWindows(StoredWindows(store_a), got);
  ASSERT_NO_FATAL_FAILURE(ProduceParts(
      topic, std::vector<std::string>(values.begin() + cut, values.end())));
  EXPECT_EQ(Wait(b), 0);
  const std::vector<WindowSummary> b_windows = StoredWindows(store_b);
  EXPECT_FALSE(b_windows.empty());
  AddWindows(b_windows, got);
  ExpectSameWindows(got, want);
}

}  // namespace
}  // namespace bubblewatch
