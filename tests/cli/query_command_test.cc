// End-to-end tests of `bubblewatch query` in both modes (--store, and
// --server against a `bubblewatch serve` child process) and of `serve`'s
// token check, on a hand-written store; plus one run on a store the
// processor wrote (`bubblewatch demo --store`).
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "rocksdb/db.h"
#include "simdjson.h"
#include "tests/cli/cli_runner.h"
#include "tests/cli/serve_process.h"
#include "tests/storage/query_test_windows.h"
#include "tests/testing/temp_dir.h"
#include "tests/testing/test_time.h"

namespace bubblewatch {
namespace {

using ::bubblewatch::testing::RunBubblewatch;
using ::bubblewatch::testing::ServeProcess;
using ::bubblewatch::testing::WriteTempFile;
using ::testing::HasSubstr;
using ::testing::Not;

constexpr int64_t kSecondNs = 1'000'000'000;

class QueryCommandTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new testing::TempDir();
    ASSERT_TRUE(query_test::WriteFleetStore(dir_->Sub("store")).ok());
  }
  static void TearDownTestSuite() { delete dir_; }

  static std::string Store() { return " --store " + dir_->Sub("store"); }

  static testing::TempDir* dir_;
};
testing::TempDir* QueryCommandTest::dir_ = nullptr;

TEST_F(QueryCommandTest, JobsListsEveryJobWithItsWindowCount) {
  auto r = RunBubblewatch("query jobs --json" + Store());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  simdjson::dom::parser parser;
  simdjson::dom::array jobs = parser.parse(r.out)["jobs"];
  ASSERT_EQ(jobs.size(), 4u);
  EXPECT_EQ(std::string_view(jobs.at(0)["job"]), "alpha");
  EXPECT_EQ(int64_t(jobs.at(0)["window_count"]), 400);
  EXPECT_EQ(int64_t(jobs.at(0)["latest_window_start_ns"]),
            query_test::kT0 + 399 * query_test::kWindow);

  auto text = RunBubblewatch("query jobs" + Store());
  ASSERT_EQ(text.exit_code, 0) << text.err;
  EXPECT_THAT(text.out, HasSubstr("alpha"));
  EXPECT_THAT(text.out, HasSubstr("2025-11-29 11:06:30"));  // Window 399.
}

// The job lifecycle (docs/semantics.md#job-lifecycle): an ended job says so
// in `query jobs`, from the store and through a server (whose JSON the
// client reads back), and so does the bad input counted for it
// (docs/semantics.md#observations).
TEST(QueryJobsLifecycle, TheStateIsShownFromTheStoreAndThroughAServer) {
  testing::TempDir dir;
  ASSERT_TRUE(query_test::WriteFleetStoreWithGammaEnded(dir.Sub("s")).ok());
  auto server = ServeProcess::Start(dir.Sub("s"));
  ASSERT_NE(server, nullptr);
  for (const std::string& source :
       {" --store " + dir.Sub("s"), " --server " + server->url()}) {
    auto text = RunBubblewatch("query jobs" + source);
    ASSERT_EQ(text.exit_code, 0) << text.err;
    EXPECT_THAT(text.out, HasSubstr("state")) << source;
    int rows = 0;
    for (absl::string_view line : absl::StrSplit(text.out, '\n')) {
      if (absl::StartsWith(line, "gamma ")) {
        ++rows;
        EXPECT_THAT(line, HasSubstr(" ended ")) << source;
        EXPECT_THAT(line,
                    HasSubstr("  bad input: 1 batch after end, 2 overlapping "
                              "observations, 1 observation backwards"))
            << source;
      } else if (absl::StartsWith(line, "alpha ")) {
        ++rows;
        EXPECT_THAT(line, HasSubstr(" active ")) << source;
        EXPECT_THAT(line, Not(HasSubstr("bad input"))) << source;
      }
    }
    EXPECT_EQ(rows, 2) << text.out;
    auto json = RunBubblewatch("query jobs --json" + source);
    ASSERT_EQ(json.exit_code, 0) << json.err;
    simdjson::dom::parser parser;
    for (simdjson::dom::element j : parser.parse(json.out)["jobs"]) {
      const std::string_view job = j["job"];
      EXPECT_EQ(std::string_view(j["state"]),
                job == "gamma" ? "ended" : "active")
          << job << source;
      EXPECT_EQ(bool(j["ended"]), job == "gamma") << job;
      const bool gamma = job == "gamma";
      EXPECT_EQ(int64_t(j["batches_after_end"]), gamma ? 1 : 0) << job;
      EXPECT_EQ(int64_t(j["overlapping_observations"]), gamma ? 2 : 0) << job;
      EXPECT_EQ(int64_t(j["observations_backwards"]), gamma ? 1 : 0) << job;
    }
  }
}

