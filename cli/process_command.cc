#include <atomic>
#include <csignal>
#include <iostream>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/time.h"
#include "base/logging.h"
#include "cli/command_line.h"
#include "cli/commands.h"
#include "cli/exit_codes.h"
#include "cli/process_alerts.h"
#include "kafka/kafka_config.h"
#include "processor/merge_processor.h"
#include "processor/stream_processor.h"
#include "schemas/trace.h"
#include "serve/http_server.h"
#include "storage/window_store.h"

namespace bubblewatch {
namespace {

// Atomic: the kernel runs the handler on any thread that does not block the
// signal (the --http server's, RocksDB's), concurrently with main setting
// and clearing this; a lock-free atomic is also safe in a signal handler.
std::atomic<StreamProcessor*> g_processor{nullptr};
std::atomic<MergeProcessor*> g_merge{nullptr};

void OnSignal(int) {
  if (StreamProcessor* p = g_processor.load(); p != nullptr) p->RequestStop();
  if (MergeProcessor* p = g_merge.load(); p != nullptr) p->RequestStop();
}

// --http: the API over the processor's own store (reads are thread-safe)
// with its counters on /metrics, on a thread of its own, for either stage.
class BackgroundHttp {
 public:
  BackgroundHttp() = default;
  BackgroundHttp(const BackgroundHttp&) = delete;
  BackgroundHttp& operator=(const BackgroundHttp&) = delete;
  ~BackgroundHttp() { Stop(); }

  // Serves `options` over `store` on `listen` (nothing when empty). False,
  // with one line on stderr, when it cannot bind.
  bool Start(const std::string& listen, const HttpServerOptions& options,
             WindowStore* store) {
    if (listen.empty()) return true;
    absl::StatusOr<std::unique_ptr<HttpServer>> bound =
        HttpServer::Bind(options, store);
    if (!bound.ok()) {
      std::cerr << "bubblewatch process: " << bound.status().message() << "\n";
      return false;
    }
    server_ = *std::move(bound);
    spdlog::info("serving HTTP on {}", server_->url());
    thread_ = std::thread([s = server_.get()] {
      if (absl::Status st = s->Serve(); !st.ok()) {
        spdlog::error("HTTP server: {}", st.ToString());
      }
    });
    return true;
  }
  // Stops serving and waits for the thread (no-op when not serving).
  void Stop() {
    if (server_ == nullptr) return;
    server_->Stop();
    thread_.join();
    server_.reset();
  }

