// On-call alerts end to end against REAL servers (ctest label `kafka`;
// ops/test starts the Kafka broker and an Alertmanager and passes
// BUBBLEWATCH_KAFKA_BROKERS, BUBBLEWATCH_ALERTMANAGER_URL and
// BUBBLEWATCH_ALERTMANAGER_DIR, the state dir of ops/alertmanager/start):
// a synthetic job with a planted host-sync stall, processed by
// `bubblewatch process --rules ... --alertmanager ...`, must
//   - fire exactly one alert, listed by Alertmanager's GET /api/v2/alerts
//     with the right cause, from a window at most two windows into the stall;
//   - survive an Alertmanager restart AND a kill -9 of the processor (the
//     restored alert state re-posts it; it does not fire again);
//   - resolve once after the stall ends, and the resolution reach an
//     Alertmanager that was unreachable (SIGSTOP) when it happened;
// and SIGHUP reloads the rules file: a bad one is refused and logged, a good
// one applies to the next windows;
// and a processor started with --config reads a Kafka property
// from a secret file (bootstrap.servers.file: without the file's value it
// reaches no broker) and never prints a secret file's content, and SIGHUP
// takes a changed `rules` path from the re-read config file, naming other
// changed keys as needing a restart;
// and a resolution that could not reach Alertmanager (unreachable through a
// proxy that is shut) survives a kill -9 of the processor: the restarted
// processor delivers it, long before Alertmanager's resolve_timeout (1 h in
// ops/alertmanager/start) would end the alert by itself.
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/str_cat.h"
#include "alerts/alert_evaluator.h"
#include "alerts/alert_event.h"
#include "alerts/alert_rules.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "httplib.h"
#include "kafka/kafka_config.h"
#include "kafka/kafka_handles.h"
#include "storage/window_store.h"
#include "tests/alerts/alert_kafka_fixture.h"
#include "tests/testing/child_process.h"
#include "tests/testing/command_flags.h"
#include "tests/testing/files.h"
#include "tests/testing/kafka_broker.h"
#include "tests/testing/poll.h"
#include "tests/testing/test_time.h"

extern char** environ;