TEST_F(QueryCommandTest, JobJsonHasTheSeriesRollingSummaryAndBubbles) {
  auto r =
      RunBubblewatch("query job alpha --last 1h --bubbles 2 --json" + Store());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  simdjson::dom::parser parser;
  simdjson::dom::element doc = parser.parse(r.out);
  EXPECT_EQ(std::string_view(doc["job"]), "alpha");
  simdjson::dom::array windows = doc["windows"];
  EXPECT_EQ(windows.size(), 360u);
  EXPECT_EQ(double(windows.at(0)["utilization"]), 0.1);  // Window 40.
  EXPECT_EQ(double(windows.at(0)["bubble_us"]), 9e6);
  EXPECT_EQ(std::string_view(windows.at(0)["culprit_before_bubble"]["name"]),
            "gemm_40");
  EXPECT_EQ(simdjson::dom::object(windows.at(0)["attribution_us"]).size(), 8u);
  simdjson::dom::array rolling = doc["rolling"];
  ASSERT_EQ(rolling.size(), 3u);
  EXPECT_EQ(std::string_view(rolling.at(0)["range"]), "1m");
  EXPECT_EQ(double(rolling.at(0)["utilization"]), 0.75);
  EXPECT_EQ(std::string_view(rolling.at(2)["range"]), "1h");
  EXPECT_EQ(double(rolling.at(2)["utilization"]), 0.55);
  simdjson::dom::element summary = doc["summary"];
  EXPECT_EQ(double(summary["worst_utilization"]), 0.1);
  EXPECT_EQ(std::string_view(summary["dominant_cause"]), "host_sync");
  EXPECT_THAT(std::string(std::string_view(summary["advice"])),
              HasSubstr("item"));
  EXPECT_EQ(double(summary["attribution_us"]["launch_overhead"]), 324e3);
  simdjson::dom::array bubbles = doc["top_bubbles"];
  ASSERT_EQ(bubbles.size(), 2u);
  EXPECT_EQ(double(bubbles.at(0)["duration_us"]), 9e6);
  EXPECT_EQ(std::string_view(bubbles.at(0)["blamed"]), "cudaStreamSynchronize");
  EXPECT_EQ(std::string_view(bubbles.at(0)["after"]["name"]), "relu");
}

TEST_F(QueryCommandTest, JobTextHasChartRollingSummaryAndAdvice) {
  auto r = RunBubblewatch("query job alpha --windows 5" + Store());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("Utilization over time"));
  EXPECT_THAT(r.out, HasSubstr("\u2588"));  // A full block: a 100 % column.
  EXPECT_THAT(r.out, HasSubstr("100% \u2524"));
  EXPECT_THAT(r.out, HasSubstr("last 1m"));
  EXPECT_THAT(r.out, HasSubstr("75.0%"));
  EXPECT_THAT(r.out, HasSubstr("mean utilization   55.0%"));
  EXPECT_THAT(r.out, HasSubstr("Top bubbles"));
  EXPECT_THAT(r.out, HasSubstr("Advice (dominant cause: host_sync"));
  EXPECT_THAT(r.out, HasSubstr("latest 5 of 360"));
  EXPECT_THAT(r.out, Not(HasSubstr("\033[")));
}

