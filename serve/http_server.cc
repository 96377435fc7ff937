#include "serve/http_server.h"

#include <algorithm>
#include <atomic>
#include <fstream>
#include <map>
#include <optional>
#include <set>
#include <sstream>
#include <thread>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"
#include "absl/synchronization/mutex.h"
#include "base/json_writer.h"
#include "base/logging.h"
#include "base/text_escape.h"
#include "httplib.h"
#include "serve/dashboard_assets.h"
#include "serve/device_report.h"
#include "serve/http_connections.h"
#include "serve/query_params.h"
#include "serve/query_report.h"
#include "storage/window_queries.h"

namespace bubblewatch {
namespace {

constexpr size_t kMaxBodyBytes = 4096;  // The API takes no bodies at all.
constexpr absl::string_view kJson = "application/json";

int HttpStatusFor(const absl::Status& s) {
  switch (s.code()) {
    case absl::StatusCode::kNotFound:
      return 404;
    case absl::StatusCode::kInvalidArgument:
      return 400;
    case absl::StatusCode::kUnauthenticated:
      return 401;
    case absl::StatusCode::kUnavailable:
    case absl::StatusCode::kResourceExhausted:
      return 503;
    default:
      return 500;
  }
}

void ReplyError(httplib::Response& res, const absl::Status& status) {
  res.status = HttpStatusFor(status);
  res.set_content(RenderErrorJson(status), std::string(kJson));
  if (res.status >= 500) {
    spdlog::warn("HTTP {}: {}", res.status, status.ToString());
  }
}

// The request's parameters, each at most once and each one of `allowed`;
// otherwise a 400 reason.
absl::StatusOr<std::map<std::string, std::string>> Params(
    const httplib::Request& req, std::set<std::string> allowed) {
  std::map<std::string, std::string> out;
  for (const auto& [key, value] : req.params) {
    if (allowed.count(key) == 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "unknown parameter '", key, "'",
          allowed.empty()
              ? ": this endpoint takes none"
              : absl::StrCat(": want ", absl::StrJoin(allowed, ", "))));
    }
    if (!out.emplace(key, value).second) {
      return absl::InvalidArgumentError(
          absl::StrCat("parameter '", key, "' given twice"));
    }
  }
  return out;
}

std::string Get(const std::map<std::string, std::string>& params,
                const std::string& key) {
  auto it = params.find(key);
  return it == params.end() ? "" : it->second;
}

// The error behind a status httplib set by itself.
absl::Status HttplibError(const httplib::Request& req, int status) {
  switch (status) {
    case 404:
      return absl::NotFoundError(
          absl::StrCat("no such path: ", EscapeForLog(req.path)));
    case 405:
      return absl::InvalidArgumentError("method not allowed: use GET");
    case 413:
      return absl::InvalidArgumentError(
          absl::StrCat("request body larger than ", kMaxBodyBytes, " bytes"));
    case 414:
      return absl::InvalidArgumentError("request URI too long");
    default:
      return absl::Status(status < 500 ? absl::StatusCode::kInvalidArgument
                                       : absl::StatusCode::kInternal,
                          absl::StrCat("HTTP error ", status));
  }
}

absl::StatusOr<bool> Pretty(const std::map<std::string, std::string>& p) {
  const std::string v = Get(p, "pretty");
  if (v.empty() || v == "0" || v == "false") return false;
  if (v == "1" || v == "true") return true;
  return absl::InvalidArgumentError("bad pretty: want 0 or 1");
}

ConnectionLimits LimitsFor(const HttpServerOptions& options) {
  ConnectionLimits limits;
  limits.request_timeout = options.request_timeout;
  limits.keep_alive_timeout = options.keep_alive_timeout;
  limits.max_connections = std::max(1, options.max_connections);
  limits.max_body_bytes = kMaxBodyBytes;
  // Workers only run handlers (requests arrive whole): CPU work and store
  // reads of milliseconds. More than the cores lets a read that waits on the
  // disk not hold the others up (docs/http.md).
  limits.workers =
      static_cast<int>(std::max(8u, 2 * std::thread::hardware_concurrency()));
  return limits;
}

}  // namespace

class HttpServer::Impl {
 public:
  Impl(const HttpServerOptions& options, WindowStoreReader* store)
      : options_(options), store_(store), server_(LimitsFor(options)) {}