 private:
  std::unique_ptr<HttpServer> server_;
  std::thread thread_;
};

// `process --stage merge` once its flags and store are ready.
int RunMergeStage(const StreamProcessorOptions& options, WindowStore* store,
                  const std::string& http_listen, HttpServerOptions http) {
  absl::StatusOr<std::unique_ptr<MergeProcessor>> processor =
      MergeProcessor::Create(options, store);
  if (!processor.ok()) {
    std::cerr << "bubblewatch process: " << processor.status().message()
              << "\n";
    return kExitFailure;
  }
  http.processor_stats = [p = processor->get()] { return p->stats(); };
  BackgroundHttp server;
  if (!server.Start(http_listen, http, store)) return kExitFailure;
  g_merge.store(processor->get());
  std::signal(SIGINT, OnSignal);
  std::signal(SIGTERM, OnSignal);
  absl::Status run = (*processor)->Run();
  g_merge.store(nullptr);
  server.Stop();
  if (!run.ok()) {
    std::cerr << "bubblewatch process: " << run.message() << "\n";
    return kExitFailure;
  }
  return kExitOk;
}

}  // namespace

int RunProcessCommand(int argc, char** argv) {
  StreamProcessorOptions options;
  std::string store_path;
  std::string log_level = "info";
  absl::Duration window = absl::Seconds(10);
  absl::Duration lateness = absl::Seconds(2);
  std::string http_listen;
  std::string http_token_file;
  HttpServerOptions http;
  ProcessAlertFlags alert_flags;
  std::string stage = "events";
  CommandLine cl(
      "bubblewatch process --brokers HOST:PORT[,..] --store DIR [options]",
      "Consumes EventBatch messages, computes per-job event-time windows of "
      "GPU utilization and\nbubble attribution, and keeps them in a RocksDB "
      "store, effectively once: windows, job state\nand partition progress "
      "are written atomically, and a restart resumes where an open window\n"
      "still needs data. Malformed messages go to the dead-letter topic with "
      "the reason.\nFinalized windows are also published to the windows "
      "topic.\n\nExit codes: 0 stopped cleanly (SIGINT/SIGTERM or "
      "--exit-when-idle), 1 store or Kafka failure,\n2 usage error.");
  cl.AddString("brokers", &options.brokers, "HOST:PORT[,..]",
               "Kafka bootstrap servers (not 'embedded': see `bubblewatch "
               "demo`)");
  cl.AddString("store", &store_path, "DIR", "the RocksDB window store");
  int store_cache_mb = 64;
  int store_memtable_mb = 8;
  cl.AddInt("store-cache-mb", &store_cache_mb, "MiB",
            "the store's block cache (all reads, index and filter blocks)");
  cl.AddInt("store-memtable-mb", &store_memtable_mb, "MiB",
            "one memtable of the store; memtables take at most 6x this "
            "+ 16 MiB");
  bool store_no_sync = false;
  cl.AddBool("store-no-sync", &store_no_sync,
             "no fsync per store commit: faster, but a machine crash or a "
             "disk error can\nlose the last commits after Kafka (group "
             "offsets, state topic) moved past them");
  cl.AddString("stage", &stage, "STAGE",
               "events: windows from EventBatch messages; merge: stage 2 of "
               "jobs split across\nprocessors, windows merged from the hosts' "
               "window parts (docs/process.md#stage-2);\nits defaults: --topic "
               "bubblewatch.window-parts, --group bubblewatch-merge,\n"
               "--dlq-topic bubblewatch.window-parts.dlq,\n--state-topic "
               "bubblewatch.window-parts.state");
  cl.AddString("topic", &options.topic, "TOPIC", "events topic");
  cl.AddString("group", &options.group, "GROUP", "consumer group");
  cl.AddString("windows-topic", &options.windows_topic, "TOPIC",
               "where finalized windows are published (\"\" = nowhere)");
  cl.AddString("parts-topic", &options.parts_topic, "TOPIC",
               "where a split job's hosts publish their window parts for "
               "stage 2\n(batches keyed JOB@HOST: produce --split-ranks; "
               "docs/architecture.md#one-job-across-processors)");
  cl.AddString("dlq-topic", &options.dlq_topic, "TOPIC",
               "dead-letter topic for malformed messages");
  cl.AddString("state-topic", &options.state_topic, "TOPIC",
               "compacted changelog of per-partition job state, so another "
               "instance of the group\ntakes a partition over with its state "
               "(\"\" = none)");
  cl.AddDuration("window", &window, "DURATION", "window length");
  cl.AddDuration("lateness", &lateness, "DURATION",
                 "allowed lateness behind a host's newest event");
  cl.AddDuration("idle-timeout", &options.idle_timeout, "DURATION",
                 "close a job's windows after this much wall time of silence");
  cl.AddDuration("producer-expiry", &options.producer_expiry, "DURATION",
                 "forget a producer id whose newest event is this far behind "
                 "its job's finalized windows (event time)");
  cl.AddDuration("retention", &options.retention, "DURATION",
                 "keep windows this long (event time, per job)");
  cl.AddDuration("progress-interval", &options.log_interval, "DURATION",
                 "how often the progress line (events/s, lag, late, DLQ) is "
                 "logged");
  cl.AddDuration("exit-when-idle", &options.exit_when_idle, "DURATION",
                 "exit once nothing arrived for this long (counted from the "
                 "last message, assignment or broker recovery) and every job "
                 "is closed (0 = run forever)");
  cl.AddInt64("max-batch-bytes", &options.limits.max_batch_bytes, "N",
              "reject (to the DLQ) a message larger than this");
  cl.AddInt64("max-batch-events", &options.limits.max_events, "N",
              "reject a batch with more events than this");
  cl.AddInt64("max-name-bytes", &options.limits.max_name_bytes, "N",
              "reject a batch whose job, host or any event name is longer");
  cl.AddInt64("max-batch-names", &options.limits.max_names, "N",
              "reject a batch whose string table has more names");
  cl.AddInt64("max-open-windows", &options.state_limits.max_open_windows, "N",
              "reject a batch that would leave its job with more open "
              "windows (far-off timestamps)");
  cl.AddInt64("max-jobs-per-partition",
              &options.state_limits.max_jobs_per_partition, "N",
              "reject a batch of a new job when its input partition tracks "
              "this many jobs");
  cl.AddInt64("max-job-buffer-events",
              &options.state_limits.max_job_buffer_events, "N",
              "events one job may buffer (about 200 bytes each); a batch "
              "that would pass it closes the job's windows first "
              "(closed_by buffer_full) and drops its buffer; at least "
              "--max-batch-events");
  cl.AddDuration("job-expiry", &options.job_expiry, "DURATION",
                 "forget a job without open windows this far (event time) "
                 "behind its partition");
  cl.AddDuration("rank-grace", &options.rank_grace, "DURATION",
                 "a multi-rank job whose producers ended but not all of "
                 "its world size's ranks waits this long (its partition's "
                 "event time since the last end marker) for the others");
  cl.AddDuration("skew-warning", &options.skew_warning, "DURATION",
                 "warn (log, /metrics) when a job's hosts are this far apart "
                 "(0 = never)");
  cl.AddList("property", &options.kafka_properties, "KEY=VALUE",
             "librdkafka property for the consumer and producer "
             "(repeatable; SASL/SSL settings go here)");
  cl.AddAlias('X', "property");
  cl.AddString("log-level", &log_level, "LEVEL",
               "trace, debug, info, warn, error or off");
  cl.AddString("http", &http_listen, "HOST:PORT",
               "also serve the HTTP API, /metrics (with the processor's "
               "counters) and the dashboard, as `bubblewatch serve` does");
  cl.AddString("http-token-file", &http_token_file, "FILE",
               "bearer token for --http's /api/ and /metrics");
  cl.AddInt("metrics-top-jobs", &http.metrics_top_jobs, "K",
            "--http: jobs with their own series on /metrics");
  AddProcessAlertFlags(cl, alert_flags);
  std::vector<std::string> positional;
  if (std::optional<int> exit = cl.ParseOrExit(argc, argv, &positional)) {
    return *exit;
  }
  // Flags the library does not see; the options' own problems come from
  // StreamProcessorOptions::Validate, all of them in one message.
  std::vector<std::string> usage_errors;
  if (!positional.empty()) {
    usage_errors.push_back("unexpected argument " + positional[0]);
  }
  // Stage 2's own topics and group, unless given (on the command line or
  // in the config file).
  auto given = [&cl](absl::string_view name) {
    if (cl.GivenOnCommandLine(name)) return true;
    for (const ConfigSetting& c : cl.config_settings()) {
      if (c.key == name) return true;
    }
    return false;
  };
  const bool merge = stage == "merge";
  if (stage != "events" && !merge) {
    usage_errors.push_back("--stage must be events or merge, not \"" + stage +
                           "\"");
  }
  if (merge) {
    if (!given("topic")) options.topic = kWindowPartsTopic;
    if (!given("group")) options.group = kMergeGroup;
    if (!given("dlq-topic")) options.dlq_topic = kWindowPartsDlqTopic;
    if (!given("state-topic")) options.state_topic = kWindowPartsStateTopic;
    if (!alert_flags.rules_path.empty()) {
      usage_errors.push_back(
          "--stage merge runs no --rules (run them on the events stage)");
    }
  }
  // `produce --brokers embedded` starts librdkafka's mock cluster inside
  // its own process. Here it would be a private, empty cluster that no
  // producer can reach, so a processor on it could never see an event; and
  // taken for a host name, "embedded:9092" never resolves, which the
  // processor waits out like any outage: forever.
  if (options.brokers == "embedded") {
    usage_errors.push_back(
        "--brokers embedded is not supported: an embedded cluster lives "
        "inside one process, so a processor alone on one never sees an "
        "event; `bubblewatch demo` runs producer, processor and store on one");
  }
  if (store_path.empty()) usage_errors.push_back("--store is required");
  if (store_cache_mb < 1 || store_memtable_mb < 1) {
    usage_errors.push_back(
        "--store-cache-mb and --store-memtable-mb must be >= 1");
  }
  // Converted before Validate: a --window over kMaxWindowNs saturates to
  // a value Validate refuses; a negative one stays negative.
  options.windower.window_ns = absl::ToInt64Nanoseconds(window);
  options.windower.lateness_ns = absl::ToInt64Nanoseconds(lateness);
  if (absl::Status s = options.Validate(); !s.ok()) {
    usage_errors.push_back(
        InFlagTerms(s.message(), {{"windower.window_ns", "--window"},
                                  {"windower.lateness_ns", "--lateness"},
                                  {"idle_timeout", "--idle-timeout"},
                                  {"producer_expiry", "--producer-expiry"},
                                  {"job_expiry", "--job-expiry"},
                                  {"rank_grace", "--rank-grace"},
                                  {"skew_warning", "--skew-warning"},
                                  {"retention", "--retention"},
                                  {"log_interval", "--progress-interval"},
                                  {"exit_when_idle", "--exit-when-idle"}}));
  }
  if (!http_listen.empty()) {
    if (absl::Status s =
            ParseListenAddress(http_listen, &http.host, &http.port);
        !s.ok()) {
      usage_errors.push_back(absl::StrCat("--http: ", s.message()));
    }
  }
  if (!http_token_file.empty()) {
    absl::StatusOr<std::string> token = ReadTokenFile(http_token_file);
    if (token.ok()) {
      http.bearer_token = *token;
    } else {
      usage_errors.push_back(std::string(token.status().message()));
    }
  }
  if (alert_flags.rules_path.empty() && !alert_flags.alertmanager_url.empty()) {
    usage_errors.push_back("--alertmanager needs --rules");
  }
  // -X X.file=PATH: a secret file that is missing is the operator's
  // mistake, found before anything starts (the clients read it again).
  if (absl::Status s = CheckKafkaSecretFiles(options.kafka_properties);
      !s.ok()) {
    usage_errors.push_back(std::string(s.message()));
  }
  if (!usage_errors.empty()) {
    std::cerr << "bubblewatch process: " << absl::StrJoin(usage_errors, "; ")
              << "\nTry 'bubblewatch process --help'.\n";
    return kExitUsage;
  }
  if (absl::Status s = InitLogging(log_level); !s.ok()) {
    std::cerr << "bubblewatch process: " << s.message() << "\n";
    return kExitUsage;
  }
  WindowStoreOptions store_options;
  store_options.block_cache_bytes = int64_t{store_cache_mb} << 20;
  store_options.write_buffer_bytes = int64_t{store_memtable_mb} << 20;
  // Each commit is followed by the state topic's snapshot and, one commit
  // later, the group offsets: both tell the next run that the store holds
  // everything up to there, which must then survive more than a process
  // crash (found by the read-only store fault test: an ext4 file system
  // that the kernel turned read-only lost its unsynced commits).
  store_options.sync_commits = !store_no_sync;
  absl::StatusOr<std::unique_ptr<WindowStore>> store =
      OpenRocksDbWindowStore(store_path, store_options);
  if (!store.ok()) {
    std::cerr << "bubblewatch process: " << store.status().message() << "\n";
    return kExitFailure;
  }
  if (merge) return RunMergeStage(options, store->get(), http_listen, http);
  absl::StatusOr<ProcessAlerts> alerts =
      SetUpProcessAlerts(alert_flags, options.brokers, options.kafka_properties,
                         store->get(), RulesPathFromConfigOnReload(cl));
  if (!alerts.ok()) {
    std::cerr << "bubblewatch process: " << alerts.status().message() << "\n";
    return kExitFailure;
  }
  options.observer = alerts->hook.get();
  absl::StatusOr<std::unique_ptr<StreamProcessor>> processor =
      StreamProcessor::Create(options, store->get());
  if (!processor.ok()) {
    std::cerr << "bubblewatch process: " << processor.status().message()
              << "\n";
    return kExitFailure;
  }
  http.processor_stats = [p = processor->get()] { return p->stats(); };
  BackgroundHttp server;
  if (!server.Start(http_listen, http, store->get())) return kExitFailure;
  g_processor.store(processor->get());
  std::signal(SIGINT, OnSignal);
  std::signal(SIGTERM, OnSignal);
  ReloadRulesOnSighup(alerts->hook.get(), !cl.config_path().empty());
  absl::Status run = (*processor)->Run();
  ReloadRulesOnSighup(nullptr, false);
  g_processor.store(nullptr);
  server.Stop();
  if (!run.ok()) {
    std::cerr << "bubblewatch process: " << run.message() << "\n";
    return kExitFailure;
  }
  return kExitOk;
}

}  // namespace bubblewatch