TEST_F(QueryCommandTest, FleetRanksTheLastHourByEachOrder) {
  auto r = RunBubblewatch("query fleet --json --top 2" + Store());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  simdjson::dom::parser parser;
  simdjson::dom::element doc = parser.parse(r.out);
  EXPECT_EQ(std::string_view(doc["by"]), "bubble_time");
  // beta's windows ended more than an hour before the fleet's newest.
  EXPECT_EQ(int64_t(doc["jobs"]), 3);
  simdjson::dom::array top = doc["top"];
  ASSERT_EQ(top.size(), 2u);
  EXPECT_EQ(std::string_view(top.at(0)["job"]), "alpha");
  EXPECT_EQ(double(top.at(0)["score"]), 1620e6);  // 360 x 4.5 s, in µs.
  EXPECT_EQ(std::string_view(top.at(1)["job"]), "gamma");

  auto early = RunBubblewatch(
      "query fleet --json --from 2025-11-29T10:00:00Z --to 1764410700" +
      Store());
  ASSERT_EQ(early.exit_code, 0) << early.err;
  simdjson::dom::array etop = parser.parse(early.out)["top"];
  ASSERT_EQ(etop.size(), 2u);
  EXPECT_EQ(std::string_view(etop.at(0)["job"]), "beta");

  auto alloc = RunBubblewatch("query fleet --by cause:allocator" + Store());
  ASSERT_EQ(alloc.exit_code, 0) << alloc.err;
  EXPECT_THAT(alloc.out, HasSubstr("by cause:allocator"));
  EXPECT_THAT(alloc.out,
              HasSubstr("period  2025-11-29 10:06:40 .. 2025-11-29 11:06:40 "
                        "UTC (1 hour)"));
  // odd/job ranks first: its line comes before alpha's.
  EXPECT_LT(alloc.out.find("odd/job"), alloc.out.find("alpha"));
  EXPECT_THAT(alloc.out, HasSubstr("0.473 GPU-hours lost to bubbles"));
}

TEST_F(QueryCommandTest, UnknownJobExitsOneWithTheReason) {
  auto r = RunBubblewatch("query job nope" + Store());
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.err, HasSubstr("no windows for job nope"));
  EXPECT_EQ(r.out, "");
}

TEST_F(QueryCommandTest, BadArgumentsExitTwo) {
  for (const std::string args :
       {"query job alpha --last 2d", "query job alpha --last soon",
        "query job alpha --from 1764410400", "query job alpha --from x --to y",
        "query job alpha --from 1764414000 --to 1764410400",
        "query fleet --by cause:nope", "query fleet --top 0",
        "query fleet --last 25h", "query fleet --bubbles 3",
        "query jobs --last 1h", "query jobs --top 3", "query job",
        "query everything", "query jobs --server http://127.0.0.1:1"}) {
    auto r = RunBubblewatch(args + Store());
    EXPECT_EQ(r.exit_code, 2) << args << ": " << r.err;
    EXPECT_THAT(r.err, HasSubstr("bubblewatch query: ")) << args;
  }
  auto none = RunBubblewatch("query jobs");
  EXPECT_EQ(none.exit_code, 2);
  EXPECT_THAT(none.err, HasSubstr("--store DIR or --server URL"));
}

TEST_F(QueryCommandTest, MissingStoreExitsOne) {
  auto r = RunBubblewatch("query jobs --store " + dir_->Sub("missing"));
  EXPECT_EQ(r.exit_code, 1) << r.err;
}

TEST_F(QueryCommandTest, ServerModeGivesTheSameBytesAsStoreMode) {
  auto server = ServeProcess::Start(dir_->Sub("store"));
  ASSERT_NE(server, nullptr);
  const std::string remote = " --server " + server->url();
  for (const std::string q :
       {"query jobs --json", "query fleet --json --by cause:host_sync",
        "query fleet --json --pretty --top 3",
        "query fleet --json --last 10m --by bubble_ratio",
        "query fleet --json --from 2025-11-29T10:00:00Z --to 1764410700",
        "query job alpha --json --last 10m --bubbles 3",
        "query job alpha --json --from 2025-11-29T10:10:00Z --to 1764411600",
        "query job odd/job\\ \\\"x\\\" --json"}) {
    auto local = RunBubblewatch(q + Store());
    auto over_http = RunBubblewatch(q + remote);
    ASSERT_EQ(local.exit_code, 0) << q << ": " << local.err;
    ASSERT_EQ(over_http.exit_code, 0) << q << ": " << over_http.err;
    EXPECT_EQ(local.out, over_http.out) << q;
  }
  // Text reports too (they render what the JSON carries).
  for (const std::string q : {"query fleet", "query fleet --last 5m",
                              "query job alpha --windows 0"}) {
    EXPECT_EQ(RunBubblewatch(q + Store()).out, RunBubblewatch(q + remote).out)
        << q;
  }
  auto missing = RunBubblewatch("query job nope" + remote);
  EXPECT_EQ(missing.exit_code, 1);
  EXPECT_THAT(missing.err, HasSubstr("no windows for job nope"));
}

