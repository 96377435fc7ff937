// The producer across a real broker restart (ctest label kafka): batches in
// flight when the broker stops are retried once it is back, and idempotence
// keeps them from being stored twice. This test runs its own broker with
// ops/kafka/start on the shared test broker's port + 50 (39142 by default),
// restarts that broker process with its data kept (ops/kafka/start always
// formats fresh storage, which would lose what was acknowledged before the
// stop), and stops it with ops/kafka/stop.
//
// Post-mortem aids: BUBBLEWATCH_TEST_RDKAFKA_DEBUG=eos,msg logs the
// producer's librdkafka debug contexts; BUBBLEWATCH_TEST_KEEP_BROKER=1 leaves
// the broker running (stop it with ops/kafka/stop --port PORT --state-dir
// DIR) so that the topic can be inspected with kcat.
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <thread>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "absl/strings/strip.h"
#include "gtest/gtest.h"
#include "ingest/batched_trace.h"
#include "ingest/event_producer.h"
#include "ingest/synthetic_fleet.h"
#include "ingest/trace_replay.h"
#include "schemas/event_batch_codec.h"
#include "spdlog/spdlog.h"
#include "tests/kafka/topic_reader.h"

namespace bubblewatch {
namespace {

// The shared test broker's port + 50, so that several checkouts testing at
// once (each with its own BUBBLEWATCH_KAFKA_BROKERS) do not collide.
int OwnPort() {
  int shared = 39092;
  if (const char* brokers = std::getenv("BUBBLEWATCH_KAFKA_BROKERS")) {
    absl::string_view text(brokers);
    const size_t colon = text.rfind(':');
    int parsed = 0;
    if (colon != absl::string_view::npos &&
        absl::SimpleAtoi(text.substr(colon + 1), &parsed) && parsed > 0 &&
        parsed < 65000) {
      shared = parsed;
    }
  }
  return shared + 50;
}
const int kPort = OwnPort();

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
      : state_dir_(
            absl::StrCat(::testing::TempDir(), "/bw-kafka-restart-", getpid())),
        ops_(absl::StrCat(BUBBLEWATCH_REPO_ROOT, "/ops/kafka/")) {}
  ~OwnBroker() {
    if (std::getenv("BUBBLEWATCH_TEST_KEEP_BROKER") != nullptr) return;
    Stop();
    // The broker's log stays only when it can explain a failure.
    if (!::testing::Test::HasFailure()) {
      std::error_code ignored;
      std::filesystem::remove_all(state_dir_, ignored);
    }
  }

  // ops/kafka/start can misreport a broker that is still being exec'd as
  // "exited during start-up" (it reads /proc/PID/cmdline right after the
  // fork); it then cleans up, so trying again is safe.
  bool Start() {
    for (int attempt = 0; attempt < 3; ++attempt) {
      if (std::system(absl::StrCat(ops_, "start --port ", kPort,
                                   " --state-dir ", ShellQuote(state_dir_),
                                   " >/dev/null")
                          .c_str()) == 0) {
        return true;
      }
    }
    return false;
  }
  void Stop() {
    std::system(absl::StrCat(ops_, "stop --port ", kPort, " --state-dir ",
                             ShellQuote(state_dir_), " >/dev/null 2>&1")
                    .c_str());
    // Whatever the pid file says, the broker this test started must go.
    // It is our child: waitpid both tells whether it runs and reaps it.
    if (relaunched_pid_ > 0) {
      auto running = [&] {
        return waitpid(relaunched_pid_, nullptr, WNOHANG) == 0;
      };
      if (running()) {
        kill(relaunched_pid_, SIGTERM);
        if (!PollUntil([&] { return !running(); }, absl::Seconds(30))) {
          kill(relaunched_pid_, SIGKILL);
          PollUntil([&] { return !running(); }, absl::Seconds(10));
        }
      }
      relaunched_pid_ = 0;
    }
  }
  std::string brokers() const { return absl::StrCat("127.0.0.1:", kPort); }
  const std::string& state_dir() const { return state_dir_; }

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
      if (!arg.empty()) argv.emplace_back(arg);
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
    // The same command line, in its own session, output appended to the log.
    std::vector<std::string> args = argv;
    std::vector<char*> spawn_argv;
    for (std::string& a : args) spawn_argv.push_back(a.data());
    spawn_argv.push_back(nullptr);
    posix_spawn_file_actions_t files;
    posix_spawn_file_actions_init(&files);
    posix_spawn_file_actions_addopen(&files, 0, "/dev/null", O_RDONLY, 0);
    posix_spawn_file_actions_addopen(&files, 1, log_file().c_str(),
                                     O_WRONLY | O_APPEND | O_CREAT, 0644);
    posix_spawn_file_actions_adddup2(&files, 1, 2);
    posix_spawnattr_t attributes;
    posix_spawnattr_init(&attributes);
    posix_spawnattr_setflags(&attributes, POSIX_SPAWN_SETSID);
    pid_t new_pid = 0;
    const int spawned = posix_spawnp(&new_pid, spawn_argv[0], &files,
                                     &attributes, spawn_argv.data(), environ);
    posix_spawn_file_actions_destroy(&files);
    posix_spawnattr_destroy(&attributes);
    if (spawned != 0) {
      *error = absl::StrCat("could not relaunch the broker: errno ", spawned);
      return false;
    }
    relaunched_pid_ = new_pid;
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
  pid_t relaunched_pid_ = 0;  // Our child once restarted.
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
  KafkaConfig producer_config(broker.brokers());
  if (const char* debug = std::getenv("BUBBLEWATCH_TEST_RDKAFKA_DEBUG")) {
    producer_config.Set("debug", debug);
    spdlog::set_level(spdlog::level::debug);
  }
  auto producer = EventProducer::Create(producer_config, producer_options);
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
  std::cerr << "broker was down for " << absl::FormatDuration(down_for) << "; "
            << acked_before << " of " << batches
            << " batches were acknowledged before the restart\n";

  auto messages =
      testing::ReadTopic(broker.brokers(), topic, batches, absl::Seconds(60));
  if (!messages.ok()) {
    // Read what is there, so that the failures below name the missing batch.
    ADD_FAILURE() << messages.status() << " (state dir " << broker.state_dir()
                  << ")";
    messages =
        testing::ReadTopic(broker.brokers(), topic, 0, absl::Seconds(20));
  }
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
      ASSERT_EQ(seq[i], i) << "producer " << producer_id
                           << ": batch lost (or duplicated) near sequence " << i
                           << " of " << seq.size();
    }
  }
}

}  // namespace
}  // namespace bubblewatch
