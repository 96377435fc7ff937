// The JSON of `query job --json` and /api/v1/jobs/{job}/windows read back
// (serve/query_report_json_parse.cc), as `query --server` does: every
// closed_by a window can carry round-trips, and a name this build does not
// know is refused rather than shown as another reason; and the jobs list
// of `query jobs --json` and /api/v1/jobs with its bad-input counts.
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "schemas/window_summary.h"
#include "serve/query_report.h"
#include "storage/window_queries.h"
#include "storage/window_store.h"

namespace bubblewatch {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

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

// The period's observed time (docs/semantics.md#observations) reads back;
// a report without it has none of its keys.
TEST(QueryReportJson, ObservedTimeRoundTrips) {
  JobReport report = OneWindowPerClosedBy();
  const std::string legacy = RenderJobReportJson(report, /*pretty=*/false);
  EXPECT_THAT(legacy, Not(HasSubstr("observed")));
  absl::StatusOr<JobReport> parsed = ParseJobReportJson(legacy);
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_FALSE(parsed->observed.has_value());

  report.windows[0].observed_ns = kWindowNs;
  report.windows[1].observed_ns = kWindowNs / 4;
  report.observed.emplace();
  report.observed->Add(report.windows[0]);
  report.observed->Add(report.windows[1]);
  report.observed->Add(report.windows[2]);  // Unknown: not counted.
  EXPECT_EQ(report.observed->windows, 2);
  EXPECT_EQ(report.observed->partial_windows, 1);
  EXPECT_EQ(report.observed->unobserved_ns(), 3 * kWindowNs / 4);
  EXPECT_EQ(report.observed->coverage(), 0.625);
  const std::string json = RenderJobReportJson(report, /*pretty=*/false);
  EXPECT_THAT(json, HasSubstr("\"observed_windows\":2,\"observed_us\":"
                              "12500000,\"unobserved_us\":7500000,"
                              "\"coverage\":0.625,"
                              "\"partly_observed_windows\":1"));
  parsed = ParseJobReportJson(json);
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  ASSERT_TRUE(parsed->observed.has_value());
  EXPECT_EQ(parsed->observed->windows, 2);
  EXPECT_EQ(parsed->observed->length_ns, 2 * kWindowNs);
  EXPECT_EQ(parsed->observed->observed_ns, kWindowNs + kWindowNs / 4);
  EXPECT_EQ(parsed->observed->partial_windows, 1);
  EXPECT_EQ(RenderJobReportJson(*parsed, false), json);
}

// A window trimmed to fit the windows topic
// (docs/semantics.md#windows-that-do-not-fit) says what it left out, and
// it reads back; a window that was not has no "trimmed" key.
TEST(QueryReportJson, TrimmedNoteRoundTrips) {
  JobReport report = OneWindowPerClosedBy();
  EXPECT_THAT(RenderJobReportJson(report, false), Not(HasSubstr("trimmed")));
  report.windows[1].trimmed = WindowTrim{.limit_bytes = 32000,
                                         .original_bytes = 419624,
                                         .names_cut = 107,
                                         .devices = 30,
                                         .top_bubbles = 1,
                                         .ranks = 2,
                                         .stragglers = 3};
  const std::string json = RenderJobReportJson(report, /*pretty=*/false);
  EXPECT_THAT(json, HasSubstr("\"trimmed\":{\"limit_bytes\":32000,"
                              "\"original_bytes\":419624,\"names_cut\":107,"
                              "\"devices_left_out\":30,"
                              "\"top_bubbles_left_out\":1,"
                              "\"ranks_left_out\":2,"
                              "\"stragglers_left_out\":3}"));
  absl::StatusOr<JobReport> parsed = ParseJobReportJson(json);
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_FALSE(parsed->windows[0].trimmed.has_value());
  ASSERT_TRUE(parsed->windows[1].trimmed.has_value());
  EXPECT_EQ(*parsed->windows[1].trimmed, *report.windows[1].trimmed);
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

// /api/v1/jobs and `query jobs --json` read back by `query --server`: each
// job's lifecycle and bad-input counts round-trip, and a reply
// of a server from before the observation counts reads them as 0.
TEST(QueryReportJson, JobsRoundTripWithTheirBadInputCounts) {
  const absl::Time now = absl::FromUnixSeconds(1'800'000'000);
  std::vector<JobInfo> jobs(2);
  jobs[0].job = "clean";
  jobs[0].window_count = 3;
  jobs[0].last_seen_wall = now - absl::Seconds(2);
  jobs[1].job = "noisy";
  jobs[1].window_count = 7;
  jobs[1].last_event_ns = 123;
  jobs[1].latest_window_start_ns = 120;
  jobs[1].last_seen_wall = now - absl::Seconds(30);
  jobs[1].lifecycle.ended = true;
  jobs[1].lifecycle.batches_after_end = 1;
  jobs[1].lifecycle.overlapping_observations = 4;
  jobs[1].lifecycle.observations_backwards = 2;
  const std::string json = RenderJobsJson(jobs, /*pretty=*/false, now);
  EXPECT_THAT(json, HasSubstr("\"batches_after_end\":1,"
                              "\"overlapping_observations\":4,"
                              "\"observations_backwards\":2"));
  absl::StatusOr<std::vector<JobInfo>> parsed = ParseJobsJson(json);
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  ASSERT_EQ(parsed->size(), 2u);
  for (size_t i = 0; i < jobs.size(); ++i) {
    EXPECT_EQ((*parsed)[i].job, jobs[i].job);
    EXPECT_EQ((*parsed)[i].lifecycle, jobs[i].lifecycle) << jobs[i].job;
  }
  EXPECT_EQ(RenderJobsJson(*parsed, false, now), json);

  const std::string older = absl::StrReplaceAll(
      json,
      {{",\"overlapping_observations\":0,\"observations_backwards\":0", ""},
       {",\"overlapping_observations\":4,\"observations_backwards\":2", ""}});
  ASSERT_EQ(older.find("observations"), std::string::npos) << older;
  parsed = ParseJobsJson(older);
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ((*parsed)[1].lifecycle.batches_after_end, 1);
  EXPECT_EQ((*parsed)[1].lifecycle.overlapping_observations, 0);
  EXPECT_EQ((*parsed)[1].lifecycle.observations_backwards, 0);
}

// A job's newest event may lie before the epoch; one without events says
// null, not 0.
TEST(QueryReportJson, JobsLastEventBeforeTheEpochAndNone) {
  const absl::Time now = absl::FromUnixSeconds(1'800'000'000);
  std::vector<JobInfo> jobs(2);
  jobs[0].job = "past";
  jobs[0].last_event_ns = -4'600'000'000'000'000'000;
  jobs[1].job = "silent";
  const std::string json = RenderJobsJson(jobs, /*pretty=*/false, now);
  EXPECT_THAT(json, HasSubstr("\"last_event_ns\":-4600000000000000000,"));
  EXPECT_THAT(json, HasSubstr("\"last_event_ns\":null,"));
  absl::StatusOr<std::vector<JobInfo>> parsed = ParseJobsJson(json);
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  ASSERT_EQ(parsed->size(), 2u);
  EXPECT_EQ((*parsed)[0].last_event_ns, -4'600'000'000'000'000'000);
  EXPECT_EQ((*parsed)[1].last_event_ns, std::nullopt);
  EXPECT_EQ(RenderJobsJson(*parsed, false, now), json);
}

}  // namespace
}  // namespace bubblewatch