  absl::Status Bind() {
    Routes();
    if (options_.port < 0 || options_.port > 65535) {
      return absl::InvalidArgumentError(
          absl::StrCat("bad port ", options_.port));
    }
    absl::StatusOr<int> port = server_.Bind(options_.host, options_.port);
    if (!port.ok()) return port.status();
    port_ = *port;
    return absl::OkStatus();
  }

  int port() const { return port_; }
  std::string url() const {
    const bool v6 = absl::StrContains(options_.host, ':');
    return absl::StrCat("http://", v6 ? "[" : "", options_.host, v6 ? "]" : "",
                        ":", port_);
  }

  absl::Status Serve() {
    if (stopped_.load()) return absl::OkStatus();
    if (!server_.Listen() && !stopped_.load()) {
      return absl::UnavailableError("the HTTP server stopped unexpectedly");
    }
    return absl::OkStatus();
  }

  void Stop() {
    stopped_.store(true);
    server_.stop();
  }

 private:
  void Routes() {
    server_.set_pre_routing_handler([this](const httplib::Request& req,
                                           httplib::Response& res) {
      return Authorize(req, res) ? httplib::Server::HandlerResponse::Unhandled
                                 : httplib::Server::HandlerResponse::Handled;
    });
    // Errors httplib raises itself (no route, 413, 414, 400) get a JSON body
    // too; our own errors already have one.
    httplib::Server::HandlerWithResponse on_error =
        [](const httplib::Request& req, httplib::Response& res) {
          if (!res.body.empty()) {
            return httplib::Server::HandlerResponse::Unhandled;
          }
          res.set_content(RenderErrorJson(HttplibError(req, res.status)),
                          std::string(kJson));
          return httplib::Server::HandlerResponse::Handled;
        };
    server_.set_error_handler(std::move(on_error));
    server_.Get("/healthz",
                [this](const httplib::Request&, httplib::Response& res) {
                  res.set_content(HealthJson(), std::string(kJson));
                });
    server_.Get("/api/v1/jobs",
                [this](const httplib::Request& req, httplib::Response& res) {
                  Jobs(req, res);
                });
    server_.Get(R"(/api/v1/jobs/(.+)/windows)",
                [this](const httplib::Request& req, httplib::Response& res) {
                  JobWindows(req, res);
                });
    server_.Get(R"(/api/v1/jobs/(.+)/timeline)",
                [this](const httplib::Request& req, httplib::Response& res) {
                  JobTimeline(req, res);
                });
    server_.Get(R"(/api/v1/jobs/(.+)/devices)",
                [this](const httplib::Request& req, httplib::Response& res) {
                  JobDevices(req, res);
                });
    server_.Get("/api/v1/alerts",
                [this](const httplib::Request& req, httplib::Response& res) {
                  Alerts(req, res);
                });
    server_.Get("/api/v1/fleet",
                [this](const httplib::Request& req, httplib::Response& res) {
                  Fleet(req, res);
                });
    server_.Get("/metrics",
                [this](const httplib::Request& req, httplib::Response& res) {
                  Metrics(req, res);
                });
    server_.Get(R"(/(.*))", [](const httplib::Request& req,
                               httplib::Response& res) { Static(req, res); });
  }

  std::string HealthJson() const {
    if (!options_.materializer_status) return R"({"status":"ok"})";
    const MaterializerStatus m = options_.materializer_status();
    JsonWriter w;
    w.BeginObject();
    w.Key("status").String("ok");
    w.Key("topic").String(m.topic);
    w.Key("partitions").Int(m.partitions);
    w.Key("lag_messages");
    if (m.lag_messages) {
      w.Int(*m.lag_messages);
    } else {
      w.Null();
    }
    if (!m.state_topic.empty()) {
      w.Key("state_topic").String(m.state_topic);
      w.Key("state_partitions").Int(m.state_partitions);
      w.Key("state_lag_messages");
      if (m.state_lag_messages) {
        w.Int(*m.state_lag_messages);
      } else {
        w.Null();
      }
    }
    w.EndObject();
    return std::move(w).Take();
  }

