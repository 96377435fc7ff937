// The HTTP API in process (HttpServer on a free loopback port, cpp-httplib's
// client): status codes 200/400/401/404/413, JSON shapes, the bearer token,
// static files without path traversal, and /metrics as Prometheus's own
// `promtool check metrics` sees it. Raw sockets for what that client cannot
// do: slow and idle clients, pipelining, the server side's socket options.
#include "serve/http_server.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "base/text_escape.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "httplib.h"
#include "simdjson.h"
#include "tests/serve/dashboard_test_fleet.h"
#include "tests/storage/query_test_windows.h"
#include "tests/testing/temp_dir.h"

namespace bubblewatch {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

// A server over a store that `write_store` fills (the test fleet by
// default), serving on its own thread.
class Served {
 public:
  using StoreWriter = absl::Status (*)(const std::string& path);
  explicit Served(HttpServerOptions options = {},
                  StoreWriter write_store = query_test::WriteFleetStore) {
    EXPECT_TRUE(write_store(dir_.Sub("store")).ok());
    auto store = OpenRocksDbWindowStoreReadOnly(dir_.Sub("store"));
    EXPECT_TRUE(store.ok()) << store.status();
    store_ = *std::move(store);
    options.port = 0;
    auto server = HttpServer::Bind(options, store_.get());
    EXPECT_TRUE(server.ok()) << server.status();
    server_ = *std::move(server);
    thread_ = std::thread([this] { EXPECT_TRUE(server_->Serve().ok()); });
    client_ = std::make_unique<httplib::Client>(server_->url());
  }
  ~Served() {
    server_->Stop();
    thread_.join();
  }

  httplib::Result Get(const std::string& path,
                      const httplib::Headers& headers = {}) {
    return client_->Get(path.c_str(), headers);
  }
  httplib::Client& client() { return *client_; }
  int port() const { return server_->port(); }
  std::string url() const { return server_->url(); }
  WindowStoreReader* store() { return store_.get(); }

 private:
  testing::TempDir dir_;
  std::unique_ptr<WindowStoreReader> store_;
  std::unique_ptr<HttpServer> server_;
  std::thread thread_;
  std::unique_ptr<httplib::Client> client_;
};

// One TCP connection to 127.0.0.1:port driven by hand: requests are sent as
// written (several at once, or a piece at a time) and responses read back one
// by one, which cpp-httplib's client cannot do.
class RawConnection {
 public:
  struct Response {
    int status = 0;
    std::string body;
  };

