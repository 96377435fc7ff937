#include "ingest/chrome/chrome_trace_reader.h"

#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "ingest/trace_io/decimal_time.h"
#include "ingest/trace_io/json_support.h"

namespace bubblewatch {
namespace {

using ::testing::HasSubstr;
using ::testing::IsEmpty;

absl::StatusOr<Trace> Read(const std::string& json) {
  return ReadChromeTrace(simdjson::padded_string(json));
}

std::string Events(const std::string& events) {
  return absl::StrCat("{\"traceEvents\": [", events, "]}");
}

// A kernel as Kineto writes it.
std::string Kernel(const std::string& ts, const std::string& dur,
                   int correlation = 1, const std::string& cat = "kernel") {
  return absl::StrCat(
      R"({"ph": "X", "cat": ")", cat, R"(", "name": "k", "pid": 0, )",
      R"("tid": 7, "ts": )", ts, R"(, "dur": )", dur,
      R"(, "args": {"External id": 1, "device": 0, "stream": 7, )",
      R"("correlation": )", correlation, "}}");
}

std::string Runtime(const std::string& ts, const std::string& dur,
                    int correlation, const std::string& cat = "cuda_runtime") {
  return absl::StrCat(R"({"ph": "X", "cat": ")", cat,
                      R"(", "name": "cudaLaunchKernel", "pid": 10, )",
                      R"("tid": 11, "ts": )", ts, R"(, "dur": )", dur,
                      R"(, "args": {"cbid": 211, "correlation": )", correlation,
                      "}}");
}

TEST(ChromeTraceReader, TimestampsAreExactNanosecondsFromNumberOrString) {
  absl::StatusOr<Trace> trace =
      Read(Events(absl::StrCat(Kernel("4458676983543.183", "41.407"), ",",
                               Kernel("\"4458676983543.183\"", "\"41.407\"", 2),
                               ",", Kernel("1683564901977193", "12", 3))));
  ASSERT_TRUE(trace.ok()) << trace.status();
  ASSERT_EQ(trace->gpu.size(), 3);
  EXPECT_EQ(trace->gpu[0].start_ns, 4458676983543183);
  EXPECT_EQ(trace->gpu[0].end_ns, 4458676983543183 + 41407);
  EXPECT_EQ(trace->gpu[1].start_ns, 4458676983543183);
  EXPECT_EQ(trace->gpu[1].end_ns, 4458676983543183 + 41407);
  EXPECT_EQ(trace->gpu[2].start_ns, 1683564901977193000);
  EXPECT_EQ(trace->gpu[2].end_ns, 1683564901977193000 + 12000);
}

TEST(ChromeTraceReader, UnusualNumberShapesMatchDecimalMicrosToNanos) {
  for (std::string ts :
       {"0", "-1.5", "1e3", "1.2345", "0.0005", "12.0", "2.5E-3", "100.",
        "7.000000", "1683564901977193.5", "9223372036854775"}) {
    SCOPED_TRACE(ts);
    absl::StatusOr<int64_t> expected = DecimalMicrosToNanos(ts);
    absl::StatusOr<Trace> trace = Read(Events(Kernel(ts, "0")));
    ASSERT_EQ(trace.ok(), expected.ok()) << trace.status();
    if (expected.ok()) {
      EXPECT_EQ(trace->gpu.at(0).start_ns, *expected);
    }
  }
}