namespace bubblewatch {
namespace {

constexpr int64_t kWindowNs = 10'000'000'000;
constexpr int64_t kStallStartNs = 1767225600LL * 1000000000;  // Default start.

std::string Unique(const std::string& base) {
  return base + "-" + std::to_string(getpid()) + "-" +
         std::to_string(
             std::chrono::steady_clock::now().time_since_epoch().count() %
             1'000'000'000);
}

pid_t Spawn(const std::string& binary, const std::vector<std::string>& args) {
  return testing::SpawnChild(binary, args);
}

// Starts `binary ARGS...` with stderr appended to `log`; returns its pid.
pid_t SpawnLogged(const std::string& binary,
                  const std::vector<std::string>& args,
                  const std::string& log) {
  return testing::SpawnChild(binary, args, log, testing::StderrMode::kAppend);
}

using testing::ReadFile;

int Wait(pid_t pid) { return testing::WaitChild(pid); }

int RunToEnd(const std::string& binary, const std::vector<std::string>& args) {
  return Wait(Spawn(binary, args));
}

std::string OpsScript(const std::string& name) {
  return std::string(BUBBLEWATCH_TESTDATA_DIR) + "/../../ops/alertmanager/" +
         name;
}

using testing::AlertingProcessArgs;
using testing::ListAlertmanagerAlerts;
using testing::ListedAlert;
using testing::PollUntil;
using testing::RequiredEnv;

// 30 s of one synthetic job JOB_PREFIX-000 (2 GPUs) in SCENARIO from START.
// Without `end_marker` the job goes on in a later produce (--no-end-marker:
// it does not end, docs/semantics.md#job-lifecycle).
int ProduceSynthetic(const std::string& brokers, const std::string& topic,
                     const std::string& job_prefix, const std::string& scenario,
                     const std::string& start,
                     std::vector<std::string> extra = {},
                     bool end_marker = false) {
  if (!end_marker) extra.push_back("--no-end-marker");
  std::vector<std::string> args = {
      "produce",        "--brokers",  brokers,      "--topic",      topic,
      "--synthetic",    "--job",      job_prefix,   "--jobs",       "1",
      "--gpus-per-job", "2",          "--duration", "30s",          "--rate",
      "3000",           "--scenario", scenario,     "--start-time", start,
      "--log-level",    "error"};
  testing::SetFlags(args, extra);
  return RunToEnd(BUBBLEWATCH_BINARY, args);
}

// An HTTP proxy in front of Alertmanager's POST /api/v2/alerts that can be
// shut (connection refused: Alertmanager unreachable, yet it keeps the
// alerts it holds in memory) and opened again on the same port. Unlike a
// SIGSTOPped Alertmanager, a shut proxy buffers nothing that a killed
// processor sent.
class AlertmanagerProxy {
 public:
  explicit AlertmanagerProxy(std::string target) : target_(std::move(target)) {}
  ~AlertmanagerProxy() { Shut(); }
  // Opens on `port_` (any free port the first time).
  bool Open() {
    server_ = std::make_unique<httplib::Server>();
    server_->Post("/api/v2/alerts",
                  [this](const httplib::Request& req, httplib::Response& res) {
                    httplib::Client am(target_);
                    am.set_connection_timeout(2, 0);
                    am.set_read_timeout(2, 0);
                    httplib::Result r =
                        am.Post("/api/v2/alerts", req.body, "application/json");
                    res.status = r ? r->status : 502;
                    if (r) res.set_content(r->body, "application/json");
                  });
    if (port_ == 0) {
      port_ = server_->bind_to_any_port("127.0.0.1");
    } else if (!server_->bind_to_port("127.0.0.1", port_)) {
      return false;
    }
    if (port_ <= 0) return false;
    thread_ = std::thread([this] { server_->listen_after_bind(); });
    while (!server_->is_running()) std::this_thread::yield();
    return true;
  }
  void Shut() {
    if (!server_) return;
    server_->stop();
    thread_.join();
    server_.reset();
  }
  std::string url() const {
    return "http://127.0.0.1:" + std::to_string(port_);
  }

 private:
  const std::string target_;
  int port_ = 0;
  std::unique_ptr<httplib::Server> server_;
  std::thread thread_;
};

// Follows the alerts topic from its beginning.
class TopicReader {
 public:
  explicit TopicReader(const std::string& topic) {
    KafkaConfig config(RequiredEnv("BUBBLEWATCH_KAFKA_BROKERS"));
    config.Set("group.id", topic + "-reader");
    config.Set("enable.auto.commit", "false");
    absl::StatusOr<RdKafkaPtr> consumer =
        NewKafkaClient(RD_KAFKA_CONSUMER, config);
    EXPECT_TRUE(consumer.ok()) << consumer.status();
    if (!consumer.ok()) return;
    consumer_ = *std::move(consumer);
    RdKafkaPartitionListPtr parts(rd_kafka_topic_partition_list_new(1));
    rd_kafka_topic_partition_list_add(parts.get(), topic.c_str(), 0)->offset =
        RD_KAFKA_OFFSET_BEGINNING;
    rd_kafka_assign(consumer_.get(), parts.get());
  }
  ~TopicReader() {
    if (consumer_) rd_kafka_consumer_close(consumer_.get());
  }
  // Reads what arrived; returns every event so far.
  const std::vector<AlertEvent>& Poll() {
    if (!consumer_) return events_;
    while (true) {
      RdKafkaMessagePtr m(rd_kafka_consumer_poll(consumer_.get(), 100));
      if (!m) break;
      if (m->err) continue;
      absl::StatusOr<AlertEvent> e = ParseAlertEventJson(
          absl::string_view(static_cast<const char*>(m->payload), m->len));
      EXPECT_TRUE(e.ok()) << e.status();
      if (e.ok()) events_.push_back(*std::move(e));
    }
    return events_;
  }
  int Count(AlertStatus status) {
    int n = 0;
    for (const AlertEvent& e : Poll()) n += e.status == status;
    return n;
  }

 private:
  RdKafkaPtr consumer_;
  std::vector<AlertEvent> events_;
};

class AlertmanagerKafka : public ::testing::Test {
 protected:
  void TearDown() override {
    // Whatever happened, leave Alertmanager running and unfrozen.
    if (frozen_pid_ > 0) kill(frozen_pid_, SIGCONT);
    if (processor_ > 0) {
      kill(processor_, SIGTERM);
      Wait(processor_);
    }
  }
  pid_t AlertmanagerPid() {
    std::ifstream in(RequiredEnv("BUBBLEWATCH_ALERTMANAGER_DIR") +
                     "/alertmanager.pid");
    pid_t pid = 0;
    in >> pid;
    return pid;
  }
  std::string AmPort() {
    const std::string url = RequiredEnv("BUBBLEWATCH_ALERTMANAGER_URL");
    return url.substr(url.rfind(':') + 1);
  }
  pid_t processor_ = 0;
  pid_t frozen_pid_ = 0;
};

TEST_F(AlertmanagerKafka, SyncStallFiresOnceSurvivesRestartsAndResolves) {
  const std::string brokers = RequiredEnv("BUBBLEWATCH_KAFKA_BROKERS");
  const std::string am = RequiredEnv("BUBBLEWATCH_ALERTMANAGER_URL");
  const std::string am_dir = RequiredEnv("BUBBLEWATCH_ALERTMANAGER_DIR");
  ASSERT_FALSE(brokers.empty() || am.empty() || am_dir.empty());
  const std::string topic = Unique("bw-alerts");
  const std::string rule = Unique("sync-stall");
  const std::string job_prefix = Unique("stall");
  const std::string job = job_prefix + "-000";
  const std::string store = ::testing::TempDir() + "/" + topic;
  const std::string rules = ::testing::TempDir() + "/" + topic + ".yaml";
  {
    // The synthetic sync scenario spends ~15 % of GPU time in host syncs;
    // its healthy loop well under 1 %.
    std::ofstream out(rules);
    out << "rules:\n"
        << "  - name: " << rule << "\n"
        << "    kind: cause_share_above\n"
        << "    cause: host_sync\n"
        << "    threshold: 8%\n"
        << "    for: 1\n"
        << "    clear_for: 2\n"
        << "    severity: critical\n";
  }
  const std::vector<std::string> process_args =
      AlertingProcessArgs(brokers, topic, store, rules, am,
                          {"--dashboard-url", "http://dash.example:8080"});
  auto produce = [&](const char* scenario, const char* start,
                     const char* seed) {
    return ProduceSynthetic(brokers, topic, job_prefix, scenario, start,
                            {"--seed", seed});
  };

  // 1. The stall: 30 s of event time with planted host syncs.
  ASSERT_EQ(produce("sync", "2026-01-01T00:00:00Z", "1"), 0);
  processor_ = Spawn(BUBBLEWATCH_BINARY, process_args);
  TopicReader reader(topic + ".alerts");
  ASSERT_TRUE(
      PollUntil([&] { return ListAlertmanagerAlerts(am, rule).size() == 1; },
                absl::Seconds(60), absl::Milliseconds(200)))
      << "Alertmanager never listed the alert";
  std::vector<ListedAlert> listed = ListAlertmanagerAlerts(am, rule);
  ASSERT_EQ(listed.size(), 1u);
  EXPECT_EQ(listed[0].job, job);
  EXPECT_EQ(listed[0].cause, "host_sync");
  EXPECT_EQ(listed[0].severity, "critical");
  EXPECT_EQ(listed[0].state, "active");
  ASSERT_TRUE(PollUntil([&] { return reader.Count(AlertStatus::kFiring) >= 1; },
                        absl::Seconds(10), absl::Milliseconds(200)));
  const AlertEvent fired = reader.Poll().front();
  EXPECT_EQ(fired.status, AlertStatus::kFiring);
  EXPECT_EQ(fired.job, job);
  // Within two windows of the stall's start.
  EXPECT_LT(fired.window_start_ns, kStallStartNs + 2 * kWindowNs);
  EXPECT_EQ(fired.dominant_cause, BubbleCause::kHostSync);
  ASSERT_TRUE(fired.largest_bubble.has_value());
  EXPECT_FALSE(fired.largest_bubble->blamed.empty());
  EXPECT_EQ(fired.dashboard_url, "http://dash.example:8080/?job=" + job);

  // 2. Alertmanager restarts (it keeps alerts in memory only) while the
  // processor is killed with SIGKILL: after the processor restarts, no new
  // window arrives, so only the alert state restored from RocksDB can bring
  // the alert back, and it must not fire again.
  kill(processor_, SIGKILL);
  Wait(processor_);
  processor_ = 0;
  ASSERT_EQ(RunToEnd("/bin/bash", {OpsScript("stop"), "--port", AmPort(),
                                   "--state-dir", am_dir}),
            0);
  ASSERT_EQ(RunToEnd("/bin/bash", {OpsScript("start"), "--port", AmPort(),
                                   "--state-dir", am_dir}),
            0);
  EXPECT_TRUE(ListAlertmanagerAlerts(am, rule).empty())
      << "a fresh Alertmanager";
  processor_ = Spawn(BUBBLEWATCH_BINARY, process_args);
  ASSERT_TRUE(
      PollUntil([&] { return ListAlertmanagerAlerts(am, rule).size() == 1; },
                absl::Seconds(30), absl::Milliseconds(200)))
      << "the restored alert was not re-posted";

  // 3. Alertmanager becomes unreachable (frozen); the stall ends: 30 s of
  // healthy steps resolve the alert after two clear windows. Unfrozen,
  // Alertmanager must get the resolution (else it would list the alert as
  // active for its 5 m resolve_timeout).
  frozen_pid_ = AlertmanagerPid();
  ASSERT_GT(frozen_pid_, 0);
  ASSERT_EQ(kill(frozen_pid_, SIGSTOP), 0);
  ASSERT_EQ(produce("healthy", "2026-01-01T00:00:30Z", "2"), 0);
  ASSERT_TRUE(
      PollUntil([&] { return reader.Count(AlertStatus::kResolved) >= 1; },
                absl::Seconds(60), absl::Milliseconds(200)))
      << "no resolution on the alerts topic";
  ASSERT_EQ(kill(frozen_pid_, SIGCONT), 0);
  frozen_pid_ = 0;
  EXPECT_TRUE(
      PollUntil([&] { return ListAlertmanagerAlerts(am, rule).empty(); },
                absl::Seconds(40), absl::Milliseconds(200)))
      << "Alertmanager still lists the alert as active";

  // Exactly one firing and one resolution, whatever restarted in between.
  kill(processor_, SIGTERM);
  EXPECT_EQ(Wait(processor_), 0);
  processor_ = 0;
  int firing = 0, resolved = 0;
  for (const AlertEvent& e : reader.Poll()) {
    EXPECT_EQ(e.rule, rule);
    firing += e.status == AlertStatus::kFiring;
    resolved += e.status == AlertStatus::kResolved;
    if (e.status == AlertStatus::kResolved) {
      EXPECT_EQ(e.starts_at, fired.starts_at);
      EXPECT_GE(e.window_start_ns, kStallStartNs + 3 * kWindowNs);
    }
  }
  EXPECT_EQ(firing, 1);
  EXPECT_EQ(resolved, 1);
}

TEST_F(AlertmanagerKafka, SighupReloadsRulesAndRefusesABadFile) {
  const std::string brokers = RequiredEnv("BUBBLEWATCH_KAFKA_BROKERS");
  ASSERT_FALSE(brokers.empty());
  const std::string topic = Unique("bw-reload");
  const std::string job_prefix = Unique("reload");
  const std::string job = job_prefix + "-000";
  const std::string store = ::testing::TempDir() + "/" + topic;
  const std::string rules = ::testing::TempDir() + "/" + topic + ".yaml";
  const std::string log = ::testing::TempDir() + "/" + topic + ".log";
  auto write_rules =
      [&](const std::string& threshold) {
        std::ofstream(rules)
            << "rules:\n  - {name: stall, kind: cause_share_above, "
               "cause: host_sync, threshold: "
            << threshold << "}\n";
      };
  auto produce = [&](const char* start) {
    return ProduceSynthetic(brokers, topic, job_prefix, "sync", start);
  };
  auto log_has = [&](const std::string& text) {
    return PollUntil(
        [&] { return ReadFile(log).find(text) != std::string::npos; },
        absl::Seconds(30), absl::Milliseconds(200));
  };
  // 90 %: the ~15 % host-sync stall does not fire.
  write_rules("90%");
  processor_ =
      SpawnLogged(BUBBLEWATCH_BINARY,
                  AlertingProcessArgs(brokers, topic, store, rules, ""), log);
  TopicReader reader(topic + ".alerts");
  ASSERT_EQ(produce("2026-01-01T00:00:00Z"), 0);
  // The stall's windows are stored, and with them the alert state (one
  // commit): it holds no active alert, and the topic no event.
  std::vector<std::pair<std::string, std::string>> states;
  ASSERT_TRUE(PollUntil(
      [&] {
        auto r = OpenRocksDbWindowStoreReadOnly(store);
        if (!r.ok()) return false;
        auto w = (*r)->Scan(job, absl::InfinitePast(), absl::InfiniteFuture());
        auto s = (*r)->AlertStates();
        if (!w.ok() || w->size() < 3 || !s.ok()) return false;
        states = *s;
        return true;
      },
      absl::Seconds(60), absl::Milliseconds(200)));
  ASSERT_EQ(states.size(), 1u);
  EXPECT_EQ(states[0].first, "j/" + job);
  AlertEvaluator restored(*ParseAlertRules(ReadFile(rules), "rules"), {});
  ASSERT_TRUE(restored.Restore(states).ok());
  EXPECT_TRUE(restored.Active().empty());
  EXPECT_TRUE(reader.Poll().empty());

  std::ofstream(rules) << "rules:\n  - {name: stall, kind: cause_shar}\n";
  ASSERT_EQ(kill(processor_, SIGHUP), 0);
  ASSERT_TRUE(log_has("keeping the 1 old rules")) << ReadFile(log);
  EXPECT_TRUE(log_has(rules + ":2:25: unknown kind \"cause_shar\""))
      << ReadFile(log);

  write_rules("8%");
  ASSERT_EQ(kill(processor_, SIGHUP), 0);
  ASSERT_TRUE(log_has("reloaded 1 rules from " + rules)) << ReadFile(log);
  ASSERT_EQ(produce("2026-01-01T00:00:30Z"), 0);
  ASSERT_TRUE(PollUntil([&] { return reader.Count(AlertStatus::kFiring) == 1; },
                        absl::Seconds(60), absl::Milliseconds(200)));
  EXPECT_GE(reader.Poll().front().window_start_ns,
            kStallStartNs + 3 * kWindowNs);
  EXPECT_EQ(reader.Poll().front().job, job);
}

// `process --config FILE`. The file's `brokers` is an address
// where nothing listens; the real one comes from a secret file
// (`bootstrap.servers.file`), so windows in the store prove the file's value
// reached the consumer. A second secret (`sasl.password.file`) never appears
// in the log, though librdkafka's debug logging prints the configuration.
// Then the config file names other rules: SIGHUP loads them, and they fire.
TEST_F(AlertmanagerKafka, ConfigFileSecretsAndSighupTakeANewRulesPath) {
  const std::string brokers = RequiredEnv("BUBBLEWATCH_KAFKA_BROKERS");
  ASSERT_FALSE(brokers.empty());
  const std::string topic = Unique("bw-config");
  const std::string job_prefix = Unique("config");
  const std::string job = job_prefix + "-000";
  const std::string dir = ::testing::TempDir() + "/" + topic;
  ASSERT_EQ(system(("mkdir -p " + dir).c_str()), 0);
  const std::string store = dir + "/store";
  const std::string log = dir + "/process.log";
  const std::string config = dir + "/process.yaml";
  const std::string rules_a = dir + "/rules-a.yaml";
  const std::string rules_b = dir + "/rules-b.yaml";
  constexpr char kPassword[] = "Cfg-Secret-Pa55-41d7";
  std::ofstream(dir + "/brokers") << brokers << "\n";
  std::ofstream(dir + "/password") << kPassword << "\n";
  // A: 90 %, which the ~15 % host-sync stall never reaches. B: 8 %.
  std::ofstream(rules_a) << "rules:\n  - {name: stall-a, kind: "
                            "cause_share_above, cause: host_sync, "
                            "threshold: 90%}\n";
  std::ofstream(rules_b) << "rules:\n  - {name: stall-b, kind: "
                            "cause_share_above, cause: host_sync, "
                            "threshold: 8%}\n";
  auto write_config = [&](const std::string& rules, const std::string& window) {
    std::ofstream(config) << "# bubblewatch process --config " << config << "\n"
                          << "brokers: 127.0.0.1:1\n"
                          << "topic: " << topic << "\n"
                          << "group: " << topic << "-g\n"
                          << "store: " << store << "\n"
                          << "window: " << window << "\n"
                          << "idle-timeout: 3s\n"
                          << "rules: " << rules << "\n"
                          << "alerts-topic: " << topic << ".alerts\n"
                          << "windows-topic: \"\"\n"
                          << "log-level: debug\n"
                          << "property:\n"
                          << "  bootstrap.servers.file: " << dir << "/brokers\n"
                          << "  sasl.password.file: " << dir << "/password\n"
                          << "  debug: conf,generic\n"
                          << "  session.timeout.ms: 6000\n"
                          << "  heartbeat.interval.ms: 1000\n";
  };
  auto log_has = [&](const std::string& text) {
    return PollUntil(
        [&] { return ReadFile(log).find(text) != std::string::npos; },
        absl::Seconds(30), absl::Milliseconds(200));
  };
  write_config(rules_a, "10s");
  processor_ =
      SpawnLogged(BUBBLEWATCH_BINARY, {"process", "--config", config}, log);
  TopicReader reader(topic + ".alerts");
  ASSERT_EQ(ProduceSynthetic(brokers, topic, job_prefix, "sync",
                             "2026-01-01T00:00:00Z"),
            0);
  ASSERT_TRUE(PollUntil(
      [&] {
        auto r = OpenRocksDbWindowStoreReadOnly(store);
        if (!r.ok()) return false;
        auto w = (*r)->Scan(job, absl::InfinitePast(), absl::InfiniteFuture());
        return w.ok() && w->size() >= 3;
      },
      absl::Seconds(60), absl::Milliseconds(200)))
      << "no windows: the secret file's bootstrap.servers was not used\n"
      << ReadFile(log);
  EXPECT_TRUE(reader.Poll().empty());  // 90 %: nothing fires.

  // The config now names rules B, and a window the running processor
  // cannot change.
  write_config(rules_b, "20s");
  ASSERT_EQ(kill(processor_, SIGHUP), 0);
  ASSERT_TRUE(log_has("reloaded 1 rules from " + rules_b)) << ReadFile(log);
  EXPECT_TRUE(log_has("window changed since the start; not applied"))
      << ReadFile(log);
  ASSERT_EQ(ProduceSynthetic(brokers, topic, job_prefix, "sync",
                             "2026-01-01T00:00:30Z"),
            0);
  ASSERT_TRUE(PollUntil([&] { return reader.Count(AlertStatus::kFiring) >= 1; },
                        absl::Seconds(60), absl::Milliseconds(200)))
      << ReadFile(log);
  EXPECT_EQ(reader.Poll().front().rule, "stall-b");
  EXPECT_EQ(reader.Poll().front().job, job);

  kill(processor_, SIGTERM);
  EXPECT_EQ(Wait(processor_), 0);
  processor_ = 0;
  const std::string text = ReadFile(log);
  // The run logged librdkafka's configuration (debug=conf), so the absence
  // of the password is not for want of logging.
  EXPECT_THAT(text, ::testing::HasSubstr("librdkafka"));
  EXPECT_THAT(text, ::testing::Not(::testing::HasSubstr(kPassword)));
}

// The processor's durable alert state in `store` (opened read-only beside
// the running processor), as an evaluator with `rules_path`'s rules.
std::optional<AlertEvaluator> StoredAlerts(const std::string& store,
                                           const std::string& rules_path) {
  auto reader = OpenRocksDbWindowStoreReadOnly(store);
  if (!reader.ok()) return std::nullopt;
  auto states = (*reader)->AlertStates();
  auto rules = ParseAlertRules(ReadFile(rules_path), "rules");
  if (!states.ok() || !rules.ok()) return std::nullopt;
  AlertEvaluator ev(*std::move(rules), {});
  if (!ev.Restore(*states).ok()) return std::nullopt;
  return ev;
}

TEST_F(AlertmanagerKafka, UndeliveredResolutionSurvivesAProcessorKill) {
  const std::string brokers = RequiredEnv("BUBBLEWATCH_KAFKA_BROKERS");
  const std::string am = RequiredEnv("BUBBLEWATCH_ALERTMANAGER_URL");
  ASSERT_FALSE(brokers.empty() || am.empty());
  const std::string topic = Unique("bw-undelivered");
  const std::string rule = Unique("sync-held");
  const std::string job_prefix = Unique("held");
  const std::string store = ::testing::TempDir() + "/" + topic;
  const std::string rules = ::testing::TempDir() + "/" + topic + ".yaml";
  std::ofstream(rules) << "rules:\n  - {name: " << rule
                       << ", kind: cause_share_above, cause: host_sync, "
                          "threshold: 8%, for: 1, clear_for: 2}\n";
  AlertmanagerProxy proxy(am);
  ASSERT_TRUE(proxy.Open());
  const std::vector<std::string> process_args =
      AlertingProcessArgs(brokers, topic, store, rules, proxy.url());
  auto produce = [&](const char* scenario, const char* start) {
    return ProduceSynthetic(brokers, topic, job_prefix, scenario, start);
  };

  // Fires, and Alertmanager lists it.
  ASSERT_EQ(produce("sync", "2026-01-01T00:00:00Z"), 0);
  processor_ = Spawn(BUBBLEWATCH_BINARY, process_args);
  TopicReader reader(topic + ".alerts");
  ASSERT_TRUE(
      PollUntil([&] { return ListAlertmanagerAlerts(am, rule).size() == 1; },
                absl::Seconds(60), absl::Milliseconds(200)))
      << "Alertmanager never listed the alert";

  // Alertmanager becomes unreachable; the stall ends and the alert resolves.
  // The resolution is committed as undelivered.
  proxy.Shut();
  ASSERT_EQ(produce("healthy", "2026-01-01T00:00:30Z"), 0);
  ASSERT_TRUE(
      PollUntil([&] { return reader.Count(AlertStatus::kResolved) >= 1; },
                absl::Seconds(60), absl::Milliseconds(200)))
      << "no resolution on the alerts topic";
  ASSERT_TRUE(PollUntil(
      [&] {
        std::optional<AlertEvaluator> ev = StoredAlerts(store, rules);
        if (!ev) return false;
        std::vector<AlertEvent> due = ev->ToDeliver();
        return due.size() == 1 && due[0].status == AlertStatus::kResolved;
      },
      absl::Seconds(30), absl::Milliseconds(200)))
      << "the undelivered resolution is not in the stored alert state";

  // The processor dies before Alertmanager is back: Alertmanager still
  // lists the alert as active (its resolve_timeout is an hour away).
  kill(processor_, SIGKILL);
  Wait(processor_);
  processor_ = 0;
  ASSERT_EQ(ListAlertmanagerAlerts(am, rule).size(), 1u);

  // Alertmanager reachable again, the processor restarted with no new
  // input: only the stored resolution can resolve the alert.
  ASSERT_TRUE(proxy.Open());
  processor_ = Spawn(BUBBLEWATCH_BINARY, process_args);
  EXPECT_TRUE(
      PollUntil([&] { return ListAlertmanagerAlerts(am, rule).empty(); },
                absl::Seconds(30), absl::Milliseconds(200)))
      << "Alertmanager still lists the alert: the resolution was lost";
  // The delivery is committed: nothing left to deliver after another start.
  EXPECT_TRUE(PollUntil(
      [&] {
        std::optional<AlertEvaluator> ev = StoredAlerts(store, rules);
        return ev && ev->ToDeliver().empty();
      },
      absl::Seconds(30), absl::Milliseconds(200)))
      << "the delivery mark was not committed";
  kill(processor_, SIGTERM);
  EXPECT_EQ(Wait(processor_), 0);
  processor_ = 0;
  // Once fired, once resolved, whatever restarted in between.
  EXPECT_EQ(reader.Count(AlertStatus::kFiring), 1);
  EXPECT_EQ(reader.Count(AlertStatus::kResolved), 1);
}

// The job lifecycle (docs/semantics.md#job-lifecycle) against the real
// broker and Alertmanager: `produce` ends its job with an end marker; the
// job's firing cause alert resolves at Alertmanager (it gets endsAt: the
// alert leaves its list long before its 1 h resolve_timeout), the job is
// ended in the store, and its silence fires no job_silent. The same job
// without the marker (next test) is silent and job_silent fires.
std::string LifecycleRules(const std::string& path, const std::string& cause,
                           const std::string& silent) {
  std::ofstream(path) << "rules:\n  - {name: " << cause
                      << ", kind: cause_share_above, cause: host_sync, "
                         "threshold: 8%, for: 1, clear_for: 2}\n"
                      << "  - {name: " << silent
                      << ", kind: job_silent, duration: 4s}\n";
  return path;
}

// The job's phase as the store says now (query jobs' rule).
std::string StoredPhase(const std::string& store, const std::string& job) {
  auto reader = OpenRocksDbWindowStoreReadOnly(store);
  if (!reader.ok()) return "";
  auto info = (*reader)->Job(job);
  if (!info.ok() || !info->has_value()) return "";
  return std::string(JobPhaseName(PhaseAt(
      (*info)->lifecycle,
      std::max(absl::Now() - (*info)->last_seen_wall, absl::ZeroDuration()))));
}

TEST_F(AlertmanagerKafka, AnEndedJobsAlertsResolveAndItIsNeverSilent) {
  const std::string brokers = RequiredEnv("BUBBLEWATCH_KAFKA_BROKERS");
  const std::string am = RequiredEnv("BUBBLEWATCH_ALERTMANAGER_URL");
  ASSERT_FALSE(brokers.empty() || am.empty());
  const std::string topic = Unique("bw-ended");
  const std::string cause = Unique("sync-ended");
  const std::string silent = Unique("silent-ended");
  const std::string job_prefix = Unique("ended");
  const std::string job = job_prefix + "-000";
  const std::string store = ::testing::TempDir() + "/" + topic;
  const std::string rules = LifecycleRules(
      ::testing::TempDir() + "/" + topic + ".yaml", cause, silent);
  processor_ = Spawn(BUBBLEWATCH_BINARY,
                     AlertingProcessArgs(brokers, topic, store, rules, am));
  TopicReader reader(topic + ".alerts");
  // Paced (30 s of event time in 15 s), so that the stall's alert fires
  // and reaches Alertmanager while the job still runs (its first window
  // closes about 6 s in); then the marker.
  std::vector<std::string> produce = {
      "produce",     "--brokers",   brokers,          "--topic",
      topic,         "--synthetic", "--job",          job_prefix,
      "--jobs",      "1",           "--gpus-per-job", "2",
      "--duration",  "30s",         "--rate",         "3000",
      "--scenario",  "sync",        "--start-time",   "2026-01-01T00:00:00Z",
      "--log-level", "error"};
  for (const std::string& flag : testing::ScaledReplaySpeed(2)) {
    produce.push_back(flag);
  }
  pid_t producer = Spawn(BUBBLEWATCH_BINARY, produce);
  ASSERT_TRUE(
      PollUntil([&] { return ListAlertmanagerAlerts(am, cause).size() == 1; },
                absl::Seconds(60), absl::Milliseconds(200)))
      << "Alertmanager never listed the cause alert";
  ASSERT_EQ(Wait(producer), 0);
  EXPECT_TRUE(
      PollUntil([&] { return ListAlertmanagerAlerts(am, cause).empty(); },
                absl::Seconds(30), absl::Milliseconds(200)))
      << "the ended job's alert is still active at Alertmanager";
  ASSERT_TRUE(PollUntil([&] { return StoredPhase(store, job) == "ended"; },
                        absl::Seconds(10), absl::Milliseconds(200)))
      << StoredPhase(store, job);
  int resolved = 0;
  for (const AlertEvent& e : reader.Poll()) {
    if (e.rule != cause || e.status != AlertStatus::kResolved) continue;
    ++resolved;
    EXPECT_NE(e.ends_at, absl::InfiniteFuture());
    EXPECT_GE(e.ends_at, e.starts_at);
  }
  EXPECT_EQ(resolved, 1);
  // Silent for twice job_silent's 4 s (time passing is the point):
  // nothing fires.
  absl::SleepFor(absl::Seconds(8));
  EXPECT_TRUE(ListAlertmanagerAlerts(am, silent).empty());
  for (const AlertEvent& e : reader.Poll()) {
    EXPECT_NE(e.rule, silent) << "job_silent fired for an ended job";
  }
  EXPECT_EQ(StoredPhase(store, job), "ended");
  kill(processor_, SIGTERM);
  EXPECT_EQ(Wait(processor_), 0);
  processor_ = 0;
}

TEST_F(AlertmanagerKafka, AJobThatStopsWithoutAMarkerIsSilent) {
  const std::string brokers = RequiredEnv("BUBBLEWATCH_KAFKA_BROKERS");
  const std::string am = RequiredEnv("BUBBLEWATCH_ALERTMANAGER_URL");
  ASSERT_FALSE(brokers.empty() || am.empty());
  const std::string topic = Unique("bw-stopped");
  const std::string cause = Unique("sync-stopped");
  const std::string silent = Unique("silent-stopped");
  const std::string job_prefix = Unique("stopped");
  const std::string job = job_prefix + "-000";
  const std::string store = ::testing::TempDir() + "/" + topic;
  const std::string rules = LifecycleRules(
      ::testing::TempDir() + "/" + topic + ".yaml", cause, silent);
  processor_ = Spawn(BUBBLEWATCH_BINARY,
                     AlertingProcessArgs(brokers, topic, store, rules, am));
  TopicReader reader(topic + ".alerts");
  ASSERT_EQ(ProduceSynthetic(brokers, topic, job_prefix, "sync",
                             "2026-01-01T00:00:00Z"),
            0);
  ASSERT_TRUE(
      PollUntil([&] { return ListAlertmanagerAlerts(am, silent).size() == 1; },
                absl::Seconds(60), absl::Milliseconds(200)))
      << "job_silent never reached Alertmanager";
  EXPECT_EQ(ListAlertmanagerAlerts(am, silent)[0].job, job);
  EXPECT_EQ(StoredPhase(store, job), "active");
  // Its cause alert fires on as well: nothing said the job ended.
  EXPECT_EQ(ListAlertmanagerAlerts(am, cause).size(), 1u);
  kill(processor_, SIGTERM);
  EXPECT_EQ(Wait(processor_), 0);
  processor_ = 0;
}

// a fleet of processors in one consumer group pages once per
// condition (docs/alerts.md#fleet-wide-alerts). Two instances share a
// 4-partition topic; 6 jobs stall (planted host syncs) and fire; a third
// instance joins (rebalance) while the stall goes on, one of the first two
// is killed with SIGKILL in the middle of the stream, and 3 more jobs start
// stalling across those moves; then the survivors see every job healthy.
// Jobs' partitions move between owners with their alert state, so:
//   - the alerts topic holds exactly one firing and one resolution per job
//     (no new owner fires an alert again, and none misses a resolution);
//   - Alertmanager lists exactly one alert per stalled job while they
//     stall, and none once they resolved (an old owner that kept re-posting
//     a job it lost would keep the alert active).
TEST_F(AlertmanagerKafka, FleetOfProcessorsPagesOncePerConditionAcrossMoves) {
  const std::string brokers = RequiredEnv("BUBBLEWATCH_KAFKA_BROKERS");
  const std::string am = RequiredEnv("BUBBLEWATCH_ALERTMANAGER_URL");
  ASSERT_FALSE(brokers.empty() || am.empty());
  const std::string topic = Unique("bw-fleet-alerts");
  const std::string rule = Unique("fleet-stall");
  const std::string early = Unique("early");  // Stalls from the start.
  const std::string late = Unique("late");    // Stalls across the moves.
  testing::CreateTopic(topic, 4, brokers);
  const std::string rules = ::testing::TempDir() + "/" + topic + ".yaml";
  std::ofstream(rules) << "rules:\n"
                       << "  - name: " << rule << "\n"
                       << "    kind: cause_share_above\n"
                       << "    cause: host_sync\n"
                       << "    threshold: 8%\n"
                       << "    for: 1\n"
                       << "    clear_for: 2\n";
  // The fleet rule: in a group each instance counts its own jobs only, so
  // it is evaluated by `serve --brokers` (two replicas) over the alert
  // state the instances commit to the state topic: more than 5 jobs firing
  // `rule`, fleet-wide.
  const std::string fleet_rule = Unique("many-stalls");
  const std::string fleet_rules =
      ::testing::TempDir() + "/" + topic + ".fleet.yaml";
  std::ofstream(fleet_rules) << ReadFile(rules) << "  - name: " << fleet_rule
                             << "\n    kind: fleet\n    rule: " << rule
                             << "\n    jobs_firing_more_than: 5\n";
  auto produce = [&](const std::string& prefix, int jobs, const char* scenario,
                     const char* start, const char* seed) {
    return RunToEnd(BUBBLEWATCH_BINARY, {"produce",
                                         "--brokers",
                                         brokers,
                                         "--topic",
                                         topic,
                                         "--synthetic",
                                         "--job",
                                         prefix,
                                         "--jobs",
                                         std::to_string(jobs),
                                         "--gpus-per-job",
                                         "2",
                                         "--duration",
                                         "30s",
                                         "--rate",
                                         "3000",
                                         "--scenario",
                                         scenario,
                                         "--start-time",
                                         start,
                                         "--seed",
                                         seed,
                                         "--no-end-marker",
                                         "--log-level",
                                         "error"});
  };
  std::vector<pid_t> instances;
  std::vector<std::string> logs;
  auto start_instance = [&] {
    const int i = static_cast<int>(instances.size());
    logs.push_back(::testing::TempDir() + "/" + topic + "." +
                   std::to_string(i) + ".log");
    instances.push_back(SpawnLogged(
        BUBBLEWATCH_BINARY,
        AlertingProcessArgs(
            brokers, topic,
            ::testing::TempDir() + "/" + topic + "." + std::to_string(i), rules,
            am, {"--state-topic", topic + ".state"}),
        logs.back()));
  };
  absl::Cleanup stop_all = [&] {
    for (pid_t pid : instances) {
      if (pid > 0 && kill(pid, SIGTERM) == 0) Wait(pid);
    }
  };
  auto assigned = [&](int i) {
    return PollUntil(
        [&] {
          return ReadFile(logs[i]).find("assigned " + topic + "/") !=
                 std::string::npos;
        },
        absl::Seconds(60), absl::Milliseconds(200));
  };
  TopicReader reader(topic + ".alerts");
  // Jobs with at least one event of `status`, and the events per job.
  auto by_job = [&](AlertStatus status) {
    std::map<std::string, int> n;
    for (const AlertEvent& e : reader.Poll()) {
      if (e.rule == rule && e.status == status) ++n[e.job];
    }
    return n;
  };
  auto listed_jobs = [&] {
    std::multiset<std::string> jobs;
    for (const ListedAlert& a : ListAlertmanagerAlerts(am, rule))
      jobs.insert(a.job);
    return jobs;
  };

  std::vector<pid_t> serves;
  std::vector<std::string> serve_logs;
  for (int i = 0; i < 2; ++i) {
    serve_logs.push_back(::testing::TempDir() + "/" + topic + ".serve" +
                         std::to_string(i) + ".log");
    serves.push_back(SpawnLogged(
        BUBBLEWATCH_BINARY,
        {"serve", "--brokers", brokers, "--store",
         ::testing::TempDir() + "/" + topic + ".serve" + std::to_string(i),
         "--windows-topic", topic + ".windows", "--state-topic",
         topic + ".state", "--rules", fleet_rules, "--alertmanager", am,
         "--alertmanager-resend", "1s", "--listen", "127.0.0.1:0"},
        serve_logs.back()));
  }
  absl::Cleanup stop_serves = [&] {
    for (pid_t pid : serves) {
      if (pid > 0 && kill(pid, SIGTERM) == 0) Wait(pid);
    }
  };
  auto fleet_listed = [&] {
    return ListAlertmanagerAlerts(am, fleet_rule).size();
  };
  // Lines "fleet alert RULE STATUS" in serve replica i's log.
  auto fleet_logged = [&](int i, const std::string& status) {
    const std::string log = ReadFile(serve_logs[i]);
    const std::string line = "fleet alert " + fleet_rule + " " + status + ":";
    int n = 0;
    for (size_t at = log.find(line); at != std::string::npos;
         at = log.find(line, at + 1)) {
      ++n;
    }
    return n;
  };

  // 1. Two instances; 6 jobs stall for 30 s and fire.
  start_instance();
  start_instance();
  ASSERT_TRUE(assigned(0) && assigned(1));
  ASSERT_EQ(produce(early, 6, "sync", "2026-01-01T00:00:00Z", "1"), 0);
  ASSERT_EQ(produce(late, 3, "healthy", "2026-01-01T00:00:00Z", "2"), 0);
  ASSERT_TRUE(
      PollUntil([&] { return by_job(AlertStatus::kFiring).size() == 6; },
                absl::Seconds(90), absl::Milliseconds(250)))
      << "the early jobs did not all fire";
  ASSERT_TRUE(PollUntil([&] { return listed_jobs().size() == 6; },
                        absl::Seconds(30), absl::Milliseconds(250)));
  // 6 > 5 jobs fleet-wide, on two instances: both replicas fire the fleet
  // alert, Alertmanager holds it once.
  EXPECT_TRUE(PollUntil(
      [&] {
        return fleet_logged(0, "firing") == 1 && fleet_logged(1, "firing") == 1;
      },
      absl::Seconds(30), absl::Milliseconds(250)))
      << ReadFile(serve_logs[0]) << ReadFile(serve_logs[1]);
  EXPECT_TRUE(PollUntil([&] { return fleet_listed() == 1; }, absl::Seconds(30),
                        absl::Milliseconds(250)));

  // 2. A third instance joins: partitions (and their jobs) move to it.
  start_instance();
  ASSERT_TRUE(assigned(2)) << "the third instance got no partition";
  // The stall goes on (no new firing may come of it), the late jobs start
  // stalling, and instance 0 is killed with SIGKILL while that is processed.
  ASSERT_EQ(produce(early, 6, "sync", "2026-01-01T00:00:30Z", "3"), 0);
  ASSERT_EQ(produce(late, 3, "sync", "2026-01-01T00:00:30Z", "4"), 0);
  kill(instances[0], SIGKILL);
  Wait(instances[0]);
  instances[0] = 0;
  ASSERT_TRUE(
      PollUntil([&] { return by_job(AlertStatus::kFiring).size() == 9; },
                absl::Seconds(90), absl::Milliseconds(250)))
      << "the late jobs did not all fire";
  ASSERT_TRUE(PollUntil([&] { return listed_jobs().size() == 9; },
                        absl::Seconds(30), absl::Milliseconds(250)));
  std::multiset<std::string> listed = listed_jobs();
  EXPECT_EQ(std::set<std::string>(listed.begin(), listed.end()).size(), 9u)
      << "Alertmanager lists a job twice";
  // Through the moves and the kill: still one fleet alert, fired once.
  EXPECT_EQ(fleet_listed(), 1u);

  // 3. Every job healthy: each resolves once, on whichever instance owns it
  // now, and Alertmanager lists none (resend 1 s: an instance that still
  // re-posted a job it lost would bring the alert back).
  ASSERT_EQ(produce(early, 6, "healthy", "2026-01-01T00:01:00Z", "5"), 0);
  ASSERT_EQ(produce(late, 3, "healthy", "2026-01-01T00:01:00Z", "6"), 0);
  ASSERT_TRUE(
      PollUntil([&] { return by_job(AlertStatus::kResolved).size() == 9; },
                absl::Seconds(90), absl::Milliseconds(250)))
      << "not every job resolved";
  ASSERT_TRUE(
      PollUntil([&] { return ListAlertmanagerAlerts(am, rule).empty(); },
                absl::Seconds(30), absl::Milliseconds(250)))
      << "Alertmanager still lists alerts";
  // The fleet alert resolves with them, once per replica.
  EXPECT_TRUE(PollUntil([&] { return fleet_listed() == 0; }, absl::Seconds(30),
                        absl::Milliseconds(250)))
      << "Alertmanager still lists the fleet alert";
  // Several resend intervals later it still lists none.
  absl::SleepFor(absl::Seconds(3));
  EXPECT_TRUE(ListAlertmanagerAlerts(am, rule).empty());
  EXPECT_EQ(fleet_listed(), 0u);
  for (int i = 0; i < 2; ++i) {
    EXPECT_EQ(fleet_logged(i, "firing"), 1) << ReadFile(serve_logs[i]);
    EXPECT_EQ(fleet_logged(i, "resolved"), 1) << ReadFile(serve_logs[i]);
  }

  for (pid_t& pid : instances) {
    if (pid <= 0) continue;
    kill(pid, SIGTERM);
    EXPECT_EQ(Wait(pid), 0);
    pid = 0;
  }
  // Once per condition on the topic: no instance paged a job it took over
  // again, none lost a resolution. The early jobs fired before the moves
  // and everything resolved after them: each event is there exactly once.
  // A late job may fire while instance 0 is killed; whoever replays that
  // commit emits the same event again (at least once), with the same
  // identity (rule, job, status, window): once per identity.
  std::map<std::string, std::set<int64_t>> fired_windows;
  for (const AlertEvent& e : reader.Poll()) {
    if (e.rule == rule && e.status == AlertStatus::kFiring) {
      fired_windows[e.job].insert(e.window_start_ns);
    }
  }
  for (const auto& [job, n] : by_job(AlertStatus::kFiring)) {
    if (job.rfind(early, 0) == 0) {
      EXPECT_EQ(n, 1) << job << " fired " << n << " times";
    } else {
      EXPECT_EQ(fired_windows[job].size(), 1u)
          << job << " fired " << n << " times from "
          << fired_windows[job].size() << " windows";
    }
  }
  for (const auto& [job, n] : by_job(AlertStatus::kResolved)) {
    EXPECT_EQ(n, 1) << job << " resolved " << n << " times";
  }
  EXPECT_EQ(by_job(AlertStatus::kFiring).size(), 9u);
  int moved = 0;
  for (const std::string& log : logs) {
    moved += ReadFile(log).find("alerts: adopted the alert state") !=
             std::string::npos;
  }
  EXPECT_GE(moved, 1) << "no instance took over a job with alert state";
}

}  // namespace
}  // namespace bubblewatch