  explicit RawConnection(int port) : fd_(socket(AF_INET, SOCK_STREAM, 0)) {
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(static_cast<uint16_t>(port));
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    connected_ =
        connect(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0;
    // No read waits forever, whatever the server does.
    timeval tv{.tv_sec = 5, .tv_usec = 0};
    setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  }
  ~RawConnection() { close(fd_); }
  RawConnection(const RawConnection&) = delete;
  RawConnection& operator=(const RawConnection&) = delete;

  bool connected() const { return connected_; }
  int fd() const { return fd_; }

  bool Send(absl::string_view data) {
    return send(fd_, data.data(), data.size(), MSG_NOSIGNAL) ==
           static_cast<ssize_t>(data.size());
  }

  // The next response (status line, headers, a Content-Length body), or none
  // if the connection ends or stays silent for 5 s first.
  std::optional<Response> Read() {
    for (;;) {
      const size_t head_end = buffer_.find("\r\n\r\n");
      if (head_end != std::string::npos) {
        Response r;
        size_t length = 0;
        std::vector<absl::string_view> lines = absl::StrSplit(
            absl::string_view(buffer_).substr(0, head_end), "\r\n");
        std::vector<absl::string_view> status_line =
            absl::StrSplit(lines[0], ' ');
        if (status_line.size() < 2 ||
            !absl::SimpleAtoi(status_line[1], &r.status)) {
          return std::nullopt;
        }
        for (absl::string_view line : lines) {
          if (absl::StartsWithIgnoreCase(line, "content-length:") &&
              !absl::SimpleAtoi(absl::StripAsciiWhitespace(line.substr(15)),
                                &length)) {
            return std::nullopt;
          }
        }
        if (buffer_.size() >= head_end + 4 + length) {
          r.body = buffer_.substr(head_end + 4, length);
          buffer_.erase(0, head_end + 4 + length);
          return r;
        }
      }
      char chunk[4096];
      const ssize_t n = recv(fd_, chunk, sizeof(chunk), 0);
      if (n <= 0) return std::nullopt;
      buffer_.append(chunk, static_cast<size_t>(n));
    }
  }

  // True once the server has closed the connection (end of stream or reset);
  // waits at most `wait` for it.
  bool ClosedByServer(absl::Duration wait) {
    pollfd p{.fd = fd_, .events = POLLIN, .revents = 0};
    if (poll(&p, 1, static_cast<int>(absl::ToInt64Milliseconds(wait))) <= 0) {
      return false;
    }
    char byte;
    const ssize_t n = recv(fd_, &byte, 1, MSG_PEEK | MSG_DONTWAIT);
    return n == 0 || (n < 0 && errno == ECONNRESET);
  }

 private:
  int fd_;
  bool connected_ = false;
  std::string buffer_;
};

// The server's end of a loopback connection: the descriptor of this process
// whose peer address is `client_fd`'s own.
int ServerSideOf(int client_fd) {
  sockaddr_in client{};
  socklen_t len = sizeof(client);
  if (getsockname(client_fd, reinterpret_cast<sockaddr*>(&client), &len) != 0) {
    return -1;
  }
  for (const auto& entry :
       std::filesystem::directory_iterator("/proc/self/fd")) {
    const int fd = std::atoi(entry.path().filename().c_str());
    sockaddr_in peer{};
    len = sizeof(peer);
    if (fd != client_fd &&
        getpeername(fd, reinterpret_cast<sockaddr*>(&peer), &len) == 0 &&
        peer.sin_family == AF_INET && peer.sin_port == client.sin_port &&
        peer.sin_addr.s_addr == client.sin_addr.s_addr) {
      return fd;
    }
  }
  return -1;
}

std::string ErrorOf(const std::string& body) {
  simdjson::dom::parser parser;
  return std::string(std::string_view(parser.parse(body)["error"]));
}

TEST(HttpServer, HealthzIsOk) {
  Served s;
  auto r = s.Get("/healthz");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  EXPECT_EQ(r->body, R"({"status":"ok"})");
}

TEST(HttpServer, HealthzAndMetricsCarryTheMaterializersLag) {
  // `serve --brokers`: the lag as the materializer reports it, null (and no
  // sample) until it is known.
  MaterializerStatus status{.topic = "fleet.windows", .partitions = 12};
  absl::Mutex mu;
  HttpServerOptions options;
  options.materializer_status = [&] {
    absl::MutexLock lock(&mu);
    return status;
  };
  Served s(options);
  auto unknown = s.Get("/healthz");
  ASSERT_TRUE(unknown);
  EXPECT_EQ(unknown->status, 200);
  EXPECT_EQ(unknown->body,
            R"({"status":"ok","topic":"fleet.windows","partitions":12,)"
            R"("lag_messages":null})");
  auto page = s.Get("/metrics");
  ASSERT_TRUE(page);
  EXPECT_THAT(page->body, Not(HasSubstr("\nbubblewatch_serve_lag_messages{")));
  EXPECT_THAT(
      page->body,
      HasSubstr("\nbubblewatch_serve_partitions{topic=\"fleet.windows\"} "
                "12\n"));
  {
    absl::MutexLock lock(&mu);
    status.lag_messages = 345;
    status.windows_applied = 7;
  }
  EXPECT_EQ(s.Get("/healthz")->body,
            R"({"status":"ok","topic":"fleet.windows","partitions":12,)"
            R"("lag_messages":345})");
  page = s.Get("/metrics");
  EXPECT_THAT(
      page->body,
      HasSubstr("\nbubblewatch_serve_lag_messages{topic=\"fleet.windows\"} "
                "345\n"));
  EXPECT_THAT(page->body, HasSubstr("\nbubblewatch_serve_windows_applied_total{"
                                    "topic=\"fleet.windows\"} 7\n"));
  // Without a materializer (serve --store, process --http): as before.
  Served plain;
  EXPECT_EQ(plain.Get("/healthz")->body, R"({"status":"ok"})");
  EXPECT_THAT(plain.Get("/metrics")->body,
              Not(HasSubstr("bubblewatch_serve_")));
}

TEST(HttpServer, JobsListsTheStore) {
  Served s;
  auto r = s.Get("/api/v1/jobs");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  EXPECT_EQ(r->get_header_value("Content-Type"), "application/json");
  simdjson::dom::parser parser;
  simdjson::dom::array jobs = parser.parse(r->body)["jobs"];
  EXPECT_EQ(jobs.size(), 4u);
  for (simdjson::dom::element j : jobs) {
    for (const char* key : {"job", "window_count", "last_event_ns",
                            "latest_window_start_ns", "last_seen"}) {
      EXPECT_TRUE(j[key].error() == simdjson::SUCCESS) << key;
    }
  }
}

TEST(HttpServer, JobsFleetAndMetricsShowTheLifecycle) {
  HttpServerOptions options;
  options.metrics_top_jobs = 100;
  Served s(options, query_test::WriteFleetStoreWithGammaEnded);
  simdjson::dom::parser parser;
  auto jobs = s.Get("/api/v1/jobs");
  ASSERT_TRUE(jobs);
  std::map<std::string, std::string> state;
  std::map<std::string, int64_t> overlapping, backwards;
  for (simdjson::dom::element j : parser.parse(jobs->body)["jobs"]) {
    const std::string job{std::string_view(j["job"])};
    state[job] = std::string(std::string_view(j["state"]));
    overlapping[job] = int64_t(j["overlapping_observations"]);
    backwards[job] = int64_t(j["observations_backwards"]);
  }
  EXPECT_EQ(state["gamma"], "ended");
  EXPECT_EQ(state["alpha"], "active");
  // Its bad input (docs/semantics.md#observations), per job.
  EXPECT_EQ(overlapping["gamma"], 2);
  EXPECT_EQ(backwards["gamma"], 1);
  EXPECT_EQ(overlapping["alpha"], 0);
  EXPECT_EQ(backwards["alpha"], 0);
  auto fleet = s.Get("/api/v1/fleet?top=10");
  ASSERT_TRUE(fleet);
  std::map<std::string, std::string> fleet_state;
  for (simdjson::dom::element e : parser.parse(fleet->body)["top"]) {
    fleet_state[std::string(std::string_view(e["job"]))] =
        std::string(std::string_view(e["state"]));
  }
  EXPECT_EQ(fleet_state["gamma"], "ended");
  EXPECT_EQ(fleet_state["alpha"], "active");
  auto metrics = s.Get("/metrics");
  ASSERT_TRUE(metrics);
  EXPECT_THAT(
      metrics->body,
      HasSubstr(R"(bubblewatch_job_state{job="gamma",state="ended"} 1)"));
  EXPECT_THAT(
      metrics->body,
      HasSubstr(R"(bubblewatch_job_state{job="alpha",state="active"} 1)"));
  EXPECT_THAT(metrics->body,
              HasSubstr(R"(bubblewatch_jobs_by_state{state="ended"} 1)"));
  EXPECT_THAT(metrics->body,
              HasSubstr(R"(bubblewatch_jobs_by_state{state="active"} 3)"));
}

TEST(HttpServer, JobWindowsReportsTheLastHour) {
  Served s;
  auto r = s.Get("/api/v1/jobs/alpha/windows?last=1h&bubbles=3");
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  simdjson::dom::parser parser;
  simdjson::dom::element doc = parser.parse(r->body);
  EXPECT_EQ(simdjson::dom::array(doc["windows"]).size(), 360u);
  EXPECT_EQ(simdjson::dom::array(doc["rolling"]).size(), 3u);
  EXPECT_EQ(simdjson::dom::array(doc["top_bubbles"]).size(), 3u);
  EXPECT_EQ(double(doc["summary"]["utilization"]), 0.55);
  // The job name is one path segment even with '/' and '"' in it.
  auto odd = s.Get("/api/v1/jobs/odd%2Fjob%20%22x%22/windows");
  ASSERT_TRUE(odd);
  ASSERT_EQ(odd->status, 200) << odd->body;
  EXPECT_EQ(std::string_view(parser.parse(odd->body)["job"]), "odd/job \"x\"");
}

// A server over the dashboard's store (dashboard_test_fleet.h).
class DashboardServed : public Served {
 public:
  DashboardServed() : Served({}, dashboard_test::WriteDashboardFleetStore) {}
};

TEST(HttpServer, DevicesReportEachDeviceOfTheJobReportsWindows) {
  DashboardServed s;
  auto r = s.Get("/api/v1/jobs/wide/devices?last=1h");
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  simdjson::dom::parser parser;
  simdjson::dom::element doc = parser.parse(r->body);
  EXPECT_EQ(std::string_view(doc["job"]), "wide");
  simdjson::dom::array starts = doc["window_starts_ns"];
  ASSERT_EQ(starts.size(), 30u);
  EXPECT_EQ(int64_t(starts.at(0)),
            dashboard_test::kT0 + 370 * dashboard_test::kWindow);
  EXPECT_EQ(simdjson::dom::array(doc["window_ends_ns"]).size(), 30u);
  simdjson::dom::array devices = doc["devices"];
  ASSERT_EQ(devices.size(), size_t{dashboard_test::kWideDevices});
  int device = 0;
  for (simdjson::dom::element d : devices) {
    EXPECT_EQ(int64_t(d["device"]), device);
    const double want = device == dashboard_test::kWideSlowDevice ? 0.1 : 0.95;
    EXPECT_DOUBLE_EQ(double(d["utilization"]), want);
    EXPECT_DOUBLE_EQ(double(d["span_us"]), 30 * 10e6);
    simdjson::dom::array windows = d["windows"];
    ASSERT_EQ(windows.size(), 30u);
    for (simdjson::dom::element u : windows) EXPECT_DOUBLE_EQ(double(u), want);
    ++device;
  }
  // The same windows as the job report, for a period given by from/to too.
  auto w = s.Get("/api/v1/jobs/steady/windows?last=2m");
  auto d = s.Get("/api/v1/jobs/steady/devices?last=2m");
  ASSERT_TRUE(w && d);
  ASSERT_EQ(d->status, 200) << d->body;
  simdjson::dom::parser parser2;
  simdjson::dom::element report = parser2.parse(w->body);
  doc = parser.parse(d->body);
  simdjson::dom::array report_windows = report["windows"];
  simdjson::dom::array device_starts = doc["window_starts_ns"];
  ASSERT_EQ(report_windows.size(), device_starts.size());
  EXPECT_EQ(report_windows.size(), 12u);
  EXPECT_EQ(int64_t(report_windows.at(0)["start_ns"]),
            int64_t(device_starts.at(0)));
  EXPECT_EQ(simdjson::dom::array(doc["devices"]).size(), 2u);
  // Errors as the job report's.
  EXPECT_EQ(s.Get("/api/v1/jobs/nobody/devices")->status, 404);
  EXPECT_EQ(s.Get("/api/v1/jobs/wide/devices?last=soon")->status, 400);
  EXPECT_EQ(s.Get("/api/v1/jobs/wide/devices?bubbles=3")->status, 400);
}

// One window's timeline (docs/query.md#window-timeline): the stored
// window's ranks, root, held-up ranks and segments, as stored.
TEST(HttpServer, TimelineGivesTheStoredWindowsRanksAndSegments) {
  DashboardServed s;
  constexpr int64_t kIndex = 395;
  const WindowSummary stored = dashboard_test::RankWindows(kIndex);
  const WindowCollectives& c = *stored.collectives;
  auto r = s.Get("/api/v1/jobs/ranks/timeline?start_ns=" +
                 std::to_string(stored.window.start_ns));
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  simdjson::dom::parser parser;
  simdjson::dom::element doc = parser.parse(r->body);
  EXPECT_EQ(int64_t(doc["start_ns"]), stored.window.start_ns);
  EXPECT_EQ(int64_t(doc["end_ns"]), stored.window.end_ns);
  EXPECT_EQ(int64_t(doc["root"]), c.stragglers[0].rank);
  simdjson::dom::array held = doc["held_up"];
  ASSERT_EQ(held.size(), 1u);
  EXPECT_EQ(int64_t(held.at(0)), dashboard_test::HeldUpRank(kIndex));
  EXPECT_EQ(int64_t(doc["timelines_left_out"]), 0);
  simdjson::dom::array states = doc["states"];
  ASSERT_EQ(states.size(), size_t{kTimelineStates});
  for (int i = 0; i < kTimelineStates; ++i) {
    EXPECT_EQ(std::string_view(states.at(i)),
              TimelineStateName(static_cast<uint8_t>(i)));
  }
  simdjson::dom::array ranks = doc["ranks"];
  ASSERT_EQ(ranks.size(), c.ranks.size());
  size_t i = 0;
  for (simdjson::dom::element rank : ranks) {
    EXPECT_EQ(int64_t(rank["rank"]), c.ranks[i].rank);
    EXPECT_DOUBLE_EQ(double(rank["comm_wait_us"]),
                     c.ranks[i].comm_wait_ns / 1e3);
    const RankTimeline& t = c.timelines[i];
    simdjson::dom::element tl = rank["timeline"];
    EXPECT_EQ(int64_t(tl["start_us"]), t.start_us);
    EXPECT_EQ(int64_t(tl["merged_us"]), t.merged_us);
    EXPECT_EQ(int64_t(tl["bin_us"]), t.bin_us);
    simdjson::dom::array segments = tl["segments"];
    ASSERT_EQ(segments.size(), t.segments.size());
    size_t k = 0;
    for (simdjson::dom::element seg : segments) {
      EXPECT_EQ(int64_t(seg.at(0)), t.segments[k].state);
      EXPECT_EQ(int64_t(seg.at(1)), t.segments[k].us);
      ++k;
    }
    ++i;
  }
  // A window of a single-rank job: no ranks, no root.
  auto report = s.Get("/api/v1/jobs/alpha/windows?last=1m");
  ASSERT_TRUE(report);
  ASSERT_EQ(report->status, 200) << report->body;
  simdjson::dom::parser report_parser;
  const int64_t alpha =
      int64_t(simdjson::dom::array(report_parser.parse(report->body)["windows"])
                  .at(0)["start_ns"]);
  auto single =
      s.Get("/api/v1/jobs/alpha/timeline?start_ns=" + std::to_string(alpha));
  ASSERT_TRUE(single);
  ASSERT_EQ(single->status, 200) << single->body;
  doc = parser.parse(single->body);
  EXPECT_TRUE(doc["root"].is_null());
  EXPECT_EQ(simdjson::dom::array(doc["ranks"]).size(), 0u);
  // No window there, no start, a bad start, an unknown parameter.
  auto none = s.Get("/api/v1/jobs/ranks/timeline?start_ns=" +
                    std::to_string(stored.window.start_ns + 1));
  EXPECT_EQ(none->status, 404) << none->body;
  EXPECT_THAT(none->body, ::testing::HasSubstr("no window starting at"));
  EXPECT_EQ(s.Get("/api/v1/jobs/ranks/timeline")->status, 400);
  auto bad = s.Get("/api/v1/jobs/ranks/timeline?start_ns=soon");
  EXPECT_EQ(bad->status, 400);
  EXPECT_THAT(bad->body, ::testing::HasSubstr("start_ns"));
  EXPECT_EQ(s.Get("/api/v1/jobs/ranks/timeline?start_ns=1&last=1h")->status,
            400);
}

TEST(HttpServer, AlertsShowTheCommittedAlertState) {
  DashboardServed s;
  auto r = s.Get("/api/v1/alerts");
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  // The server's clock, for the dashboard's "last seen".
  absl::Time date;
  std::string err;
  ASSERT_TRUE(absl::ParseTime("%a, %d %b %Y %H:%M:%S GMT",
                              r->get_header_value("Date"), &date, &err))
      << r->get_header_value("Date") << ": " << err;
  EXPECT_LT(absl::AbsDuration(absl::Now() - date), absl::Minutes(1));
  simdjson::dom::parser parser;
  simdjson::dom::element doc = parser.parse(r->body);
  std::vector<std::string> evaluated;
  for (simdjson::dom::element j : simdjson::dom::array(doc["evaluated_jobs"])) {
    evaluated.emplace_back(std::string_view(j));
  }
  EXPECT_THAT(evaluated, ::testing::ElementsAre("beta", "gamma", "steady"));
  simdjson::dom::array firing = doc["firing"];
  ASSERT_EQ(firing.size(), 1u);
  simdjson::dom::element beta = firing.at(0);
  EXPECT_EQ(std::string_view(beta["job"]), "beta");
  EXPECT_EQ(std::string_view(beta["rule"]), "low-util");
  EXPECT_EQ(std::string_view(beta["severity"]), "critical");
  EXPECT_EQ(std::string_view(beta["schema"]), "bubblewatch.alert/v1");
  EXPECT_DOUBLE_EQ(double(beta["measured"]["value"]), 0.2);
  EXPECT_EQ(simdjson::dom::array(doc["unreadable_keys"]).size(), 0u);

  // A store the processor wrote without rules has no alert state.
  Served plain;
  auto none = plain.Get("/api/v1/alerts");
  ASSERT_TRUE(none);
  EXPECT_EQ(none->body,
            R"({"evaluated_jobs":[],"firing":[],"unreadable_keys":[]})");
}

TEST(HttpServer, UnknownJobIs404WithAJsonError) {
  Served s;
  auto r = s.Get("/api/v1/jobs/nope/windows");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 404);
  EXPECT_EQ(ErrorOf(r->body), "no windows for job nope");
}

// Regression: GET /api/v1/jobs/%FF%FE/windows echoed the bytes
// raw into its JSON error, which then was not valid UTF-8.
TEST(HttpServer, UnknownJobWithBytesThatAreNotUtf8IsEchoedEscaped) {
  Served s;
  auto r = s.Get("/api/v1/jobs/%FF%FEx/windows");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 404);
  EXPECT_EQ(ErrorOf(r->body), "no windows for job \\xff\\xfex");
  EXPECT_TRUE(IsPrintableUtf8(r->body)) << r->body;
  // A path no route takes (a newline stops the job pattern) likewise.
  r = s.Get("/api/v1/jobs/%FF%0A/windows");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 404);
  EXPECT_EQ(ErrorOf(r->body), "no such path: /api/v1/jobs/\\xff\\n/windows");
}