TEST(ChromeTraceReader, MapsCategoriesInBothSpellings) {
  std::string events;
  int correlation = 1;
  for (std::string cat :
       {"kernel", "Kernel", "gpu_memcpy", "Memcpy", "gpu_memset", "Memset"}) {
    absl::StrAppend(&events, events.empty() ? "" : ",",
                    Kernel("1", "1", correlation++, cat));
  }
  for (std::string cat :
       {"cuda_runtime", "Runtime", "cuda_driver", "Driver", "cpu_op",
        "Operator", "user_annotation", "python_function"}) {
    absl::StrAppend(&events, ",", Runtime("1", "1", correlation++, cat));
  }
  absl::StatusOr<Trace> trace = Read(Events(events));
  ASSERT_TRUE(trace.ok()) << trace.status();
  ASSERT_EQ(trace->gpu.size(), 6);
  EXPECT_EQ(trace->gpu[1].kind, GpuActivityKind::kKernel);
  EXPECT_EQ(trace->gpu[2].kind, GpuActivityKind::kMemcpy);
  EXPECT_EQ(trace->gpu[3].kind, GpuActivityKind::kMemcpy);
  EXPECT_EQ(trace->gpu[5].kind, GpuActivityKind::kMemset);
  ASSERT_EQ(trace->cpu.size(), 8);
  const CpuEventCategory expected[] = {
      CpuEventCategory::kCudaRuntime,    CpuEventCategory::kCudaRuntime,
      CpuEventCategory::kCudaDriver,     CpuEventCategory::kCudaDriver,
      CpuEventCategory::kCpuOp,          CpuEventCategory::kCpuOp,
      CpuEventCategory::kUserAnnotation, CpuEventCategory::kPythonFunction};
  for (int i = 0; i < 8; ++i) EXPECT_EQ(trace->cpu[i].category, expected[i]);
  EXPECT_EQ(trace->cpu[0].correlation, 7);
  EXPECT_EQ(trace->gpu[0].correlation, 1);
  EXPECT_THAT(trace->skipped, IsEmpty());
}

TEST(ChromeTraceReader, ReadsDeviceStreamBytesAndPageable) {
  absl::StatusOr<Trace> trace = Read(Events(
      R"j({"ph": "X", "cat": "gpu_memcpy", "name": "Memcpy DtoH (Device -> Pageable)",
          "pid": 3, "tid": 23, "ts": 10, "dur": 2,
          "args": {"device": 3, "stream": 23, "correlation": 99, "bytes": 4096}},
         {"ph": "X", "cat": "gpu_memcpy", "name": "Memcpy HtoD (Pinned -> Device)",
          "pid": 5, "tid": 9, "ts": 10, "dur": 2, "args": {}})j"));
  ASSERT_TRUE(trace.ok()) << trace.status();
  ASSERT_EQ(trace->gpu.size(), 2);
  const GpuActivity& pageable = trace->gpu[0];
  EXPECT_TRUE(pageable.pageable);
  EXPECT_EQ(pageable.device, 3);
  EXPECT_EQ(pageable.stream, 23);
  EXPECT_EQ(pageable.correlation, 99);
  EXPECT_EQ(pageable.bytes, 4096);
  EXPECT_EQ(trace->Name(pageable.name), "Memcpy DtoH (Device -> Pageable)");
  // Without args, device and stream fall back to pid and tid.
  const GpuActivity& pinned = trace->gpu[1];
  EXPECT_FALSE(pinned.pageable);
  EXPECT_EQ(pinned.device, 5);
  EXPECT_EQ(pinned.stream, 9);
  EXPECT_EQ(pinned.correlation, kNoCorrelation);
}

