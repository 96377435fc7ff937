#include "ingest/trace_reader.h"

#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "ingest/trace_io/trace_file.h"
#include "tests/testing/big_input.h"
#include "tests/testing/files.h"

namespace bubblewatch {
namespace {

using ::testing::HasSubstr;

using testing::ReadFile;
using testing::RealTrace;
using testing::WriteUniqueTempFile;

TEST(ReadTraceFile, AutoDetectsGzippedChromeTrace) {
  absl::StatusOr<Trace> trace =
      ReadTraceFile(RealTrace("hta/sampled_rank-1.json.gz"));
  ASSERT_TRUE(trace.ok()) << trace.status();
  EXPECT_EQ(trace->source_format, "chrome");
  EXPECT_EQ(trace->rank, 1);
  EXPECT_FALSE(trace->gpu.empty());
}

TEST(ReadTraceFile, AutoDetectsPlainChromeTrace) {
  std::string path = WriteUniqueTempFile(
      "plain.json",
      R"({"traceEvents": [{"ph": "X", "cat": "kernel", "name": "k",
          "ts": 1, "dur": 2, "args": {"device": 0, "stream": 7}}]})");
  absl::StatusOr<Trace> trace = ReadTraceFile(path);
  ASSERT_TRUE(trace.ok()) << trace.status();
  EXPECT_EQ(trace->source_format, "chrome");
  EXPECT_EQ(trace->gpu.size(), 1);
}

TEST(ReadTraceFile, AutoDetectsNsysExport) {
  absl::StatusOr<Trace> trace =
      ReadTraceFile(RealTrace("nsys/healthy_1pct.sqlite"));
  ASSERT_TRUE(trace.ok()) << trace.status();
  EXPECT_EQ(trace->source_format, "nsys");
  EXPECT_EQ(trace->gpu.size(), 400);
}

TEST(ReadTraceFile, AutoDetectsTimelineJson) {
  std::string path = WriteUniqueTempFile(
      "timeline.json",
      R"({"gpu_kernels": [{"name": "k", "start_us": 0, "end_us": 5,
          "stream": 7}], "cpu_events": []})");
  absl::StatusOr<Trace> trace = ReadTraceFile(path);
  ASSERT_TRUE(trace.ok()) << trace.status();
  EXPECT_EQ(trace->source_format, "timeline");
}

TEST(ReadTraceFile, ForcedFormatsUseTheirReader) {
  TraceReadOptions chrome;
  chrome.format = TraceFormat::kChrome;
  absl::StatusOr<Trace> trace =
      ReadTraceFile(RealTrace("hta/sampled_rank-0.json.gz"), chrome);
  ASSERT_TRUE(trace.ok()) << trace.status();
  EXPECT_EQ(trace->source_format, "chrome");
  TraceReadOptions nsys;
  nsys.format = TraceFormat::kNsys;
  trace = ReadTraceFile(RealTrace("nsys/mfu_2gpu_after.sqlite"), nsys);
  ASSERT_TRUE(trace.ok()) << trace.status();
  EXPECT_EQ(trace->source_format, "nsys");
}

