// `bubblewatch serve`: the HTTP API, /metrics and the dashboard over a
// store: one processor's, opened read-only so that it runs beside the
// processor (or on a copied store), or, with --brokers, a store of its own
// that serve/window_materializer.h fills from the windows topic (the whole
// fleet).
#include <pthread.h>

#include <csignal>
#include <cstdlib>
#include <iostream>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "alerts/alert_rules.h"
#include "alerts/alertmanager_client.h"
#include "alerts/fleet_alerter.h"
#include "base/logging.h"
#include "cli/command_line.h"
#include "cli/commands.h"
#include "cli/exit_codes.h"
#include "processor/fleet_topics.h"
#include "serve/http_server.h"
#include "serve/window_materializer.h"
#include "spdlog/spdlog.h"
#include "storage/window_store.h"

namespace bubblewatch {

namespace {

// Where `serve --brokers` keeps its store without --store: under /var/tmp
// (kept across reboots, unlike /tmp on many systems), one per windows topic.
std::string DefaultMaterializedStore(const std::string& topic) {
  const char* tmp = std::getenv("TMPDIR");
  return absl::StrCat(tmp != nullptr && *tmp != '\0' ? tmp : "/var/tmp",
                      "/bubblewatch-serve-", topic);
}

}  // namespace

int RunServeCommand(int argc, char** argv) {
  std::string store_path;
  std::string listen = "127.0.0.1:8080";
  std::string token_file;
  std::string log_level = "info";
  HttpServerOptions options;
  WindowMaterializerOptions fleet;
  // As `process`: the processors' state topic is followed by default.
  const std::string default_state_topic = FleetTopicOptions().state_topic;
  fleet.state_topic = default_state_topic;
  // The fleet rules (docs/alerts.md#fleet-wide-alerts).
  std::string rules_path;
  std::string alertmanager_url;
  std::string dashboard_url;
  absl::Duration alertmanager_resend = absl::Minutes(1);
  CommandLine cl(
      "bubblewatch serve --store DIR [--listen HOST:PORT] [--token-file F]\n"
      "       bubblewatch serve --brokers B [--windows-topic T] "
      "[--state-topic T] [--store DIR] [...]",
      "Serves a window store over HTTP: the JSON API of `bubblewatch "
      "query` (/api/v1/jobs,\n/api/v1/jobs/JOB/windows, /api/v1/fleet), "
      "Prometheus metrics (/metrics), /healthz and\na dashboard (/).\n\n"
      "--store DIR alone: one processor's store, opened read-only: it may be "
      "the one a running\nprocessor writes (new windows show up within "
      "--refresh) or a copy.\n--brokers B: the whole fleet. The windows "
      "topic every processor publishes to is\nmaterialized into a store of "
      "serve's own (--store, default\n/var/tmp/bubblewatch-serve-TOPIC, "
      "under $TMPDIR when set), resumed from its stored offsets\nafter a "
      "restart; /healthz and /metrics report the lag. The processors' state "
      "topic gives\nthe jobs' states and the alerts their rules have firing. "
      "With --rules, serve --brokers\nevaluates the file's fleet rules over "
      "the whole fleet (the processors evaluate the job\nrules). Stops on "
      "SIGINT/SIGTERM.\n\nExit codes: 0 stopped by a signal, 1 store, "
      "listen or Kafka failure, 2 usage error.");
  cl.AddString("store", &store_path, "DIR",
               "the RocksDB window store (with --brokers: serve's own)");
  cl.AddString("brokers", &fleet.brokers, "HOST:PORT,...",
               "materialize the windows topic of these brokers (the fleet "
               "query tier)");
  cl.AddString("windows-topic", &fleet.windows_topic, "TOPIC",
               "--brokers: the topic processors publish windows to");
  cl.AddString("state-topic", &fleet.state_topic, "TOPIC",
               "--brokers: the processors' state topic, for job states and "
               "alerts (\"\" = windows only)");
  cl.AddDuration("retention", &fleet.retention, "DURATION",
                 "--brokers: keep windows this long (event time, per job), "
                 "as process --retention");
  cl.AddList("property", &fleet.kafka_properties, "KEY=VALUE",
             "--brokers: librdkafka property for the consumer (repeatable; "
             "SASL/SSL settings go here)");
  cl.AddAlias('X', "property");
  cl.AddString("rules", &rules_path, "FILE",
               "--brokers: evaluate the fleet rules of this rules file over "
               "the whole fleet (its job rules are left to the processors)");
  cl.AddString("alertmanager", &alertmanager_url, "URL",
               "--rules: post the fleet alerts to this Alertmanager (v2 API)");
  cl.AddDuration("alertmanager-resend", &alertmanager_resend, "DURATION",
                 "--alertmanager: re-post active alerts this often (keep it "
                 "below its resolve_timeout)");
  cl.AddString("dashboard-url", &dashboard_url, "URL",
               "--rules: base URL of the dashboard the alerts link to");
  cl.AddString("listen", &listen, "HOST:PORT",
               "address to listen on (port 0 = any free port)");
  cl.AddString("token-file", &token_file, "FILE",
               "require 'Authorization: Bearer TOKEN' for /api/ and /metrics, "
               "TOKEN being this file's content");
  cl.AddInt("metrics-top-jobs", &options.metrics_top_jobs, "K",
            "jobs with their own series on /metrics (most bubble time "
            "first; the rest are aggregated)");
  cl.AddDuration("refresh", &options.refresh_interval, "DURATION",
                 "catch up with the processor's commits at most this often");
  cl.AddString("log-level", &log_level, "LEVEL",
               "trace, debug, info, warn, error or off");
  std::vector<std::string> positional;
  if (std::optional<int> exit = cl.ParseOrExit(argc, argv, &positional)) {
    return *exit;
  }
  const bool materialize = !fleet.brokers.empty();
  std::vector<std::string> usage_errors;
  if (!positional.empty()) {
    usage_errors.push_back("unexpected argument " + positional[0]);
  }
  if (!materialize) {
    if (store_path.empty()) {
      usage_errors.push_back("--store (or --brokers) is required");
    }
    const WindowMaterializerOptions defaults;
    if (fleet.windows_topic != defaults.windows_topic ||
        fleet.state_topic != default_state_topic ||
        fleet.retention != defaults.retention ||
        !fleet.kafka_properties.empty() || !rules_path.empty()) {
      usage_errors.push_back(
          "--windows-topic, --state-topic, --retention, --rules and -X need "
          "--brokers");
    }
  } else {
    if (fleet.brokers == "embedded") {
      usage_errors.push_back(
          "--brokers embedded is not supported: an embedded cluster lives "
          "inside one process, so no processor could publish to it");
    }
    if (store_path.empty()) {
      store_path = DefaultMaterializedStore(fleet.windows_topic);
    }
    if (absl::Status s = fleet.Validate(); !s.ok()) {
      usage_errors.push_back(std::string(s.message()));
    }
  }
  if (rules_path.empty() &&
      (!alertmanager_url.empty() || !dashboard_url.empty())) {
    usage_errors.push_back("--alertmanager and --dashboard-url need --rules");
  }
  if (!rules_path.empty() && fleet.state_topic.empty()) {
    usage_errors.push_back(
        "--rules needs the state topic: the fleet rules count the alerts "
        "the processors commit there");
  }
  if (alertmanager_resend <= absl::ZeroDuration()) {
    usage_errors.push_back("--alertmanager-resend must be > 0");
  }
  if (options.metrics_top_jobs < 0)
    usage_errors.push_back("--metrics-top-jobs must be >= 0");
  if (absl::Status s = ParseListenAddress(listen, &options.host, &options.port);
      !s.ok()) {
    usage_errors.push_back(absl::StrCat("--listen: ", s.message()));
  }
  if (!usage_errors.empty()) {
    std::cerr << "bubblewatch serve: " << absl::StrJoin(usage_errors, "; ")
              << "\nTry 'bubblewatch serve --help'.\n";
    return kExitUsage;
  }
  if (absl::Status s = InitLogging(log_level); !s.ok()) {
    std::cerr << "bubblewatch serve: " << s.message() << "\n";
    return kExitUsage;
  }
  if (!token_file.empty()) {
    absl::StatusOr<std::string> token = ReadTokenFile(token_file);
    if (!token.ok()) {
      std::cerr << "bubblewatch serve: " << token.status().message() << "\n";
      return kExitUsage;
    }
    options.bearer_token = *std::move(token);
  }

  std::optional<AlertRuleSet> rules;
  if (!rules_path.empty()) {
    absl::StatusOr<AlertRuleSet> loaded = LoadAlertRulesFile(rules_path);
    if (!loaded.ok()) {
      std::cerr << "bubblewatch serve: " << loaded.status().message() << "\n";
      return kExitUsage;
    }
    rules = *std::move(loaded);
  }

  // Signals are taken by one thread (sigwait) rather than a handler: stopping
  // the server is not async-signal-safe. Blocked before any thread starts, so
  // every thread inherits the mask.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);

  // With --brokers the store is serve's own, written by the materializer
  // on a thread of its own; without, a processor's, read-only.
  std::unique_ptr<WindowStore> own_store;
  std::unique_ptr<WindowStoreReader> read_only;
  std::unique_ptr<WindowMaterializer> materializer;
  if (materialize) {
    absl::StatusOr<std::unique_ptr<WindowStore>> opened =
        OpenRocksDbWindowStore(store_path);
    if (!opened.ok()) {
      std::cerr << "bubblewatch serve: " << opened.status().message() << "\n";
      return kExitFailure;
    }
    own_store = *std::move(opened);
    absl::StatusOr<std::unique_ptr<WindowMaterializer>> made =
        WindowMaterializer::Create(fleet, own_store.get());
    if (!made.ok()) {
      std::cerr << "bubblewatch serve: " << made.status().message() << "\n";
      return kExitFailure;
    }
    materializer = *std::move(made);
    options.materializer_status = [m = materializer.get()] {
      return m->status();
    };
  } else {
    absl::StatusOr<std::unique_ptr<WindowStoreReader>> opened =
        OpenRocksDbWindowStoreReadOnly(store_path);
    if (!opened.ok()) {
      std::cerr << "bubblewatch serve: " << opened.status().message() << "\n";
      return kExitFailure;
    }
    read_only = *std::move(opened);
  }
  WindowStoreReader* store =
      own_store ? static_cast<WindowStoreReader*>(own_store.get())
                : read_only.get();
  std::unique_ptr<AlertmanagerClient> alertmanager;
  std::unique_ptr<FleetAlerter> alerter;
  if (rules) {
    if (!alertmanager_url.empty()) {
      AlertmanagerOptions am;
      am.url = alertmanager_url;
      am.resend_interval = alertmanager_resend;
      absl::StatusOr<std::unique_ptr<AlertmanagerClient>> client =
          AlertmanagerClient::Create(am);
      if (!client.ok()) {
        std::cerr << "bubblewatch serve: " << client.status().message() << "\n";
        return kExitUsage;
      }
      alertmanager = *std::move(client);
    }
    FleetAlerterOptions alerter_options;
    alerter_options.evaluator.dashboard_url = dashboard_url;
    std::string& link = alerter_options.evaluator.dashboard_url;
    while (!link.empty() && link.back() == '/') link.pop_back();
    alerter = std::make_unique<FleetAlerter>(*std::move(rules), alerter_options,
                                             store, alertmanager.get());
    if (alerter->fleet_rules() == 0) {
      spdlog::warn("{} has no fleet rule: serve evaluates nothing of it",
                   rules_path);
    }
    options.fleet_alerts = [a = alerter.get()] { return a->Active(); };
  }
  absl::StatusOr<std::unique_ptr<HttpServer>> server =
      HttpServer::Bind(options, store);
  if (!server.ok()) {
    std::cerr << "bubblewatch serve: " << server.status().message() << "\n";
    return kExitFailure;
  }
  std::thread waiter([&signals, s = server->get()] {
    int sig = 0;
    sigwait(&signals, &sig);
    s->Stop();
  });
  absl::Status materialized = absl::OkStatus();
  std::thread materializer_thread;
  if (materializer) {
    materializer_thread = std::thread([&, s = server->get()] {
      materialized = materializer->Run();
      // A failure stops the server too: answers from a store that no
      // longer follows the topic would go stale without a sign.
      if (!materialized.ok()) s->Stop();
    });
  }
  std::thread alerter_thread;
  if (alerter) alerter_thread = std::thread([&] { alerter->Run(); });
  // Tests and scripts wait for this line to learn the (maybe chosen) port.
  std::cerr << "bubblewatch serve: listening on " << (*server)->url()
            << " (store " << store_path
            << (materialize
                    ? absl::StrCat(", materializing ", fleet.windows_topic,
                                   " from ", fleet.brokers)
                    : std::string())
            << ")" << std::endl;
  absl::Status served = (*server)->Serve();
  // Wakes the waiter if the server stopped without a signal.
  pthread_kill(waiter.native_handle(), SIGTERM);
  waiter.join();
  if (materializer) {
    materializer->Stop();
    materializer_thread.join();
  }
  if (alerter) {
    alerter->Stop();
    alerter_thread.join();
  }
  // Its destructor makes one last attempt to deliver what is pending.
  alertmanager.reset();
  if (!served.ok()) {
    std::cerr << "bubblewatch serve: " << served.message() << "\n";
    return kExitFailure;
  }
  if (!materialized.ok()) {
    std::cerr << "bubblewatch serve: " << materialized.message() << "\n";
    return kExitFailure;
  }
  return kExitOk;
}

}  // namespace bubblewatch