TEST_F(QueryCommandTest, ServerWithATokenRefusesQueriesWithoutIt) {
  const std::string pid = std::to_string(getpid());
  const std::string token =
      WriteTempFile("query_token_" + pid, "s3cret-token\n");
  const std::string wrong =
      WriteTempFile("query_wrong_" + pid, "s3cret-tokeN\n");
  auto server =
      ServeProcess::Start(dir_->Sub("store"), "--token-file " + token);
  ASSERT_NE(server, nullptr);
  const std::string remote = " --server " + server->url();
  auto none = RunBubblewatch("query jobs" + remote);
  EXPECT_EQ(none.exit_code, 1);
  EXPECT_THAT(none.err, HasSubstr("bearer token"));
  auto bad = RunBubblewatch("query jobs --token-file " + wrong + remote);
  EXPECT_EQ(bad.exit_code, 1);
  auto good = RunBubblewatch("query jobs --token-file " + token + remote);
  EXPECT_EQ(good.exit_code, 0) << good.err;
  EXPECT_THAT(good.out, HasSubstr("alpha"));
}

TEST_F(QueryCommandTest, UnreachableServerExitsOne) {
  // Port 1 on loopback: nothing listens there.
  auto r = RunBubblewatch("query jobs --server http://127.0.0.1:1");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.err, HasSubstr("no reply from http://127.0.0.1:1"));
}

// A two-rank job's windows with their collective analysis
// (docs/semantics.md#streaming-collectives): rank 1 makes rank 0 wait, by
// data loading, in windows 0 and 2; window 1 has no analysis.
WindowSummary RankedWindow(int64_t index, bool with_collectives) {
  WindowSummary w = query_test::MakeWindow("ranked", index, 5 * kSecondNs);
  if (!with_collectives) return w;
  WindowCollectives& c = w.collectives.emplace();
  c.kernels = 20;
  c.matched = 10;
  c.used = 9;
  c.unsynchronized = 1;
  c.unattributed = 1;
  const int64_t ms = 1'000'000;
  c.ranks.push_back(RankWindow{.rank = 0,
                               .host = "node-a",
                               .device = 0,
                               .span_ns = 10'000 * ms,
                               .compute_ns = 6'000 * ms,
                               .comm_ns = 3'000 * ms,
                               .comm_exposed_ns = 2'000 * ms,
                               .comm_wait_ns = 1'000 * ms * (index + 1),
                               .wait_caused_ns = 0,
                               .arrived_last = 1,
                               .clock_offset_ns = 0});
  c.ranks.push_back(RankWindow{.rank = 1,
                               .host = "node-b",
                               .device = 0,
                               .span_ns = 10'000 * ms,
                               .compute_ns = 5'000 * ms,
                               .comm_ns = 1'000 * ms,
                               .comm_exposed_ns = 500 * ms,
                               .comm_wait_ns = 0,
                               .wait_caused_ns = 1'000 * ms * (index + 1),
                               .arrived_last = 8,
                               .clock_offset_ns = -2 * ms,
                               .clock_drift_ns_per_s = 1'500,
                               .clock_instances = 9,
                               .clock_residual_ns = 4'000,
                               .clock_connected = true,
                               .clock_corrected = true});
  c.ranks[0].clock_connected = true;
  StragglerWindow& s = c.stragglers.emplace_back();
  s.rank = 1;
  s.wait_caused_ns = 1'000 * ms * (index + 1);
  s.arrived_last = 8;
  s.causes[static_cast<int>(BubbleCause::kDataLoading)] = s.wait_caused_ns - ms;
  s.unattributed_ns = ms;
  // The root blame and its cost (docs/semantics.md#root-cause,
  // #what-it-cost): a fifth of its wait passed on through rank 0.
  s.host = "node-b";
  s.direct_wait_caused_ns = 800 * ms * (index + 1);
  s.via.push_back(Straggler::Via{.rank = 0, .wait_ns = 200 * ms * (index + 1)});
  s.saved_ns = 100 * ms * (index + 1);
  c.job_ns = 10'000 * ms;
  c.job_ns_without_stragglers = c.job_ns - 100 * ms * (index + 1);
  return w;
}

