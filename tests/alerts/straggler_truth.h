// What the straggler-rule tests (straggler_alert_kafka_test.cc over a
// broker and Alertmanager, straggler_alert_task_test.cc over the partition
// task) both read: the planted stragglers' truth that `produce --synthetic
// --truth` writes, and a stored job's hosts as `query job --json` gives
// them.
#ifndef BUBBLEWATCH_TESTS_ALERTS_STRAGGLER_TRUTH_H_
#define BUBBLEWATCH_TESTS_ALERTS_STRAGGLER_TRUTH_H_

#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <map>
#include <set>
#include <string>
#include <string_view>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "simdjson.h"
#include "tests/testing/files.h"
#include "tests/testing/temp_dir.h"

namespace bubblewatch::testing {

// One planted straggler job's truth line.
struct StragglerTruth {
  std::string job, host, cause;
  int64_t rank = -1;
  int64_t start_ns = 0, end_ns = 0;
};

// The truth file's lines by job.
inline std::map<std::string, StragglerTruth> ReadStragglerTruth(
    const std::string& path) {
  std::map<std::string, StragglerTruth> out;
  std::ifstream in(path);
  simdjson::dom::parser parser;
  for (std::string line; std::getline(in, line);) {
    simdjson::dom::element e = parser.parse(line);
    StragglerTruth t{.job = std::string(std::string_view(e["job"])),
                     .host = std::string(std::string_view(e["host"])),
                     .cause = std::string(std::string_view(e["cause"])),
                     .rank = int64_t(e["rank"]),
                     .start_ns = int64_t(e["start_ns"]),
                     .end_ns = int64_t(e["end_ns"])};
    out[t.job] = t;
  }
  return out;
}

// `bubblewatch ARGS` (a query) run through the shell, its stdout.
inline std::string QueryOutput(const std::string& args) {
  TempDir out_dir;
  const std::string out = out_dir.Sub("query.out");
  const std::string command =
      absl::StrCat("'", BUBBLEWATCH_BINARY, "' ", args, " > '", out, "'");
  EXPECT_EQ(std::system(command.c_str()), 0) << command;
  return ReadFile(out);
}

// The hosts of a stored job's ranks (`query job --json`).
inline std::set<std::string> JobHosts(const std::string& store,
                                      const std::string& job) {
  const std::string json = QueryOutput(
      absl::StrCat("query job ", job, " --json --store '", store, "'"));
  simdjson::dom::parser parser;
  simdjson::dom::element doc;
  std::set<std::string> hosts;
  if (parser.parse(json).get(doc) != simdjson::SUCCESS) return hosts;
  simdjson::dom::array ranks;
  if (doc["ranks"].get(ranks) != simdjson::SUCCESS) return hosts;
  for (simdjson::dom::element r : ranks) {
    std::string_view host;
    if (r["host"].get(host) == simdjson::SUCCESS) hosts.emplace(host);
  }
  return hosts;
}

}  // namespace bubblewatch::testing

#endif  // BUBBLEWATCH_TESTS_ALERTS_STRAGGLER_TRUTH_H_
