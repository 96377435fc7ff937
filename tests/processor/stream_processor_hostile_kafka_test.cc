// Hostile messages against the processor and a real Kafka broker (ctest
// label `kafka`), each a reproduction from an earlier review that stopped the
// processor for good or lost data before its fix:
//   - a 70 MB rejected batch (lz4: a few hundred KB on the wire) and an 8 MB
//     undecodable one: their dead letters were larger than the broker
//     accepts and the processor exited 1 on every restart;
//   - a kernel at 9,223,372,030 s: std::bad_alloc (exit 134), every restart;
//   - a job named "bad\xff\xfe-job": into the store, the API and /metrics;
//   - a forged batch with a real producer id and sequence 2^64 - 1: the
//     next real batches were dropped as duplicates.
// Afterwards the processor has exited 0 (idle), every bad message is in the
// dead-letter topic with its reason, bounded, with its original headers,
// and the good job's windows hold every real kernel.
// And the state of many jobs (docs/state.md#partition-snapshots): 300 jobs
// with 3,995-byte names on one partition made the partition's snapshot
// larger than the broker accepts, and `process` exited 1 on every run. (That
// a snapshot written before jobs were kept per key still restores is a unit
// test over the in-memory Kafka: tests/processor/crash_harness_test.cc.)
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kafka/kafka_config.h"
#include "kafka/kafka_handles.h"
#include "schemas/event_batch_codec.h"
#include "tests/processor/processor_kafka_test_util.h"
#include "tests/testing/files.h"