TEST(ChromeTraceReader, ThreadsOfDifferentProcessesStayDistinct) {
  absl::StatusOr<Trace> trace = Read(Events(
      R"({"ph": "X", "cat": "cpu_op", "name": "a", "pid": 1, "tid": 5, "ts": 1, "dur": 1},
         {"ph": "X", "cat": "cpu_op", "name": "a", "pid": 2, "tid": 5, "ts": 1, "dur": 1},
         {"ph": "X", "cat": "cpu_op", "name": "a", "pid": 2, "tid": "5", "ts": 1, "dur": 2},
         {"ph": "X", "cat": "cpu_op", "name": "a", "pid": 2, "tid": "worker", "ts": 1, "dur": 3},
         {"ph": "X", "cat": "cpu_op", "name": "a", "pid": 2, "tid": "worker", "ts": 1, "dur": 4})"));
  ASSERT_TRUE(trace.ok()) << trace.status();
  ASSERT_EQ(trace->cpu.size(), 5);
  EXPECT_EQ(trace->cpu[0].thread, (uint64_t{1} << 32) | 5);
  EXPECT_EQ(trace->cpu[1].thread, (uint64_t{2} << 32) | 5);
  EXPECT_EQ(trace->cpu[2].thread, trace->cpu[1].thread);
  EXPECT_NE(trace->cpu[3].thread, trace->cpu[1].thread);
  EXPECT_EQ(trace->cpu[3].thread, trace->cpu[4].thread);
}

TEST(ChromeTraceReader, SkipsAndCountsWhatItDoesNotRead) {
  absl::StatusOr<Trace> trace = Read(Events(absl::StrCat(
      R"({"ph": "s", "id": 1, "pid": 1, "tid": 1, "ts": 1, "cat": "ac2g", "name": "ac2g"},
         {"ph": "f", "id": 1, "pid": 1, "tid": 1, "ts": 1, "cat": "ac2g", "name": "ac2g", "bp": "e"},
         {"name": "process_name", "ph": "M", "pid": 1, "tid": 0, "args": {"name": "python"}},
         {"name": "Iteration Start", "ph": "i", "s": "g", "pid": "Traces", "tid": "Trace", "ts": 5},
         {"ph": "X", "cat": "gpu_user_annotation", "name": "x", "pid": 0, "tid": 7, "ts": 1, "dur": 1},
         {"ph": "X", "cat": "cuda_sync", "name": "Stream Sync", "pid": 0, "tid": 7, "ts": 1, "dur": 1, "args": {"stream": "x"}},
         {"ph": "X", "cat": "mtia_ccp_events", "name": "y", "pid": 0, "tid": 7, "ts": 1, "dur": 1},
         {"ph": "i", "cat": "cpu_op", "name": "z", "pid": 0, "tid": 7, "ts": 1},
         {"ph": "X", "name": "no category", "pid": 0, "tid": 7, "ts": 1, "dur": 1},
         42,
         )",
      Kernel("1", "1"))));
  ASSERT_TRUE(trace.ok()) << trace.status();
  EXPECT_EQ(trace->gpu.size(), 1);
  EXPECT_THAT(trace->cpu, IsEmpty());
  EXPECT_EQ(trace->skipped["category 'ac2g'"], 2);
  EXPECT_EQ(trace->skipped["phase 'M'"], 1);
  EXPECT_EQ(trace->skipped["phase 'i'"], 1);
  EXPECT_EQ(trace->skipped["category 'gpu_user_annotation'"], 1);
  EXPECT_EQ(trace->skipped["category 'cuda_sync'"], 1);
  EXPECT_EQ(trace->skipped["category 'mtia_ccp_events'"], 1);
  EXPECT_EQ(trace->skipped["phase 'i' in category 'cpu_op'"], 1);
  EXPECT_EQ(trace->skipped["complete event without category"], 1);
  EXPECT_EQ(trace->skipped["non-object event"], 1);
}

TEST(ChromeTraceReader, DropsAndCountsByteIdenticalDuplicates) {
  std::string kernel = Kernel("5", "1");
  // Same fields the Trace keeps, but a different "External id": not a copy.
  std::string sibling = kernel;
  sibling.replace(sibling.find("\"External id\": 1"), 16, "\"External id\": 2");
  absl::StatusOr<Trace> trace = Read(
      Events(absl::StrCat(kernel, ",", kernel, ",", sibling, ",", kernel)));
  ASSERT_TRUE(trace.ok()) << trace.status();
  EXPECT_EQ(trace->gpu.size(), 2);
  EXPECT_EQ(trace->skipped["duplicate event"], 2);
  // Whitespace between events is not part of them: the last copy still is.
  trace = Read(Events(absl::StrCat(kernel, " ,\n  ", kernel, "\n\t ")));
  ASSERT_TRUE(trace.ok()) << trace.status();
  EXPECT_EQ(trace->gpu.size(), 1);
  EXPECT_EQ(trace->skipped["duplicate event"], 1);
}

