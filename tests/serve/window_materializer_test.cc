// WindowMaterializer against librdkafka's mock cluster (fast; the real
// broker, with real processors, is tests/cli/serve_brokers_kafka_test.cc):
// a republished window replaces the stored one, a tombstone deletes, a
// message that is no window is skipped, and a restart resumes from the
// offsets stored with the windows, re-applying nothing. With the state
// topic: the jobs' states, times and alert states of the newest snapshots.
#include "serve/window_materializer.h"

#include <librdkafka/rdkafka.h>

#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kafka/embedded_kafka_cluster.h"
#include "kafka/kafka_config.h"
#include "processor/fleet_topics.h"
#include "processor/job_state.h"
#include "processor/state_changelog.h"
#include "schemas/window_summary_codec.h"
#include "storage/window_store.h"
#include "tests/storage/storage_test_util.h"
#include "tests/testing/poll.h"
#include "tests/testing/temp_dir.h"

namespace bubblewatch {
namespace {

using ::bubblewatch::testing_util::kWindowNs;
using ::bubblewatch::testing_util::SampleWindow;
using ::testing::ElementsAre;

constexpr char kTopic[] = "windows";
constexpr int kPartitions = 3;

class Publisher {
 public:
  explicit Publisher(const std::string& brokers, std::string topic = kTopic)
      : topic_(std::move(topic)) {
    auto p = NewKafkaClient(RD_KAFKA_PRODUCER, KafkaConfig(brokers));
    EXPECT_TRUE(p.ok()) << p.status();
    if (p.ok()) producer_ = *std::move(p);
  }
  // As the processor's CommitPipeline publishes a window.
  void Window(const WindowSummary& w) {
    const std::string value = EncodeWindowSummary(w);
    Send(WindowTopicKey(w.job, w.window.start_ns), w.job, &value);
  }
  void Tombstone(const std::string& job, int64_t start) {
    Send(WindowTopicKey(job, start), job, nullptr);
  }
  void Raw(const std::string& key, const std::string& job,
           const std::string& value) {
    Send(key, job, &value);
  }
  // As the processor's StateChangelog writes a snapshot: key "topic/P", to
  // partition P.
  void Snapshot(const PartitionSnapshot& s) {
    const std::string value = EncodePartitionSnapshot(s);
    const std::string key = absl::StrCat(s.topic, "/", s.partition);
    Send(key, s.partition, &value);
  }
  void Flush() {
    ASSERT_EQ(rd_kafka_flush(producer_.get(), 10000),
              RD_KAFKA_RESP_ERR_NO_ERROR);
  }
  int sent() const { return sent_; }