TEST(HttpServer, MalformedParametersAre400WithTheReason) {
  Served s;
  const std::pair<const char*, const char*> cases[] = {
      {"/api/v1/jobs/alpha/windows?last=soon", "bad last \"soon\""},
      {"/api/v1/jobs/alpha/windows?last=25h", "last may be at most 24h"},
      {"/api/v1/jobs/alpha/windows?from=1764410400", "from and to go together"},
      {"/api/v1/jobs/alpha/windows?from=yesterday&to=1764410400",
       "bad from time"},
      {"/api/v1/jobs/alpha/windows?from=1764000000&to=1764410400",
       "from..to may span at most 24h"},
      {"/api/v1/jobs/alpha/windows?last=1h&from=1&to=2", "not both"},
      {"/api/v1/jobs/alpha/windows?bubbles=1000", "bad bubbles"},
      {"/api/v1/jobs/alpha/windows?lst=1h", "unknown parameter 'lst'"},
      {"/api/v1/jobs/alpha/windows?last=1h&last=2h", "given twice"},
      {"/api/v1/fleet?by=cause:nope", "unknown cause 'nope'"},
      {"/api/v1/fleet?by=waste", "unknown order 'waste'"},
      {"/api/v1/fleet?top=0", "bad top"},
      {"/api/v1/fleet?top=ten", "bad top"},
      {"/api/v1/fleet?pretty=maybe", "bad pretty"},
      {"/api/v1/fleet?last=25h", "last may be at most 24h"},
      {"/api/v1/fleet?last=1h&from=1&to=2", "not both"},
      {"/api/v1/fleet?from=1764410400", "from and to go together"},
      {"/metrics?x=1", "unknown parameter 'x'"},
  };
  for (const auto& [path, reason] : cases) {
    auto r = s.Get(path);
    ASSERT_TRUE(r) << path;
    EXPECT_EQ(r->status, 400) << path << ": " << r->body;
    EXPECT_THAT(ErrorOf(r->body), HasSubstr(reason)) << path;
  }
}

