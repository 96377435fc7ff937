#include "alerts/alertmanager_client.h"

#include <atomic>
#include <string>
#include <thread>

#include "absl/strings/str_cat.h"
#include "base/human_duration.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "httplib.h"
#include "simdjson.h"
#include "tests/testing/poll.h"

namespace bubblewatch {
namespace {

AlertEvent Event(AlertStatus status) {
  AlertEvent e;
  e.status = status;
  e.rule = "sync-stall";
  e.kind = RuleKind::kCauseShareAbove;
  e.severity = "critical";
  e.summary = "stall";
  e.job = "train-1";
  e.cause = "host_sync";
  e.starts_at = absl::FromUnixSeconds(1'800'000'000);
  if (status == AlertStatus::kResolved) {
    e.ends_at = e.starts_at + absl::Minutes(3);
  }
  e.sent_at = e.starts_at + absl::Minutes(status == AlertStatus::kResolved);
  e.measure = "host_sync_share";
  e.value = 0.4;
  e.threshold = 0.3;
  e.dominant_cause = BubbleCause::kHostSync;
  e.dominant_share = 0.9;
  e.window_start_ns = int64_t{1'767'225'610} * 1'000'000'000;
  e.window_end_ns = e.window_start_ns + 10'000'000'000;
  e.utilization = 0.55;
  BubbleReport b;
  b.start_ns = e.window_start_ns + 2'500'000'000;
  b.end_ns = b.start_ns + 30'000'000;
  b.blamed = "aten::item";
  b.before = KernelRef{.name = "conv"};
  e.largest_bubble = b;
  e.dashboard_url = "http://d:8080/?job=train-1";
  return e;
}

TEST(AlertmanagerClient, JsonHasV2LabelsAnnotationsAndTimes) {
  const std::string json = AlertmanagerClient::ToAlertmanagerJson(
      {Event(AlertStatus::kFiring), Event(AlertStatus::kResolved)});
  simdjson::dom::parser parser;
  simdjson::dom::element root = parser.parse(json);
  simdjson::dom::array alerts = root.get_array();
  ASSERT_EQ(alerts.size(), 2u);
  simdjson::dom::element firing = alerts.at(0);
  EXPECT_EQ(std::string_view(firing["labels"]["alertname"]), "sync-stall");
  EXPECT_EQ(std::string_view(firing["labels"]["job"]), "train-1");
  EXPECT_EQ(std::string_view(firing["labels"]["severity"]), "critical");
  EXPECT_EQ(std::string_view(firing["labels"]["cause"]), "host_sync");
  EXPECT_THAT(std::string(std::string_view(firing["annotations"]["advice"])),
              ::testing::HasSubstr(".item()"));
  // Times in alert text are RFC 3339, durations in words: no epoch ns.
  EXPECT_EQ(
      std::string_view(firing["annotations"]["description"]),
      "host_sync 40% of GPU time (threshold 30%) in the window of 10 seconds "
      "from 2026-01-01T00:00:10Z, utilization 55.0%");
  EXPECT_THAT(
      std::string(std::string_view(firing["annotations"]["largest_bubble"])),
      ::testing::StartsWith(
          "30 milliseconds on device 0 at 2026-01-01T00:00:12.5Z, cause "));
  EXPECT_THAT(
      std::string(std::string_view(firing["annotations"]["largest_bubble"])),
      ::testing::HasSubstr("blamed on aten::item; after kernel conv"));
  EXPECT_EQ(std::string_view(firing["startsAt"]), "2027-01-15T08:00:00Z");
  EXPECT_EQ(firing["endsAt"].error(), simdjson::NO_SUCH_FIELD);
  EXPECT_EQ(std::string_view(firing["generatorURL"]),
            "http://d:8080/?job=train-1");
  EXPECT_EQ(std::string_view(alerts.at(1)["endsAt"]), "2027-01-15T08:03:00Z");
}

TEST(AlertmanagerClient, StragglerAlertNamesRankHostAndCause) {
  AlertEvent e = Event(AlertStatus::kFiring);
  e.kind = RuleKind::kStraggler;
  e.measure = "straggler_wait_share";
  e.value = 0.25;
  e.threshold = 0.05;
  e.cause = "data_loading";
  e.straggler_rank = 3;
  e.straggler_host = "node-b";
  e.straggler_cause = "data_loading";
  e.straggler_cost_ns = 14'800'000;
  e.straggler_of_ns = 10'000'000'000;
  e.host = "node-b";
  const std::string json = AlertmanagerClient::ToAlertmanagerJson({e});
  simdjson::dom::parser parser;
  simdjson::dom::element a = parser.parse(json).at(0);
  EXPECT_EQ(std::string_view(a["labels"]["rule_kind"]), "straggler");
  EXPECT_EQ(std::string_view(a["labels"]["cause"]), "data_loading");
  EXPECT_EQ(std::string_view(a["labels"]["host"]), "node-b");
  const std::string text =
      absl::StrCat("job ", e.job,
                   ": rank 3 on host node-b late by data loading; cost the "
                   "job ",
                   HumanDurationWords(e.straggler_cost_ns), " of every ",
                   HumanDurationWords(e.straggler_of_ns), " window");
  EXPECT_EQ(std::string_view(a["annotations"]["straggler"]), text);
  EXPECT_THAT(std::string(std::string_view(a["annotations"]["description"])),
              ::testing::StartsWith(absl::StrCat(
                  text,
                  " (its waits 25% of GPU time, threshold 5%) in the "
                  "window")));
  // Other kinds carry no host label.
  simdjson::dom::parser plain;
  EXPECT_EQ(plain
                .parse(AlertmanagerClient::ToAlertmanagerJson(
                    {Event(AlertStatus::kFiring)}))
                .at(0)["labels"]["host"]
                .error(),
            simdjson::NO_SUCH_FIELD);
  // Other kinds carry no straggler annotation.
  simdjson::dom::parser other;
  EXPECT_EQ(other
                .parse(AlertmanagerClient::ToAlertmanagerJson(
                    {Event(AlertStatus::kFiring)}))
                .at(0)["annotations"]["straggler"]
                .error(),
            simdjson::NO_SUCH_FIELD);
}

TEST(AlertmanagerClient, RejectsUrlsItCannotPost) {
  EXPECT_FALSE(AlertmanagerClient::Create({.url = "127.0.0.1:9093"}).ok());
  EXPECT_FALSE(AlertmanagerClient::Create({.url = "http://"}).ok());
}

// A local HTTP server that fails the first `failures` POSTs with 503, then
// records the bodies.
class FlakyServer {
 public:
  explicit FlakyServer(int failures) : failures_(failures) {
    server_.Post("/prefix/api/v2/alerts",
                 [this](const httplib::Request& req, httplib::Response& res) {
                   if (attempts_.fetch_add(1) < failures_) {
                     res.status = 503;
                     return;
                   }
                   std::lock_guard<std::mutex> lock(mu_);
                   bodies_.push_back(req.body);
                   res.status = 200;
                 });
    port_ = server_.bind_to_any_port("127.0.0.1");
    thread_ = std::thread([this] { server_.listen_after_bind(); });
    while (!server_.is_running()) std::this_thread::yield();
  }
  ~FlakyServer() {
    server_.stop();
    thread_.join();
  }
  std::string url() const {
    return "http://127.0.0.1:" + std::to_string(port_) + "/prefix/";
  }
  int attempts() const { return attempts_.load(); }
  std::vector<std::string> bodies() {
    std::lock_guard<std::mutex> lock(mu_);
    return bodies_;
  }

 private:
  httplib::Server server_;
  std::thread thread_;
  int port_ = 0;
  const int failures_;
  std::atomic<int> attempts_{0};
  std::mutex mu_;
  std::vector<std::string> bodies_;
};

using testing::PollUntil;

TEST(AlertmanagerClient, RetriesWithBackoffAndKeepsResolutionsUntilDelivered) {
  FlakyServer server(/*failures=*/3);
  absl::StatusOr<std::unique_ptr<AlertmanagerClient>> client =
      AlertmanagerClient::Create({.url = server.url(),
                                  .resend_interval = absl::Hours(1),
                                  .initial_backoff = absl::Milliseconds(10),
                                  .max_backoff = absl::Milliseconds(40)});
  ASSERT_TRUE(client.ok()) << client.status();
  (*client)->Send({Event(AlertStatus::kFiring)});
  (*client)->Send({Event(AlertStatus::kResolved)});
  ASSERT_TRUE(PollUntil([&] { return !server.bodies().empty(); },
                        absl::Seconds(20), absl::Milliseconds(20)));
  EXPECT_EQ(server.attempts(), 4);
  // The one successful POST carries the resolution, which is then dropped.
  EXPECT_THAT(server.bodies().front(), ::testing::HasSubstr("\"endsAt\""));
  ASSERT_TRUE(PollUntil(
      [&] {
        return (*client)->stats().pending_resolved == 0 &&
               (*client)->stats().posts_ok == 1;
      },
      absl::Seconds(20), absl::Milliseconds(20)));
  EXPECT_EQ((*client)->stats().posts_failed, 3);
  EXPECT_EQ((*client)->stats().active, 0);
}

TEST(AlertmanagerClient, ReSendsActiveAlertsEveryInterval) {
  FlakyServer server(/*failures=*/0);
  absl::StatusOr<std::unique_ptr<AlertmanagerClient>> client =
      AlertmanagerClient::Create(
          {.url = server.url(), .resend_interval = absl::Milliseconds(50)});
  ASSERT_TRUE(client.ok());
  (*client)->Send({Event(AlertStatus::kFiring)});
  ASSERT_TRUE(PollUntil([&] { return server.bodies().size() >= 3; },
                        absl::Seconds(20), absl::Milliseconds(20)));
  for (const std::string& body : server.bodies()) {
    EXPECT_THAT(body, ::testing::HasSubstr("\"alertname\":\"sync-stall\""));
    EXPECT_THAT(body, ::testing::Not(::testing::HasSubstr("endsAt")));
  }
  EXPECT_EQ((*client)->stats().active, 1);
}

TEST(AlertmanagerClient, ReportsWhatASuccessfulPostCarriedOnce) {
  FlakyServer server(/*failures=*/2);
  absl::StatusOr<std::unique_ptr<AlertmanagerClient>> client =
      AlertmanagerClient::Create({.url = server.url(),
                                  .resend_interval = absl::Hours(1),
                                  .initial_backoff = absl::Milliseconds(10),
                                  .max_backoff = absl::Milliseconds(20)});
  ASSERT_TRUE(client.ok()) << client.status();
  (*client)->Send({Event(AlertStatus::kResolved)});
  std::vector<AlertEvent> delivered;
  ASSERT_TRUE(PollUntil(
      [&] {
        for (AlertEvent& e : (*client)->TakeDelivered()) {
          delivered.push_back(std::move(e));
        }
        return !delivered.empty();
      },
      absl::Seconds(20), absl::Milliseconds(20)));
  // Only after the failing attempts; the event as sent (same sent_at).
  EXPECT_EQ(server.attempts(), 3);
  ASSERT_EQ(delivered.size(), 1u);
  EXPECT_EQ(delivered[0].status, AlertStatus::kResolved);
  EXPECT_EQ(delivered[0].sent_at, Event(AlertStatus::kResolved).sent_at);
  EXPECT_TRUE((*client)->TakeDelivered().empty());
}

}  // namespace
}  // namespace bubblewatch
