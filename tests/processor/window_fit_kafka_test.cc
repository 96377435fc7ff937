// Windows larger than the windows topic takes, against a real Kafka broker
// (ctest label `kafka`): the reproductions of "windows always fit". Before
// the fix, a job with 500 devices and 4,000-byte kernel names made a window
// the producer refused ("Message size too large"): stored, never published,
// missing from serve --brokers for ever; and a windows topic with a small
// max.message.bytes made `process` exit 1 each time such a job's window
// closed (a crash loop). Now `process` exits 0, every window of every job is
// in the store and on the windows topic, the same bytes, and the wide job's
// windows say what was left out (docs/semantics.md#windows-that-do-not-fit).
#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <iostream>
#include <map>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "kafka/kafka_admin.h"
#include "kafka/kafka_config.h"
#include "kafka/kafka_handles.h"
#include "processor/fleet_topics.h"
#include "schemas/event_batch_codec.h"
#include "tests/processor/processor_kafka_test_util.h"
#include "tests/testing/files.h"

namespace bubblewatch {
// Named: the unity build shares a file with the hostile test's constants.
namespace window_fit_kafka_test {
namespace {

constexpr int64_t kMs = 1'000'000;
constexpr int64_t kSec = 1'000'000'000;
constexpr int64_t kBase = int64_t{1'767'225'600} * kSec;
constexpr int kSeconds = 25;  // Of events: three windows per job.

// A `bytes`-long name for device `device` of `job`: letters drawn at
// random after a distinct prefix, so that LZ4 cannot shrink a window under
// the topic's limit (it takes compressed batches) as it would shrink a
// repeated letter.
std::string KernelName(const std::string& job, int device, size_t bytes) {
  std::string name = absl::StrCat("kernel_", job, "_", device, "_");
  std::mt19937 random(static_cast<uint32_t>(device));
  std::uniform_int_distribution<int> letter('a', 'z');
  while (name.size() < bytes) name.push_back(static_cast<char>(letter(random)));
  return name;
}

// Batch `sequence` of `job`: on devices [first, first + devices) a kernel
// every second for kSeconds, device d's kernels (100 + d) ms long and named
// KernelName(job, d, name_bytes), so the devices with the most bubble time
// are the lowest ids. Adds the kernels' total time to `busy_ns`.
std::string Batch(const std::string& job, uint64_t sequence, int first,
                  int devices, size_t name_bytes, int64_t& busy_ns) {
  Trace t;
  NameInterner names(&t);
  for (int d = first; d < first + devices; ++d) {
    const NameId id = names.Intern(KernelName(job, d, name_bytes));
    for (int s = 0; s < kSeconds; ++s) {
      const int64_t start = kBase + s * kSec;
      const int64_t length = (100 + d) * kMs;
      t.gpu.push_back(GpuActivity{.start_ns = start,
                                  .end_ns = start + length,
                                  .name = id,
                                  .device = d});
      busy_ns += length;
    }
  }
  EventBatchEncoder encoder(&t);
  std::span<const uint8_t> bytes = encoder.Encode(
      BatchHeader{
          .job = job, .host = "h", .producer_id = 1, .sequence = sequence},
      0, t.gpu.size(), 0, 0);
  return std::string(reinterpret_cast<const char*>(bytes.data()), bytes.size());
}

void Send(rd_kafka_t* producer, const std::string& topic,
          const std::string& key, const std::string& value) {
  rd_kafka_resp_err_t err = rd_kafka_producev(
      producer, RD_KAFKA_V_TOPIC(topic.c_str()), RD_KAFKA_V_PARTITION(0),
      RD_KAFKA_V_KEY(key.data(), key.size()),
      RD_KAFKA_V_VALUE(const_cast<char*>(value.data()), value.size()),
      RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY), RD_KAFKA_V_END);
  ASSERT_EQ(err, RD_KAFKA_RESP_ERR_NO_ERROR) << rd_kafka_err2str(err);
}

// The reproduction: a wide job (`devices` devices, `name_bytes`-long
// names) next to two normal ones, through `process`; with
// `windows_topic_limit` > 0 the windows topic is created first with that
// max.message.bytes. Checks everything the fix promises and returns the
// wide job's stored windows.
std::vector<WindowSummary> RunWideJob(int devices, size_t name_bytes,
                                      int64_t windows_topic_limit) {
  const std::string topic = Unique("bw-fit");
  const std::string windows_topic = topic + ".windows";
  const std::string store = ::testing::TempDir() + "/" + topic;
  KafkaConfig config(Brokers());
  config.Set("compression.type", "lz4");
  config.Set("message.max.bytes", "100000000");
  absl::StatusOr<RdKafkaPtr> producer =
      NewKafkaClient(RD_KAFKA_PRODUCER, config);
  EXPECT_TRUE(producer.ok()) << producer.status();
  if (!producer.ok()) return {};
  // The wide job's batch (its names are incompressible) is larger than
  // the broker's default 1 MB.
  absl::StatusOr<bool> events = CreateTopicIfMissing(
      producer->get(),
      TopicSpec{.name = topic,
                .partitions = 1,
                .configs = {{"max.message.bytes", "20000000"}}},
      absl::Seconds(30));
  EXPECT_TRUE(events.ok() && *events) << events.status();
  EXPECT_TRUE(
      CreatedTopicPartitionCount(producer->get(), topic, absl::Seconds(30))
          .ok());
  if (windows_topic_limit > 0) {
    absl::StatusOr<bool> created = CreateTopicIfMissing(
        producer->get(),
        TopicSpec{.name = windows_topic,
                  .partitions = 1,
                  .configs = {{"cleanup.policy", "compact"},
                              {"max.message.bytes",
                               absl::StrCat(windows_topic_limit)}}},
        absl::Seconds(30));
    EXPECT_TRUE(created.ok() && *created) << created.status();
  }
  // Each job in one batch: a window closes once its job's events pass it,
  // so a second batch of other devices would be late.
  std::map<std::string, int64_t> busy_ns;
  Send(producer->get(), topic, "wide",
       Batch("wide", 0, 0, devices, name_bytes, busy_ns["wide"]));
  Send(producer->get(), topic, "normal-a",
       Batch("normal-a", 0, 0, 2, 20, busy_ns["normal-a"]));
  Send(producer->get(), topic, "normal-b",
       Batch("normal-b", 0, 0, 4, 40, busy_ns["normal-b"]));
  EXPECT_EQ(rd_kafka_flush(producer->get(), 60'000),
            RD_KAFKA_RESP_ERR_NO_ERROR);

  EXPECT_EQ(RunToEnd(ProcessArgs(topic, store)), 0);

  // Every window of every job is stored, whole in its job figures.
  const std::vector<std::string> jobs = {"normal-a", "normal-b", "wide"};
  std::vector<WindowSummary> stored = StoredWindows(store, jobs);
  std::map<std::string, int64_t> stored_busy;
  std::map<std::string, int> windows_of;
  for (const WindowSummary& w : stored) {
    stored_busy[w.job] += w.window.job.compute_ns;
    ++windows_of[w.job];
  }
  for (const std::string& job : jobs) {
    EXPECT_EQ(windows_of[job], 3) << job;
    EXPECT_EQ(stored_busy[job], busy_ns[job]) << job;
  }
  // The windows topic holds the same windows (its last record per key).
  std::map<std::pair<std::string, int64_t>, WindowSummary> published;
  for (WindowSummary& w : ReadWindowsTopic(windows_topic)) {
    published[{w.job, w.window.start_ns}] = std::move(w);
  }
  EXPECT_EQ(published.size(), stored.size());
  std::vector<WindowSummary> wide;
  for (const WindowSummary& w : stored) {
    auto it = published.find({w.job, w.window.start_ns});
    if (it == published.end()) {
      ADD_FAILURE() << "window " << w.job << "@" << w.window.start_ns
                    << " is stored but not on " << windows_topic;
      continue;
    }
    std::string diff;
    EXPECT_TRUE(SameWindow(w, it->second, &diff))
        << w.job << "@" << w.window.start_ns << ": " << diff;
    if (w.job == "wide") {
      wide.push_back(w);
    } else {
      EXPECT_FALSE(w.trimmed.has_value()) << w.job;
    }
  }
  std::filesystem::remove_all(store);
  return wide;
}

TEST(WindowFitKafka, WideJobUnderASmallTopicLimitIsTrimmedNotFatal) {
  // 100 devices x 4,000-byte names: ~450 KB windows, 32 KiB allowed.
  const std::vector<WindowSummary> wide = RunWideJob(100, 4000, 32 * 1024);
  ASSERT_EQ(wide.size(), 3u);
  for (const WindowSummary& w : wide) {
    ASSERT_TRUE(w.trimmed.has_value()) << w.window.start_ns;
    const WindowTrim& t = *w.trimmed;
    EXPECT_LT(t.limit_bytes, 32 * 1024);
    EXPECT_GT(t.original_bytes, 400'000);
    EXPECT_GE(t.names_cut, 100);
    EXPECT_GT(t.devices, 0);
    EXPECT_EQ(static_cast<int64_t>(w.window.devices.size()) + t.devices, 100);
    // Kept: the devices with the most bubble time, the lowest ids.
    for (size_t i = 0; i < w.window.devices.size(); ++i) {
      EXPECT_EQ(w.window.devices[i].device, static_cast<int32_t>(i));
    }
    EXPECT_LE(EncodeWindowSummary(w).size(),
              static_cast<size_t>(t.limit_bytes));
  }
}

TEST(WindowFitKafka, FiveHundredDevicesFitTheDefaultTopicWithEveryDevice) {
  // 500 devices x 4,000-byte names: ~2.2 MB windows on a windows topic that
  // `process` creates with the broker's defaults.
  const std::vector<WindowSummary> wide = RunWideJob(500, 4000, 0);
  ASSERT_EQ(wide.size(), 3u);
  for (const WindowSummary& w : wide) {
    ASSERT_TRUE(w.trimmed.has_value()) << w.window.start_ns;
    EXPECT_GT(w.trimmed->original_bytes, 2'000'000);
    EXPECT_LE(w.trimmed->limit_bytes, 1'000'000);
    EXPECT_EQ(w.trimmed->devices, 0);
    EXPECT_EQ(w.window.devices.size(), 500u);
  }
}

// A windows topic so small that no window fits it, even trimmed to its job
// figures (below what FitWindow can make): `process` must stop with an
// error naming the window, store nothing it did not publish and commit no
// offset past the window (docs/semantics.md#no-silent-loss); restarted
// with a windows topic that takes the windows, it makes every one of them.
TEST(WindowFitKafka, AWindowThatFitsNoWhereStopsTheProcessorLosingNothing) {
  const std::string topic = Unique("bw-nofit");
  const std::string store = ::testing::TempDir() + "/" + topic;
  const std::string log = store + ".stderr";
  KafkaConfig config(Brokers());
  absl::StatusOr<RdKafkaPtr> producer =
      NewKafkaClient(RD_KAFKA_PRODUCER, config);
  ASSERT_TRUE(producer.ok()) << producer.status();
  CreateTopic(topic, 1);
  // 100 bytes: a window of job "normal-a" with every list empty is larger.
  absl::StatusOr<bool> created =
      CreateTopicIfMissing(producer->get(),
                           TopicSpec{.name = topic + ".windows",
                                     .partitions = 1,
                                     .configs = {{"cleanup.policy", "compact"},
                                                 {"max.message.bytes", "100"}}},
                           absl::Seconds(30));
  ASSERT_TRUE(created.ok() && *created) << created.status();
  int64_t busy_ns = 0;
  Send(producer->get(), topic, "normal-a",
       Batch("normal-a", 0, 0, 2, 20, busy_ns));
  ASSERT_EQ(rd_kafka_flush(producer->get(), 60'000),
            RD_KAFKA_RESP_ERR_NO_ERROR);

  std::vector<std::string> args = ProcessArgs(topic, store);
  EXPECT_NE(testing::WaitChild(Spawn(args, log)), 0);
  const std::string errors = testing::ReadFile(log);
  std::cout << "stderr of the stopped process:\n" << errors;
  EXPECT_NE(errors.find("normal-a"), std::string::npos) << errors;
  // Nothing stored that was not published, no offset past the batch.
  EXPECT_TRUE(StoredWindows(store, {"normal-a"}).empty());
  EXPECT_TRUE(ReadWindowsTopic(topic + ".windows").empty());
  for (auto [partition, offset] : GroupOffsets(topic, topic + "-group")) {
    EXPECT_LE(offset, 0) << "partition " << partition;
  }
  {
    absl::StatusOr<std::unique_ptr<WindowStoreReader>> reader =
        OpenRocksDbWindowStoreReadOnly(store);
    ASSERT_TRUE(reader.ok()) << reader.status();
    absl::StatusOr<std::optional<PartitionProgress>> progress =
        (*reader)->Progress(topic, 0);
    ASSERT_TRUE(progress.ok()) << progress.status();
    if (progress->has_value()) {
      EXPECT_LE((*progress)->resume_offset, 0);
      EXPECT_LE((*progress)->committed_position, 0);
    }
  }

  // The restart, publishing to a topic with the broker's default limit.
  const std::string windows2 = topic + ".windows2";
  std::replace(args.begin(), args.end(), topic + ".windows", windows2);
  ASSERT_EQ(RunToEnd(args), 0);
  const std::vector<WindowSummary> stored = StoredWindows(store, {"normal-a"});
  EXPECT_EQ(stored.size(), 3u);
  int64_t stored_busy = 0;
  for (const WindowSummary& w : stored) stored_busy += w.window.job.compute_ns;
  EXPECT_EQ(stored_busy, busy_ns);
  EXPECT_EQ(ReadWindowsTopic(windows2).size(), stored.size());
  std::filesystem::remove_all(store);
}

}  // namespace
}  // namespace window_fit_kafka_test
}  // namespace bubblewatch
