// The producer across a real broker restart (ctest label kafka): batches in
// flight when the broker stops are retried once it is back, and idempotence
// keeps them from being stored twice. This test runs its own broker with
// ops/kafka/start on port 39192, restarts that broker process with its data
// kept (ops/kafka/start always formats fresh storage, which would lose what
// was acknowledged before the stop), and stops it with ops/kafka/stop.
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <sstream>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "absl/strings/numbers.h"
#include "absl/strings/strip.h"
#include "gtest/gtest.h"
#include "ingest/batched_trace.h"
#include "ingest/event_producer.h"
#include "ingest/synthetic_fleet.h"
#include "ingest/trace_replay.h"
#include "schemas/event_batch_codec.h"
#include "tests/kafka/topic_reader.h"

namespace bubblewatch {
namespace {

constexpr int kPort = 39192;

std::string ShellQuote(const std::string& s) {
  return absl::StrCat("'", absl::StrReplaceAll(s, {{"'", "'\\''"}}), "'");
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

bool Alive(pid_t pid) { return kill(pid, 0) == 0; }

// Polls `done` every 100 ms until it holds or `timeout` passes.
template <typename F>
bool PollUntil(F done, absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  while (!done()) {
    if (absl::Now() > deadline) return false;
    absl::SleepFor(absl::Milliseconds(100));
  }
  return true;
}

class OwnBroker {
 public:
  OwnBroker()
      : state_dir_(absl::StrCat(::testing::TempDir(), "/bw-kafka-restart-",
                                getpid())),
        ops_(absl::StrCat(BUBBLEWATCH_REPO_ROOT, "/ops/kafka/")) {}
  ~OwnBroker() { Stop(); }

  bool Start() {
    return std::system(absl::StrCat(ops_, "start --port ", kPort,
                                    " --state-dir ", ShellQuote(state_dir_),
                                    " >/dev/null")
                           .c_str()) == 0;
  }
  void Stop() {
    std::system(absl::StrCat(ops_, "stop --port ", kPort, " --state-dir ",
                             ShellQuote(state_dir_), " >/dev/null 2>&1")
                    .c_str());
  }
  std::string brokers() const { return absl::StrCat("127.0.0.1:", kPort); }

  // Stops the broker process (SIGTERM: a clean shutdown) and starts the same
  // command line again on the same data. Returns false with `error` set.
  bool RestartKeepingData(absl::Duration* down_for, std::string* error) {
    int pid_number = 0;
    if (!absl::SimpleAtoi(absl::StripAsciiWhitespace(ReadFile(pid_file())),
                          &pid_number)) {
      *error = "no broker.pid";
      return false;
    }
    const pid_t pid = pid_number;
    std::string cmdline = ReadFile(absl::StrCat("/proc/", pid, "/cmdline"));
    std::vector<std::string> argv;
    for (absl::string_view arg : absl::StrSplit(cmdline, '\0')) {
      if (!arg.empty()) argv.push_back(ShellQuote(std::string(arg)));
    }
    if (argv.empty()) {
      *error = "cannot read the broker's command line";
      return false;
    }
    const absl::Time stopped = absl::Now();
    kill(pid, SIGTERM);
    if (!PollUntil([&] { return !Alive(pid); }, absl::Seconds(60))) {
      kill(pid, SIGKILL);
      PollUntil([&] { return !Alive(pid); }, absl::Seconds(10));
    }
    const size_t started_before = CountStarted();
    const std::string relaunch = absl::StrCat(
        "setsid ", absl::StrJoin(argv, " "), " </dev/null >>",
        ShellQuote(log_file()), " 2>&1 & echo $!");
    FILE* pipe = popen(relaunch.c_str(), "r");
    char buffer[64] = {};
    const bool read = pipe != nullptr && fgets(buffer, sizeof(buffer), pipe);
    if (pipe != nullptr) pclose(pipe);
    int new_pid = 0;
    if (!read || !absl::SimpleAtoi(absl::StripAsciiWhitespace(buffer),
                                   &new_pid)) {
      *error = "could not relaunch the broker";
      return false;
    }
    // ops/kafka/stop finds it by this file.
    std::ofstream(pid_file(), std::ios::trunc) << new_pid << "\n";
    if (!PollUntil([&] { return CountStarted() > started_before; },
                   absl::Seconds(90))) {
      *error = "the restarted broker did not log 'Kafka Server started'";
      return false;
    }
    *down_for = absl::Now() - stopped;
    return true;
  }

 private:
  std::string pid_file() const { return state_dir_ + "/broker.pid"; }
  std::string log_file() const { return state_dir_ + "/broker.log"; }
  size_t CountStarted() const {
    const std::string log = ReadFile(log_file());
    size_t count = 0;
    for (size_t at = log.find("Kafka Server started"); at != std::string::npos;
         at = log.find("Kafka Server started", at + 1)) {
      ++count;
    }
    return count;
  }

  std::string state_dir_;
  std::string ops_;
};

TEST(BrokerRestart, InFlightBatchesAreRetriedNotLostNorDuplicated) {
  // ops/test passes the shared broker; this test uses its own, but like every
  // kafka-labelled test it refuses to run outside ops/test's setup.
  ASSERT_NE(std::getenv("BUBBLEWATCH_KAFKA_BROKERS"), nullptr)
      << "run through ops/test (BUBBLEWATCH_KAFKA_BROKERS is not set)";
  OwnBroker broker;
  ASSERT_TRUE(broker.Start()) << "ops/kafka/start --port " << kPort;

  // 40 s of event time for 4 GPUs, replayed at 4x: about 10 s of sending,
  // so the restart (several seconds) falls in the middle.
  SyntheticFleetOptions options;
  options.jobs = 2;
  options.gpus_per_job = 2;
  options.duration = absl::Seconds(40);
  options.events_per_second_per_gpu = 5000;
  auto fleet = GenerateSyntheticFleet(options);
  ASSERT_TRUE(fleet.ok());
  std::vector<std::unique_ptr<BatchedTrace>> streams;
  std::vector<BatchedTrace*> pointers;
  size_t batches = 0;
  for (SyntheticJob& job : *fleet) {
    for (Trace& t : job.ranks) {
      BatchHeader identity;
      identity.job = t.job;
      identity.host = t.host;
      identity.rank = t.rank;
      streams.push_back(std::make_unique<BatchedTrace>(
          std::move(t), identity,
          BatchingOptions{.max_events = 1024, .max_span_ns = 200'000'000}));
      pointers.push_back(streams.back().get());
      batches += streams.back()->num_batches();
    }
  }

  const std::string topic = absl::StrCat("it-restart-", getpid());
  EventProducerOptions producer_options;
  producer_options.topic = topic;
  producer_options.delivery_timeout = absl::Seconds(180);
  producer_options.linger = absl::Milliseconds(20);
  auto producer =
      EventProducer::Create(KafkaConfig(broker.brokers()), producer_options);
  ASSERT_TRUE(producer.ok()) << producer.status();
  ASSERT_TRUE((*producer)->WaitUntilReachable(absl::Seconds(60)).ok());

  absl::Status sent, flushed;
  std::thread sender([&] {
    ReplayOptions replay;
    replay.speed = 4;
    sent = ReplayTraces(pointers, producer->get(), replay);
    flushed = (*producer)->Flush(absl::Seconds(200));
  });
  // Restart once a tenth of the batches is acknowledged.
  ASSERT_TRUE(PollUntil(
      [&] {
        return (*producer)->stats().batches_acked >=
               static_cast<int64_t>(batches / 10);
      },
      absl::Seconds(60)));
  const int64_t acked_before = (*producer)->stats().batches_acked;
  absl::Duration down_for;
  std::string error;
  const bool restarted = broker.RestartKeepingData(&down_for, &error);
  sender.join();
  ASSERT_TRUE(restarted) << error;
  ASSERT_TRUE(sent.ok()) << sent;
  ASSERT_TRUE(flushed.ok()) << flushed;
  const ProducerStats stats = (*producer)->stats();
  EXPECT_LT(acked_before, static_cast<int64_t>(batches)) << "not mid-run";
  EXPECT_EQ(stats.batches_sent, static_cast<int64_t>(batches));
  EXPECT_EQ(stats.batches_acked, static_cast<int64_t>(batches));
  std::cerr << "broker was down for " << absl::FormatDuration(down_for)
            << "; " << acked_before << " of " << batches
            << " batches were acknowledged before the restart\n";

  auto messages = testing::ReadTopic(broker.brokers(), topic, batches,
                                     absl::Seconds(60));
  ASSERT_TRUE(messages.ok()) << messages.status();
  EXPECT_EQ(messages->size(), batches);
  std::map<uint64_t, std::vector<uint64_t>> sequences;
  for (const testing::ConsumedMessage& m : *messages) {
    auto batch = DecodeEventBatch(std::span<const uint8_t>(
        reinterpret_cast<const uint8_t*>(m.value.data()), m.value.size()));
    ASSERT_TRUE(batch.ok()) << batch.status();
    sequences[batch->header.producer_id].push_back(batch->header.sequence);
  }
  EXPECT_EQ(sequences.size(), streams.size());
  for (auto& [producer_id, seq] : sequences) {
    // Per key, Kafka keeps order: the sequences are already sorted.
    for (size_t i = 0; i < seq.size(); ++i) {
      ASSERT_EQ(seq[i], i) << "producer " << producer_id;
    }
  }
}

}  // namespace
}  // namespace bubblewatch