TEST(QueryRanks, JobJsonHasRanksAndStragglersForThePeriodAndEachWindow) {
  testing::TempDir dir;
  const std::string store = dir.Sub("store");
  {
    auto s = OpenRocksDbWindowStore(store);
    ASSERT_TRUE(s.ok()) << s.status();
    StoreBatch batch;
    for (int64_t i = 0; i < 3; ++i) {
      batch.windows.push_back(RankedWindow(i, /*with_collectives=*/i != 1));
    }
    batch.jobs.push_back(JobUpdate{.job = "ranked",
                                   .last_event_ns = query_test::kT0,
                                   .last_seen_wall = absl::Now()});
    ASSERT_TRUE((*s)->Commit(batch).ok());
  }
  auto r = RunBubblewatch("query job ranked --json --store " + store);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  simdjson::dom::parser parser;
  simdjson::dom::element doc = parser.parse(r.out);
  // The period: windows 0 and 2 summed.
  simdjson::dom::array ranks = doc["ranks"];
  ASSERT_EQ(ranks.size(), 2u);
  EXPECT_EQ(int64_t(ranks.at(0)["rank"]), 0);
  EXPECT_EQ(std::string_view(ranks.at(0)["host"]), "node-a");
  EXPECT_EQ(double(ranks.at(0)["comm_wait_us"]), 4e6);  // 1 s + 3 s.
  EXPECT_EQ(double(ranks.at(0)["busy_useful_utilization"]),
            (12e9 - 4e9) / 20e9);
  EXPECT_EQ(double(ranks.at(1)["wait_caused_us"]), 4e6);
  EXPECT_EQ(int64_t(ranks.at(1)["arrived_last"]), 16);
  simdjson::dom::array stragglers = doc["stragglers"];
  ASSERT_EQ(stragglers.size(), 1u);
  EXPECT_EQ(int64_t(stragglers.at(0)["rank"]), 1);
  EXPECT_EQ(double(stragglers.at(0)["causes_us"]["data_loading"]), 4e6 - 2e3);
  EXPECT_EQ(double(stragglers.at(0)["unattributed_us"]), 2e3);
  EXPECT_EQ(int64_t(doc["collectives"]["used"]), 18);
  EXPECT_EQ(std::string_view(doc["collectives"]["key"]), "pg_seq");
  // The root, its blame and cost, summed over windows 0 and 2.
  simdjson::dom::element root = stragglers.at(0);
  EXPECT_TRUE(bool(root["root"]));
  EXPECT_EQ(std::string_view(root["cause"]), "data_loading");
  EXPECT_EQ(std::string_view(root["host"]), "node-b");
  EXPECT_EQ(double(root["direct_wait_caused_us"]), 3.2e6);
  ASSERT_EQ(root["via"].get_array().size(), 1u);
  EXPECT_EQ(int64_t(root["via"].at(0)["rank"]), 0);
  EXPECT_EQ(double(root["via"].at(0)["wait_us"]), 0.8e6);
  EXPECT_EQ(double(root["saved_us"]), 0.4e6);
  EXPECT_EQ(double(doc["what_if"]["job_us"]), 20e6);
  EXPECT_EQ(double(doc["what_if"]["job_us_without_stragglers"]), 19.6e6);
  // A rank's clock over the period: the latest window's.
  EXPECT_EQ(double(ranks.at(1)["clock_offset_us"]), -2e3);
  EXPECT_EQ(double(ranks.at(1)["clock_drift_us_per_s"]), 1.5);
  EXPECT_TRUE(bool(ranks.at(1)["clock_corrected"]));
  EXPECT_TRUE(ranks.at(0)["clock_drift_us_per_s"].is_null());
  // Each window: its own figures; none in the window without an analysis.
  simdjson::dom::array windows = doc["windows"];
  ASSERT_EQ(windows.size(), 3u);
  EXPECT_EQ(double(windows.at(2)["ranks"].at(0)["comm_wait_us"]), 3e6);
  EXPECT_EQ(double(windows.at(2)["ranks"].at(1)["clock_offset_us"]), -2e3);
  EXPECT_EQ(double(windows.at(0)["stragglers"].at(0)["wait_caused_us"]), 1e6);
  EXPECT_EQ(double(windows.at(2)["stragglers"].at(0)["saved_us"]), 0.3e6);
  EXPECT_EQ(double(windows.at(2)["what_if"]["job_us_without_stragglers"]),
            9.7e6);
  EXPECT_EQ(windows.at(1)["ranks"].error(), simdjson::NO_SUCH_FIELD);

  auto text = RunBubblewatch("query job ranked --store " + store);
  ASSERT_EQ(text.exit_code, 0) << text.err;
  EXPECT_THAT(text.out, HasSubstr("Ranks"));
  EXPECT_THAT(text.out, HasSubstr("node-b"));
  EXPECT_THAT(text.out, HasSubstr("data_loading 100.0%"));
  EXPECT_THAT(text.out, HasSubstr("(root)"));
  EXPECT_THAT(text.out, HasSubstr("held up ranks 0 ("));
  EXPECT_THAT(text.out, HasSubstr("-2000 us"));  // Rank 1's clock.
  EXPECT_THAT(text.out, HasSubstr("What if"));

  // The server gives the same bytes, and the client renders the same text.
  auto server = ServeProcess::Start(store);
  ASSERT_NE(server, nullptr);
  for (const std::string q : {"query job ranked --json", "query job ranked"}) {
    EXPECT_EQ(RunBubblewatch(q + " --store " + store).out,
              RunBubblewatch(q + " --server " + server->url()).out)
        << q;
  }
}