TEST(ChromeTraceReader, GpuEventsWithoutCpuEventsReadFine) {
  absl::StatusOr<Trace> trace =
      Read(Events(absl::StrCat(Kernel("1", "1"), ",", Kernel("3", "1", 2))));
  ASSERT_TRUE(trace.ok()) << trace.status();
  EXPECT_EQ(trace->gpu.size(), 2);
  EXPECT_THAT(trace->cpu, IsEmpty());
}

TEST(ChromeTraceReader, NoEventsAtAllReadsAsEmptyTrace) {
  absl::StatusOr<Trace> trace = Read(R"({"traceEvents": []})");
  ASSERT_TRUE(trace.ok()) << trace.status();
  EXPECT_THAT(trace->gpu, IsEmpty());
  EXPECT_THAT(trace->cpu, IsEmpty());
}

TEST(ChromeTraceReader, ReadsDistributedInfoAndHostWherever) {
  absl::StatusOr<Trace> trace = Read(absl::StrCat(
      R"({"schemaVersion": 1, "deviceProperties": [{"id": 0, "name": "A100"}],
          "traceEvents": [)",
      Kernel("1", "1"),
      R"(], "host_name": "node7",
          "distributedInfo": {"backend": "nccl", "rank": 3, "world_size": 16}})"));
  ASSERT_TRUE(trace.ok()) << trace.status();
  EXPECT_EQ(trace->rank, 3);
  EXPECT_EQ(trace->world_size, 16);
  EXPECT_EQ(trace->host, "node7");
  EXPECT_THAT(trace->skipped, IsEmpty());
}

TEST(ChromeTraceReader, AddsBaseTimeToRelativeTimestamps) {
  absl::StatusOr<Trace> trace = Read(absl::StrCat(
      R"({"traceEvents": [)", Kernel("4458676983543.183", "41.407"), ",",
      Runtime("4458676983500", "10", 1),
      R"(], "baseTimeNanoseconds": 1711964646000000000})"));
  ASSERT_TRUE(trace.ok()) << trace.status();
  EXPECT_EQ(trace->gpu[0].start_ns, 1711964646000000000 + 4458676983543183);
  EXPECT_EQ(trace->gpu[0].end_ns,
            1711964646000000000 + 4458676983543183 + 41407);
  EXPECT_EQ(trace->cpu[0].start_ns, 1711964646000000000 + 4458676983500000);
}

TEST(ChromeTraceReader, LeavesAbsoluteTimestampsAloneDespiteBaseTime) {
  absl::StatusOr<Trace> trace = Read(absl::StrCat(
      R"({"baseTimeNanoseconds": 1683564900000000000, "traceEvents": [)",
      Kernel("1683564901977193", "12"), "]}"));
  ASSERT_TRUE(trace.ok()) << trace.status();
  EXPECT_EQ(trace->gpu[0].start_ns, 1683564901977193000);
}

TEST(ChromeTraceReader, ReportsProgressEndingAtTotal) {
  std::string events = Kernel("1", "1");
  for (int i = 2; i < 40000; ++i) {
    absl::StrAppend(&events, ",", Kernel(absl::StrCat(i), "1", i));
  }
  simdjson::padded_string json(Events(events));
  std::vector<uint64_t> done;
  absl::StatusOr<Trace> trace =
      ReadChromeTrace(json, [&](uint64_t d, uint64_t total) {
        EXPECT_EQ(total, json.size());
        done.push_back(d);
      });
  ASSERT_TRUE(trace.ok()) << trace.status();
  EXPECT_EQ(trace->gpu.size(), 39999);
  ASSERT_GE(done.size(), 2);  // ~6 MB: at least one step, plus the end.
  EXPECT_TRUE(std::is_sorted(done.begin(), done.end()));
  EXPECT_EQ(done.back(), json.size());
}

