// `bubblewatch analyze --timeline` (cli/timeline_export.h): the export of a
// synthetic job whose hosts' clocks are apart (offset and drift) and of a
// real Kineto trace, read back by `analyze`, gives the inputs' figures; the
// ranks are on one clock in it (a collective's kernels end together); its
// own tracks (bubbles, waits, transfers, flows, counters) are there and
// consistent; --ranks and --from/--to cut it.
#include <algorithm>
#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "ingest/chrome/chrome_trace_writer.h"
#include "ingest/synthetic/synthetic_parallel_job.h"
#include "simdjson.h"
#include "tests/cli/cli_runner.h"
#include "tests/testing/files.h"
#include "tests/testing/temp_dir.h"

namespace bubblewatch {
namespace {

using testing::CliResult;
using testing::RunBubblewatch;

// Hosts 3 ms apart, one drifting 40 ppm; spans over a second so that the
// drift is fitted (CollectiveOptions::min_drift_span_ns).
ParallelJob ClocksApartJob() {
  ParallelJobOptions o;
  o.tp = 2;
  o.dp = 2;
  o.steps = 10;
  o.kernel_ns = 10'000'000;
  o.kernel_jitter_ns = 100'000;
  o.all_reduce_ns = 2'000'000;
  o.clock_offset_ns = {0, 3'000'000};
  o.drift_ppm = {0, 40};
  o.host_names = true;
  o.roots = {{3, 4, 30'000'000, StragglerCause::kCompute}};
  return MakeParallelJob(o);
}

std::string WriteJob(const ParallelJob& job, const testing::TempDir& dir) {
  std::string files;
  for (const Trace& t : job.ranks) {
    const std::string path = dir.Sub(absl::StrCat("rank-", t.rank, ".json"));
    EXPECT_TRUE(WriteChromeTraceFile(t, path).ok());
    absl::StrAppend(&files, " '", path, "'");
  }
  return files;
}

// Relative and absolute slack for figures that a clock's drift, removed
// in the export, scales by its few ppm.
void ExpectNear(double a, double b, const std::string& what) {
  EXPECT_LE(std::abs(a - b), std::max(0.01, 1e-4 * std::abs(a))) << what;
}

struct RankFigures {
  double utilization = 0;
  double comm_wait_us = 0;
  double bubble_us = 0;
  std::map<std::string, double> causes;
};

std::map<int64_t, RankFigures> Figures(const std::string& report) {
  simdjson::dom::parser parser;
  simdjson::dom::element doc = parser.parse(report);
  std::map<int64_t, RankFigures> out;
  simdjson::dom::array ranks = doc["ranks"];
  simdjson::dom::array files = doc["files"];
  EXPECT_EQ(ranks.size(), files.size());
  size_t i = 0;
  for (simdjson::dom::element r : ranks) {
    RankFigures& f = out[int64_t(r["rank"])];
    f.utilization = double(r["utilization"]);
    f.comm_wait_us = double(r["comm_wait_us"]);
    simdjson::dom::element file = files.at(i++);
    f.bubble_us = double(file["bubble_time_us"]);
    for (auto [cause, us] : simdjson::dom::object(file["attribution_us"])) {
      f.causes[std::string(cause)] = double(us);
    }
  }
  return out;
}

// Slices on one track (pid, tid) nest: Perfetto and chrome://tracing cut
// or drop a slice that partly overlaps another. Checked for bubblewatch's
// own tracks (the inputs' events are as the inputs had them).
void ExpectOwnTracksNest(simdjson::dom::element doc) {
  std::map<std::pair<int64_t, int64_t>, std::vector<std::pair<double, double>>>
      tracks;
  for (simdjson::dom::element e : simdjson::dom::array(doc["traceEvents"])) {
    if (std::string_view(e["ph"]) != "X") continue;
    if (std::string_view(e["cat"]).rfind("bubblewatch", 0) != 0) continue;
    const double ts = double(e["ts"]);
    tracks[{int64_t(e["pid"]), int64_t(e["tid"])}].push_back(
        {ts, ts + double(e["dur"])});
  }
  ASSERT_FALSE(tracks.empty());
  for (auto& [track, slices] : tracks) {
    std::sort(slices.begin(), slices.end(), [](const auto& a, const auto& b) {
      return a.first < b.first || (a.first == b.first && a.second > b.second);
    });
    std::vector<double> open;  // Ends of the enclosing slices.
    for (const auto& [start, end] : slices) {
      while (!open.empty() && open.back() <= start + 1e-4) open.pop_back();
      if (!open.empty()) {
        EXPECT_LE(end, open.back() + 1e-4) << "pid " << track.first << " tid "
                                           << track.second << " at " << start;
      }
      open.push_back(end);
    }
  }
}

TEST(AnalyzeTimeline, RoundTripOfAJobWithClocksApart) {
  const ParallelJob job = ClocksApartJob();
  testing::TempDir dir;
  const std::string files = WriteJob(job, dir);
  const std::string out = dir.Sub("job.json.gz");
  const CliResult a = RunBubblewatch(
      absl::StrCat("analyze --json --timeline '", out, "'", files));
  ASSERT_EQ(a.exit_code, 0) << a.err;
  EXPECT_NE(a.err.find("4 ranks"), std::string::npos) << a.err;
  const CliResult b =
      RunBubblewatch(absl::StrCat("analyze --json '", out, "'"));
  ASSERT_EQ(b.exit_code, 0) << b.err;

  // The clocks were corrected, drift included, or this proves little.
  simdjson::dom::parser parser;
  simdjson::dom::element in = parser.parse(a.out);
  bool drift_fitted = false;
  for (simdjson::dom::element r : simdjson::dom::array(in["ranks"])) {
    if (!r["clock_drift_us_per_s"].is_null()) drift_fitted = true;
  }
  EXPECT_TRUE(drift_fitted) << a.out.substr(0, 2000);

  const std::map<int64_t, RankFigures> before = Figures(a.out);
  const std::map<int64_t, RankFigures> after = Figures(b.out);
  ASSERT_EQ(before.size(), 4u);
  ASSERT_EQ(after.size(), before.size());
  for (const auto& [rank, f] : before) {
    ASSERT_TRUE(after.contains(rank)) << rank;
    const RankFigures& g = after.at(rank);
    const std::string who = absl::StrCat("rank ", rank);
    ExpectNear(f.utilization * 1e6, g.utilization * 1e6, who + " utilization");
    ExpectNear(f.comm_wait_us, g.comm_wait_us, who + " comm wait");
    ExpectNear(f.bubble_us, g.bubble_us, who + " bubble time");
    for (const auto& [cause, us] : f.causes) {
      ExpectNear(us, g.causes.at(cause), who + " " + cause);
    }
  }
  simdjson::dom::parser parser2;
  simdjson::dom::element back = parser2.parse(b.out);
  EXPECT_EQ(int64_t(in["stragglers"].at(0)["rank"]), 3);
  EXPECT_EQ(int64_t(back["stragglers"].at(0)["rank"]), 3);
}

TEST(AnalyzeTimeline, PutsTheRanksOnOneClockWithItsOwnTracks) {
  const ParallelJob job = ClocksApartJob();
  testing::TempDir dir;
  const std::string files = WriteJob(job, dir);
  const std::string out = dir.Sub("job.json");
  const CliResult a =
      RunBubblewatch(absl::StrCat("analyze --timeline '", out, "'", files));
  ASSERT_EQ(a.exit_code, 0) << a.err;
  simdjson::dom::parser parser;
  simdjson::dom::element doc = parser.load(out);
  EXPECT_TRUE(doc["bubblewatch_timeline"].is_object());
  EXPECT_EQ(int64_t(doc["distributedInfo"]["world_size"]), 4);
  ExpectOwnTracksNest(doc);

  // Each collective kernel's end by (group, Seq) and rank: equal in true
  // time, so equal on the job's clock within the solution's residuals.
  std::map<std::pair<std::string, int64_t>, std::vector<double>> ends;
  std::map<int64_t, std::string> process_names;
  absl::flat_hash_map<int64_t, int> flow_starts;
  absl::flat_hash_map<int64_t, int> flow_ends;
  std::map<std::string, int> own;  // Slices of bubblewatch's, by category.
  std::map<int64_t, double> saved_us;
  for (simdjson::dom::element e : simdjson::dom::array(doc["traceEvents"])) {
    const std::string_view ph = e["ph"];
    if (ph == "M" && std::string_view(e["name"]) == "process_name") {
      process_names[int64_t(e["pid"])] = std::string(e["args"]["name"]);
    } else if (ph == "s") {
      ++flow_starts[int64_t(e["id"])];
    } else if (ph == "f") {
      ++flow_ends[int64_t(e["id"])];
    } else if (ph == "C") {
      saved_us[int64_t(e["pid"])] = double(e["args"]["saved_us"]);
    } else if (ph == "X") {
      const std::string cat = std::string(std::string_view(e["cat"]));
      if (cat.rfind("bubblewatch", 0) == 0) {
        ++own[cat];
        if (cat == "bubblewatch_bubble") {
          EXPECT_EQ(std::string_view(e["name"]),
                    std::string_view(e["args"]["cause"]));
          EXPECT_TRUE(e["args"]["advice"].is_string());
          EXPECT_TRUE(e["args"]["blamed"].is_string());
        }
        continue;
      }
      simdjson::dom::element seq;
      if (e["args"]["Seq"].get(seq) != simdjson::SUCCESS) continue;
      ends[{std::string(std::string_view(e["args"]["Process Group Name"])),
            int64_t(seq)}]
          .push_back(double(e["ts"]) + double(e["dur"]));
    }
  }
  ASSERT_EQ(process_names.size(), 4u);
  EXPECT_EQ(process_names[0], "rank 0 (host-0)");
  EXPECT_EQ(process_names[3], "rank 3 (host-1)");
  ASSERT_EQ(ends.size(), job.truth.instances.size());
  double worst_export = 0;
  for (const auto& [key, e] : ends) {
    const auto [lo, hi] = std::minmax_element(e.begin(), e.end());
    worst_export = std::max(worst_export, *hi - *lo);
  }
  // In the inputs the hosts' ends are the offset (3 ms) apart.
  double worst_input = 0;
  for (const ParallelInstanceTruth& t : job.truth.instances) {
    std::vector<double> local;
    for (int32_t m : t.members) {
      local.push_back((t.end_ns + job.truth.ClockOffsetAt(m, t.end_ns)) / 1e3);
    }
    const auto [lo, hi] = std::minmax_element(local.begin(), local.end());
    worst_input = std::max(worst_input, *hi - *lo);
  }
  EXPECT_GT(worst_input, 2900.0);
  EXPECT_LT(worst_export, 2.0);

  EXPECT_GT(own["bubblewatch_bubble"], 0);
  EXPECT_GT(own["bubblewatch_wait"], 0);
  EXPECT_GT(own["bubblewatch_transfer"], 0);
  EXPECT_GT(own["bubblewatch_root"], 0);
  // Every arrow starts once and ends once.
  ASSERT_FALSE(flow_starts.empty());
  EXPECT_EQ(flow_starts.size(), flow_ends.size());
  for (const auto& [id, n] : flow_starts) {
    EXPECT_EQ(n, 1) << id;
    EXPECT_EQ(flow_ends[id], 1) << id;
  }
  // The planted root's what-if, as the report gives it.
  const CliResult r = RunBubblewatch(absl::StrCat("analyze --json", files));
  simdjson::dom::parser parser2;
  simdjson::dom::element report = parser2.parse(r.out);
  simdjson::dom::element top = report["stragglers"].at(0);
  ASSERT_TRUE(saved_us.contains(int64_t(top["rank"])));
  EXPECT_EQ(saved_us[int64_t(top["rank"])], double(top["saved_us"]));
}

void ExpectRoundTripOfOneTrace(const std::string& trace) {
  testing::TempDir dir;
  const std::string out = dir.Sub("rank0.json.gz");
  const CliResult a = RunBubblewatch(
      absl::StrCat("analyze --json --timeline '", out, "' '", trace, "'"));
  EXPECT_EQ(a.exit_code, 0) << a.err;
  const CliResult b =
      RunBubblewatch(absl::StrCat("analyze --json '", out, "'"));
  EXPECT_EQ(b.exit_code, 0) << b.err;
  simdjson::dom::parser pa;
  simdjson::dom::parser pb;
  simdjson::dom::element x = pa.parse(a.out);
  simdjson::dom::element y = pb.parse(b.out);
  // One clock, no correction: the figures are the same to the digit.
  for (const char* key :
       {"total_span_us", "compute_time_us", "bubble_time_us", "utilization",
        "largest_bubble_us", "attribution_us", "devices", "bubbles"}) {
    EXPECT_EQ(simdjson::to_string(x[key]), simdjson::to_string(y[key])) << key;
  }
  EXPECT_EQ(int64_t(x["input"]["kernels"]), int64_t(y["input"]["kernels"]));
  EXPECT_EQ(int64_t(y["input"]["rank"]), 0);
}

// rank0: older Kineto (absolute ts); nccl_data: newer (ts relative to a
// baseTimeNanoseconds written after the events).
TEST(AnalyzeTimeline, RoundTripOfARealTrace) {
  for (const char* name : {"hta/rank0.json.gz", "hta/nccl_data.json.gz"}) {
    SCOPED_TRACE(name);
    ExpectRoundTripOfOneTrace(testing::RealTrace(name));
  }
}

// Two ranks of a real 128-rank job (HTA's sampled traces): each rank's
// figures and the job's collectives read back the same. (A rank whose clock
// was not connected is written uncorrected, and reads back connected: the
// export has one clock.)
TEST(AnalyzeTimeline, RoundTripOfARealJobPair) {
  const std::string inputs = absl::StrCat(
      " '", testing::RealTrace("hta/sampled_rank-0.json.gz"), "' '",
      testing::RealTrace("hta/sampled_rank-1.json.gz"), "'");
  testing::TempDir dir;
  const std::string out = dir.Sub("pair.json.gz");
  const CliResult a = RunBubblewatch(
      absl::StrCat("analyze --json --timeline '", out, "'", inputs));
  ASSERT_EQ(a.exit_code, 0) << a.err;
  const CliResult b =
      RunBubblewatch(absl::StrCat("analyze --json '", out, "'"));
  ASSERT_EQ(b.exit_code, 0) << b.err;
  simdjson::dom::parser pa;
  simdjson::dom::parser pb;
  simdjson::dom::element x = pa.parse(a.out);
  simdjson::dom::element y = pb.parse(b.out);
  simdjson::dom::array xr = x["ranks"];
  simdjson::dom::array yr = y["ranks"];
  ASSERT_EQ(xr.size(), 2u);
  ASSERT_EQ(yr.size(), 2u);
  for (size_t i = 0; i < 2; ++i) {
    for (const char* key :
         {"rank", "device", "utilization", "busy_useful_utilization", "comm_us",
          "comm_exposed_us", "comm_wait_us", "wait_caused_us",
          "arrived_last"}) {
      EXPECT_EQ(simdjson::to_string(xr.at(i)[key]),
                simdjson::to_string(yr.at(i)[key]))
          << i << " " << key;
    }
    for (const char* key : {"utilization", "attribution_us", "bubbles"}) {
      EXPECT_EQ(simdjson::to_string(x["files"].at(i)[key]),
                simdjson::to_string(y["files"].at(i)[key]))
          << i << " " << key;
    }
  }
  EXPECT_EQ(simdjson::to_string(x["collectives"]),
            simdjson::to_string(y["collectives"]));
  EXPECT_EQ(simdjson::to_string(x["stragglers"]),
            simdjson::to_string(y["stragglers"]));
}

// An Nsight Systems export of a node: one trace, a rank per device, whose
// CPU events serve both. The export writes them under rank 0 and says the
// two came from one trace; read back, they are one trace again.
TEST(AnalyzeTimeline, RoundTripOfANodeExport) {
  const std::string trace = testing::RealTrace("nsys/mfu_2gpu_before.sqlite");
  testing::TempDir dir;
  const std::string out = dir.Sub("node.json");
  const CliResult a = RunBubblewatch(
      absl::StrCat("analyze --json --timeline '", out, "' '", trace, "'"));
  ASSERT_EQ(a.exit_code, 0) << a.err;
  const CliResult b =
      RunBubblewatch(absl::StrCat("analyze --json '", out, "'"));
  ASSERT_EQ(b.exit_code, 0) << b.err;
  simdjson::dom::parser pa;
  simdjson::dom::parser pb;
  simdjson::dom::element x = pa.parse(a.out);
  simdjson::dom::element y = pb.parse(b.out);
  ASSERT_EQ(simdjson::dom::array(x["ranks"]).size(), 2u);
  // Its two streams' collectives overlap in time: lanes keep them nested.
  simdjson::dom::parser pe;
  ExpectOwnTracksNest(pe.load(out));
  for (const char* key : {"utilization", "attribution_us", "devices", "bubbles",
                          "collectives", "stragglers", "what_if"}) {
    EXPECT_EQ(simdjson::to_string(x[key]), simdjson::to_string(y[key])) << key;
  }
  for (size_t i = 0; i < 2; ++i) {
    for (const char* key : {"utilization", "comm_wait_us", "wait_caused_us"}) {
      EXPECT_EQ(simdjson::to_string(x["ranks"].at(i)[key]),
                simdjson::to_string(y["ranks"].at(i)[key]))
          << i << " " << key;
    }
  }
}

// A pipeline-parallel job: a stage's send/recv overlaps its other
// collectives in time, so some go to a second track, and every track nests.
TEST(AnalyzeTimeline, OverlappingCollectivesGoToFurtherTracks) {
  ParallelJobOptions o;
  o.tp = 2;
  o.dp = 2;
  o.pp = 2;
  o.steps = 4;
  o.host_names = true;
  const ParallelJob job = MakeParallelJob(o);
  testing::TempDir dir;
  const std::string files = WriteJob(job, dir);
  const std::string out = dir.Sub("pp.json");
  const CliResult a =
      RunBubblewatch(absl::StrCat("analyze --timeline '", out, "'", files));
  ASSERT_EQ(a.exit_code, 0) << a.err;
  simdjson::dom::parser parser;
  simdjson::dom::element doc = parser.load(out);
  int second_tracks = 0;
  for (simdjson::dom::element e : simdjson::dom::array(doc["traceEvents"])) {
    if (std::string_view(e["ph"]) == "M" &&
        std::string_view(e["name"]) == "thread_name" &&
        std::string_view(e["args"]["name"]).find(" (2)") !=
            std::string_view::npos) {
      ++second_tracks;
    }
  }
  EXPECT_GT(second_tracks, 0);
  ExpectOwnTracksNest(doc);
}

TEST(AnalyzeTimeline, RanksAndTimeCut) {
  const ParallelJob job = ClocksApartJob();
  testing::TempDir dir;
  const std::string files = WriteJob(job, dir);
  const std::string out = dir.Sub("cut.json");
  const CliResult a = RunBubblewatch(
      absl::StrCat("analyze --timeline '", out,
                   "' --ranks 1-2 --from 200ms --to 500ms", files));
  ASSERT_EQ(a.exit_code, 0) << a.err;
  simdjson::dom::parser parser;
  simdjson::dom::element doc = parser.load(out);
  // "ts" counts from baseTimeNanoseconds (whole microseconds before the
  // job's start).
  const double start = double(doc["bubblewatch_timeline"]["job_start_us"]) -
                       int64_t(doc["baseTimeNanoseconds"]) / 1000;
  std::map<int64_t, int> events;
  for (simdjson::dom::element e : simdjson::dom::array(doc["traceEvents"])) {
    if (std::string_view(e["ph"]) != "X") continue;
    ++events[int64_t(e["pid"])];
    const double ts = double(e["ts"]) - start;
    const double end = ts + double(e["dur"]);
    EXPECT_LT(ts, 500'000.0);
    EXPECT_GT(end, 200'000.0);
  }
  ASSERT_EQ(events.size(), 2u);
  EXPECT_TRUE(events.contains(1));
  EXPECT_TRUE(events.contains(2));

  EXPECT_EQ(RunBubblewatch(absl::StrCat("analyze --ranks 1", files)).exit_code,
            2);
  // A file that cannot be created: one line, exit 1, the report unprinted.
  const CliResult no_dir = RunBubblewatch(absl::StrCat(
      "analyze --timeline '", dir.Sub("missing/x.json"), "'", files));
  EXPECT_EQ(no_dir.exit_code, 1);
  EXPECT_NE(no_dir.err.find("cannot create"), std::string::npos) << no_dir.err;
  EXPECT_EQ(no_dir.out, "");
  EXPECT_EQ(RunBubblewatch(absl::StrCat("analyze --timeline '", out,
                                        "' --ranks 1-x", files))
                .exit_code,
            2);
  EXPECT_EQ(RunBubblewatch(
                absl::StrCat("analyze --timeline '", out, "' --ranks 9", files))
                .exit_code,
            2);
  const CliResult late = RunBubblewatch(
      absl::StrCat("analyze --timeline '", out, "' --from 1h", files));
  EXPECT_EQ(late.exit_code, 2);
  EXPECT_NE(late.err.find("past the job's end"), std::string::npos) << late.err;
}

}  // namespace
}  // namespace bubblewatch