// Observed time (docs/semantics.md#observations): shown per window where
// stored (observed_us, coverage; "(observed ...)" in the rows), and absent
// where not, so a legacy job's report is unchanged.
TEST(QueryObserved, JobShowsObservedTimePerWindowWhereKnown) {
  testing::TempDir dir;
  const std::string store = dir.Sub("store");
  {
    auto s = OpenRocksDbWindowStore(store);
    ASSERT_TRUE(s.ok()) << s.status();
    StoreBatch batch;
    for (int64_t i = 0; i < 2; ++i) {
      WindowSummary w = query_test::MakeWindow("observed", i, 2 * kSecondNs);
      if (i == 1) w.observed_ns = 2'500'000'000;
      batch.windows.push_back(std::move(w));
    }
    batch.jobs.push_back(JobUpdate{.job = "observed",
                                   .last_event_ns = query_test::kT0,
                                   .last_seen_wall = absl::Now()});
    ASSERT_TRUE((*s)->Commit(batch).ok());
  }
  auto r = RunBubblewatch("query job observed --json --store " + store);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  simdjson::dom::parser parser;
  simdjson::dom::element doc = parser.parse(r.out);
  simdjson::dom::array windows = doc["windows"];
  ASSERT_EQ(windows.size(), 2u);
  EXPECT_EQ(windows.at(0)["observed_us"].error(), simdjson::NO_SUCH_FIELD);
  EXPECT_EQ(windows.at(0)["coverage"].error(), simdjson::NO_SUCH_FIELD);
  EXPECT_EQ(double(windows.at(1)["observed_us"]), 2.5e6);
  EXPECT_EQ(double(windows.at(1)["coverage"]), 0.25);
  // The period's figures, over the one window whose observed time is known.
  simdjson::dom::element summary = doc["summary"];
  EXPECT_EQ(int64_t(summary["observed_windows"]), 1);
  EXPECT_EQ(double(summary["observed_us"]), 2.5e6);
  EXPECT_EQ(double(summary["unobserved_us"]), 7.5e6);
  EXPECT_EQ(double(summary["coverage"]), 0.25);
  EXPECT_EQ(int64_t(summary["partly_observed_windows"]), 1);
  auto text = RunBubblewatch("query job observed --store " + store);
  ASSERT_EQ(text.exit_code, 0) << text.err;
  EXPECT_THAT(text.out, HasSubstr("(observed 2.500 s, 25.0%)"));
  EXPECT_THAT(text.out,
              HasSubstr("observed           2.500 s  (25.0% of 1 window(s), "
                        "1 partly observed)\n  unobserved         7.500 s\n"));
  const std::vector<absl::string_view> parts =
      absl::StrSplit(text.out, "(observed");
  EXPECT_EQ(parts.size(), 2u) << "only the window whose observed time is known";
}