TEST(HttpServer, FleetRanksTheLastHourAndLimits) {
  Served s;
  auto r = s.Get("/api/v1/fleet?top=2&by=cause:launch_overhead");
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  simdjson::dom::parser parser;
  simdjson::dom::element doc = parser.parse(r->body);
  EXPECT_EQ(std::string_view(doc["by"]), "cause:launch_overhead");
  // The last hour ends at the fleet's newest window (window 400 of the
  // test fleet); beta stopped long before it.
  EXPECT_EQ(int64_t(doc["to_ns"]), query_test::kT0 + 400 * query_test::kWindow);
  EXPECT_EQ(int64_t(doc["from_ns"]),
            query_test::kT0 + 40 * query_test::kWindow);
  EXPECT_EQ(int64_t(doc["jobs"]), 3);
  simdjson::dom::array top = doc["top"];
  ASSERT_EQ(top.size(), 2u);
  // 1 ms of launch overhead in each of alpha's 324 windows with a bubble.
  EXPECT_EQ(std::string_view(top.at(0)["job"]), "alpha");
  EXPECT_EQ(int64_t(top.at(0)["rank"]), 1);
  EXPECT_EQ(double(top.at(0)["score"]), 324e3);  // µs.
  EXPECT_EQ(int64_t(top.at(0)["period"]["windows"]), 360);
  EXPECT_EQ(int64_t(top.at(0)["period"]["partial_windows"]), 0);
  EXPECT_EQ(std::string_view(top.at(1)["job"]), "gamma");
  // Compute over the hour: alpha 360 x 5.5 s, gamma 20 x 6 s, odd/job
  // 3 x 9 s, of 3,830 s of span.
  EXPECT_DOUBLE_EQ(double(doc["fleet"]["utilization"]), 2127.0 / 3830.0);
  EXPECT_DOUBLE_EQ(double(doc["fleet"]["bubble_gpu_hours"]),
                   (3830.0 - 2127.0) / 3600);

  // The same period parameters as a job report.
  auto between = s.Get("/api/v1/fleet?from=2025-11-29T10:00:00Z&to=1764410700");
  ASSERT_TRUE(between);
  ASSERT_EQ(between->status, 200) << between->body;
  simdjson::dom::element b = parser.parse(between->body);
  EXPECT_EQ(std::string_view(b["by"]), "bubble_time");
  simdjson::dom::array btop = b["top"];
  ASSERT_EQ(btop.size(), 2u);
  EXPECT_EQ(std::string_view(btop.at(0)["job"]), "beta");
  EXPECT_EQ(double(btop.at(0)["score"]), 240e6);  // 30 windows x 8 s, µs.
  EXPECT_EQ(std::string_view(btop.at(1)["job"]), "alpha");
}

