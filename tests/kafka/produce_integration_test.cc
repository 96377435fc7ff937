// `bubblewatch produce` against a real Apache Kafka broker (ctest label
// kafka). ops/test starts the broker and passes its address in
// BUBBLEWATCH_KAFKA_BROKERS; without it these tests fail, never skip. The
// restart test runs its own broker (ops/kafka/start) on another port.
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "ingest/batched_trace.h"
#include "ingest/event_producer.h"
#include "ingest/synthetic/synthetic_fleet.h"
#include "ingest/trace_reader.h"
#include "ingest/trace_replay.h"
#include "schemas/event_batch_codec.h"
#include "tests/testing/kafka_broker.h"
#include "tests/testing/topic_reader.h"

namespace bubblewatch {
namespace {

using ::testing::HasSubstr;

std::string UniqueTopic(absl::string_view test) {
  static int counter = 0;
  return absl::StrCat("it-", test, "-", getpid(), "-", ++counter, "-",
                      absl::ToUnixMillis(absl::Now()));
}

struct CommandRun {
  int exit_code = -1;
  std::string output;  // stdout and stderr.
  absl::Duration wall;
};

// Runs the bubblewatch binary with `args` (shell-quoted by the caller),
// bounded by coreutils timeout so a hang fails the test instead of ctest.
CommandRun RunBubblewatch(const std::string& args, int limit_s = 180) {
  const std::string command = absl::StrCat(
      "timeout ", limit_s, " ", BUBBLEWATCH_BINARY, " ", args, " 2>&1");
  CommandRun run;
  const absl::Time begin = absl::Now();
  FILE* pipe = popen(command.c_str(), "r");
  if (pipe == nullptr) return run;
  char buffer[4096];
  size_t n;
  while ((n = fread(buffer, 1, sizeof(buffer), pipe)) > 0) {
    run.output.append(buffer, n);
  }
  const int status = pclose(pipe);
  run.wall = absl::Now() - begin;
  run.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return run;
}

// Decodes every message; fails the test on an undecodable one.
std::vector<DecodedBatch> DecodeAll(
    const std::vector<testing::ConsumedMessage>& messages) {
  std::vector<DecodedBatch> out;
  for (const testing::ConsumedMessage& m : messages) {
    auto batch = DecodeEventBatch(std::span<const uint8_t>(
        reinterpret_cast<const uint8_t*>(m.value.data()), m.value.size()));
    EXPECT_TRUE(batch.ok()) << batch.status();
    if (!batch.ok()) continue;
    EXPECT_EQ(m.key, batch->header.job);
    out.push_back(*std::move(batch));
  }
  return out;
}

// Per producer id, the sequence numbers must be exactly 0..n-1, once each.
void ExpectEachSequenceOnce(const std::vector<DecodedBatch>& batches,
                            size_t expected_producers) {
  std::map<uint64_t, std::vector<uint64_t>> sequences;
  for (const DecodedBatch& b : batches) {
    sequences[b.header.producer_id].push_back(b.header.sequence);
  }
  EXPECT_EQ(sequences.size(), expected_producers);
  for (auto& [producer, seq] : sequences) {
    std::sort(seq.begin(), seq.end());
    for (size_t i = 0; i < seq.size(); ++i) {
      ASSERT_EQ(seq[i], i) << "producer " << producer << ": lost or duplicated"
                           << " batch near sequence " << i;
    }
  }
}

// "... 12 of 12 batches acknowledged" -> {12, 12}.
std::pair<int64_t, int64_t> AcknowledgedFromSummary(const std::string& out) {
  const size_t at = out.rfind(" batches acknowledged");
  if (at == std::string::npos) return {-1, -1};
  const size_t newline = out.rfind('\n', at);
  const size_t begin = newline == std::string::npos ? 0 : newline + 1;
  std::vector<std::string> words =
      absl::StrSplit(out.substr(begin, at - begin), ' ');
  int64_t acked = -1, sent = -1;
  if (words.size() >= 3 && absl::SimpleAtoi(words[words.size() - 1], &sent) &&
      absl::SimpleAtoi(words[words.size() - 3], &acked)) {
    return {acked, sent};
  }
  return {-1, -1};
}

class ProduceIntegrationTest : public ::testing::Test {
 protected:
  void SetUp() override {
    brokers_ = testing::Brokers();
    ASSERT_FALSE(HasFailure());  // Not set: no broker to test against.
  }
  std::string brokers_;
};

TEST_F(ProduceIntegrationTest, TraceFilesArriveFieldForField) {
  std::vector<std::string> files = {
      absl::StrCat(BUBBLEWATCH_TESTDATA_DIR, "/timeline/seed_sample.json")};
  const std::string real =
      absl::StrCat(BUBBLEWATCH_TESTDATA_DIR, "/real/hta/rank0.json.gz");
  struct stat st;
  if (stat(real.c_str(), &st) == 0) files.push_back(real);

  for (const std::string& file : files) {
    SCOPED_TRACE(file);
    const std::string topic = UniqueTopic("file");
    CommandRun run = RunBubblewatch(absl::StrCat(
        "produce --brokers ", brokers_, " --topic ", topic,
        " --job job-file --host test-host --rank 0 --batch-events 512 ", file));
    ASSERT_EQ(run.exit_code, 0) << run.output;
    auto [acked, sent] = AcknowledgedFromSummary(run.output);
    ASSERT_GT(sent, 0) << run.output;
    EXPECT_EQ(acked, sent);

    // What the producer must have sent: the file, batched the same way.
    absl::StatusOr<Trace> trace = ReadTraceFile(file);
    ASSERT_TRUE(trace.ok()) << trace.status();
    BatchHeader identity;
    identity.job = "job-file";
    identity.host = "test-host";
    identity.rank = 0;
    identity.world_size = trace->world_size;
    BatchedTrace want(*std::move(trace), identity, {.max_events = 512});
    // The file's batches, then its end marker.
    ASSERT_EQ(static_cast<size_t>(sent), want.num_batches() + 1);

    auto messages = testing::ReadTopic(brokers_, topic, want.num_batches() + 1,
                                       absl::Seconds(60));
    ASSERT_TRUE(messages.ok()) << messages.status();
    ASSERT_EQ(messages->size(), want.num_batches() + 1);
    std::vector<DecodedBatch> batches = DecodeAll(*messages);
    ASSERT_EQ(batches.size(), want.num_batches() + 1);
    const DecodedBatch& marker = batches.back();
    EXPECT_TRUE(marker.header.end_of_stream);
    EXPECT_EQ(marker.header.sequence, want.num_batches());
    EXPECT_EQ(marker.header.producer_id, want.header().producer_id);
    EXPECT_TRUE(marker.trace.gpu.empty() && marker.trace.cpu.empty());
    batches.pop_back();
    // One key: one partition, so offsets follow the send order.
    const Trace& w = want.trace();
    size_t gpu = 0, cpu = 0;
    for (size_t i = 0; i < batches.size(); ++i) {
      const DecodedBatch& b = batches[i];
      EXPECT_EQ(b.header.sequence, i);
      EXPECT_EQ(b.header.producer_id, want.header().producer_id);
      EXPECT_EQ(b.header.host, "test-host");
      EXPECT_EQ(b.header.rank, 0);
      for (const GpuActivity& a : b.trace.gpu) {
        ASSERT_LT(gpu, w.gpu.size());
        const GpuActivity& e = w.gpu[gpu++];
        EXPECT_EQ(a.start_ns, e.start_ns);
        EXPECT_EQ(a.end_ns, e.end_ns);
        EXPECT_EQ(a.correlation, e.correlation);
        EXPECT_EQ(a.bytes, e.bytes);
        EXPECT_EQ(b.trace.Name(a.name), w.Name(e.name));
        EXPECT_EQ(a.device, e.device);
        EXPECT_EQ(a.stream, e.stream);
        EXPECT_EQ(a.kind, e.kind);
        EXPECT_EQ(a.pageable, e.pageable);
      }
      for (const CpuEvent& a : b.trace.cpu) {
        ASSERT_LT(cpu, w.cpu.size());
        const CpuEvent& e = w.cpu[cpu++];
        EXPECT_EQ(a.start_ns, e.start_ns);
        EXPECT_EQ(a.end_ns, e.end_ns);
        EXPECT_EQ(a.correlation, e.correlation);
        EXPECT_EQ(a.thread, e.thread);
        EXPECT_EQ(b.trace.Name(a.name), w.Name(e.name));
        EXPECT_EQ(a.category, e.category);
      }
    }
    EXPECT_EQ(gpu, w.gpu.size());
    EXPECT_EQ(cpu, w.cpu.size());
  }
}

TEST_F(ProduceIntegrationTest, SyntheticFleetIsFullyAcknowledged) {
  const std::string topic = UniqueTopic("synthetic");
  const std::string truth =
      absl::StrCat(::testing::TempDir(), "/truth-", getpid(), ".jsonl");
  CommandRun run = RunBubblewatch(absl::StrCat(
      "produce --brokers ", brokers_, " --topic ", topic,
      " --synthetic --jobs 3 --gpus-per-job 2 --duration 10s --rate 20000 "
      "--scenario mix --seed 5 --truth ",
      truth));
  ASSERT_EQ(run.exit_code, 0) << run.output;
  auto [acked, sent] = AcknowledgedFromSummary(run.output);
  ASSERT_GT(sent, 0) << run.output;
  EXPECT_EQ(acked, sent);

  auto messages = testing::ReadTopic(brokers_, topic, sent, absl::Seconds(60));
  ASSERT_TRUE(messages.ok()) << messages.status();
  EXPECT_EQ(static_cast<int64_t>(messages->size()), sent);
  std::vector<DecodedBatch> batches = DecodeAll(*messages);
  ExpectEachSequenceOnce(batches, /*expected_producers=*/6);
  int64_t events = 0;
  for (const DecodedBatch& b : batches) {
    events += b.trace.gpu.size() + b.trace.cpu.size();
  }
  EXPECT_THAT(run.output, HasSubstr(absl::StrCat(events, " events in ")));

  // The truth file is the library's, for the same options, byte for byte.
  SyntheticFleetOptions options;
  options.jobs = 3;
  options.gpus_per_job = 2;
  options.duration = absl::Seconds(10);
  options.events_per_second_per_gpu = 20000;
  options.seed = 5;
  auto fleet = GenerateSyntheticFleet(options);
  ASSERT_TRUE(fleet.ok());
  std::string want;
  for (const SyntheticJob& job : *fleet) {
    WriteTruthJsonLines(job.job, SyntheticScenarioName(job.scenario),
                        job.truth_window_ns, job.truth, &want);
  }
  std::ifstream in(truth);
  std::stringstream got;
  got << in.rdbuf();
  EXPECT_EQ(got.str(), want);
  std::remove(truth.c_str());
}

TEST_F(ProduceIntegrationTest, AbsentBrokerIsAClearErrorWithinTheTimeout) {
  CommandRun run = RunBubblewatch(
      absl::StrCat("produce --brokers 127.0.0.1:1 --timeout 3s --job j ",
                   BUBBLEWATCH_TESTDATA_DIR, "/timeline/seed_sample.json"));
  EXPECT_EQ(run.exit_code, 1) << run.output;
  EXPECT_LT(run.wall, absl::Seconds(15));
  EXPECT_THAT(run.output, HasSubstr("no Kafka broker at 127.0.0.1:1"));
}

}  // namespace
}  // namespace bubblewatch
