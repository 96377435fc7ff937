// The streaming Chrome-trace reader (ReadChromeTrace on a TraceByteSource)
// must read exactly what the in-memory one reads, wherever the read and gzip
// chunks cut the text: inside strings with braces and escaped quotes, inside
// an escape, between a key and its value, inside one huge event.
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cstdint>
#include <fstream>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "ingest/chrome/chrome_trace_reader.h"
#include "ingest/trace_io/trace_file.h"
#include "ingest/trace_reader.h"
#include "tests/testing/files.h"

namespace bubblewatch {
namespace {

using ::testing::HasSubstr;

using bubblewatch::testing::WriteUniqueTempFile;

// `bytes` gzip-compressed as `members` concatenated gzip members.
std::string Gzip(const std::string& bytes, int members = 1) {
  std::string out;
  size_t step = bytes.size() / members + 1;
  for (size_t begin = 0; begin < bytes.size(); begin += step) {
    std::string part = bytes.substr(begin, step);
    z_stream zs{};
    EXPECT_EQ(
        deflateInit2(&zs, 6, Z_DEFLATED, 16 + MAX_WBITS, 8, Z_DEFAULT_STRATEGY),
        Z_OK);
    std::string member(deflateBound(&zs, part.size()) + 64, '\0');
    zs.next_in = reinterpret_cast<Bytef*>(part.data());
    zs.avail_in = static_cast<uInt>(part.size());
    zs.next_out = reinterpret_cast<Bytef*>(member.data());
    zs.avail_out = static_cast<uInt>(member.size());
    EXPECT_EQ(deflate(&zs, Z_FINISH), Z_STREAM_END);
    member.resize(zs.total_out);
    deflateEnd(&zs);
    out += member;
  }
  return out;
}

absl::StatusOr<Trace> ReadStreamed(
    const std::string& path, size_t max_read,
    const ReadProgressFn& progress = nullptr,
    int parse_threads = kChromeParseThreadsAuto) {
  absl::StatusOr<std::unique_ptr<TraceByteSource>> source =
      TraceByteSource::Open(path);
  if (!source.ok()) return source.status();
  (*source)->set_max_read_bytes(max_read);
  return ReadChromeTrace(**source, "", progress, parse_threads);
}

// Everything a Trace says, names resolved, in one comparable value.
std::string Describe(const Trace& t) {
  std::string out = absl::StrCat("rank ", t.rank, " world ", t.world_size,
                                 " host ", t.host, "\n");
  for (const GpuActivity& a : t.gpu) {
    absl::StrAppend(&out, "gpu ", a.start_ns, " ", a.end_ns, " ", a.correlation,
                    " ", a.bytes, " ", t.Name(a.name), " ", a.device, " ",
                    a.stream, " ", static_cast<int>(a.kind), " ", a.pageable,
                    "\n");
  }
  for (const CpuEvent& e : t.cpu) {
    absl::StrAppend(&out, "cpu ", e.start_ns, " ", e.end_ns, " ", e.correlation,
                    " ", e.thread, " ", t.Name(e.name), " ",
                    static_cast<int>(e.category), "\n");
  }
  std::vector<std::pair<std::string, int64_t>> skipped(t.skipped.begin(),
                                                       t.skipped.end());
  std::sort(skipped.begin(), skipped.end());
  for (const auto& [reason, count] : skipped) {
    absl::StrAppend(&out, "skipped ", reason, " ", count, "\n");
  }
  return out;
}

// Names and texts that a brace counter that ignored strings or escapes would
// cut in the wrong place.
std::string TrickyTrace() {
  std::string kernel_a =
      R"({"ph": "X", "cat": "kernel", "name": "k{[\"}]\\", "pid": 0, "tid": 7, "ts": 10, "dur": 5, "args": {"device": 0, "stream": 7, "correlation": 1, "note": "}}}\"{{{"}})";
  std::string kernel_b =
      R"({"ph":"X","cat":"kernel","name":"\u007bunicode\u007d \\\"","pid":0,"tid":7,"ts":"20.5","dur":"1.25","args":{"device":0,"stream":7,"correlation":2}})";
  std::string runtime =
      R"({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": "python", "tid": 11, "ts": 9, "dur": 1, "args": {"correlation": 1, "deep": [[{"x": "]"}], {"y": "\\"}]}})";
  return absl::StrCat(
      R"({"schemaVersion": 1, "deviceProperties": [{"id": 0, "name": "A\"100}{"}],)",
      "\n  \"traceEvents\"  :\n  [\n", kernel_a, ",\n", runtime, " , ",
      kernel_b, ",", kernel_a, ",\n  \"}{\\\"\", 42, [{\"a\": \"]\"}], null,",
      R"({"ph": "f", "cat": "ac2g", "name": "}", "id": 1},)",
      R"({"name": "process_name", "ph": "M", "args": {"name": "{\"py\"}"}},)",
      kernel_b, "\n  ],\n",
      R"("host_name": "node\"7\"", "distributedInfo": {"rank": 3, "world_size": 16, "x": "}"},)",
      R"( "baseTimeNanoseconds": 1000000000000 })", "\n");
}