namespace bubblewatch {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;
using ::testing::StartsWith;

constexpr int64_t kSec = 1'000'000'000;
constexpr int64_t kBase = int64_t{1'767'225'600} * kSec;

// Produces raw values (lz4, up to 100 MB before compression) with headers.
class RawProducer {
 public:
  explicit RawProducer(const std::string& topic) : topic_(topic) {
    KafkaConfig config(Brokers());
    config.Set("compression.type", "lz4");
    config.Set("message.max.bytes", "100000000");
    absl::StatusOr<RdKafkaPtr> p = NewKafkaClient(RD_KAFKA_PRODUCER, config);
    EXPECT_TRUE(p.ok()) << p.status();
    if (p.ok()) producer_ = *std::move(p);
  }
  void Send(const std::string& key, const std::string& value,
            const std::string& trace_id = "", int32_t partition = 0) {
    ASSERT_NE(producer_, nullptr);
    rd_kafka_headers_t* headers = rd_kafka_headers_new(1);
    if (!trace_id.empty()) {
      rd_kafka_header_add(headers, "trace-id", -1, trace_id.data(),
                          static_cast<ssize_t>(trace_id.size()));
    }
    rd_kafka_resp_err_t err = rd_kafka_producev(
        producer_.get(), RD_KAFKA_V_TOPIC(topic_.c_str()),
        RD_KAFKA_V_PARTITION(partition), RD_KAFKA_V_KEY(key.data(), key.size()),
        RD_KAFKA_V_VALUE(const_cast<char*>(value.data()), value.size()),
        RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY), RD_KAFKA_V_HEADERS(headers),
        RD_KAFKA_V_END);
    if (err != RD_KAFKA_RESP_ERR_NO_ERROR) rd_kafka_headers_destroy(headers);
    ASSERT_EQ(err, RD_KAFKA_RESP_ERR_NO_ERROR) << rd_kafka_err2str(err);
  }
  void Flush() {
    ASSERT_EQ(rd_kafka_flush(producer_.get(), 60'000),
              RD_KAFKA_RESP_ERR_NO_ERROR);
  }

 private:
  std::string topic_;
  RdKafkaPtr producer_;
};

// One batch of `job` with kernels [start, start + 1 ms) at each start.
std::string Batch(const std::string& job, uint64_t producer, uint64_t sequence,
                  const std::vector<int64_t>& starts) {
  Trace t;
  NameInterner names(&t);
  for (int64_t s : starts) {
    t.gpu.push_back(GpuActivity{
        .start_ns = s, .end_ns = s + 1'000'000, .name = names.Intern("gemm")});
  }
  EventBatchEncoder encoder(&t);
  std::span<const uint8_t> bytes =
      encoder.Encode(BatchHeader{.job = job,
                                 .host = "h",
                                 .producer_id = producer,
                                 .sequence = sequence},
                     0, t.gpu.size(), 0, 0);
  return std::string(reinterpret_cast<const char*>(bytes.data()), bytes.size());
}

TEST(ProcessorHostileKafka, HostileMessagesAreDeadLetteredAndNothingStops) {
  const std::string topic = Unique("bw-hostile");
  const std::string store = ::testing::TempDir() + "/" + topic;
  RawProducer producer(topic);
  // 1. Over the 64 MiB batch limit once inflated; 2. undecodable and over
  // the broker's 1 MB default once inflated.
  producer.Send("job-big", std::string(70 << 20, '\0'), "t-1");
  producer.Send("job-big", std::string(8 << 20, 'x'), "t-2");
  // 3. A kernel at 9,223,372,030 s.
  producer.Send("job-far", Batch("job-far", 5, 0, {9'223'372'030 * kSec}));
  // 4. A job name that is not UTF-8.
  producer.Send("bad", Batch("bad\xff\xfe-job", 6, 0, {kBase}));
  // 5. A real producer's batches with a forged one among them.
  int64_t real_kernels = 0;
  for (uint64_t seq = 0; seq < 12; ++seq) {
    if (seq == 2) {
      producer.Send("job-good",
                    Batch("job-good", 9, UINT64_MAX, {kBase + 15 * kSec}));
    }
    std::vector<int64_t> starts;
    for (int i = 0; i < 10; ++i) {
      starts.push_back(kBase + static_cast<int64_t>(seq) * kSec +
                       i * 50'000'000);
    }
    real_kernels += static_cast<int64_t>(starts.size());
    producer.Send("job-good", Batch("job-good", 9, seq, starts));
  }
  producer.Flush();

  ASSERT_EQ(RunToEnd(ProcessArgs(topic, store)), 0);

  std::vector<TopicMessage> letters = ReadTopicMessages(topic + ".dlq", 5);
  ASSERT_EQ(letters.size(), 5u);
  auto header = [&](size_t i, const std::string& name) {
    return letters[i].LastHeader(name);
  };
  auto reason = [&](size_t i) { return header(i, "bubblewatch.error"); };
  EXPECT_THAT(reason(0), StartsWith("batch_too_large: "));
  EXPECT_THAT(reason(1), StartsWith("undecodable: "));
  EXPECT_THAT(reason(2), StartsWith("timestamps_out_of_range: "));
  EXPECT_THAT(reason(3), StartsWith("bad_job_name: "));
  EXPECT_THAT(reason(4), StartsWith("sequence_gap: "));
  // The big ones: a bounded prefix, marked, with their source and headers.
  for (size_t i : {0u, 1u}) {
    EXPECT_EQ(letters[i].payload.size(), 256u << 10);
    EXPECT_EQ(header(i, "bubblewatch.truncated"), "payload");
    EXPECT_EQ(header(i, "bubblewatch.source.topic"), topic);
    EXPECT_EQ(header(i, "bubblewatch.source.offset"), std::to_string(i));
    EXPECT_EQ(header(i, "trace-id"), "t-" + std::to_string(i + 1));
  }
  EXPECT_EQ(header(0, "bubblewatch.source.bytes"), std::to_string(70 << 20));
  EXPECT_EQ(header(2, "bubblewatch.truncated"), "");
  EXPECT_THAT(reason(3), Not(HasSubstr("\xff")));

  // Every real kernel of the good job was counted; the forged one was not.
  std::vector<WindowSummary> windows = StoredWindows(store, {"job-good"});
  ASSERT_FALSE(windows.empty());
  int64_t compute_ns = 0;
  for (const WindowSummary& w : windows) compute_ns += w.window.job.compute_ns;
  EXPECT_EQ(compute_ns, real_kernels * 1'000'000);
  EXPECT_TRUE(StoredWindows(store, {"job-far"}).empty());
  std::filesystem::remove_all(store);
}

// `args` with --log-level info, so that the assignment's restore is logged.
std::vector<std::string> WithInfoLog(std::vector<std::string> args) {
  for (size_t i = 0; i + 1 < args.size(); ++i) {
    if (args[i] == "--log-level") args[i + 1] = "info";
  }
  return args;
}

TEST(ProcessorHostileKafka, ManyJobsWithLongNamesCommitAndMoveToTheNextOwner) {
  const std::string topic = Unique("bw-manyjobs");
  const std::string store = ::testing::TempDir() + "/" + topic;
  RawProducer producer(topic);
  constexpr int kJobs = 300;
  std::vector<std::string> jobs;
  for (int i = 0; i < kJobs; ++i) {
    std::string name = absl::StrCat("job-", i, "-");
    name.resize(3995, 'x');  // Under the 4,096-byte name limit.
    jobs.push_back(name);
    producer.Send(name, Batch(name, 1000 + i, 0, {kBase + i * 1'000'000}));
  }
  producer.Flush();
  // Once exit 1 within about a second ("Message size too large"), on
  // every run.
  ASSERT_EQ(RunToEnd(ProcessArgs(topic, store)), 0);
  ASSERT_EQ(RunToEnd(ProcessArgs(topic, store)), 0);

  // A record per job and partition records, none near the broker's limit.
  std::vector<TopicMessage> records =
      ReadTopicMessages(topic + ".state", kJobs + 1);
  std::set<std::string> job_keys;
  size_t partition_records = 0, largest = 0;
  for (const TopicMessage& m : records) {
    largest = std::max(largest, m.payload.size());
    if (m.key == absl::StrCat(topic, "/0")) {
      ++partition_records;
    } else {
      job_keys.insert(m.key);
    }
  }
  EXPECT_EQ(job_keys.size(), static_cast<size_t>(kJobs));
  EXPECT_GE(partition_records, 1u);
  EXPECT_LT(largest, 16u << 10);

  // The next owner (another store) restores every job's state from the
  // changelog: each job's batch sent again counts as a duplicate, and a
  // new batch of one job counts once.
  for (int i = 0; i < kJobs; ++i) {
    producer.Send(jobs[i],
                  Batch(jobs[i], 1000 + i, 0, {kBase + i * 1'000'000}));
  }
  producer.Send(jobs[7], Batch(jobs[7], 1007, 1, {kBase + 60 * kSec}));
  producer.Flush();
  const std::string next_store = store + "-next";
  const std::string log = next_store + ".log";
  ASSERT_EQ(Wait(Spawn(WithInfoLog(ProcessArgs(topic, next_store)), log)), 0);
  EXPECT_THAT(
      testing::ReadFile(log),
      HasSubstr(absl::StrCat("state from changelog (", kJobs, " jobs")));
  std::vector<WindowSummary> windows = StoredWindows(next_store, jobs);
  ASSERT_EQ(windows.size(), 1u);
  EXPECT_EQ(windows[0].job, jobs[7]);
  EXPECT_EQ(windows[0].window.job.compute_ns, 1'000'000);
  std::filesystem::remove_all(store);
  std::filesystem::remove_all(next_store);
}

// A processor started before its events topic exists (before the fleet's
// first producer created it) picks the topic up once it appears: asking the
// windows topic's limit on the consumer before it subscribed once left the
// subscription blind for librdkafka's 5-minute metadata refresh.
TEST(ProcessorHostileKafka, AProcessorStartedBeforeItsTopicExistsConsumesIt) {
  const std::string topic = Unique("bw-later");
  const std::string store = ::testing::TempDir() + "/" + topic;
  pid_t processor = Spawn(ProcessArgs(topic, store));
  absl::SleepFor(absl::Seconds(2));  // Subscribed to a topic not yet there.
  RawProducer producer(topic);
  producer.Send("job-later", Batch("job-later", 3, 0, {kBase, kBase + kSec}));
  producer.Flush();
  // Before the fix it never saw the topic and never went idle: bounded.
  ASSERT_EQ(testing::WaitChildWithin(processor, absl::Seconds(60)), 0)
      << "process did not consume the topic created after it started";
  std::vector<WindowSummary> windows = StoredWindows(store, {"job-later"});
  ASSERT_EQ(windows.size(), 1u);
  EXPECT_EQ(windows[0].window.job.compute_ns, 2'000'000);
  std::filesystem::remove_all(store);
}

}  // namespace
}  // namespace bubblewatch
