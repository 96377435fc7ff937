// A forged sequence against a real Kafka broker (ctest label `kafka`;
// docs/semantics.md#what-a-producer-can-forge). Producer ids are a hash of
// the file and the batching options, so they can be known in advance: a
// batch with the real producer id and sequence 2^64 - 1, sent before the
// real batch 0, used to make every real batch of the file a "duplicate"
// (measured: 11 of 11 dropped, one window holding only the forged event,
// against 4 windows and 40 events). Now every real batch counts, the forged
// one is in the dead-letter topic with its reason, and the stored windows
// are byte for byte those of the clean run.
#include <cstdint>
#include <filesystem>
#include <span>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "kafka/kafka_config.h"
#include "kafka/kafka_handles.h"
#include "schemas/event_batch_codec.h"
#include "schemas/window_summary_codec.h"
#include "tests/processor/processor_kafka_test_util.h"
#include "tests/testing/files.h"
#include "tests/testing/topic_reader.h"

namespace bubblewatch {
namespace {

constexpr int64_t kMsNs = 1'000'000;

// 40 kernels of 50 ms, one every 900 ms from 0.1 s: 4 windows of 10 s.
std::string FortyKernels() {
  std::string gpu;
  for (int64_t i = 0; i < 40; ++i) {
    const int64_t us = 100'000 + i * 900'000;
    absl::StrAppend(&gpu, gpu.empty() ? "" : ",\n",
                    "{\"name\": \"step\", \"start_us\": ", us,
                    ", \"end_us\": ", us + 50'000, ", \"stream\": 7}");
  }
  return absl::StrCat("{\"gpu_kernels\": [", gpu, "],\n\"cpu_events\": []}\n");
}

// `produce` of the file in batches of 4 events: 10 batches and the marker.
std::vector<std::string> ProduceFile(const std::string& topic,
                                     const std::string& file) {
  return {"produce", "--brokers",   Brokers(), "--topic",
          topic,     "--job",       "forged",  "--batch-events",
          "4",       "--log-level", "error",   file};
}

// The forged batch: `real`'s identity (producer id, job, host, rank) with
// sequence 2^64 - 1 and one kernel of its own at 12.3 s.
std::string ForgedBatch(const BatchHeader& real) {
  Trace t;
  t.names = {"forged"};
  t.gpu.push_back(GpuActivity{.start_ns = 12'300 * kMsNs,
                              .end_ns = 12'350 * kMsNs,
                              .name = 0,
                              .device = 0,
                              .stream = 7,
                              .kind = GpuActivityKind::kKernel});
  BatchHeader header = real;
  header.sequence = UINT64_MAX;
  header.end_of_stream = false;
  header.observation.reset();
  EventBatchEncoder encoder(&t);
  std::span<const uint8_t> bytes = encoder.Encode(header, 0, 1, 0, 0);
  return std::string(reinterpret_cast<const char*>(bytes.data()), bytes.size());
}

void SendRaw(const std::string& topic, const std::string& key,
             const std::string& value) {
  absl::StatusOr<RdKafkaPtr> producer =
      NewKafkaClient(RD_KAFKA_PRODUCER, KafkaConfig(Brokers()));
  ASSERT_TRUE(producer.ok()) << producer.status();
  rd_kafka_resp_err_t err = rd_kafka_producev(
      producer->get(), RD_KAFKA_V_TOPIC(topic.c_str()), RD_KAFKA_V_PARTITION(0),
      RD_KAFKA_V_KEY(key.data(), key.size()),
      RD_KAFKA_V_VALUE(const_cast<char*>(value.data()), value.size()),
      RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY), RD_KAFKA_V_END);
  ASSERT_EQ(err, RD_KAFKA_RESP_ERR_NO_ERROR) << rd_kafka_err2str(err);
  ASSERT_EQ(rd_kafka_flush(producer->get(), 60'000),
            RD_KAFKA_RESP_ERR_NO_ERROR);
}

std::vector<std::string> Encoded(const std::vector<WindowSummary>& windows) {
  std::vector<std::string> out;
  for (const WindowSummary& w : windows) out.push_back(EncodeWindowSummary(w));
  return out;
}

TEST(ForgedSequenceKafka, AForgedFirstBatchShadowsNoRealBatch) {
  const std::string clean_topic = Unique("bw-seq-clean");
  const std::string forged_topic = Unique("bw-seq-forged");
  const std::string dir = ::testing::TempDir() + "/" + forged_topic;
  std::filesystem::create_directories(dir);
  const std::string file = dir + "/rank0.json";
  testing::WriteFile(file, FortyKernels());
  testing::CreateTopic(clean_topic, 1);
  testing::CreateTopic(forged_topic, 1);

  // The clean run, and the producer id the file's batches carry.
  ASSERT_EQ(RunToEnd(ProduceFile(clean_topic, file)), 0);
  std::vector<TopicMessage> real = ReadTopicMessages(clean_topic, 11);
  ASSERT_EQ(real.size(), 11u) << "10 batches of 4 events and the marker";
  absl::StatusOr<DecodedBatch> first = DecodeEventBatch(
      {reinterpret_cast<const uint8_t*>(real[0].payload.data()),
       real[0].payload.size()});
  ASSERT_TRUE(first.ok()) << first.status();
  ASSERT_EQ(first->header.sequence, 0u);
  ASSERT_NE(first->header.producer_id, 0u);
  const std::string clean_store = dir + "/clean";
  ASSERT_EQ(RunToEnd(ProcessArgs(clean_topic, clean_store)), 0);
  const std::vector<WindowSummary> clean =
      StoredWindows(clean_store, {"forged"});
  ASSERT_EQ(clean.size(), 4u);
  int64_t compute_ns = 0;
  for (const WindowSummary& w : clean) compute_ns += w.window.job.compute_ns;
  EXPECT_EQ(compute_ns, 40 * 50 * kMsNs);

  // The forged batch first, then the same file produced again.
  SendRaw(forged_topic, real[0].key, ForgedBatch(first->header));
  ASSERT_EQ(RunToEnd(ProduceFile(forged_topic, file)), 0);
  const std::string forged_store = dir + "/forged";
  ASSERT_EQ(RunToEnd(ProcessArgs(forged_topic, forged_store)), 0);

  EXPECT_EQ(Encoded(StoredWindows(forged_store, {"forged"})), Encoded(clean))
      << "every real batch counted, the forged one not";
  std::vector<TopicMessage> letters =
      ReadTopicMessages(forged_topic + ".dlq", 1);
  ASSERT_EQ(letters.size(), 1u);
  EXPECT_EQ(letters[0].LastHeader("bubblewatch.reason"), "sequence_gap");
  EXPECT_EQ(letters[0].LastHeader("bubblewatch.source.offset"), "0");
  EXPECT_NE(letters[0]
                .LastHeader("bubblewatch.error")
                .find("starts at batch 18446744073709551615"),
            std::string::npos)
      << letters[0].LastHeader("bubblewatch.error");
  absl::StatusOr<int64_t> clean_letters = testing::StoredMessageCount(
      Brokers(), clean_topic + ".dlq", absl::Seconds(30));
  ASSERT_TRUE(clean_letters.ok()) << clean_letters.status();
  EXPECT_EQ(*clean_letters, 0);
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace bubblewatch
