// `bubblewatch serve`: the HTTP API, /metrics and the dashboard over a
// store, opened read-only so that it runs beside the processor (or on a
// copied store).
#include <pthread.h>

#include <csignal>
#include <iostream>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/logging.h"
#include "cli/command_line.h"
#include "cli/commands.h"
#include "cli/exit_codes.h"
#include "serve/http_server.h"
#include "storage/window_store.h"

namespace bubblewatch {

int RunServeCommand(int argc, char** argv) {
  std::string store_path;
  std::string listen = "127.0.0.1:8080";
  std::string token_file;
  std::string log_level = "info";
  HttpServerOptions options;
  CommandLine cl(
      "bubblewatch serve --store DIR [--listen HOST:PORT] [--token-file F]",
      "Serves the window store over HTTP: the JSON API of `bubblewatch "
      "query` (/api/v1/jobs,\n/api/v1/jobs/JOB/windows, /api/v1/fleet), "
      "Prometheus metrics (/metrics), /healthz and\na dashboard (/). The "
      "store is opened read-only: it may be the one a running processor\n"
      "writes (new windows show up within --refresh) or a copy. Stops on "
      "SIGINT/SIGTERM.\n\nExit codes: 0 stopped by a signal, 1 store or "
      "listen failure, 2 usage error.");
  cl.AddString("store", &store_path, "DIR", "the RocksDB window store");
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
  std::string usage_error;
  if (!positional.empty()) usage_error = "unexpected argument " + positional[0];
  if (store_path.empty()) usage_error = "--store is required";
  if (options.metrics_top_jobs < 0)
    usage_error = "--metrics-top-jobs must be >= 0";
  if (absl::Status s = ParseListenAddress(listen, &options.host, &options.port);
      !s.ok()) {
    usage_error = absl::StrCat("--listen: ", s.message());
  }
  if (!usage_error.empty()) {
    std::cerr << "bubblewatch serve: " << usage_error
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

  // Signals are taken by one thread (sigwait) rather than a handler: stopping
  // the server is not async-signal-safe. Blocked before any thread starts, so
  // every thread inherits the mask.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);

  absl::StatusOr<std::unique_ptr<WindowStoreReader>> store =
      OpenRocksDbWindowStoreReadOnly(store_path);
  if (!store.ok()) {
    std::cerr << "bubblewatch serve: " << store.status().message() << "\n";
    return kExitFailure;
  }
  absl::StatusOr<std::unique_ptr<HttpServer>> server =
      HttpServer::Bind(options, store->get());
  if (!server.ok()) {
    std::cerr << "bubblewatch serve: " << server.status().message() << "\n";
    return kExitFailure;
  }
  std::thread waiter([&signals, s = server->get()] {
    int sig = 0;
    sigwait(&signals, &sig);
    s->Stop();
  });
  // Tests and scripts wait for this line to learn the (maybe chosen) port.
  std::cerr << "bubblewatch serve: listening on " << (*server)->url()
            << " (store " << store_path << ")" << std::endl;
  absl::Status served = (*server)->Serve();
  // Wakes the waiter if the server stopped without a signal.
  pthread_kill(waiter.native_handle(), SIGTERM);
  waiter.join();
  if (!served.ok()) {
    std::cerr << "bubblewatch serve: " << served.message() << "\n";
    return kExitFailure;
  }
  return kExitOk;
}

}  // namespace bubblewatch
