// `bubblewatch analyze --timeline` passes a Chrome input's events through
// (cli/chrome_passthrough.h, docs/analyze.md#timeline-export): for real
// PyTorch-profiler traces, every original event is in the export, in its
// order, under its rank's pid, with every field and arg as it was but "ts",
// "pid", "dur" (where the drift changes it) and a flow's "id"; every event
// of a rank moved by one offset; the inputs' top-level metadata carried.
#include <cmath>
#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "ingest/trace_io/trace_file.h"
#include "simdjson.h"
#include "tests/cli/cli_runner.h"
#include "tests/testing/files.h"
#include "tests/testing/temp_dir.h"

namespace bubblewatch {
namespace {

using testing::CliResult;
using testing::RunBubblewatch;

struct Input {
  std::string path;
  int64_t rank = 0;
};

bool OwnKey(std::string_view key) {
  return key == "schemaVersion" || key == "distributedInfo" ||
         key == "baseTimeNanoseconds" || key == "traceEvents" ||
         key.rfind("bubblewatch_", 0) == 0;
}

// Exports `inputs` as one job and checks each input's events and metadata
// against the export. Returns the number of events compared.
int64_t ExpectPassedThrough(const std::vector<Input>& inputs,
                            bool flows_expected) {
  testing::TempDir dir;
  const std::string out = dir.Sub("job.json.gz");
  std::string files;
  for (const Input& in : inputs) absl::StrAppend(&files, " '", in.path, "'");
  const CliResult a =
      RunBubblewatch(absl::StrCat("analyze --timeline '", out, "'", files));
  EXPECT_EQ(a.exit_code, 0) << a.err;
  if (a.exit_code != 0) return 0;

  absl::StatusOr<simdjson::padded_string> exported = LoadTraceFile(out);
  EXPECT_TRUE(exported.ok()) << exported.status();
  if (!exported.ok()) return 0;
  simdjson::dom::parser export_parser;
  simdjson::dom::element doc = export_parser.parse(*exported);
  const double base_us =
      doc["baseTimeNanoseconds"].is_int64()
          ? static_cast<double>(int64_t(doc["baseTimeNanoseconds"])) / 1e3
          : 0.0;
  // The export's events by pid, in file order.
  std::map<int64_t, std::vector<simdjson::dom::element>> by_pid;
  for (simdjson::dom::element e : simdjson::dom::array(doc["traceEvents"])) {
    by_pid[int64_t(e["pid"])].push_back(e);
  }
  simdjson::dom::array rank_table = doc["bubblewatch_timeline"]["ranks"];

  int64_t compared = 0;
  int64_t flows = 0;
  for (size_t i = 0; i < inputs.size(); ++i) {
    const Input& in = inputs[i];
    SCOPED_TRACE(in.path);
    absl::StatusOr<simdjson::padded_string> json = LoadTraceFile(in.path);
    EXPECT_TRUE(json.ok()) << json.status();
    if (!json.ok()) continue;
    simdjson::dom::parser parser;
    simdjson::dom::element original = parser.parse(*json);

    // Top level: every key in the rank's table entry, and the lowest
    // rank's (but those the export writes itself) at the top level.
    simdjson::dom::object metadata;
    for (simdjson::dom::element r : rank_table) {
      if (int64_t(r["rank"]) == in.rank) metadata = r["metadata"];
    }
    size_t keys = 0;
    for (auto [key, value] : simdjson::dom::object(original)) {
      if (key == "traceEvents") continue;
      ++keys;
      EXPECT_EQ(simdjson::to_string(metadata[key]), simdjson::to_string(value))
          << key;
      if (i == 0 && !OwnKey(key)) {
        EXPECT_EQ(simdjson::to_string(doc[key]), simdjson::to_string(value))
            << key;
      }
    }
    EXPECT_EQ(metadata.size(), keys);

    // Events: the export's first ones of this pid are the input's, in order.
    const std::vector<simdjson::dom::element>& mine = by_pid[in.rank];
    simdjson::dom::array events = original["traceEvents"];
    EXPECT_GE(mine.size(), events.size());
    size_t k = 0;
    double first_delta = NAN;
    double first_ts = 0;
    for (simdjson::dom::element e : events) {
      if (k >= mine.size()) break;
      simdjson::dom::element x = mine[k++];
      std::vector<std::string_view> keys_in;
      std::vector<std::string_view> keys_out;
      for (auto [key, value] : simdjson::dom::object(x))
        keys_out.push_back(key);
      const std::string_view ph =
          e["ph"].is_string() ? std::string_view(e["ph"]) : std::string_view();
      for (auto [key, value] : simdjson::dom::object(e)) {
        keys_in.push_back(key);
        if (key == "pid") continue;
        if (key == "ts") {
          // One offset for every event of the rank (its clock's, drift at
          // most a few ppm over the trace).
          const double ts = double(value);
          const double delta = double(x["ts"]) + base_us - ts;
          if (std::isnan(first_delta)) {
            first_delta = delta;
            first_ts = ts;
          }
          EXPECT_LE(std::abs(delta - first_delta),
                    1.0 + 1e-5 * std::abs(ts - first_ts))
              << simdjson::to_string(e);
          continue;
        }
        if (key == "dur") {
          const double dur = double(value);
          EXPECT_LE(std::abs(double(x["dur"]) - dur), 1e-3 + 1e-5 * dur)
              << simdjson::to_string(e);
          continue;
        }
        if (key == "id" && (ph == "s" || ph == "f" || ph == "t") &&
            inputs.size() > 1) {
          ++flows;
          EXPECT_EQ(int64_t(x["id"]), (in.rank << 36) + int64_t(value))
              << simdjson::to_string(e);
          continue;
        }
        if (key == "id") ++flows;
        // Everything else as it was, args whole.
        EXPECT_EQ(simdjson::to_string(x[key]), simdjson::to_string(value))
            << key << " of " << simdjson::to_string(e);
      }
      EXPECT_EQ(keys_in, keys_out) << simdjson::to_string(e);
      EXPECT_EQ(int64_t(x["pid"]), in.rank);
      ++compared;
    }
    EXPECT_EQ(k, events.size());
  }
  if (flows_expected) EXPECT_GT(flows, 0);
  return compared;
}

// A rank of a real trainer: call stacks of cpu_ops, "External id", "Input
// Dims", kernel launch args and ac2g flows.
TEST(TimelinePassThrough, EveryEventOfARealTraceKeepsItsFields) {
  EXPECT_GT(ExpectPassedThrough({{testing::RealTrace("hta/rank0.json.gz"), 0}},
                                /*flows_expected=*/true),
            100'000);
}

// Newer Kineto: "ts" relative to a "baseTimeNanoseconds" written after the
// events, and long metadata ("INFO" logs) after them too.
TEST(TimelinePassThrough, ATraceWithItsBaseTimeAtTheEnd) {
  EXPECT_GT(
      ExpectPassedThrough({{testing::RealTrace("hta/nccl_data.json.gz"), 0}},
                          /*flows_expected=*/false),
      40'000);
}

// Two ranks of one job: the clocks aligned (offset removed), pid = rank,
// each rank's metadata in its table entry.
TEST(TimelinePassThrough, TwoRanksOfARealJob) {
  EXPECT_GT(ExpectPassedThrough(
                {{testing::RealTrace("hta/sampled_rank-0.json.gz"), 0},
                 {testing::RealTrace("hta/sampled_rank-1.json.gz"), 1}},
                /*flows_expected=*/false),
            9'000);
}

// Two hand-written ranks whose correlation ids collide, with what real
// traces lack: GPU events without args.device (older Kineto, where the pid
// said it) and without args at all. Flow ids become rank × 2^36 + id, the
// device goes into args, and the export reads back to the inputs' figures.
TEST(TimelinePassThrough, FlowIdsAndDevicesOfHandWrittenRanks) {
  testing::TempDir dir;
  std::string files;
  for (int rank = 0; rank < 2; ++rank) {
    const std::string cpu = absl::StrCat(100 + rank);
    const std::string path = dir.Sub(absl::StrCat("rank", rank, ".json"));
    testing::WriteFile(
        path,
        absl::StrCat(
            R"({"distributedInfo": {"rank": )", rank,
            R"(, "world_size": 2}, "traceEvents": [
  {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": )",
            cpu,
            R"(, "tid": 5, "ts": 1000, "dur": 5, "args": {"correlation": 7}},
  {"ph": "s", "id": 7, "pid": )",
            cpu,
            R"(, "tid": 5, "ts": 1000, "cat": "ac2g", "name": "ac2g"},
  {"ph": "X", "cat": "kernel", "name": "k", "pid": 3, "tid": 7, "ts": 1010, "dur": 20, "args": {"stream": 7, "correlation": 7}},
  {"ph": "f", "id": 7, "pid": 3, "tid": 7, "ts": 1010, "cat": "ac2g", "name": "ac2g", "bp": "e"},
  {"ph": "X", "cat": "kernel", "name": "k2", "pid": 3, "tid": 7, "ts": 1050, "dur": 20}
]})"));
    absl::StrAppend(&files, " '", path, "'");
  }
  const std::string out = dir.Sub("job.json");
  const CliResult a = RunBubblewatch(
      absl::StrCat("analyze --json --timeline '", out, "'", files));
  ASSERT_EQ(a.exit_code, 0) << a.err;
  simdjson::dom::parser parser;
  simdjson::dom::element doc = parser.load(out);
  std::map<int64_t, std::vector<int64_t>> flow_ids;
  int kernels = 0;
  for (simdjson::dom::element e : simdjson::dom::array(doc["traceEvents"])) {
    const std::string_view ph = e["ph"];
    if (ph == "s" || ph == "f") {
      flow_ids[int64_t(e["pid"])].push_back(int64_t(e["id"]));
    }
    simdjson::dom::element cat;
    if (e["cat"].get(cat) != simdjson::SUCCESS ||
        std::string_view(cat) != "kernel") {
      continue;
    }
    ++kernels;
    // The device first in args, what was there after it.
    simdjson::dom::object args = e["args"];
    EXPECT_EQ(std::string_view(args.begin().key()), "device");
    EXPECT_EQ(int64_t(args["device"]), 3);
    if (std::string_view(e["name"]) == "k") {
      EXPECT_EQ(simdjson::to_string(args),
                R"({"device":3,"stream":7,"correlation":7})");
    }
  }
  EXPECT_EQ(kernels, 4);
  ASSERT_EQ(flow_ids.size(), 2u);
  for (const auto& [rank, ids] : flow_ids) {
    EXPECT_EQ(ids, std::vector<int64_t>({(rank << 36) + 7, (rank << 36) + 7}))
        << rank;
  }

  const CliResult b =
      RunBubblewatch(absl::StrCat("analyze --json '", out, "'"));
  ASSERT_EQ(b.exit_code, 0) << b.err;
  simdjson::dom::parser pa;
  simdjson::dom::parser pb;
  simdjson::dom::element x = pa.parse(a.out);
  simdjson::dom::element y = pb.parse(b.out);
  for (size_t i = 0; i < 2; ++i) {
    for (const char* key : {"devices", "utilization", "bubbles"}) {
      EXPECT_EQ(simdjson::to_string(x["files"].at(i)[key]),
                simdjson::to_string(y["files"].at(i)[key]))
          << i << " " << key;
    }
  }
}

}  // namespace
}  // namespace bubblewatch
