// Hostile messages against the processor and a real Kafka broker (ctest
// label `kafka`), each a reproduction from issue 17 that stopped the
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
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kafka/kafka_config.h"
#include "kafka/kafka_handles.h"
#include "schemas/event_batch_codec.h"
#include "tests/processor/processor_kafka_test_util.h"

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
            const std::string& trace_id = "") {
    ASSERT_NE(producer_, nullptr);
    rd_kafka_headers_t* headers = rd_kafka_headers_new(1);
    if (!trace_id.empty()) {
      rd_kafka_header_add(headers, "trace-id", -1, trace_id.data(),
                          static_cast<ssize_t>(trace_id.size()));
    }
    rd_kafka_resp_err_t err = rd_kafka_producev(
        producer_.get(), RD_KAFKA_V_TOPIC(topic_.c_str()),
        RD_KAFKA_V_PARTITION(0), RD_KAFKA_V_KEY(key.data(), key.size()),
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

}  // namespace
}  // namespace bubblewatch