TEST(HttpServer, BearerTokenGuardsTheApiAndMetricsOnly) {
  HttpServerOptions options;
  options.bearer_token = "s3cret";
  Served s(options);
  for (const char* path : {"/api/v1/jobs", "/api/v1/fleet", "/metrics",
                           "/api/v1/jobs/alpha/windows"}) {
    auto none = s.Get(path);
    ASSERT_TRUE(none);
    EXPECT_EQ(none->status, 401) << path;
    EXPECT_EQ(none->get_header_value("WWW-Authenticate"),
              R"(Bearer realm="bubblewatch")");
    auto wrong = s.Get(path, {{"Authorization", "Bearer s3creT"}});
    EXPECT_EQ(wrong->status, 401) << path;
    auto longer = s.Get(path, {{"Authorization", "Bearer s3cret2"}});
    EXPECT_EQ(longer->status, 401) << path;
    auto good = s.Get(path, {{"Authorization", "Bearer s3cret"}});
    EXPECT_EQ(good->status, 200) << path;
  }
  // The page and the health check need no token (the page asks for it).
  EXPECT_EQ(s.Get("/healthz")->status, 200);
  EXPECT_EQ(s.Get("/")->status, 200);
}

TEST(HttpServer, BearerSchemeIsCaseInsensitive) {
  // RFC 7235 2.1: the auth scheme is a case-insensitive token; the token
  // itself is compared exactly.
  HttpServerOptions options;
  options.bearer_token = "s3cret";
  Served s(options);
  for (const char* value : {"Bearer s3cret", "bearer s3cret", "BEARER s3cret",
                            "bEaReR s3cret", "Bearer  s3cret"}) {
    auto r = s.Get("/api/v1/jobs", {{"Authorization", value}});
    ASSERT_TRUE(r) << value;
    EXPECT_EQ(r->status, 200) << value;
  }
  for (const char* value :
       {"bearer S3CRET", "Bearers3cret", "Basic s3cret", "bearer", "bearer "}) {
    auto r = s.Get("/api/v1/jobs", {{"Authorization", value}});
    ASSERT_TRUE(r) << value;
    EXPECT_EQ(r->status, 401) << value;
  }
}

TEST(HttpServer, ConstantTimeEqualsComparesWholeStrings) {
  EXPECT_TRUE(ConstantTimeEquals("abc", "abc"));
  EXPECT_FALSE(ConstantTimeEquals("abd", "abc"));
  EXPECT_FALSE(ConstantTimeEquals("ab", "abc"));
  EXPECT_FALSE(ConstantTimeEquals("abcabc", "abc"));
  EXPECT_FALSE(ConstantTimeEquals("", "abc"));
  EXPECT_FALSE(ConstantTimeEquals("", ""));
}

TEST(HttpServer, ServesTheDashboardWithoutPathTraversal) {
  Served s;
  auto index = s.Get("/");
  ASSERT_TRUE(index);
  EXPECT_EQ(index->status, 200);
  EXPECT_THAT(index->get_header_value("Content-Type"), HasSubstr("text/html"));
  EXPECT_THAT(index->body, HasSubstr("vendor/chart.umd.min.js"));
  auto chart = s.Get("/vendor/chart.umd.min.js");
  ASSERT_TRUE(chart);
  EXPECT_EQ(chart->status, 200);
  EXPECT_THAT(chart->body, HasSubstr("Chart.js v4"));
  for (const char* path :
       {"/../../etc/passwd", "/%2e%2e/%2e%2e/etc/passwd",
        "/vendor/../../../etc/passwd", "/..%2f..%2fetc%2fpasswd", "/etc/passwd",
        "/nope.html", "/api/v2/jobs", "//etc/passwd"}) {
    auto r = s.Get(path);
    ASSERT_TRUE(r) << path;
    EXPECT_EQ(r->status, 404) << path;
    EXPECT_THAT(r->body, Not(HasSubstr("root:"))) << path;
  }
}

TEST(HttpServer, RefusesLargeRequestBodies) {
  Served s;
  auto r = s.client().Post("/api/v1/jobs", std::string(64 * 1024, 'x'),
                           "text/plain");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 413);
}

// Runs `promtool check metrics` on `page`; returns its output and sets
// `exit_code`.
std::string Promtool(const std::string& page, int* exit_code) {
  // ctest runs each test as its own process, possibly at the same time.
  const std::string in =
      ::testing::TempDir() + "/metrics_" + std::to_string(getpid()) + ".prom";
  std::ofstream(in) << page;
  const std::string out = in + ".out";
  const std::string cmd =
      "promtool check metrics < '" + in + "' > '" + out + "' 2>&1";
  const int status = std::system(cmd.c_str());
  *exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  std::ifstream result(out);
  return std::string(std::istreambuf_iterator<char>(result), {});
}

