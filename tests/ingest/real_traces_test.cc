// Every real trace in tests/testdata/real/ is read, and what the readers
// return is checked against counts taken a second way: a simdjson DOM pass
// for the Chrome traces, SQL for the Nsight Systems exports, plus the counts
// stated in each folder's SOURCE.md (python3 json+gzip / sqlite3 COUNT(*)).
#include <sqlite3.h>

#include <cstdint>
#include <string>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "ingest/chrome/chrome_trace_reader.h"
#include "ingest/nsys/nsys_reader.h"
#include "ingest/trace_io/trace_file.h"
#include "simdjson.h"

namespace bubblewatch {
namespace {

struct Counts {
  int64_t kernels = 0;
  int64_t memcpys = 0;
  int64_t memsets = 0;
  int64_t runtime = 0;  // CUDA runtime + driver calls.
  int64_t context = 0;  // cpu_op, user_annotation, python_function, NVTX.
  int64_t pageable = 0;
  int64_t matched_kernels = 0;  // Kernels whose correlation has a launch.
  bool operator==(const Counts&) const = default;
};

std::ostream& operator<<(std::ostream& os, const Counts& c) {
  return os << "{kernels " << c.kernels << ", memcpys " << c.memcpys
            << ", memsets " << c.memsets << ", runtime " << c.runtime
            << ", context " << c.context << ", pageable " << c.pageable
            << ", matched kernels " << c.matched_kernels << "}";
}

// Counts what the readers returned, checking every interval on the way.
Counts CountTrace(const Trace& trace) {
  Counts c;
  absl::flat_hash_set<CorrelationId> launches;
  for (const CpuEvent& e : trace.cpu) {
    EXPECT_LE(e.start_ns, e.end_ns);
    EXPECT_LT(e.name, trace.names.size());
    bool api = e.category == CpuEventCategory::kCudaRuntime ||
               e.category == CpuEventCategory::kCudaDriver;
    (api ? c.runtime : c.context)++;
    if (api && e.correlation != kNoCorrelation) launches.insert(e.correlation);
  }
  for (const GpuActivity& a : trace.gpu) {
    EXPECT_LE(a.start_ns, a.end_ns);
    EXPECT_LT(a.name, trace.names.size());
    switch (a.kind) {
      case GpuActivityKind::kKernel:
        c.kernels++;
        c.matched_kernels += launches.contains(a.correlation);
        break;
      case GpuActivityKind::kMemcpy:
        c.memcpys++;
        c.pageable += a.pageable;
        break;
      case GpuActivityKind::kMemset:
        c.memsets++;
        break;
    }
  }
  return c;
}

// --- Chrome traces -------------------------------------------------------

struct ChromeCase {
  const char* file;
  Counts source_md;  // From SOURCE.md (python3); pageable/matched from DOM.
  int32_t rank;
  int32_t world_size;
};

// A second, independent count: the DOM, by "cat" for "ph": "X" events.
Counts CountWithDom(const simdjson::padded_string& json) {
  simdjson::dom::parser parser;
  simdjson::dom::element root = parser.parse(json).value();
  Counts c;
  absl::flat_hash_set<uint64_t> launches;
  std::vector<uint64_t> kernel_correlations;
  simdjson::dom::array events = root["traceEvents"].get_array().value();
  for (simdjson::dom::element e : events) {
    std::string_view ph, cat, name;
    if (e["ph"].get(ph) || ph != "X" || e["cat"].get(cat)) continue;
    uint64_t correlation = 0;
    if (e.at_pointer("/args/correlation").get(correlation)) correlation = 0;
    if (cat == "kernel" || cat == "Kernel") {
      c.kernels++;
      kernel_correlations.push_back(correlation);
    } else if (cat == "gpu_memcpy" || cat == "Memcpy") {
      c.memcpys++;
      if (e["name"].get(name)) name = {};
      c.pageable += absl::StrContains(
          absl::string_view(name.data(), name.size()), "Pageable");
    } else if (cat == "gpu_memset" || cat == "Memset") {
      c.memsets++;
    } else if (cat == "cuda_runtime" || cat == "cuda_driver" ||
               cat == "Runtime" || cat == "Driver") {
      c.runtime++;
      if (correlation != 0) launches.insert(correlation);
    } else if (cat == "cpu_op" || cat == "user_annotation" ||
               cat == "python_function" || cat == "Operator") {
      c.context++;
    }
  }
  for (uint64_t k : kernel_correlations)
    c.matched_kernels += launches.contains(k);
  return c;
}

class RealChromeTrace : public ::testing::TestWithParam<ChromeCase> {};

TEST_P(RealChromeTrace, CountsMatchAnIndependentCount) {
  const ChromeCase& param = GetParam();
  absl::StatusOr<simdjson::padded_string> json = LoadTraceFile(
      absl::StrCat(BUBBLEWATCH_TESTDATA_DIR, "/real/hta/", param.file));
  ASSERT_TRUE(json.ok()) << json.status();
  absl::StatusOr<Trace> trace = ReadChromeTrace(*json);
  ASSERT_TRUE(trace.ok()) << trace.status();
  Counts read = CountTrace(*trace);
  Counts dom = CountWithDom(*json);
  EXPECT_EQ(read, dom);
  Counts stated = param.source_md;
  stated.pageable = dom.pageable;
  stated.matched_kernels = dom.matched_kernels;
  EXPECT_EQ(read, stated);
  EXPECT_EQ(trace->rank, param.rank);
  EXPECT_EQ(trace->world_size, param.world_size);
  EXPECT_EQ(trace->skipped.count("duplicate event"), 0);
}

// kernels, memcpys, memsets, runtime, cpu_op + user_annotation (SOURCE.md).
INSTANTIATE_TEST_SUITE_P(
    Hta, RealChromeTrace,
    ::testing::Values(
        ChromeCase{"benchmark_result_2869224_1695835535_trace.json.gz",
                   {79, 16, 3, 361, 359 + 8},
                   0,
                   -1},
        ChromeCase{
            "sampled_rank-0.json.gz", {1154, 40, 10, 1204, 2329 + 73}, 0, 128},
        ChromeCase{
            "sampled_rank-1.json.gz", {1104, 40, 10, 1154, 2302 + 65}, 1, 128},
        ChromeCase{
            "rank0.json.gz", {6080, 1390, 277, 33924, 25185 + 360}, 0, 16},
        ChromeCase{
            "nccl_data.json.gz", {2700, 960, 114, 8740, 14346 + 42}, 0, 2},
        ChromeCase{"mtia_rank_0.json.gz", {0, 0, 0, 0, 108889 + 214}, 0, 1}),
    [](const ::testing::TestParamInfo<ChromeCase>& info) {
      std::string name = info.param.file;
      name = name.substr(0, name.find('.'));
      for (char& ch : name) {
        if (!isalnum(static_cast<unsigned char>(ch))) ch = '_';
      }
      return name;
    });

TEST(RealChromeTraces, Rank0HasBlockingPageableCopiesBothWays) {
  absl::StatusOr<simdjson::padded_string> json = LoadTraceFile(
      absl::StrCat(BUBBLEWATCH_TESTDATA_DIR, "/real/hta/rank0.json.gz"));
  ASSERT_TRUE(json.ok()) << json.status();
  absl::StatusOr<Trace> trace = ReadChromeTrace(*json);
  ASSERT_TRUE(trace.ok()) << trace.status();
  int dtoh = 0, htod = 0;
  for (const GpuActivity& a : trace->gpu) {
    if (!a.pageable) continue;
    EXPECT_EQ(a.kind, GpuActivityKind::kMemcpy);
    absl::string_view name = trace->Name(a.name);
    dtoh += name == "Memcpy DtoH (Device -> Pageable)";
    htod += name == "Memcpy HtoD (Pageable -> Device)";
  }
  EXPECT_EQ(dtoh, 30);
  EXPECT_EQ(htod, 45);
}

TEST(RealChromeTraces, MtiaTraceHasNoKernelsAndSaysWhatItSkipped) {
  absl::StatusOr<simdjson::padded_string> json = LoadTraceFile(
      absl::StrCat(BUBBLEWATCH_TESTDATA_DIR, "/real/hta/mtia_rank_0.json.gz"));
  ASSERT_TRUE(json.ok()) << json.status();
  absl::StatusOr<Trace> trace = ReadChromeTrace(*json);
  ASSERT_TRUE(trace.ok()) << trace.status();
  EXPECT_TRUE(trace->gpu.empty());
  EXPECT_EQ(trace->skipped["category 'mtia_ccp_events'"], 25814);
  EXPECT_EQ(trace->skipped["category 'mtia_runtime'"], 3453);
  EXPECT_EQ(trace->skipped["phase 'M'"], 310046);
}

TEST(RealChromeTraces, BaseTimeMakesRelativeTimestampsEpochNanoseconds) {
  // nccl_data: baseTimeNanoseconds 1711964646000000000 (2024-04-01), ts
  // relative to it; its first cudnn bn_bw kernel has ts 4458676983543.183.
  absl::StatusOr<simdjson::padded_string> json = LoadTraceFile(
      absl::StrCat(BUBBLEWATCH_TESTDATA_DIR, "/real/hta/nccl_data.json.gz"));
  ASSERT_TRUE(json.ok()) << json.status();
  absl::StatusOr<Trace> trace = ReadChromeTrace(*json);
  ASSERT_TRUE(trace.ok()) << trace.status();
  bool found = false;
  for (const GpuActivity& a : trace->gpu) {
    found |= a.start_ns == 1711964646000000000 + 4458676983543183 &&
             a.end_ns == a.start_ns + 41407;
  }
  EXPECT_TRUE(found);
}

// --- Nsight Systems exports ----------------------------------------------

int64_t SqlCount(sqlite3* db, const std::string& sql) {
  sqlite3_stmt* stmt = nullptr;
  if (sqlite3_prepare_v2(db, sql.c_str(), -1, &stmt, nullptr) != SQLITE_OK) {
    return 0;  // A table that is absent has no rows.
  }
  int64_t n =
      sqlite3_step(stmt) == SQLITE_ROW ? sqlite3_column_int64(stmt, 0) : 0;
  sqlite3_finalize(stmt);
  return n;
}

// The second count, in SQL. Kernels match a launch on (process, correlation);
// without globalPid (healthy_1pct) on the correlation alone.
Counts CountWithSql(const std::string& path) {
  sqlite3* db = nullptr;
  EXPECT_EQ(sqlite3_open_v2(path.c_str(), &db, SQLITE_OPEN_READONLY, nullptr),
            SQLITE_OK);
  Counts c;
  c.kernels = SqlCount(db, "SELECT COUNT(*) FROM CUPTI_ACTIVITY_KIND_KERNEL");
  c.memcpys = SqlCount(db, "SELECT COUNT(*) FROM CUPTI_ACTIVITY_KIND_MEMCPY");
  c.memsets = SqlCount(db, "SELECT COUNT(*) FROM CUPTI_ACTIVITY_KIND_MEMSET");
  c.runtime = SqlCount(db, "SELECT COUNT(*) FROM CUPTI_ACTIVITY_KIND_RUNTIME") +
              SqlCount(db, "SELECT COUNT(*) FROM CUPTI_ACTIVITY_KIND_DRIVER");
  c.context = SqlCount(
      db, "SELECT COUNT(*) FROM NVTX_EVENTS WHERE \"end\" IS NOT NULL");
  c.pageable = SqlCount(db,
                        "SELECT COUNT(*) FROM CUPTI_ACTIVITY_KIND_MEMCPY "
                        "WHERE srcKind = 0 OR dstKind = 0");
  c.matched_kernels = SqlCount(
      db,
      "SELECT COUNT(*) FROM CUPTI_ACTIVITY_KIND_KERNEL k JOIN (SELECT DISTINCT "
      "correlationId AS c, (globalTid >> 24) & 16777215 AS p FROM "
      "CUPTI_ACTIVITY_KIND_RUNTIME) r ON r.c = k.correlationId AND "
      "r.p = (k.globalPid >> 24) & 16777215");
  if (c.matched_kernels == 0) {
    c.matched_kernels = SqlCount(
        db,
        "SELECT COUNT(*) FROM CUPTI_ACTIVITY_KIND_KERNEL k JOIN (SELECT "
        "DISTINCT correlationId AS c FROM CUPTI_ACTIVITY_KIND_RUNTIME) r ON "
        "r.c = k.correlationId");
  }
  sqlite3_close(db);
  return c;
}

struct NsysCase {
  const char* file;
  Counts stated;  // kernels, memcpys, memsets, runtime, NVTX ranges,
                  // pageable, matched kernels (sqlite3 CLI, once).
};

class RealNsysExport : public ::testing::TestWithParam<NsysCase> {};

TEST_P(RealNsysExport, CountsMatchSql) {
  std::string path =
      absl::StrCat(BUBBLEWATCH_TESTDATA_DIR, "/real/nsys/", GetParam().file);
  absl::StatusOr<Trace> trace = ReadNsysExport(path);
  ASSERT_TRUE(trace.ok()) << trace.status();
  Counts read = CountTrace(*trace);
  EXPECT_EQ(read, CountWithSql(path));
  EXPECT_EQ(read, GetParam().stated);
  EXPECT_EQ(trace->rank, -1);
  EXPECT_EQ(trace->world_size, -1);
}

INSTANTIATE_TEST_SUITE_P(
    NsysAi, RealNsysExport,
    ::testing::Values(
        NsysCase{"h100_2gpu_1s.sqlite", {3442, 904, 22, 5796, 16782, 4, 1632}},
        NsysCase{"healthy_1pct.sqlite", {400, 0, 0, 400, 0, 0, 400}},
        NsysCase{"mfu_2gpu_before.sqlite",
                 {4010, 1020, 269, 7466, 19118, 34, 3986}},
        NsysCase{"mfu_2gpu_after.sqlite",
                 {3587, 904, 242, 6682, 17113, 32, 3577}}),
    [](const ::testing::TestParamInfo<NsysCase>& info) {
      std::string name = info.param.file;
      name = name.substr(0, name.find('.'));
      for (char& ch : name) {
        if (!isalnum(static_cast<unsigned char>(ch))) ch = '_';
      }
      return name;
    });

}  // namespace
}  // namespace bubblewatch