 private:
  void Send(const std::string& key, const std::string& job,
            const std::string* value) {
    Send(key, WindowTopicPartition(job, kPartitions), value);
  }
  void Send(const std::string& key, int32_t partition,
            const std::string* value) {
    ASSERT_EQ(
        rd_kafka_producev(
            producer_.get(), RD_KAFKA_V_TOPIC(topic_.c_str()),
            RD_KAFKA_V_PARTITION(partition),
            RD_KAFKA_V_KEY(key.data(), key.size()),
            RD_KAFKA_V_VALUE(value ? const_cast<char*>(value->data()) : nullptr,
                             value ? value->size() : 0),
            RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY), RD_KAFKA_V_END),
        RD_KAFKA_RESP_ERR_NO_ERROR);
    ++sent_;
  }
  std::string topic_;
  RdKafkaPtr producer_;
  int sent_ = 0;
};

// Runs a materializer over `store` until it has caught up with `messages`
// messages (lag known and 0 after at least that many were read), then
// stops it and returns its final status.
MaterializerStatus MaterializeUntilCaughtUp(
    const std::string& brokers, WindowStore* store,
    const std::string& state_topic = "") {
  WindowMaterializerOptions options;
  options.brokers = brokers;
  options.windows_topic = kTopic;
  options.state_topic = state_topic;
  options.retention = absl::Hours(24 * 365);
  options.max_batch_wait = absl::Milliseconds(20);
  auto m = WindowMaterializer::Create(options, store);
  EXPECT_TRUE(m.ok()) << m.status();
  if (!m.ok()) return {};
  absl::Status ran;
  std::thread runner([&] { ran = (*m)->Run(); });
  const bool caught_up = testing::PollUntil(
      [&] {
        const MaterializerStatus s = (*m)->status();
        return s.partitions == kPartitions && s.lag_messages == 0 &&
               (state_topic.empty() || (s.state_partitions == kPartitions &&
                                        s.state_lag_messages == 0));
      },
      absl::Seconds(30), absl::Milliseconds(10));
  (*m)->Stop();
  runner.join();
  EXPECT_TRUE(ran.ok()) << ran;
  EXPECT_TRUE(caught_up);
  return (*m)->status();
}

std::vector<int64_t> Starts(const WindowStoreReader& store,
                            const std::string& job) {
  auto windows = store.Scan(job, absl::InfinitePast(), absl::InfiniteFuture());
  EXPECT_TRUE(windows.ok()) << windows.status();
  std::vector<int64_t> out;
  if (windows.ok()) {
    for (const WindowSummary& w : *windows) out.push_back(w.window.start_ns);
  }
  return out;
}

TEST(WindowMaterializer, ReplacesDeletesSkipsAndResumesFromStoredOffsets) {
  auto cluster = EmbeddedKafkaCluster::Create(1);
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  const std::string brokers = (*cluster)->bootstrap_servers();
  ASSERT_TRUE((*cluster)->CreateTopic(kTopic, kPartitions).ok());
  // Jobs on more than one partition, so that per-partition offsets count.
  const std::vector<std::string> jobs = {"job-a", "job-b", "job-c", "job-d"};
  std::set<int32_t> used;
  for (const std::string& j : jobs) {
    used.insert(WindowTopicPartition(j, kPartitions));
  }
  ASSERT_GT(used.size(), 1u);

  Publisher pub(brokers);
  for (const std::string& j : jobs) {
    for (int64_t i = 0; i < 5; ++i) pub.Window(SampleWindow(j, i * kWindowNs));
  }
  // A later version of job-a's second window (more late events), a
  // tombstone for job-b's fourth, and messages that are no windows.
  WindowSummary late = SampleWindow("job-a", kWindowNs);
  late.late_events += 17;
  pub.Window(late);
  pub.Tombstone("job-b", 3 * kWindowNs);
  pub.Raw(WindowTopicKey("job-c", 99), "job-c", "not a flatbuffer");
  pub.Raw(WindowTopicKey("job-c", 7 * kWindowNs), "job-c",
          EncodeWindowSummary(SampleWindow("job-c", 8 * kWindowNs)));
  pub.Flush();

  testing::TempDir dir;
  {
    auto store = OpenRocksDbWindowStore(dir.path());
    ASSERT_TRUE(store.ok()) << store.status();
    const MaterializerStatus s =
        MaterializeUntilCaughtUp(brokers, store->get());
    EXPECT_EQ(s.invalid_messages, 2);
    EXPECT_EQ(s.windows_deleted, 1);
    // 21 versions of windows arrived; a batch keeps the last version of a
    // key only (job-a's second window twice, job-b's fourth then its
    // tombstone), so 19 to 21 writes.
    EXPECT_GE(s.windows_applied, 19);
    EXPECT_LE(s.windows_applied, 21);

    const WindowStore& st = **store;
    EXPECT_THAT(Starts(st, "job-a"), ElementsAre(0, kWindowNs, 2 * kWindowNs,
                                                 3 * kWindowNs, 4 * kWindowNs));
    EXPECT_THAT(Starts(st, "job-b"),
                ElementsAre(0, kWindowNs, 2 * kWindowNs, 4 * kWindowNs));
    EXPECT_THAT(Starts(st, "job-c").size(), 5u);
    auto a = st.Scan("job-a", absl::FromUnixNanos(kWindowNs),
                     absl::FromUnixNanos(kWindowNs + 1));
    ASSERT_TRUE(a.ok() && a->size() == 1u);
    std::string diff;
    EXPECT_TRUE(SameWindow(a->front(), late, &diff)) << diff;
    auto info = st.Job("job-a");
    ASSERT_TRUE(info.ok() && info->has_value());
    EXPECT_EQ((*info)->window_count, 5);  // Replaced, never duplicated.
    EXPECT_EQ((*info)->last_event_ns, 5 * kWindowNs);  // Newest window's end.
    auto b = st.Job("job-b");
    ASSERT_TRUE(b.ok() && b->has_value());
    EXPECT_EQ((*b)->window_count, 4);
    // Progress: the next offset of each partition, stored with the windows.
    int64_t stored = 0;
    for (int32_t p = 0; p < kPartitions; ++p) {
      auto progress = st.Progress(kTopic, p);
      ASSERT_TRUE(progress.ok());
      if (progress->has_value()) stored += (*progress)->committed_position;
    }
    EXPECT_EQ(stored, pub.sent());
  }

  // Restart on the same store: only what was published since is applied.
  pub.Window(SampleWindow("job-d", 5 * kWindowNs));
  pub.Tombstone("job-d", 0);
  pub.Flush();
  auto store = OpenRocksDbWindowStore(dir.path());
  ASSERT_TRUE(store.ok()) << store.status();
  const MaterializerStatus s = MaterializeUntilCaughtUp(brokers, store->get());
  EXPECT_EQ(s.windows_applied, 1);
  EXPECT_EQ(s.windows_deleted, 1);
  EXPECT_EQ(s.invalid_messages, 0);
  EXPECT_THAT(Starts(**store, "job-d"),
              ElementsAre(kWindowNs, 2 * kWindowNs, 3 * kWindowNs,
                          4 * kWindowNs, 5 * kWindowNs));
  auto d = (*store)->Job("job-d");
  ASSERT_TRUE(d.ok() && d->has_value());
  EXPECT_EQ((*d)->window_count, 5);
}

std::string JobStateBlob(int64_t newest_ns) {
  JobState s;
  s.NoteProducerEvents(/*producer=*/7, newest_ns);
  return s.Serialize();
}

TEST(WindowMaterializer, KeepsWhatTheNewestSnapshotsSayOfJobsAndAlerts) {
  auto cluster = EmbeddedKafkaCluster::Create(1);
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  const std::string brokers = (*cluster)->bootstrap_servers();
  const std::string state_topic = "state";
  ASSERT_TRUE((*cluster)->CreateTopic(kTopic, kPartitions).ok());
  ASSERT_TRUE((*cluster)->CreateTopic(state_topic, kPartitions).ok());
  Publisher windows(brokers);
  Publisher states(brokers, state_topic);
  // Alert states are opaque here, but StateRecords (the schema nests them).
  const std::string kAlertsOfA1 = JobStateBlob(1);
  const std::string kAlertsOfB = JobStateBlob(2);
  const std::string kAlertsOfA2 = JobStateBlob(3);
  // A window of job-a: with the state topic its times are not the window's.
  windows.Window(SampleWindow("job-a", 0));
  PartitionSnapshot first{.topic = "events",
                          .partition = 1,
                          .resume_offset = 4,
                          .committed_position = 10};
  // job-a@host-1 is a split unit (one host of a job split across
  // processors): its state is in the snapshot, but it is no job.
  JobState unit;
  unit.NoteProducerEvents(/*producer=*/9, 450);
  unit.split_unit = true;
  first.jobs = {{"job-a", JobStateBlob(400)},
                {"job-b", JobStateBlob(300)},
                {"job-a@host-1", unit.Serialize()}};
  first.activity = {
      {"job-a", JobActivity{.last_event_ns = 500, .last_seen_wall_ns = 9000}}};
  first.job_alerts = {{"job-a", kAlertsOfA1}, {"job-b", kAlertsOfB}};
  states.Snapshot(first);
  // A former owner's late write: an older committed position, ignored.
  PartitionSnapshot zombie = first;
  zombie.committed_position = 8;
  zombie.resume_offset = 3;
  zombie.jobs["job-a"] = JobStateBlob(100);
  zombie.job_alerts.erase("job-b");
  states.Snapshot(zombie);
  windows.Flush();
  states.Flush();

  testing::TempDir dir;
  {
    auto store = OpenRocksDbWindowStore(dir.path());
    ASSERT_TRUE(store.ok()) << store.status();
    const MaterializerStatus s =
        MaterializeUntilCaughtUp(brokers, store->get(), state_topic);
    EXPECT_EQ(s.snapshots_applied, 1);
    EXPECT_EQ(s.snapshots_superseded, 1);
    EXPECT_EQ(s.state_invalid_messages, 0);
    const WindowStore& st = **store;
    auto a = st.Job("job-a");
    ASSERT_TRUE(a.ok() && a->has_value());
    EXPECT_EQ((*a)->last_event_ns, 500);
    EXPECT_EQ((*a)->last_seen_wall, absl::FromUnixNanos(9000));
    EXPECT_EQ((*a)->window_count, 1);
    EXPECT_EQ(st.JobState("job-a").value(), JobStateBlob(400));
    auto b = st.Job("job-b");
    ASSERT_TRUE(b.ok() && b->has_value());
    EXPECT_EQ((*b)->last_event_ns,
              std::nullopt);  // No activity in the snapshot.
    EXPECT_FALSE((*b)->lifecycle.ended);
    auto unit_job = st.Job("job-a@host-1");
    ASSERT_TRUE(unit_job.ok());
    EXPECT_FALSE(unit_job->has_value()) << "a split unit listed as a job";
    EXPECT_THAT(
        st.AlertStates().value(),
        ElementsAre(
            std::pair<std::string, std::string>("j/job-a", kAlertsOfA1),
            std::pair<std::string, std::string>("j/job-b", kAlertsOfB)));
  }

  // After a restart, the next snapshot is compared with the one applied
  // before it: job-b left (its owner forgot it past --job-expiry) and its
  // alert state is gone; job-a moved on.
  PartitionSnapshot second = first;
  second.committed_position = 20;
  second.jobs.erase("job-b");
  second.jobs.erase("job-a@host-1");
  second.jobs["job-a"] = JobStateBlob(600);
  second.activity["job-a"] =
      JobActivity{.last_event_ns = 650, .last_seen_wall_ns = 12000};
  second.job_alerts = {{"job-a", kAlertsOfA2}};
  states.Snapshot(second);
  states.Raw("events/2", "job-x", "not a snapshot");
  states.Flush();
  auto store = OpenRocksDbWindowStore(dir.path());
  ASSERT_TRUE(store.ok()) << store.status();
  const MaterializerStatus s =
      MaterializeUntilCaughtUp(brokers, store->get(), state_topic);
  EXPECT_EQ(s.snapshots_applied, 1);
  EXPECT_EQ(s.snapshots_superseded, 0);
  EXPECT_EQ(s.state_invalid_messages, 1);
  const WindowStore& st = **store;
  auto a = st.Job("job-a");
  ASSERT_TRUE(a.ok() && a->has_value());
  EXPECT_EQ((*a)->last_event_ns, 650);
  EXPECT_EQ((*a)->last_seen_wall, absl::FromUnixNanos(12000));
  EXPECT_EQ(st.JobState("job-a").value(), JobStateBlob(600));
  auto b = st.Job("job-b");
  ASSERT_TRUE(b.ok() && b->has_value());
  EXPECT_TRUE((*b)->lifecycle.ended);
  EXPECT_TRUE((*b)->lifecycle.expired);
  auto unit_job = st.Job("job-a@host-1");
  ASSERT_TRUE(unit_job.ok());
  EXPECT_FALSE(unit_job->has_value()) << "a forgotten split unit listed";
  EXPECT_THAT(
      st.AlertStates().value(),
      ElementsAre(std::pair<std::string, std::string>("j/job-a", kAlertsOfA2)));
}

TEST(WindowMaterializer, WaitsForAMissingTopicAndReportsNoLagUntilThen) {
  auto cluster = EmbeddedKafkaCluster::Create(1);
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  testing::TempDir dir;
  auto store = OpenRocksDbWindowStore(dir.path());
  ASSERT_TRUE(store.ok());
  WindowMaterializerOptions options;
  options.brokers = (*cluster)->bootstrap_servers();
  options.windows_topic = kTopic;
  options.missing_topic_retry = absl::Milliseconds(100);
  auto m = WindowMaterializer::Create(options, store->get());
  ASSERT_TRUE(m.ok()) << m.status();
  absl::Status ran;
  std::thread runner([&] { ran = (*m)->Run(); });
  absl::SleepFor(absl::Milliseconds(300));  // Several lookups of no topic.
  EXPECT_EQ((*m)->status().partitions, 0);
  EXPECT_EQ((*m)->status().lag_messages, std::nullopt);
  ASSERT_TRUE((*cluster)->CreateTopic(kTopic, kPartitions).ok());
  Publisher pub(options.brokers);
  pub.Window(SampleWindow("late-topic", 0));
  pub.Flush();
  EXPECT_TRUE(testing::PollUntil(
      [&] {
        const MaterializerStatus s = (*m)->status();
        return s.lag_messages == 0 && s.windows_applied == 1;
      },
      absl::Seconds(30), absl::Milliseconds(10)));
  (*m)->Stop();
  runner.join();
  EXPECT_TRUE(ran.ok()) << ran;
  EXPECT_THAT(Starts(**store, "late-topic"), ElementsAre(0));
}

TEST(WindowTopicKey, ParsesBackWhatItWrites) {
  for (const auto& [job, start] : std::vector<std::pair<std::string, int64_t>>{
           {"job", 0},
           {"a@b", 1'700'000'000'000'000'000},
           {"@", -5},
           {"j", std::numeric_limits<int64_t>::min()}}) {
    std::string parsed_job;
    int64_t parsed_start = 1;
    ASSERT_TRUE(ParseWindowTopicKey(WindowTopicKey(job, start), &parsed_job,
                                    &parsed_start))
        << job;
    EXPECT_EQ(parsed_job, job);
    EXPECT_EQ(parsed_start, start);
  }
  std::string job;
  int64_t start = 0;
  for (const char* bad : {"", "job", "@5", "job@", "job@+5", "job@ 5", "job@5x",
                          "job@5-1", "job@99999999999999999999"}) {
    EXPECT_FALSE(ParseWindowTopicKey(bad, &job, &start)) << bad;
  }
}

TEST(WindowMaterializer, OptionsAreValidated) {
  WindowMaterializerOptions bad;
  bad.windows_topic = "";
  bad.retention = absl::ZeroDuration();
  bad.max_batch_messages = 0;
  absl::Status s = bad.Validate();
  WindowMaterializerOptions same;
  same.brokers = "localhost:9092";
  same.state_topic = same.windows_topic;
  EXPECT_THAT(std::string(same.Validate().message()),
              ::testing::HasSubstr("the same topic"));
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  for (const char* part :
       {"brokers", "windows_topic", "retention", "max_batch_messages"}) {
    EXPECT_THAT(std::string(s.message()), ::testing::HasSubstr(part));
  }
}

}  // namespace
}  // namespace bubblewatch