// `query fleet --by comm_wait|straggler_wait`: "ranked" waits 1 + 3 s and
// its straggler caused 1 + 3 s; "other" waits twice that and caused half;
// "alpha", single-rank, has neither (and no such keys in its entry).
TEST(QueryRanks, FleetRanksByCommWaitAndByStragglerWait) {
  testing::TempDir dir;
  const std::string store = dir.Sub("store");
  {
    auto s = OpenRocksDbWindowStore(store);
    ASSERT_TRUE(s.ok()) << s.status();
    StoreBatch batch;
    for (int64_t i = 0; i < 3; ++i) {
      batch.windows.push_back(RankedWindow(i, /*with_collectives=*/i != 1));
      WindowSummary other = RankedWindow(i, /*with_collectives=*/i != 1);
      other.job = "other";
      if (other.collectives) {
        other.collectives->ranks[0].comm_wait_ns *= 2;
        other.collectives->stragglers[0].wait_caused_ns /= 2;
        // Its stragglers cost it twice as much.
        other.collectives->job_ns_without_stragglers -= 100'000'000 * (i + 1);
      }
      batch.windows.push_back(std::move(other));
      batch.windows.push_back(query_test::MakeWindow("alpha", i, kSecondNs));
    }
    for (const char* job : {"ranked", "other", "alpha"}) {
      batch.jobs.push_back(JobUpdate{.job = job,
                                     .last_event_ns = query_test::kT0,
                                     .last_seen_wall = absl::Now()});
    }
    ASSERT_TRUE((*s)->Commit(batch).ok());
  }
  struct Want {
    std::string by;
    std::string first, second;
    double first_us, second_us;
  };
  for (const Want& want :
       {Want{"comm_wait", "other", "ranked", 8e6, 4e6},
        Want{"straggler_wait", "ranked", "other", 4e6, 2e6},
        // The what-if's saving x 2 ranks (GPUs): ranked 2 x (0.1 + 0.3) s,
        // other twice that.
        Want{"straggler_cost", "other", "ranked", 1.6e6, 0.8e6}}) {
    SCOPED_TRACE(want.by);
    auto r = RunBubblewatch("query fleet --json --by " + want.by + " --store " +
                            store);
    ASSERT_EQ(r.exit_code, 0) << r.err;
    simdjson::dom::parser parser;
    simdjson::dom::element doc = parser.parse(r.out);
    EXPECT_EQ(std::string_view(doc["by"]), want.by);
    simdjson::dom::array top = doc["top"];
    ASSERT_EQ(top.size(), 3u);
    EXPECT_EQ(std::string_view(top.at(0)["job"]), want.first);
    EXPECT_EQ(double(top.at(0)["score"]), want.first_us);
    EXPECT_EQ(std::string_view(top.at(1)["job"]), want.second);
    EXPECT_EQ(double(top.at(1)["score"]), want.second_us);
    EXPECT_EQ(std::string_view(top.at(2)["job"]), "alpha");
    EXPECT_EQ(double(top.at(2)["score"]), 0);
    EXPECT_EQ(int64_t(top.at(0)["period"]["collective_windows"]), 2);
    EXPECT_EQ(top.at(2)["period"]["comm_wait_us"].error(),
              simdjson::NO_SUCH_FIELD);
    EXPECT_EQ(double(doc["fleet"]["comm_wait_us"]), 12e6);
    EXPECT_EQ(double(doc["fleet"]["straggler_wait_us"]), 6e6);
    EXPECT_EQ(double(doc["fleet"]["straggler_cost_us"]), 2.4e6);
    auto text =
        RunBubblewatch("query fleet --by " + want.by + " --store " + store);
    ASSERT_EQ(text.exit_code, 0) << text.err;
    EXPECT_THAT(text.out, HasSubstr("straggler wait"));
    if (want.by == "straggler_cost") {
      EXPECT_THAT(text.out, HasSubstr("GPU-hours lost to stragglers"));
    }
  }
  // Through the HTTP API's fleet endpoint (by=...): the same bytes.
  auto server = ServeProcess::Start(store);
  ASSERT_NE(server, nullptr);
  for (const std::string q :
       {"query fleet --json --by comm_wait", "query fleet --by straggler_wait",
        "query fleet --json --by straggler_cost"}) {
    EXPECT_EQ(RunBubblewatch(q + " --store " + store).out,
              RunBubblewatch(q + " --server " + server->url()).out)
        << q;
  }
  // The other orders' text has no wait columns.
  EXPECT_THAT(RunBubblewatch("query fleet --store " + store).out,
              Not(HasSubstr("straggler wait")));
}

TEST_F(QueryCommandTest, SingleRankJobsHaveNoRanks) {
  auto r = RunBubblewatch("query job alpha --json" + Store());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, Not(HasSubstr("\"ranks\"")));
  EXPECT_THAT(r.out, Not(HasSubstr("\"stragglers\"")));
  auto text = RunBubblewatch("query job alpha" + Store());
  EXPECT_THAT(text.out, Not(HasSubstr("Stragglers")));
}

