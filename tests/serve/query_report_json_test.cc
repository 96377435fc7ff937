// The JSON of `query job --json` and /api/v1/jobs/{job}/windows read back
// (serve/query_report_json_parse.cc), as `query --server` does: every
// closed_by a window can carry round-trips, and a name this build does not
// know is refused rather than shown as another reason.
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "schemas/window_summary.h"
#include "serve/query_report.h"
#include "storage/window_queries.h"

namespace bubblewatch {
namespace {

using ::testing::HasSubstr;

constexpr int64_t kWindowNs = 10'000'000'000;

// A report of one window per ClosedBy value, in the enum's order.
JobReport OneWindowPerClosedBy() {
  JobReport r;
  r.job = "job";
  for (WindowSummary::ClosedBy closed_by : kAllClosedBy) {
    WindowPoint& p = r.windows.emplace_back();
    p.start_ns = static_cast<int64_t>(r.windows.size() - 1) * kWindowNs;
    p.end_ns = p.start_ns + kWindowNs;
    p.closed_by = closed_by;
  }
  r.to_ns = r.anchor_ns = r.windows.back().end_ns;
  return r;
}

TEST(QueryReportJson, EveryClosedByRoundTrips) {
  const JobReport report = OneWindowPerClosedBy();
  const std::string json = RenderJobReportJson(report, /*pretty=*/false);
  for (WindowSummary::ClosedBy closed_by : kAllClosedBy) {
    EXPECT_THAT(json, HasSubstr(absl::StrCat("\"closed_by\":\"",
                                             ClosedByName(closed_by), "\"")));
  }
  absl::StatusOr<JobReport> parsed = ParseJobReportJson(json);
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  ASSERT_EQ(parsed->windows.size(), report.windows.size());
  for (size_t i = 0; i < report.windows.size(); ++i) {
    EXPECT_EQ(parsed->windows[i].closed_by, report.windows[i].closed_by)
        << ClosedByName(report.windows[i].closed_by);
  }
  EXPECT_EQ(RenderJobReportJson(*parsed, false), json);
}

TEST(QueryReportJson, AnUnknownClosedByIsABadReply) {
  const std::string json =
      RenderJobReportJson(OneWindowPerClosedBy(), /*pretty=*/false);
  const std::string newer = absl::StrReplaceAll(
      json, {{"\"closed_by\":\"end_marker\"", "\"closed_by\":\"evicted\""}});
  ASSERT_NE(newer, json);
  absl::StatusOr<JobReport> parsed = ParseJobReportJson(newer);
  ASSERT_FALSE(parsed.ok());
  EXPECT_EQ(parsed.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_EQ(parsed.status().message(),
            "bad server reply: $.windows[2].closed_by: unknown value "
            "\"evicted\"");
  // Not a string, or missing: as for any other field.
  parsed = ParseJobReportJson(absl::StrReplaceAll(
      json, {{"\"closed_by\":\"watermark\"", "\"closed_by\":0"}}));
  ASSERT_FALSE(parsed.ok());
  EXPECT_EQ(parsed.status().message(),
            "bad server reply: $.windows[0].closed_by: not a string");
  parsed = ParseJobReportJson(
      absl::StrReplaceAll(json, {{"\"closed_by\":\"watermark\",", ""}}));
  ASSERT_FALSE(parsed.ok());
  EXPECT_EQ(parsed.status().message(),
            "bad server reply: $.windows[0].closed_by: missing");
}

}  // namespace
}  // namespace bubblewatch