  // Checks the bearer token for the API and the metrics; replies 401 and
  // returns false when it is missing or wrong.
  bool Authorize(const httplib::Request& req, httplib::Response& res) {
    if (options_.bearer_token.empty()) return true;
    if (!absl::StartsWith(req.path, "/api/") && req.path != "/metrics") {
      return true;
    }
    const std::string header = req.get_header_value("Authorization");
    // RFC 7235 2.1: the scheme is case-insensitive ("bearer" too), then one
    // or more spaces, then the token, compared exactly.
    absl::string_view given = header;
    if (absl::StartsWithIgnoreCase(given, "Bearer ") &&
        ConstantTimeEquals(absl::StripLeadingAsciiWhitespace(given.substr(7)),
                           options_.bearer_token)) {
      return true;
    }
    res.set_header("WWW-Authenticate", R"(Bearer realm="bubblewatch")");
    ReplyError(res, absl::UnauthenticatedError(
                        "missing or wrong bearer token (Authorization: "
                        "Bearer TOKEN)"));
    return false;
  }

  // Lets a read-only store see the processor's latest commits, at most once
  // per refresh_interval whatever the request rate.
  absl::Status MaybeRefresh() {
    absl::MutexLock lock(&refresh_mu_);
    const absl::Time now = absl::Now();
    if (now - last_refresh_ < options_.refresh_interval)
      return absl::OkStatus();
    last_refresh_ = now;
    return store_->Refresh();
  }

  void Jobs(const httplib::Request& req, httplib::Response& res) {
    auto params = Params(req, {"pretty"});
    if (!params.ok()) return ReplyError(res, params.status());
    absl::StatusOr<bool> pretty = Pretty(*params);
    if (!pretty.ok()) return ReplyError(res, pretty.status());
    if (absl::Status s = MaybeRefresh(); !s.ok()) return ReplyError(res, s);
    absl::StatusOr<std::vector<JobInfo>> jobs = store_->ListJobs();
    if (!jobs.ok()) return ReplyError(res, jobs.status());
    Reply(res, RenderJobsJson(*jobs, *pretty, absl::Now()));
  }

  void JobWindows(const httplib::Request& req, httplib::Response& res) {
    auto params = Params(req, {"last", "from", "to", "bubbles", "pretty"});
    if (!params.ok()) return ReplyError(res, params.status());
    absl::StatusOr<JobPeriod> period = ParseJobPeriod(
        Get(*params, "last"), Get(*params, "from"), Get(*params, "to"));
    if (!period.ok()) return ReplyError(res, period.status());
    absl::StatusOr<int> bubbles = ParseCount(
        "bubbles", Get(*params, "bubbles"), kDefaultTopBubbles, kMaxTopBubbles);
    if (!bubbles.ok()) return ReplyError(res, bubbles.status());
    absl::StatusOr<bool> pretty = Pretty(*params);
    if (!pretty.ok()) return ReplyError(res, pretty.status());
    if (absl::Status s = MaybeRefresh(); !s.ok()) return ReplyError(res, s);
    absl::StatusOr<JobReport> report =
        QueryJob(*store_, req.matches[1].str(), *period, *bubbles);
    if (!report.ok()) return ReplyError(res, report.status());
    Reply(res, RenderJobReportJson(*report, *pretty));
  }

  // One window's ranks and their timelines (docs/query.md#window-timeline):
  // ?start_ns= the window's start, as the report gives it.
  void JobTimeline(const httplib::Request& req, httplib::Response& res) {
    auto params = Params(req, {"start_ns", "pretty"});
    if (!params.ok()) return ReplyError(res, params.status());
    int64_t start_ns = 0;
    const std::string start = Get(*params, "start_ns");
    if (!absl::SimpleAtoi(start, &start_ns)) {
      return ReplyError(res, absl::InvalidArgumentError(absl::StrCat(
                                 "start_ns: want a window's start in ns, got '",
                                 start, "'")));
    }
    absl::StatusOr<bool> pretty = Pretty(*params);
    if (!pretty.ok()) return ReplyError(res, pretty.status());
    if (absl::Status s = MaybeRefresh(); !s.ok()) return ReplyError(res, s);
    const std::string job = req.matches[1].str();
    const absl::Time at = absl::FromUnixNanos(start_ns);
    absl::StatusOr<std::vector<WindowSummary>> windows =
        store_->Scan(job, at, at + absl::Nanoseconds(1));
    if (!windows.ok()) return ReplyError(res, windows.status());
    if (windows->empty()) {
      return ReplyError(res, absl::NotFoundError(absl::StrCat(
                                 "job ", job, " has no window starting at ",
                                 start_ns, " ns")));
    }
    Reply(res, RenderWindowTimelineJson(windows->front(), *pretty));
  }