TEST(HttpServer, MetricsPassPromtoolAndBoundTheJobs) {
  HttpServerOptions options;
  options.metrics_top_jobs = 2;
  options.processor_stats = [] {
    ProcessorStats p;
    p.messages = 10;
    p.events = 12345678901;
    p.dlq_by_reason["bad_flatbuffer"] = 2;
    p.dlq_by_reason["device \"x\""] = 1;
    p.dlq_by_source[{"rogue", 77}] = 4;
    p.dlq_by_source[{"", 0}] = 9;
    p.lag["bubblewatch.events/0"] = 5;
    p.lag["bubblewatch.events/11"] = 0;
    p.open_jobs = 3;
    p.tracked_jobs = 7;
    p.jobs_forgotten = 2;
    p.host_skew["skewed"] = {
        .skew_ns = 178'000'000'000, .ahead = "h-a", .behind = "h-b"};
    return p;
  };
  Served s(options);
  auto r = s.Get("/metrics");
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  EXPECT_EQ(r->get_header_value("Content-Type"),
            "text/plain; version=0.0.4; charset=utf-8");
  const std::string& page = r->body;
  int exit_code = -1;
  const std::string lint = Promtool(page, &exit_code);
  EXPECT_EQ(exit_code, 0) << "promtool (from Debian's prometheus package) "
                             "must be installed and accept the page:\n"
                          << lint << "\n"
                          << page;
  // Top 2 by bubble time: beta and gamma; the other two are aggregated.
  EXPECT_THAT(
      page,
      HasSubstr(R"(bubblewatch_job_utilization{job="beta",range="1m"} 0.2)"));
  EXPECT_THAT(
      page,
      HasSubstr(R"(bubblewatch_job_utilization{job="gamma",range="1h"} 0.6)"));
  EXPECT_THAT(page, Not(HasSubstr(R"(job="alpha")")));
  EXPECT_THAT(page, HasSubstr("bubblewatch_other_jobs 2\n"));
  EXPECT_THAT(page, HasSubstr("bubblewatch_jobs 4\n"));
  EXPECT_THAT(
      page,
      HasSubstr(
          R"(bubblewatch_job_bubble_ratio{job="beta",range="5m",cause="launch_overhead"} 0.8)"));
  EXPECT_THAT(page,
              HasSubstr("bubblewatch_processor_events_total 12345678901\n"));
  EXPECT_THAT(
      page,
      HasSubstr(
          R"(bubblewatch_processor_dlq_messages_total{reason="device \"x\""} 1)"));
  EXPECT_THAT(
      page,
      HasSubstr(
          R"(bubblewatch_processor_lag_messages{topic="bubblewatch.events",partition="11"} 0)"));
  EXPECT_THAT(
      page,
      HasSubstr(
          R"(bubblewatch_processor_dlq_batches_by_source_total{job="rogue",producer="77"} 4)"));
  EXPECT_THAT(page, HasSubstr("bubblewatch_processor_tracked_jobs 7\n"));
  EXPECT_THAT(page,
              HasSubstr("bubblewatch_processor_jobs_forgotten_total 2\n"));
  EXPECT_THAT(
      page,
      HasSubstr(
          R"(bubblewatch_processor_job_host_skew_seconds{job="skewed",ahead="h-a",behind="h-b"} 178)"));
  EXPECT_THAT(
      page,
      HasSubstr(
          R"(bubblewatch_processor_dlq_batches_by_source_total{job="",producer="0"} 9)"));
}

// The fleet of WriteFleetStore plus "ranked", a two-rank job whose window
// i has rank 0 waiting i + 1 s in collectives (window span 10 s); in its
// latest window ranks 1-4 straggle, causing 4, 3, 2 and 1 s of wait.
absl::Status WriteFleetWithStragglers(const std::string& path) {
  absl::StatusOr<std::unique_ptr<WindowStore>> store =
      OpenRocksDbWindowStore(path);
  if (!store.ok()) return store.status();
  if (absl::Status s = query_test::WriteFleet(**store); !s.ok()) return s;
  StoreBatch batch;
  const int64_t second = 1'000'000'000;
  for (int64_t i = 0; i < 3; ++i) {
    WindowSummary w = query_test::MakeWindow("ranked", i, second);
    WindowCollectives& c = w.collectives.emplace();
    c.ranks.push_back(RankWindow{.rank = 0, .comm_wait_ns = (i + 1) * second});
    c.ranks.push_back(RankWindow{.rank = 1, .comm_wait_ns = 0});
    if (i == 2) {
      for (int32_t rank = 1; rank <= 4; ++rank) {
        StragglerWindow& st = c.stragglers.emplace_back();
        st.rank = rank;
        st.wait_caused_ns = (5 - rank) * second;
        st.causes[static_cast<int>(BubbleCause::kDataLoading)] =
            st.wait_caused_ns - second / 2;
        st.unattributed_ns = second / 4;
        st.compute_ns = second / 4;
      }
    }
    batch.windows.push_back(std::move(w));
  }
  return (*store)->Commit(batch);
}

// The samples of an exposition page, "name{labels}" -> value; fails the test
// on a line that is neither a comment nor "NAME[{LABELS}] VALUE".
std::map<std::string, double> ParseExposition(const std::string& page) {
  std::map<std::string, double> out;
  for (absl::string_view line : absl::StrSplit(page, '\n', absl::SkipEmpty())) {
    if (absl::StartsWith(line, "#")) continue;
    const size_t space = line.rfind(' ');
    double v = 0;
    EXPECT_TRUE(space != absl::string_view::npos &&
                absl::SimpleAtod(line.substr(space + 1), &v))
        << line;
    if (space == absl::string_view::npos) continue;
    EXPECT_TRUE(out.emplace(std::string(line.substr(0, space)), v).second)
        << "duplicate sample " << line;
  }
  return out;
}

TEST(HttpServer, MetricsExportCommWaitAndBoundedStragglers) {
  HttpServerOptions options;
  options.metrics_top_jobs = 100;
  options.processor_stats = [] {
    ProcessorStats p;
    p.late_collectives = 17;
    p.collective_errors = 3;
    return p;
  };
  Served s(options, WriteFleetWithStragglers);
  auto r = s.Get("/metrics");
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  int exit_code = -1;
  const std::string lint = Promtool(r->body, &exit_code);
  EXPECT_EQ(exit_code, 0) << lint << "\n" << r->body;
  const std::map<std::string, double> m = ParseExposition(r->body);
  // (1 + 2 + 3) s waited over 3 x 10 s of GPU time, in every range.
  for (const char* range : {"1m", "5m", "1h"}) {
    const std::string key =
        absl::StrCat(R"(bubblewatch_job_comm_wait_ratio{job="ranked",range=")",
                     range, R"("})");
    ASSERT_TRUE(m.contains(key)) << key << "\n" << r->body;
    EXPECT_DOUBLE_EQ(m.at(key), 0.2);
  }
  // Single-rank jobs have no ratio at all.
  int ratios = 0;
  int straggler_series = 0;
  std::map<std::string, double> by_rank;
  for (const auto& [key, v] : m) {
    if (absl::StartsWith(key, "bubblewatch_job_comm_wait_ratio{")) ++ratios;
    if (!absl::StartsWith(key, "bubblewatch_job_straggler_wait_seconds{")) {
      continue;
    }
    ++straggler_series;
    EXPECT_THAT(key, HasSubstr(R"(job="ranked")"));
    const size_t at = key.find("rank=\"");
    ASSERT_NE(at, std::string::npos) << key;
    by_rank[key.substr(at + 6, 1)] += v;
  }
  EXPECT_EQ(ratios, 3);
  // Top 3 stragglers only (rank 4 is left out); their causes add up to the
  // wait each caused.
  EXPECT_EQ(straggler_series, 3 * 3);
  EXPECT_EQ(by_rank.size(), 3u);
  EXPECT_DOUBLE_EQ(by_rank["1"], 4.0);
  EXPECT_DOUBLE_EQ(by_rank["2"], 3.0);
  EXPECT_DOUBLE_EQ(by_rank["3"], 2.0);
  EXPECT_DOUBLE_EQ(
      m.at(
          R"(bubblewatch_job_straggler_wait_seconds{job="ranked",rank="1",cause="data_loading"})"),
      3.5);
  EXPECT_DOUBLE_EQ(
      m.at(
          R"(bubblewatch_job_straggler_wait_seconds{job="ranked",rank="1",cause="unattributed"})"),
      0.25);
  EXPECT_DOUBLE_EQ(
      m.at(
          R"(bubblewatch_job_straggler_wait_seconds{job="ranked",rank="2",cause="compute"})"),
      0.25);
  EXPECT_EQ(m.at("bubblewatch_processor_late_collectives_total"), 17);
  EXPECT_EQ(m.at("bubblewatch_processor_collective_errors_total"), 3);
}

