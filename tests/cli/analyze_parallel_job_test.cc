// `bubblewatch analyze` of a synthetic TP×DP job written as Kineto files
// (ingest/synthetic/synthetic_parallel_job.h, chrome_trace_writer.h): the
// files read back, every collective instance of the truth is matched and
// used, and the planted root is the top straggler
// (docs/semantics.md#collectives).
#include <string>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "ingest/chrome/chrome_trace_writer.h"
#include "ingest/synthetic/synthetic_parallel_job.h"
#include "simdjson.h"
#include "tests/cli/cli_runner.h"
#include "tests/testing/temp_dir.h"

namespace bubblewatch {
namespace {

using testing::RunBubblewatch;

TEST(AnalyzeParallelJob, MatchesEveryInstanceOfTheTruthWithHostNames) {
  ParallelJobOptions o;
  o.tp = 4;
  o.dp = 2;
  o.steps = 6;
  o.host_names = true;
  o.roots = {{6, 2, 2'000'000, StragglerCause::kDataLoading}};
  const ParallelJob job = MakeParallelJob(o);
  testing::TempDir dir;
  std::string files;
  for (const Trace& t : job.ranks) {
    const std::string path = dir.Sub(absl::StrCat("rank-", t.rank, ".json.gz"));
    ASSERT_TRUE(WriteChromeTraceFile(t, path).ok());
    absl::StrAppend(&files, " '", path, "'");
  }
  const testing::CliResult r = RunBubblewatch("analyze --json" + files);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  simdjson::dom::parser parser;
  simdjson::dom::element doc = parser.parse(r.out);
  simdjson::dom::element c = doc["collectives"];
  EXPECT_EQ(int64_t(c["matched"]),
            static_cast<int64_t>(job.truth.instances.size()));
  EXPECT_EQ(int64_t(c["unmatched"]), 0);
  EXPECT_EQ(int64_t(c["used"]), int64_t(c["matched"]));
  EXPECT_EQ(std::string_view(c["key"]), "pg_seq");
  EXPECT_EQ(int64_t(c["world_size"]), 8);
  simdjson::dom::array stragglers = doc["stragglers"];
  ASSERT_GT(stragglers.size(), 0u);
  EXPECT_EQ(int64_t(stragglers.at(0)["rank"]), 6);
}

}  // namespace
}  // namespace bubblewatch
