#include "alerts/alert_event.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "simdjson.h"

namespace bubblewatch {
namespace {

AlertEvent Sample() {
  AlertEvent e;
  e.status = AlertStatus::kResolved;
  e.rule = "sync-stall";
  e.kind = RuleKind::kCauseShareAbove;
  e.severity = "critical";
  e.summary = "host \"sync\"\tstall";
  e.job = "train-1";
  e.starts_at = absl::FromUnixMillis(1'700'000'000'123);
  e.ends_at = absl::FromUnixMillis(1'700'000'060'000);
  e.sent_at = e.ends_at;
  e.measure = "host_sync_share";
  e.value = 0.42;
  e.threshold = 0.3;
  e.window_start_ns = 10;
  e.window_end_ns = 20;
  e.utilization = 0.55;
  e.dominant_cause = BubbleCause::kHostSync;
  e.dominant_share = 0.9;
  BubbleReport b;
  b.device = 3;
  b.start_ns = 11;
  b.end_ns = 19;
  b.before =
      KernelRef{.name = "conv", .start_ns = 1, .end_ns = 11, .stream = 7};
  b.cause = BubbleCause::kHostSync;
  b.blamed = "cudaStreamSynchronize";
  e.largest_bubble = b;
  e.dashboard_url = "http://d/?job=train-1";
  return e;
}

TEST(AlertEvent, JsonRoundTripsAndCarriesAdvice) {
  const AlertEvent e = Sample();
  const std::string json = AlertEventToJson(e);
  EXPECT_THAT(json, ::testing::HasSubstr(
                        std::string(BubbleCauseAdvice(BubbleCause::kHostSync))
                            .substr(0, 20)));
  absl::StatusOr<AlertEvent> back = ParseAlertEventJson(json);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->status, AlertStatus::kResolved);
  EXPECT_EQ(back->kind, RuleKind::kCauseShareAbove);
  EXPECT_EQ(back->summary, e.summary);
  EXPECT_EQ(back->starts_at, e.starts_at);
  EXPECT_EQ(back->ends_at, e.ends_at);
  EXPECT_DOUBLE_EQ(back->value, 0.42);
  EXPECT_EQ(back->dominant_cause, BubbleCause::kHostSync);
  ASSERT_TRUE(back->largest_bubble.has_value());
  EXPECT_EQ(back->largest_bubble->device, 3);
  EXPECT_EQ(back->largest_bubble->before->name, "conv");
  EXPECT_EQ(back->largest_bubble->before->stream, 7);
  EXPECT_FALSE(back->largest_bubble->after.has_value());
  EXPECT_EQ(back->largest_bubble->blamed, "cudaStreamSynchronize");
  EXPECT_EQ(back->dashboard_url, e.dashboard_url);
  EXPECT_EQ(AlertEventToJson(*back), json);
}

TEST(AlertEvent, FiringHasNullEndsAt) {
  AlertEvent e = Sample();
  e.status = AlertStatus::kFiring;
  e.ends_at = absl::InfiniteFuture();
  const std::string json = AlertEventToJson(e);
  simdjson::dom::parser parser;
  simdjson::dom::element root = parser.parse(json);
  EXPECT_TRUE(root["ends_at"].is_null());
  EXPECT_EQ(std::string_view(root["status"]), "firing");
  EXPECT_EQ(std::string_view(root["schema"]), "bubblewatch.alert/v1");
  absl::StatusOr<AlertEvent> back = ParseAlertEventJson(json);
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(back->ends_at, absl::InfiniteFuture());
}

TEST(AlertEvent, MalformedJsonIsAnErrorNamingTheField) {
  absl::StatusOr<AlertEvent> e = ParseAlertEventJson(
      R"({"schema":"bubblewatch.alert/v1","status":"firing"})");
  ASSERT_FALSE(e.ok());
  EXPECT_THAT(e.status().message(), ::testing::HasSubstr("\"rule\""));
}

}  // namespace
}  // namespace bubblewatch