TEST(HttpServer, MetricsEscapeJobNamesInLabels) {
  HttpServerOptions options;
  options.metrics_top_jobs = 100;
  Served s(options);
  auto r = s.Get("/metrics");
  ASSERT_TRUE(r);
  EXPECT_THAT(r->body, HasSubstr(R"(job="odd/job \"x\"")"));
  EXPECT_THAT(r->body, Not(HasSubstr("bubblewatch_processor_")));
  int exit_code = -1;
  const std::string lint = Promtool(r->body, &exit_code);
  EXPECT_EQ(exit_code, 0) << lint;
}

TEST(HttpServer, SeesWindowsTheProcessorCommitsWhileItRuns) {
  // `serve` beside a running processor: the store stays open for writing,
  // the server reads through a secondary instance and catches up.
  testing::TempDir dir;
  auto writer = OpenRocksDbWindowStore(dir.Sub("store"));
  ASSERT_TRUE(writer.ok()) << writer.status();
  ASSERT_TRUE(query_test::WriteFleet(**writer).ok());
  auto reader = OpenRocksDbWindowStoreReadOnly(dir.Sub("store"));
  ASSERT_TRUE(reader.ok()) << reader.status();
  HttpServerOptions options;
  options.port = 0;
  options.refresh_interval = absl::ZeroDuration();
  auto server = HttpServer::Bind(options, reader->get());
  ASSERT_TRUE(server.ok()) << server.status();
  std::thread serving([&] { EXPECT_TRUE((*server)->Serve().ok()); });
  httplib::Client client((*server)->url());

  EXPECT_EQ(client.Get("/api/v1/jobs/delta/windows")->status, 404);
  StoreBatch batch;
  batch.windows.push_back(query_test::MakeWindow("delta", 5, 3'000'000'000));
  ASSERT_TRUE((*writer)->Commit(batch).ok());
  auto r = client.Get("/api/v1/jobs/delta/windows");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200) << r->body;
  simdjson::dom::parser parser;
  EXPECT_EQ(double(parser.parse(r->body)["summary"]["utilization"]), 0.3);

  (*server)->Stop();
  serving.join();
}

TEST(HttpServer, SlowAndIdleClientsDoNotLockOutAFreshOne) {
  // 8 clients trickling their headers left /healthz
  // unanswered. 50 here: half connect and send nothing, half send the start of
  // a request and stop; a fresh client must still be answered.
  Served s;
  std::vector<std::unique_ptr<RawConnection>> slow;
  for (int i = 0; i < 50; ++i) {
    slow.push_back(std::make_unique<RawConnection>(s.port()));
    ASSERT_TRUE(slow.back()->connected()) << i;
    if (i % 2 == 1) {
      ASSERT_TRUE(slow.back()->Send("GET /healthz HTTP/1.1\r\nX-Slow: "));
    }
  }
  httplib::Client fresh(s.url());
  // Generous: the server answers at once (ops/bench/http_bench measures it);
  // before, the request queued behind the slow ones for 5 s each.
  fresh.set_connection_timeout(3, 0);
  fresh.set_read_timeout(3, 0);
  auto r = fresh.Get("/healthz");
  ASSERT_TRUE(r) << "no answer: " << httplib::to_string(r.error());
  EXPECT_EQ(r->status, 200);
}

TEST(HttpServer, AFullServerClosesTheConnectionThatWaitedLongest) {
  HttpServerOptions options;
  options.max_connections = 4;
  Served s(options);
  std::vector<std::unique_ptr<RawConnection>> slow;
  for (int i = 0; i < 8; ++i) {
    slow.push_back(std::make_unique<RawConnection>(s.port()));
    ASSERT_TRUE(slow.back()->Send("GET /healthz HTTP/1.1\r\nX-Slow: "));
    // In order, so that the first ones have waited longest: the time
    // between them is the point, not a wait for a condition.
    absl::SleepFor(absl::Milliseconds(20));
  }
  httplib::Client fresh(s.url());
  fresh.set_connection_timeout(3, 0);
  fresh.set_read_timeout(3, 0);
  auto r = fresh.Get("/healthz");
  ASSERT_TRUE(r) << "no answer: " << httplib::to_string(r.error());
  EXPECT_EQ(r->status, 200);
  EXPECT_TRUE(slow.front()->ClosedByServer(absl::Seconds(3)));
  EXPECT_FALSE(slow.back()->ClosedByServer(absl::ZeroDuration()));
}

TEST(HttpServer, ClosesARequestThatTricklesInPastTheRequestTimeout) {
  // Slow loris: one header line at a time, each within any per-read timeout.
  // The whole request must arrive within request_timeout.
  HttpServerOptions options;
  options.request_timeout = absl::Seconds(1);
  Served s(options);
  RawConnection c(s.port());
  ASSERT_TRUE(c.Send("GET /healthz HTTP/1.1\r\n"));
  const absl::Time start = absl::Now();
  bool closed = false;
  while (!closed && absl::Now() - start < absl::Seconds(8)) {
    c.Send("X-Slow: 1\r\n");
    closed = c.ClosedByServer(absl::Milliseconds(200));
  }
  EXPECT_TRUE(closed) << "still open after " << absl::Now() - start;
  // A request that arrives in pieces, but in time, is answered as ever.
  RawConnection quick(s.port());
  for (const char* piece :
       {"GET /heal", "thz HTTP/1.1\r\nHo", "st: t\r\n\r\n"}) {
    ASSERT_TRUE(quick.Send(piece));
    // Apart in time, so that the server reads them as pieces.
    absl::SleepFor(absl::Milliseconds(50));
  }
  auto r = quick.Read();
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
}

TEST(HttpServer, ClosesIdleConnectionsAfterTheKeepAliveTimeout) {
  HttpServerOptions options;
  options.keep_alive_timeout = absl::Seconds(1);
  Served s(options);
  RawConnection silent(s.port());
  EXPECT_TRUE(silent.ClosedByServer(absl::Seconds(4)));
  RawConnection answered(s.port());
  ASSERT_TRUE(answered.Send("GET /healthz HTTP/1.1\r\nHost: t\r\n\r\n"));
  ASSERT_TRUE(answered.Read());
  EXPECT_FALSE(answered.ClosedByServer(absl::Milliseconds(300)));
  EXPECT_TRUE(answered.ClosedByServer(absl::Seconds(4)));
}

TEST(HttpServer, RefusesAnOversizedRequestHeadAndCloses) {
  // Each header line is bounded by httplib; their number was not.
  Served s;
  RawConnection c(s.port());
  std::string head = "GET /healthz HTTP/1.1\r\nHost: t\r\n";
  while (head.size() < 40 * 1024) {
    head += "X-Filler: " + std::string(100, 'x') + "\r\n";
  }
  ASSERT_TRUE(c.Send(head + "\r\n"));
  auto r = c.Read();
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 400);
  EXPECT_TRUE(c.ClosedByServer(absl::Seconds(3)));
}

TEST(HttpServer, ASecondServerOnABusyPortFails) {
  // with SO_REUSEPORT a second `serve` shared the port and
  // answered from another store.
  Served s;
  HttpServerOptions options;
  options.port = s.port();
  auto second = HttpServer::Bind(options, s.store());
  ASSERT_FALSE(second.ok()) << "a second server listens on " << s.port();
  EXPECT_EQ(second.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(second.status().message(), HasSubstr("in use"));
  EXPECT_EQ(s.Get("/healthz")->status, 200);
}

TEST(HttpServer, AnswersPipelinedRequestsInOrder) {
  // 3 requests sent at once got 1 response.
  Served s;
  RawConnection c(s.port());
  ASSERT_TRUE(
      c.Send("GET /healthz HTTP/1.1\r\nHost: t\r\n\r\n"
             "POST /api/v1/jobs HTTP/1.1\r\nHost: t\r\nContent-Length: 5"
             "\r\n\r\nhello"
             "GET /nope HTTP/1.1\r\nHost: t\r\n\r\n"
             "GET /api/v1/jobs HTTP/1.1\r\nHost: t\r\n\r\n"));
  auto healthz = c.Read();
  ASSERT_TRUE(healthz);
  EXPECT_EQ(healthz->status, 200);
  EXPECT_EQ(healthz->body, R"({"status":"ok"})");
  auto post = c.Read();
  ASSERT_TRUE(post) << "only the first of 4 pipelined requests was answered";
  EXPECT_EQ(post->status, 404);
  auto nope = c.Read();
  ASSERT_TRUE(nope);
  EXPECT_EQ(nope->status, 404);
  EXPECT_EQ(ErrorOf(nope->body), "no such path: /nope");
  auto jobs = c.Read();
  ASSERT_TRUE(jobs);
  EXPECT_EQ(jobs->status, 200);
  EXPECT_THAT(jobs->body, HasSubstr(R"("jobs")"));
  // The connection stays usable after the pipeline.
  ASSERT_TRUE(c.Send("GET /healthz HTTP/1.1\r\nHost: t\r\n\r\n"));
  auto again = c.Read();
  ASSERT_TRUE(again);
  EXPECT_EQ(again->status, 200);
}

TEST(HttpServer, ConnectionsHaveNagleOff) {
  // each keep-alive request after the first took 42-44 ms,
  // the response's second segment held back by Nagle until the client's
  // delayed ACK. The server's end of the connection must have TCP_NODELAY.
  Served s;
  RawConnection c(s.port());
  ASSERT_TRUE(c.Send("GET /healthz HTTP/1.1\r\nHost: t\r\n\r\n"));
  ASSERT_TRUE(c.Read());
  const int server_fd = ServerSideOf(c.fd());
  ASSERT_GE(server_fd, 0) << "the server's end is not in this process";
  int nodelay = 0;
  socklen_t len = sizeof(nodelay);
  ASSERT_EQ(getsockopt(server_fd, IPPROTO_TCP, TCP_NODELAY, &nodelay, &len), 0);
  EXPECT_NE(nodelay, 0);
}

TEST(HttpServer, ParseListenAddress) {
  std::string host;
  int port = 0;
  ASSERT_TRUE(ParseListenAddress("127.0.0.1:8080", &host, &port).ok());
  EXPECT_EQ(host, "127.0.0.1");
  EXPECT_EQ(port, 8080);
  ASSERT_TRUE(ParseListenAddress("[::1]:0", &host, &port).ok());
  EXPECT_EQ(host, "::1");
  ASSERT_TRUE(ParseListenAddress(":9100", &host, &port).ok());
  EXPECT_EQ(host, "127.0.0.1");
  EXPECT_FALSE(ParseListenAddress("localhost", &host, &port).ok());
  EXPECT_FALSE(ParseListenAddress("h:99999", &host, &port).ok());
}

}  // namespace
}  // namespace bubblewatch