TEST(ChromeTraceReader, NegativeDurationIsAnErrorNamingTheEvent) {
  absl::StatusOr<Trace> trace =
      Read(Events(absl::StrCat(Kernel("1", "1"), ",", Kernel("5", "-3", 2))));
  ASSERT_FALSE(trace.ok());
  EXPECT_EQ(trace.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(trace.status().message(),
              HasSubstr("traceEvents[1]: negative dur -3"));
}

TEST(ChromeTraceReader, TimestampThatDoesNotFitIsAnError) {
  absl::StatusOr<Trace> trace = Read(Events(Kernel("9223372036854776", "1")));
  ASSERT_FALSE(trace.ok());
  EXPECT_THAT(trace.status().message(), HasSubstr("traceEvents[0]"));
  EXPECT_THAT(trace.status().message(),
              HasSubstr("does not fit in 64-bit nanoseconds"));
  trace = Read(Events(Kernel("9223372036854775", "1000")));
  ASSERT_FALSE(trace.ok());
  EXPECT_THAT(trace.status().message(), HasSubstr("does not fit"));
  trace = Read(absl::StrCat(R"({"baseTimeNanoseconds": 9000000000000000000,
                                "traceEvents": [)",
                            Kernel("900000000000000", "1"), "]}"));
  ASSERT_FALSE(trace.ok());
  EXPECT_THAT(trace.status().message(), HasSubstr("baseTimeNanoseconds"));
}

TEST(ChromeTraceReader, MalformedKeptEventsAreErrors) {
  struct Case {
    std::string event;
    std::string message;
  } cases[] = {
      {R"({"ph": "X", "cat": "kernel", "name": "k", "ts": 1})",
       "traceEvents[0]: complete event without \"dur\""},
      {R"({"ph": "X", "cat": "kernel", "name": "k", "dur": 1})",
       "traceEvents[0]: complete event without \"ts\""},
      {R"({"ph": "X", "cat": "kernel", "ts": 1, "dur": 1})",
       "traceEvents[0]: complete event without \"name\""},
      {R"({"ph": "X", "cat": "kernel", "name": "k", "ts": "soon", "dur": 1})",
       "traceEvents[0]: \"ts\": 'soon' is not a decimal number"},
      {R"({"ph": "X", "cat": "kernel", "name": "k", "ts": 1, "dur": 1,
           "args": {"device": "gpu0"}})",
       "traceEvents[0]: args.device must be an integer"},
  };
  for (const Case& c : cases) {
    absl::StatusOr<Trace> trace = Read(Events(c.event));
    ASSERT_FALSE(trace.ok()) << c.event;
    EXPECT_EQ(trace.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(trace.status().message(), HasSubstr(c.message));
  }
}

TEST(ChromeTraceReader, BadJsonIsAnErrorWithOffset) {
  std::string whole =
      Events(absl::StrCat(Kernel("1", "1"), ",", Runtime("1", "1", 1)));
  for (size_t cut :
       {size_t{1}, whole.size() / 3, whole.size() / 2, whole.size() - 1}) {
    absl::StatusOr<Trace> trace = Read(whole.substr(0, cut));
    ASSERT_FALSE(trace.ok()) << cut;
    EXPECT_EQ(trace.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(trace.status().message(), HasSubstr("bad JSON")) << cut;
  }
  absl::StatusOr<Trace> trace = Read(whole.substr(0, whole.size() - 2));
  EXPECT_THAT(trace.status().message(), HasSubstr("truncated?"));
  trace = Read(whole + " {}");
  ASSERT_FALSE(trace.ok());
  EXPECT_THAT(trace.status().message(), HasSubstr("bad JSON"));
  trace = Read(R"({"traceEvents": [1, 2 3]})");
  ASSERT_FALSE(trace.ok());
  EXPECT_THAT(trace.status().message(), HasSubstr("bad JSON at offset"));
}

TEST(ChromeTraceReader, WrongShapesAreErrors) {
  EXPECT_THAT(Read("[]").status().message(), HasSubstr("top level"));
  EXPECT_THAT(Read(R"({"gpu_kernels": []})").status().message(),
              HasSubstr("no \"traceEvents\""));
  EXPECT_THAT(Read(R"({"traceEvents": {}})").status().message(),
              HasSubstr("must be an array"));
}

}  // namespace
}  // namespace bubblewatch