  void JobDevices(const httplib::Request& req, httplib::Response& res) {
    auto params = Params(req, {"last", "from", "to", "pretty"});
    if (!params.ok()) return ReplyError(res, params.status());
    absl::StatusOr<JobPeriod> period = ParseJobPeriod(
        Get(*params, "last"), Get(*params, "from"), Get(*params, "to"));
    if (!period.ok()) return ReplyError(res, period.status());
    absl::StatusOr<bool> pretty = Pretty(*params);
    if (!pretty.ok()) return ReplyError(res, pretty.status());
    if (absl::Status s = MaybeRefresh(); !s.ok()) return ReplyError(res, s);
    absl::StatusOr<JobDeviceReport> report =
        QueryJobDevices(*store_, req.matches[1].str(), *period);
    if (!report.ok()) return ReplyError(res, report.status());
    Reply(res, RenderJobDevicesJson(*report, *pretty));
  }

  void Alerts(const httplib::Request& req, httplib::Response& res) {
    auto params = Params(req, {"pretty"});
    if (!params.ok()) return ReplyError(res, params.status());
    absl::StatusOr<bool> pretty = Pretty(*params);
    if (!pretty.ok()) return ReplyError(res, pretty.status());
    if (absl::Status s = MaybeRefresh(); !s.ok()) return ReplyError(res, s);
    auto states = store_->AlertStates();
    if (!states.ok()) return ReplyError(res, states.status());
    StoredAlerts alerts = ReadStoredAlerts(*states);
    if (options_.fleet_alerts) {
      for (AlertEvent& e : options_.fleet_alerts()) {
        alerts.firing.push_back(std::move(e));
      }
    }
    Reply(res, RenderAlertsJson(alerts, *pretty));
  }

  void Fleet(const httplib::Request& req, httplib::Response& res) {
    auto params = Params(req, {"top", "by", "last", "from", "to", "pretty"});
    if (!params.ok()) return ReplyError(res, params.status());
    absl::StatusOr<JobPeriod> period = ParseJobPeriod(
        Get(*params, "last"), Get(*params, "from"), Get(*params, "to"));
    if (!period.ok()) return ReplyError(res, period.status());
    absl::StatusOr<int> top =
        ParseCount("top", Get(*params, "top"), kDefaultFleetTop, kMaxFleetTop);
    if (!top.ok()) return ReplyError(res, top.status());
    const std::string by_text = Get(*params, "by");
    absl::StatusOr<FleetOrder> by =
        ParseFleetOrder(by_text.empty() ? "bubble_time" : by_text);
    if (!by.ok()) return ReplyError(res, by.status());
    absl::StatusOr<bool> pretty = Pretty(*params);
    if (!pretty.ok()) return ReplyError(res, pretty.status());
    if (absl::Status s = MaybeRefresh(); !s.ok()) return ReplyError(res, s);
    absl::StatusOr<FleetReport> fleet = QueryFleet(*store_, *period, *by, *top);
    if (!fleet.ok()) return ReplyError(res, fleet.status());
    Reply(res, RenderFleetJson(*fleet, *pretty));
  }

  void Metrics(const httplib::Request& req, httplib::Response& res) {
    auto params = Params(req, {});
    if (!params.ok()) return ReplyError(res, params.status());
    if (absl::Status s = MaybeRefresh(); !s.ok()) return ReplyError(res, s);
    std::optional<ProcessorStats> stats;
    if (options_.processor_stats) stats = options_.processor_stats();
    std::optional<MaterializerStatus> materializer;
    if (options_.materializer_status) {
      materializer = options_.materializer_status();
    }
    absl::StatusOr<std::string> page = RenderPrometheusMetrics(
        *store_, options_.metrics_top_jobs, stats ? &*stats : nullptr,
        materializer ? &*materializer : nullptr);
    if (!page.ok()) return ReplyError(res, page.status());
    res.set_header("Cache-Control", "no-store");
    res.set_content(std::move(page).value(),
                    std::string(kPrometheusContentType));
  }