TEST(ReadTraceFile, JsonForcedAsNsysIsAClearError) {
  TraceReadOptions nsys;
  nsys.format = TraceFormat::kNsys;
  absl::StatusOr<Trace> trace =
      ReadTraceFile(RealTrace("hta/sampled_rank-0.json.gz"), nsys);
  ASSERT_FALSE(trace.ok());
  EXPECT_EQ(trace.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(trace.status().message(),
              HasSubstr("not an Nsight Systems export"));
}

TEST(ReadTraceFile, TruncatedGzipIsDataLoss) {
  std::string whole = ReadFile(RealTrace("hta/sampled_rank-0.json.gz"));
  ASSERT_GT(whole.size(), 1000);
  std::string path =
      WriteUniqueTempFile("half.json.gz", whole.substr(0, whole.size() / 2));
  absl::StatusOr<Trace> trace = ReadTraceFile(path);
  ASSERT_FALSE(trace.ok());
  EXPECT_EQ(trace.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(trace.status().message(), HasSubstr("truncated gzip"));
}

TEST(ReadTraceFile, TruncatedRealJsonIsBadJson) {
  absl::StatusOr<simdjson::padded_string> json =
      LoadTraceFile(RealTrace("hta/sampled_rank-0.json.gz"));
  ASSERT_TRUE(json.ok()) << json.status();
  for (size_t cut : {json->size() / 2, json->size() - 2}) {
    std::string path =
        WriteUniqueTempFile("cut.json", std::string(json->data(), cut));
    absl::StatusOr<Trace> trace = ReadTraceFile(path);
    ASSERT_FALSE(trace.ok()) << cut;
    EXPECT_EQ(trace.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(trace.status().message(), HasSubstr("bad JSON")) << cut;
  }
}

TEST(ReadTraceFile, UnknownContentIsAClearError) {
  std::string path = WriteUniqueTempFile("other.json", R"({"hello": "world"})");
  absl::StatusOr<Trace> trace = ReadTraceFile(path);
  ASSERT_FALSE(trace.ok());
  EXPECT_THAT(trace.status().message(), HasSubstr("unknown format"));
}

TEST(ReadTraceFile, MissingFileIsNotFound) {
  EXPECT_EQ(ReadTraceFile(RealTrace("hta/absent.json.gz")).status().code(),
            absl::StatusCode::kNotFound);
  TraceReadOptions nsys;
  nsys.format = TraceFormat::kNsys;
  EXPECT_EQ(
      ReadTraceFile(RealTrace("nsys/absent.sqlite"), nsys).status().code(),
      absl::StatusCode::kNotFound);
}

TEST(ReadTraceFile, ProgressReachesTheTotal) {
  TraceReadOptions options;
  uint64_t last_done = 0, last_total = 1;
  int calls = 0;
  options.progress = [&](uint64_t done, uint64_t total) {
    last_done = done;
    last_total = total;
    ++calls;
  };
  absl::StatusOr<Trace> trace =
      ReadTraceFile(RealTrace("hta/rank0.json.gz"), options);
  ASSERT_TRUE(trace.ok()) << trace.status();
  EXPECT_GT(calls, 2);  // 25 MB of JSON: a call every 4 MB and the end.
  EXPECT_EQ(last_done, last_total);
  EXPECT_EQ(last_total, 25762803);
}

// a gzip whose content starts with blanks was read whole before its
// format was decided (analyze needed the inflated size in memory; 2 GiB of
// blanks in a 2 MB .json.gz). Leading whitespace now streams by.
constexpr uint64_t kBlanks = uint64_t{512} << 20;
constexpr int64_t kMaxRssGrowth = 64 << 20;

TEST(ReadTraceFile, AGzipOfOnlyBlanksIsRefusedWithoutHoldingThem) {
  const std::string path = WriteUniqueTempFile("blanks.json.gz", "");
  testing::WriteGzipWithBlanks(path, "", kBlanks, "");
  testing::PeakRssGrowth rss;
  absl::StatusOr<Trace> trace = ReadTraceFile(path);
  EXPECT_EQ(trace.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(trace.status().message(), HasSubstr("only whitespace"));
  EXPECT_LT(rss.bytes(), kMaxRssGrowth)
      << "peak RSS grew by " << (rss.bytes() >> 20) << " MiB";
}

TEST(ReadTraceFile, ATimelineAfterManyBlanksIsReadWithoutHoldingThem) {
  const std::string path = WriteUniqueTempFile("padded.json.gz", "");
  testing::WriteGzipWithBlanks(
      path, "", kBlanks,
      R"({"gpu_kernels": [{"name": "k", "start_us": 0, "end_us": 5,
          "stream": 7}], "cpu_events": []})");
  testing::PeakRssGrowth rss;
  absl::StatusOr<Trace> trace = ReadTraceFile(path);
  ASSERT_TRUE(trace.ok()) << trace.status();
  ASSERT_EQ(trace->gpu.size(), 1u);
  EXPECT_EQ(trace->gpu[0].end_ns - trace->gpu[0].start_ns, 5000);
  EXPECT_EQ(trace->source_format, "timeline");
  EXPECT_LT(rss.bytes(), kMaxRssGrowth)
      << "peak RSS grew by " << (rss.bytes() >> 20) << " MiB";
}

}  // namespace
}  // namespace bubblewatch
