// HttpServer: the HTTP face of the window store, for `bubblewatch serve` and
// `bubblewatch process --http`. Built on Debian's cpp-httplib with its own
// connection handling (serve/http_connections.h): one poll thread holds the
// connections that wait, worker threads answer whole requests concurrently
// (the store's reads are thread-safe). Keep-alive and pipelining are
// supported; docs/http.md has the limits and what they cost.
//
// Endpoints (docs/query.md, "`bubblewatch serve` and `process --http`"):
//   GET /api/v1/jobs                          the job list
//   GET /api/v1/jobs/{job}/windows?last=1h    a job report (or from=&to=;
//        bubbles=N, pretty=1)
//   GET /api/v1/jobs/{job}/devices?last=1h    the same windows per device
//        (serve/device_report.h; from=&to=, pretty=1)
//   GET /api/v1/fleet?last=1h&top=20&by=bubble_time  the fleet ranking over
//        a period (or from=&to=; pretty=1)
//   GET /api/v1/alerts                        the committed alert state
//   GET /metrics                              Prometheus text format 0.0.4
//   GET /healthz                              {"status":"ok"}; under
//        `serve --brokers` also the windows topic, its partitions and the
//        lag ({"status":"ok","topic":T,"partitions":N,"lag_messages":L},
//        L null until known)
//   GET /, /app.js, ...                       the dashboard (built in)
// The JSON bodies are the ones of `bubblewatch query --json`
// (serve/query_report.h). Errors are JSON {"error", "code"}: 400 for a
// malformed or unknown parameter (with the reason), 401 without the bearer
// token, 404 for an unknown job or path, 500/503 for store failures.
//
// Safety: binds 127.0.0.1 unless told otherwise, and never shares the port
// with another listener; with a token, /api/ and /metrics require
// "Authorization: Bearer TOKEN" (scheme in any case, token compared in
// constant time; the dashboard's static files and /healthz do not, the page
// asks for the token); request bodies are refused beyond 4 KiB, URIs beyond
// httplib's 8 KiB, request heads beyond 32 KiB, periods beyond
// kMaxQueryRange; a request must arrive whole within request_timeout; static
// files come from a fixed in-memory table, never the file system.
#ifndef BUBBLEWATCH_SERVE_HTTP_SERVER_H_
#define BUBBLEWATCH_SERVE_HTTP_SERVER_H_

#include <functional>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "alerts/alert_event.h"
#include "processor/processor_stats.h"
#include "serve/materializer_status.h"
#include "serve/prometheus_metrics.h"
#include "storage/window_store.h"

namespace bubblewatch {

struct HttpServerOptions {
  // Address to bind. Default: loopback only.
  std::string host = "127.0.0.1";
  // 0 picks a free port (see HttpServer::port()).
  int port = 8080;
  // If not empty, /api/ and /metrics require this bearer token.
  std::string bearer_token;
  // Jobs with their own series on /metrics (prometheus_metrics.h).
  int metrics_top_jobs = kDefaultMetricsTopJobs;
  // A read-only store catches up with the processor's commits at most this
  // often (on the next request after it elapsed).
  absl::Duration refresh_interval = absl::Seconds(1);
  // Inside the processor: its counters, added to /metrics. Called from
  // request threads; must be thread-safe.
  std::function<ProcessorStats()> processor_stats;
  // Under `serve --brokers`: the materializer's lag, shown on /healthz and
  // /metrics (bubblewatch_serve_*). Called from request threads; must be
  // thread-safe.
  std::function<MaterializerStatus()> materializer_status;
  // Under `serve --brokers --rules`: the fleet alerts firing now, added to
  // /api/v1/alerts' "firing". Called from request threads; thread-safe.
  std::function<std::vector<AlertEvent>()> fleet_alerts;

  // Connection limits (docs/http.md). A request's head and body must arrive
  // within request_timeout of its first byte: a client that trickles one
  // (slow loris) is disconnected instead of holding the connection forever.
  absl::Duration request_timeout = absl::Seconds(10);
  // A connection waiting for its next request is closed after this.
  absl::Duration keep_alive_timeout = absl::Seconds(5);
  // Open connections at most; a new one beyond closes the connection that
  // has waited longest for a request, so that waiting clients cannot keep a
  // fresh one out.
  int max_connections = 512;
};

class HttpServer {
 public:
  // Binds the listening socket. `store` must outlive the server; it is
  // refreshed (WindowStoreReader::Refresh) as options.refresh_interval says.
  // Errors: kInvalidArgument for a bad port; kUnavailable if the address
  // cannot be bound (another socket listens there, not local).
  static absl::StatusOr<std::unique_ptr<HttpServer>> Bind(
      const HttpServerOptions& options, WindowStoreReader* store);
  ~HttpServer();

  // The bound port (the chosen one when options.port was 0).
  int port() const;
  // "http://HOST:PORT".
  std::string url() const;

  // Answers requests until Stop() is called (from another thread). Returns
  // kUnavailable if the server fails while listening.
  absl::Status Serve();
  // Makes Serve() return; safe from any thread, idempotent.
  void Stop();

 private:
  class Impl;
  explicit HttpServer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// Parses "HOST:PORT" ("127.0.0.1:8080", "0.0.0.0:9100", "[::1]:8080") or a
// bare ":PORT" (loopback). Errors: kInvalidArgument with the reason.
absl::Status ParseListenAddress(absl::string_view text, std::string* host,
                                int* port);

// True when `given` equals `expected`, in time that depends only on the
// length of `given` (never on where they differ, nor on `expected`).
bool ConstantTimeEquals(absl::string_view given, absl::string_view expected);

// Reads a bearer token from `path`: the file's content without surrounding
// whitespace. Errors: kNotFound/kPermissionDenied-style kFailedPrecondition
// for an unreadable file, kInvalidArgument for an empty token.
absl::StatusOr<std::string> ReadTokenFile(absl::string_view path);

}  // namespace bubblewatch

#endif  // BUBBLEWATCH_SERVE_HTTP_SERVER_H_