  static void Static(const httplib::Request& req, httplib::Response& res) {
    std::string name = req.matches[1].str();
    if (name.empty()) name = "index.html";
    const DashboardAsset* asset =
        absl::StartsWith(name, "api/") ? nullptr : FindDashboardAsset(name);
    if (asset == nullptr) {
      return ReplyError(res, absl::NotFoundError(absl::StrCat(
                                 "no such path: ", EscapeForLog(req.path))));
    }
    res.set_header("X-Content-Type-Options", "nosniff");
    res.set_header("Content-Security-Policy",
                   "default-src 'self'; style-src 'self' 'unsafe-inline'; "
                   "img-src 'self' data:; frame-ancestors 'none'");
    res.set_header("Cache-Control", "no-cache");
    res.set_content(std::string(asset->data), std::string(asset->content_type));
  }

  static void Reply(httplib::Response& res, std::string json) {
    res.set_header("Cache-Control", "no-store");
    // RFC 9110 6.6.1: the server's clock, which the dashboard measures "last
    // seen" against (the browser's own clock may be off).
    res.set_header("Date", absl::FormatTime("%a, %d %b %Y %H:%M:%S GMT",
                                            absl::Now(), absl::UTCTimeZone()));
    res.set_content(std::move(json), std::string(kJson));
  }

  const HttpServerOptions options_;
  WindowStoreReader* const store_;
  PollingServer server_;
  int port_ = -1;
  std::atomic<bool> stopped_{false};
  absl::Mutex refresh_mu_;
  absl::Time last_refresh_ ABSL_GUARDED_BY(refresh_mu_) = absl::InfinitePast();
};

absl::StatusOr<std::unique_ptr<HttpServer>> HttpServer::Bind(
    const HttpServerOptions& options, WindowStoreReader* store) {
  auto impl = std::make_unique<Impl>(options, store);
  if (absl::Status s = impl->Bind(); !s.ok()) return s;
  return std::unique_ptr<HttpServer>(new HttpServer(std::move(impl)));
}

HttpServer::HttpServer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
HttpServer::~HttpServer() { impl_->Stop(); }
int HttpServer::port() const { return impl_->port(); }
std::string HttpServer::url() const { return impl_->url(); }
absl::Status HttpServer::Serve() { return impl_->Serve(); }
void HttpServer::Stop() { impl_->Stop(); }

absl::Status ParseListenAddress(absl::string_view text, std::string* host,
                                int* port) {
  const size_t colon = text.rfind(':');
  if (colon == absl::string_view::npos) {
    return absl::InvalidArgumentError(
        absl::StrCat("bad address \"", text, "\": want HOST:PORT"));
  }
  absl::string_view h = text.substr(0, colon);
  if (absl::ConsumePrefix(&h, "[") && !absl::ConsumeSuffix(&h, "]")) {
    return absl::InvalidArgumentError(
        absl::StrCat("bad address \"", text, "\": unbalanced ["));
  }
  int p = 0;
  if (!absl::SimpleAtoi(text.substr(colon + 1), &p) || p < 0 || p > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat("bad port in \"", text, "\": want 0..65535"));
  }
  *host = h.empty() ? "127.0.0.1" : std::string(h);
  *port = p;
  return absl::OkStatus();
}

bool ConstantTimeEquals(absl::string_view given, absl::string_view expected) {
  // Loops over `given` only, so the time reveals nothing about `expected`;
  // every byte is compared whether or not an earlier one differed.
  unsigned char diff = given.size() == expected.size() ? 0 : 1;
  if (expected.empty()) return false;
  for (size_t i = 0; i < given.size(); ++i) {
    diff |= static_cast<unsigned char>(given[i]) ^
            static_cast<unsigned char>(expected[i % expected.size()]);
  }
  return diff == 0;
}

absl::StatusOr<std::string> ReadTokenFile(absl::string_view path) {
  std::ifstream in{std::string(path)};
  if (!in) {
    return absl::FailedPreconditionError(
        absl::StrCat("cannot read token file ", path));
  }
  std::stringstream ss;
  ss << in.rdbuf();
  std::string token(absl::StripAsciiWhitespace(ss.str()));
  if (token.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("token file ", path, " is empty"));
  }
  return token;
}

}  // namespace bubblewatch