TEST(QueryOnProcessorStore, AnswersOnTheStoreTheDemoWrote) {
  testing::TempDir dir;
  const std::string store = dir.Sub("store");
  auto demo = RunBubblewatch("demo --jobs 2 --duration 25s --store " + store);
  ASSERT_EQ(demo.exit_code, 0) << demo.err;
  auto jobs = RunBubblewatch("query jobs --json --store " + store);
  ASSERT_EQ(jobs.exit_code, 0) << jobs.err;
  simdjson::dom::parser parser;
  simdjson::dom::array list = parser.parse(jobs.out)["jobs"];
  ASSERT_EQ(list.size(), 2u);
  const std::string job(std::string_view(list.at(0)["job"]));
  EXPECT_GE(int64_t(list.at(0)["window_count"]), 2);

  auto report = RunBubblewatch("query job " + job + " --store " + store);
  ASSERT_EQ(report.exit_code, 0) << report.err;
  EXPECT_THAT(report.out, HasSubstr("Bubble time by cause"));
  auto fleet = RunBubblewatch("query fleet --json --store " + store);
  ASSERT_EQ(fleet.exit_code, 0) << fleet.err;
  simdjson::dom::array top = parser.parse(fleet.out)["top"];
  EXPECT_EQ(top.size(), 2u);
}

// Every log line goes to stderr, stdout carries only the report (an earlier
// review item 13). The reproduction: a store with more level-0 files than
// RocksDB's slowdown trigger (20), as a store whose compactions fell behind
// has, so that opening it read-only logs RocksDB's "Stalling writes" warning
// while `query` prints JSON. The warning was on stdout, ahead of the JSON, for
// every command that did not set up logging itself (query, analyze, diff,
// alerts).
// `serve --brokers` at a port where nothing listens: SIGTERM ends it within
// a second or two, exit 0, not after its waits for a broker (18.2 s
// measured before, docs/query.md).
TEST(ServeStop, SigtermEndsServeBrokersSoonWhenNoBrokerAnswers) {
  testing::TempDir dir;
  auto server = ServeProcess::StartCommand(
      "serve --brokers 127.0.0.1:1 --store '" + dir.Sub("s") +
      "' --listen 127.0.0.1:0 --log-level error");
  ASSERT_NE(server, nullptr);
  absl::SleepFor(absl::Seconds(1));  // Inside its first wait for a broker.
  const absl::Time start = absl::Now();
  server.reset();  // SIGTERM; expects exit code 0.
  const absl::Duration took = absl::Now() - start;
  EXPECT_LT(took, testing::Scaled(absl::Seconds(5)));
  std::printf("serve --brokers stopped %s after SIGTERM\n",
              absl::FormatDuration(took).c_str());
}

TEST(QueryLogs, RocksDbWarningsGoToStderrNotStdout) {
  testing::TempDir dir;
  const std::string store = dir.Sub("store");
  ASSERT_TRUE(query_test::WriteFleetStore(store).ok());
  {
    // 24 flushes with compactions off: 24 level-0 files in `default`.
    std::vector<std::string> names;
    ASSERT_TRUE(
        rocksdb::DB::ListColumnFamilies(rocksdb::DBOptions(), store, &names)
            .ok());
    rocksdb::ColumnFamilyOptions cf;
    cf.disable_auto_compactions = true;
    std::vector<rocksdb::ColumnFamilyDescriptor> families;
    for (const std::string& name : names) families.emplace_back(name, cf);
    std::vector<rocksdb::ColumnFamilyHandle*> handles;
    rocksdb::DB* raw = nullptr;
    ASSERT_TRUE(
        rocksdb::DB::Open(rocksdb::DBOptions(), store, families, &handles, &raw)
            .ok());
    std::unique_ptr<rocksdb::DB> db(raw);
    for (int i = 0; i < 24; ++i) {
      ASSERT_TRUE(
          db->Put(rocksdb::WriteOptions(), "filler", std::to_string(i)).ok());
      ASSERT_TRUE(db->Flush(rocksdb::FlushOptions()).ok());
    }
    for (rocksdb::ColumnFamilyHandle* h : handles) {
      ASSERT_TRUE(db->DestroyColumnFamilyHandle(h).ok());
    }
    ASSERT_TRUE(db->Close().ok());
  }
  auto r = RunBubblewatch("query job alpha --json --store " + store);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  // The scenario is real: RocksDB did warn, on stderr.
  EXPECT_THAT(r.err, HasSubstr("rocksdb: "));
  EXPECT_THAT(r.err, HasSubstr("Stalling writes"));
  EXPECT_EQ(r.out.find("rocksdb"), std::string::npos) << r.out.substr(0, 300);
  ASSERT_FALSE(r.out.empty());
  EXPECT_EQ(r.out.front(), '{') << r.out.substr(0, 300);
  simdjson::dom::parser parser;
  simdjson::dom::element doc;
  EXPECT_EQ(parser.parse(r.out).get(doc), simdjson::SUCCESS);
}

}  // namespace
}  // namespace bubblewatch