TEST(ChromeTraceStream, ChunkBoundariesAnywhereReadTheSameTrace) {
  std::string json = TrickyTrace();
  absl::StatusOr<Trace> whole = ReadChromeTrace(simdjson::padded_string(json));
  ASSERT_TRUE(whole.ok()) << whole.status();
  // The tricky names really were read, and the repeats really dropped.
  ASSERT_EQ(whole->gpu.size(), 2);
  EXPECT_EQ(whole->Name(whole->gpu[0].name), "k{[\"}]\\");
  EXPECT_EQ(whole->Name(whole->gpu[1].name), "{unicode} \\\"");
  EXPECT_EQ(whole->skipped["duplicate event"], 2);
  EXPECT_EQ(whole->skipped["non-object event"], 4);
  EXPECT_EQ(whole->host, "node\"7\"");
  EXPECT_EQ(whole->rank, 3);
  std::string expected = Describe(*whole);

  std::string plain = WriteUniqueTempFile("tricky.json", json);
  std::string gz = WriteUniqueTempFile("tricky.json.gz", Gzip(json, 3));
  for (const std::string& path : {plain, gz}) {
    for (size_t max_read : {1, 2, 3, 5, 7, 13, 64, 4096, 1 << 20}) {
      SCOPED_TRACE(absl::StrCat(path, " max_read ", max_read));
      absl::StatusOr<Trace> streamed = ReadStreamed(path, max_read);
      ASSERT_TRUE(streamed.ok()) << streamed.status();
      EXPECT_EQ(Describe(*streamed), expected);
    }
  }
  // And through the one entry point, which sniffs the format first.
  absl::StatusOr<Trace> auto_read = ReadTraceFile(gz);
  ASSERT_TRUE(auto_read.ok()) << auto_read.status();
  EXPECT_EQ(Describe(*auto_read), expected);
}

// Megabytes of events, one of them larger than the read chunk, so the buffer
// is compacted and grown while events straddle chunks.
TEST(ChromeTraceStream, BigTraceWithAnEventLargerThanAChunk) {
  std::string events;
  for (int i = 0; i < 30000; ++i) {
    std::string pad;
    for (int j = 0; j < i % 100; ++j)
      pad += j % 3 == 0 ? "\\\"" : j % 3 == 1 ? "{" : "]";
    absl::StrAppend(&events, i == 0 ? "" : ",",
                    R"({"ph": "X", "cat": "kernel", "name": "kernel_)", i % 97,
                    R"(", "pid": 0, "tid": 7, "ts": )", i * 10,
                    R"(, "dur": 3,)",
                    R"( "args": {"device": 0, "stream": 7, "correlation": )",
                    i + 1, R"(, "pad": ")", pad, R"("}})");
    if (i == 15000) {
      absl::StrAppend(&events, R"(, {"ph": "X", "cat": "cpu_op", "name": ")",
                      std::string(3 << 20, 'n'),
                      R"(", "pid": 1, "tid": 2, "ts": 1, "dur": 1})");
    }
  }
  std::string json = absl::StrCat(R"({"traceEvents": [)", events, "]}");
  ASSERT_GT(json.size(), size_t{8} << 20);
  absl::StatusOr<Trace> whole = ReadChromeTrace(simdjson::padded_string(json));
  ASSERT_TRUE(whole.ok()) << whole.status();
  ASSERT_EQ(whole->gpu.size(), 30000);
  ASSERT_EQ(whole->cpu.size(), 1);
  std::string expected = Describe(*whole);
  for (const std::string& path :
       {WriteUniqueTempFile("big.json", json),
        WriteUniqueTempFile("big.json.gz", Gzip(json))}) {
    SCOPED_TRACE(path);
    std::vector<std::pair<uint64_t, uint64_t>> calls;
    absl::StatusOr<Trace> streamed =
        ReadStreamed(path, SIZE_MAX, [&](uint64_t d, uint64_t t) {
          calls.push_back({d, t});
        });
    ASSERT_TRUE(streamed.ok()) << streamed.status();
    EXPECT_EQ(Describe(*streamed), expected);
    // Progress: several calls, done never above total nor going back, the
    // last one exactly the JSON's size.
    ASSERT_GE(calls.size(), 2);
    for (size_t i = 0; i < calls.size(); ++i) {
      EXPECT_LE(calls[i].first, calls[i].second);
      if (i > 0) {
        EXPECT_GE(calls[i].first, calls[i - 1].first);
      }
    }
    EXPECT_EQ(calls.back().first, json.size());
    EXPECT_EQ(calls.back().second, json.size());
  }
}

