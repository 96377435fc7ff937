// The HTTP API in process (HttpServer on a free loopback port, cpp-httplib's
// client): status codes 200/400/401/404/413, JSON shapes, the bearer token,
// static files without path traversal, and /metrics as Prometheus's own
// `promtool check metrics` sees it.
#include "cli/http_server.h"

#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <memory>
#include <string>
#include <thread>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "httplib.h"
#include "simdjson.h"
#include "tests/storage/query_test_windows.h"
#include "tests/storage/storage_test_util.h"

namespace bubblewatch {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

// A server over the test fleet, serving on its own thread.
class Served {
 public:
  explicit Served(HttpServerOptions options = {}) {
    EXPECT_TRUE(query_test::WriteFleetStore(dir_.Sub("store")).ok());
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
  testing_util::TempDir dir_;
  std::unique_ptr<WindowStoreReader> store_;
  std::unique_ptr<HttpServer> server_;
  std::thread thread_;
  std::unique_ptr<httplib::Client> client_;
};

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

TEST(HttpServer, UnknownJobIs404WithAJsonError) {
  Served s;
  auto r = s.Get("/api/v1/jobs/nope/windows");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 404);
  EXPECT_EQ(ErrorOf(r->body), "no windows for job nope");
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
      {"/metrics?x=1", "unknown parameter 'x'"},
  };
  for (const auto& [path, reason] : cases) {
    auto r = s.Get(path);
    ASSERT_TRUE(r) << path;
    EXPECT_EQ(r->status, 400) << path << ": " << r->body;
    EXPECT_THAT(ErrorOf(r->body), HasSubstr(reason)) << path;
  }
}

TEST(HttpServer, FleetRanksAndLimits) {
  Served s;
  auto r = s.Get("/api/v1/fleet?top=2&by=cause:launch_overhead");
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  simdjson::dom::parser parser;
  simdjson::dom::element doc = parser.parse(r->body);
  EXPECT_EQ(std::string_view(doc["by"]), "cause:launch_overhead");
  simdjson::dom::array top = doc["top"];
  ASSERT_EQ(top.size(), 2u);
  EXPECT_EQ(std::string_view(top.at(0)["job"]), "beta");
  EXPECT_EQ(int64_t(top.at(0)["rank"]), 1);
  EXPECT_EQ(std::string_view(top.at(1)["job"]), "gamma");
  EXPECT_EQ(double(doc["fleet"]["utilization"]), 27.0 / 40.0);
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
  testing_util::TempDir dir;
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

TEST(HttpServer, ASecondServerOnABusyPortFails) {
  // Issue 17 item 7: with SO_REUSEPORT a second `serve` shared the port and
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
