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
#include <map>
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

// A dead letter as read back: its headers (last of each name) and sizes.
struct ReadLetter {
  std::map<std::string, std::string> headers;
  size_t key_bytes = 0;
  size_t payload_bytes = 0;
};

std::vector<ReadLetter> ReadLetters(const std::string& topic, size_t expected) {
  KafkaConfig config(Brokers());
  config.Set("group.id", Unique(topic + "-reader"));
  config.Set("enable.auto.commit", "false");
  absl::StatusOr<RdKafkaPtr> consumer =
      NewKafkaClient(RD_KAFKA_CONSUMER, config);
  EXPECT_TRUE(consumer.ok()) << consumer.status();
  std::vector<ReadLetter> out;
  if (!consumer.ok()) return out;
  RdKafkaPartitionListPtr parts(rd_kafka_topic_partition_list_new(1));
  rd_kafka_topic_partition_list_add(parts.get(), topic.c_str(), 0)->offset =
      RD_KAFKA_OFFSET_BEGINNING;
  rd_kafka_assign(consumer->get(), parts.get());
  const auto deadline =
      std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (out.size() < expected && std::chrono::steady_clock::now() < deadline) {
    RdKafkaMessagePtr m(rd_kafka_consumer_poll(consumer->get(), 200));
    if (!m || m->err) continue;
    ReadLetter letter;
    letter.key_bytes = m->key_len;
    letter.payload_bytes = m->len;
    rd_kafka_headers_t* headers = nullptr;
    if (rd_kafka_message_headers(m.get(), &headers) ==
        RD_KAFKA_RESP_ERR_NO_ERROR) {
      const char* name = nullptr;
      const void* value = nullptr;
      size_t size = 0;
      for (size_t i = 0;
           rd_kafka_header_get_all(headers, i, &name, &value, &size) ==
           RD_KAFKA_RESP_ERR_NO_ERROR;
           ++i) {
        letter.headers[name] =
            value ? std::string(static_cast<const char*>(value), size) : "";
      }
    }
    out.push_back(std::move(letter));
  }
  rd_kafka_consumer_close(consumer->get());
  return out;
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

  std::vector<ReadLetter> letters = ReadLetters(topic + ".dlq", 5);
  ASSERT_EQ(letters.size(), 5u);
  auto reason = [&](size_t i) {
    return letters[i].headers["bubblewatch.error"];
  };
  EXPECT_THAT(reason(0), StartsWith("batch_too_large: "));
  EXPECT_THAT(reason(1), StartsWith("undecodable: "));
  EXPECT_THAT(reason(2), StartsWith("timestamps_out_of_range: "));
  EXPECT_THAT(reason(3), StartsWith("bad_job_name: "));
  EXPECT_THAT(reason(4), StartsWith("sequence_gap: "));
  // The big ones: a bounded prefix, marked, with their source and headers.
  for (size_t i : {0u, 1u}) {
    EXPECT_EQ(letters[i].payload_bytes, 256u << 10);
    EXPECT_EQ(letters[i].headers["bubblewatch.truncated"], "payload");
    EXPECT_EQ(letters[i].headers["bubblewatch.source.topic"], topic);
    EXPECT_EQ(letters[i].headers["bubblewatch.source.offset"],
              std::to_string(i));
    EXPECT_EQ(letters[i].headers["trace-id"], "t-" + std::to_string(i + 1));
  }
  EXPECT_EQ(letters[0].headers["bubblewatch.source.bytes"],
            std::to_string(70 << 20));
  EXPECT_EQ(letters[2].headers["bubblewatch.truncated"], "");
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