TEST(ChromeTraceStream, ErrorsSayTheSameAsInMemory) {
  for (
      std::string json :
      {std::string(R"({"traceEvents": [1, 2 3]})"),
       std::string(
           R"({"traceEvents": [{"ph": "X", "cat": "kernel", "name": "k", "ts": 1 "dur": 1}]})"),
       std::string(
           R"({"traceEvents": [{"ph": "X", "cat": "kernel", "name": "k", "ts": 1, "dur": -2}]})"),
       std::string(R"({"traceEvents": {}})"), std::string("[]"),
       std::string(R"({"traceEvents": []} {})"),
       std::string(R"({"traceEvents": [,]})")}) {
    SCOPED_TRACE(json);
    absl::StatusOr<Trace> whole =
        ReadChromeTrace(simdjson::padded_string(json));
    ASSERT_FALSE(whole.ok());
    absl::StatusOr<Trace> streamed =
        ReadStreamed(WriteUniqueTempFile("bad.json", json), 1);
    ASSERT_FALSE(streamed.ok());
    EXPECT_EQ(streamed.status(), whole.status());
  }
}

TEST(ChromeTraceStream, EveryTruncationIsAnErrorNotACrash) {
  std::string json = TrickyTrace();
  // The last bytes are the closing brace and a newline.
  for (size_t cut = 0; cut + 2 < json.size(); ++cut) {
    std::string path = WriteUniqueTempFile("cut.json", json.substr(0, cut));
    absl::StatusOr<Trace> streamed = ReadStreamed(path, 7);
    ASSERT_FALSE(streamed.ok()) << cut;
    EXPECT_EQ(streamed.status().code(), absl::StatusCode::kInvalidArgument)
        << cut;
    EXPECT_THAT(streamed.status().message(), HasSubstr("bad JSON")) << cut;
    absl::StatusOr<Trace> whole =
        ReadChromeTrace(simdjson::padded_string(json.substr(0, cut)));
    EXPECT_EQ(streamed.status(), whole.status()) << cut;
  }
  std::string gz = Gzip(json);
  absl::StatusOr<Trace> half = ReadStreamed(
      WriteUniqueTempFile("half.json.gz", gz.substr(0, gz.size() / 2)), 64);
  ASSERT_FALSE(half.ok());
  EXPECT_EQ(half.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(half.status().message(), HasSubstr("truncated gzip"));
}

// Mutated traces (bytes replaced by JSON's structural characters, quotes and
// escapes) read the same streamed in small chunks as in memory: the same
// trace, or the same error.
TEST(ChromeTraceStream, MutatedTracesReadTheSameStreamedAsInMemory) {
  const std::string base = TrickyTrace();
  const std::string alphabet = "{}[]\",:\\ a1-.eEtn";
  std::mt19937 rng(20261130);
  int ok = 0;
  for (int round = 0; round < 300; ++round) {
    std::string json = base;
    int edits = 1 + static_cast<int>(rng() % 3);
    for (int e = 0; e < edits; ++e) {
      json[rng() % json.size()] = alphabet[rng() % alphabet.size()];
    }
    SCOPED_TRACE(json);
    absl::StatusOr<Trace> whole =
        ReadChromeTrace(simdjson::padded_string(json));
    absl::StatusOr<Trace> streamed =
        ReadStreamed(WriteUniqueTempFile("mutated.json", json), 1 + rng() % 64);
    ASSERT_EQ(streamed.ok(), whole.ok())
        << streamed.status() << " vs " << whole.status();
    if (whole.ok()) {
      ++ok;
      EXPECT_EQ(Describe(*streamed), Describe(*whole));
    } else {
      EXPECT_EQ(streamed.status(), whole.status());
    }
  }
  // Both outcomes were exercised.
  EXPECT_GT(ok, 10);
  EXPECT_LT(ok, 290);
}

// TrickyTrace's events repeated to `bytes` of JSON: several of the blocks
// the reader parses on its threads, elements cut at block boundaries.
std::string BigTrickyTrace(size_t bytes) {
  const std::string tricky = TrickyTrace();
  const size_t open = tricky.find("[\n") + 2;
  const size_t close = tricky.rfind("\n  ],");
  const std::string events = tricky.substr(open, close - open);
  std::string json = tricky.substr(0, open);
  for (int i = 0; json.size() < bytes; ++i) {
    if (i > 0) json += ",\n";
    // Distinct times, so that copies are not duplicates of each other.
    std::string copy = events;
    for (size_t at = copy.find("\"ts\": 10"); at != std::string::npos;
         at = copy.find("\"ts\": 10", at + 1)) {
      copy.replace(at, 8, absl::StrCat("\"ts\": ", 100 + i * 50));
    }
    json += copy;
  }
  return json + tricky.substr(close);
}

// Blocks parsed on several threads or one, in memory or streamed in chunks
// of any size, from a file or gzip: one result.
TEST(ChromeTraceStream, ThreadsAndBlocksDoNotChangeTheResult) {
  const std::string json = BigTrickyTrace(600 << 10);
  absl::StatusOr<Trace> alone =
      ReadChromeTrace(simdjson::padded_string(json), nullptr, 0);
  ASSERT_TRUE(alone.ok()) << alone.status();
  // Kernels of distinct times, and repeats of the ones whose time was not
  // changed, across blocks.
  EXPECT_GT(alone->gpu.size(), 600u);
  EXPECT_GT(alone->skipped["duplicate event"], 1000);
  const std::string expected = Describe(*alone);
  for (int threads : {1, 3, kChromeParseThreadsAuto}) {
    SCOPED_TRACE(threads);
    absl::StatusOr<Trace> in_memory =
        ReadChromeTrace(simdjson::padded_string(json), nullptr, threads);
    ASSERT_TRUE(in_memory.ok()) << in_memory.status();
    EXPECT_EQ(Describe(*in_memory), expected);
    for (size_t max_read : {size_t{977}, size_t{1} << 20}) {
      absl::StatusOr<Trace> streamed = ReadStreamed(
          WriteUniqueTempFile("big.json", json), max_read, nullptr, threads);
      ASSERT_TRUE(streamed.ok()) << streamed.status();
      EXPECT_EQ(Describe(*streamed), expected);
    }
    absl::StatusOr<Trace> gz =
        ReadStreamed(WriteUniqueTempFile("big.json.gz", Gzip(json, 3)), 1 << 20,
                     nullptr, threads);
    ASSERT_TRUE(gz.ok()) << gz.status();
    EXPECT_EQ(Describe(*gz), expected);
  }
}

// Mutations of a trace of several blocks: the first error, or the same
// trace, whatever the threads and the chunking (an error late in the file
// does not hide an earlier one parsed on another thread).
TEST(ChromeTraceStream, MutatedBigTracesReadTheSameOnAnyThreads) {
  const std::string base = BigTrickyTrace(300 << 10);
  const std::string alphabet = "{}[]\",:\\ a1-.eEtn";
  std::mt19937 rng(20261201);
  int ok = 0;
  for (int round = 0; round < 40; ++round) {
    std::string json = base;
    int edits = 1 + static_cast<int>(rng() % 4);
    for (int e = 0; e < edits; ++e) {
      json[rng() % json.size()] = alphabet[rng() % alphabet.size()];
    }
    absl::StatusOr<Trace> alone =
        ReadChromeTrace(simdjson::padded_string(json), nullptr, 0);
    absl::StatusOr<Trace> threaded =
        ReadChromeTrace(simdjson::padded_string(json), nullptr, 3);
    absl::StatusOr<Trace> streamed =
        ReadStreamed(WriteUniqueTempFile("mutated_big.json", json),
                     1 + rng() % 4096, nullptr, 3);
    SCOPED_TRACE(
        absl::StrCat("round ", round, ": ", alone.status().ToString()));
    ASSERT_EQ(threaded.ok(), alone.ok());
    ASSERT_EQ(streamed.ok(), alone.ok());
    if (alone.ok()) {
      ++ok;
      EXPECT_EQ(Describe(*threaded), Describe(*alone));
      EXPECT_EQ(Describe(*streamed), Describe(*alone));
    } else {
      EXPECT_EQ(threaded.status(), alone.status());
      EXPECT_EQ(streamed.status(), alone.status());
    }
  }
  EXPECT_GT(ok, 0);
  EXPECT_LT(ok, 40);
}

}  // namespace
}  // namespace bubblewatch
