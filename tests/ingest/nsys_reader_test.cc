#include "ingest/nsys/nsys_reader.h"

#include <sqlite3.h>
#include <unistd.h>

#include <cstdio>
#include <string>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace bubblewatch {
namespace {

using ::testing::HasSubstr;
using ::testing::IsEmpty;

std::string RealExport(const std::string& name) {
  return absl::StrCat(BUBBLEWATCH_TESTDATA_DIR, "/real/nsys/", name);
}

// A fresh path in the test's temporary directory.
std::string TempPath(const std::string& name) {
  std::string path =
      absl::StrCat(::testing::TempDir(), "/", getpid(), "_", name);
  std::remove(path.c_str());
  return path;
}

// Creates an SQLite file at `path` by running `sql`.
void CreateDatabase(const std::string& path, const std::string& sql) {
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(path.c_str(), &db), SQLITE_OK);
  char* error = nullptr;
  int rc = sqlite3_exec(db, sql.c_str(), nullptr, nullptr, &error);
  std::string message = error != nullptr ? error : "";
  sqlite3_free(error);
  sqlite3_close(db);
  ASSERT_EQ(rc, SQLITE_OK) << message;
}

// The smallest export the reader accepts, plus `extra` SQL.
std::string MinimalExport(const std::string& extra) {
  return absl::StrCat(
      "CREATE TABLE StringIds (id INTEGER PRIMARY KEY, value TEXT);"
      "INSERT INTO StringIds VALUES (1, 'gemm'), (2, 'void gemm<float>()'),"
      "  (3, 'cuLaunchKernel'), (4, 'step'), (5, 'cudaMemcpy_v3020');"
      "CREATE TABLE CUPTI_ACTIVITY_KIND_KERNEL (start INTEGER, \"end\" "
      "  INTEGER, deviceId INTEGER, streamId INTEGER, correlationId INTEGER,"
      "  shortName INTEGER, demangledName INTEGER);",
      extra);
}

TEST(NsysReader, ReadsDriverCallsNvtxRangesAndNamesFromStringIds) {
  std::string path = TempPath("driver.sqlite");
  const int64_t tid_a = (int64_t{7} << 24) | 70;  // process 7, thread 70
  CreateDatabase(
      path,
      MinimalExport(absl::StrCat(
          "INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL VALUES (100, 200, 1, 13, 5,"
          "  1, 2);"
          "CREATE TABLE CUPTI_ACTIVITY_KIND_DRIVER (start INTEGER, \"end\" "
          "  INTEGER, globalTid INTEGER, correlationId INTEGER, nameId "
          "  INTEGER);",
          "INSERT INTO CUPTI_ACTIVITY_KIND_DRIVER VALUES (90, 95, ", tid_a,
          ", 5, 3);"
          "CREATE TABLE NVTX_EVENTS (start INTEGER, \"end\" INTEGER,"
          "  eventType INTEGER, text TEXT, globalTid INTEGER, textId INTEGER);",
          "INSERT INTO NVTX_EVENTS VALUES (80, 300, 59, NULL, ", tid_a,
          ", 4), (81, 82, 59, 'literal', ", tid_a, ", NULL),",
          "  (85, NULL, 34, 'mark', ", tid_a, ", NULL);")));
  absl::StatusOr<Trace> trace = ReadNsysExport(path);
  ASSERT_TRUE(trace.ok()) << trace.status();
  EXPECT_EQ(trace->rank, -1);
  ASSERT_EQ(trace->gpu.size(), 1);
  const GpuActivity& kernel = trace->gpu[0];
  EXPECT_EQ(trace->Name(kernel.name), "gemm");  // shortName preferred.
  EXPECT_EQ(kernel.device, 1);
  EXPECT_EQ(kernel.stream, 13);
  EXPECT_EQ(kernel.start_ns, 100);
  EXPECT_EQ(kernel.end_ns, 200);
  // No globalPid column: the single process that made API calls.
  EXPECT_EQ(kernel.correlation, (uint64_t{7} << 32) | 5);
  ASSERT_EQ(trace->cpu.size(), 3);
  const CpuEvent& driver = trace->cpu[0];
  EXPECT_EQ(driver.category, CpuEventCategory::kCudaDriver);
  EXPECT_EQ(trace->Name(driver.name), "cuLaunchKernel");
  EXPECT_EQ(driver.correlation, kernel.correlation);
  EXPECT_EQ(driver.thread, static_cast<uint64_t>(tid_a));
  EXPECT_EQ(trace->cpu[1].category, CpuEventCategory::kUserAnnotation);
  EXPECT_EQ(trace->Name(trace->cpu[1].name), "step");
  EXPECT_EQ(trace->Name(trace->cpu[2].name), "literal");
  EXPECT_EQ(trace->skipped["NVTX event without end (mark or registration)"], 1);
}

TEST(NsysReader, FoldsProcessIntoCorrelationSoEqualIdsDoNotJoinAcross) {
  std::string path = TempPath("two_processes.sqlite");
  const int64_t pid_a = int64_t{0x1000000} << 24 | (int64_t{111} << 24);
  const int64_t pid_b = int64_t{0x1000000} << 24 | (int64_t{112} << 24);
  CreateDatabase(
      path,
      absl::StrCat(
          "CREATE TABLE StringIds (id INTEGER PRIMARY KEY, value TEXT);"
          "INSERT INTO StringIds VALUES (1, 'k'), (2, "
          "'cudaLaunchKernel_v7000');"
          "CREATE TABLE CUPTI_ACTIVITY_KIND_KERNEL (start INTEGER, \"end\" "
          "  INTEGER, deviceId INTEGER, streamId INTEGER, correlationId "
          "  INTEGER, globalPid INTEGER, shortName INTEGER);"
          "INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL VALUES (10, 20, 0, 7, 42, ",
          pid_a, ", 1), (10, 20, 1, 7, 42, ", pid_b,
          ", 1);"
          "CREATE TABLE CUPTI_ACTIVITY_KIND_RUNTIME (start INTEGER, \"end\" "
          "  INTEGER, globalTid INTEGER, correlationId INTEGER, nameId "
          "  INTEGER);"
          "INSERT INTO CUPTI_ACTIVITY_KIND_RUNTIME VALUES (1, 2, ",
          pid_a | 111, ", 42, 2), (1, 2, ", pid_b | 112, ", 42, 2);"));
  absl::StatusOr<Trace> trace = ReadNsysExport(path);
  ASSERT_TRUE(trace.ok()) << trace.status();
  ASSERT_EQ(trace->gpu.size(), 2);
  ASSERT_EQ(trace->cpu.size(), 2);
  EXPECT_EQ(trace->gpu[0].correlation, (uint64_t{111} << 32) | 42);
  EXPECT_EQ(trace->gpu[1].correlation, (uint64_t{112} << 32) | 42);
  EXPECT_EQ(trace->cpu[0].correlation, trace->gpu[0].correlation);
  EXPECT_EQ(trace->cpu[1].correlation, trace->gpu[1].correlation);
  EXPECT_NE(trace->cpu[0].thread, trace->cpu[1].thread);
  EXPECT_EQ(trace->Name(trace->cpu[0].name), "cudaLaunchKernel_v7000");
}

TEST(NsysReader,
     KernelWithoutGlobalPidAmongSeveralProcessesKeepsNoCorrelation) {
  std::string path = TempPath("ambiguous.sqlite");
  CreateDatabase(
      path,
      MinimalExport(
          "INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL VALUES (1, 2, 0, 7, 5, 1, 2);"
          "CREATE TABLE CUPTI_ACTIVITY_KIND_RUNTIME (start INTEGER, \"end\" "
          "  INTEGER, globalTid INTEGER, correlationId INTEGER, nameId "
          "  INTEGER);"
          "INSERT INTO CUPTI_ACTIVITY_KIND_RUNTIME VALUES (0, 1, 16777217, 5, "
          "  3), (0, 1, 33554434, 5, 3);"));
  absl::StatusOr<Trace> trace = ReadNsysExport(path);
  ASSERT_TRUE(trace.ok()) << trace.status();
  ASSERT_EQ(trace->gpu.size(), 1);
  EXPECT_EQ(trace->gpu[0].correlation, kNoCorrelation);
  EXPECT_EQ(trace->skipped.size(), 1);
  EXPECT_THAT(trace->skipped.begin()->first, HasSubstr("correlation unknown"));
}

TEST(NsysReader, MemcpyNamesAndPageableFromMemoryKinds) {
  std::string path = TempPath("memcpy.sqlite");
  CreateDatabase(
      path,
      MinimalExport(
          "CREATE TABLE CUPTI_ACTIVITY_KIND_MEMCPY (start INTEGER, \"end\" "
          "  INTEGER, deviceId INTEGER, streamId INTEGER, correlationId "
          "  INTEGER, bytes INTEGER, copyKind INTEGER, srcKind INTEGER,"
          "  dstKind INTEGER);"
          "INSERT INTO CUPTI_ACTIVITY_KIND_MEMCPY VALUES"
          "  (1, 2, 0, 7, 1, 64, 2, 2, 0), (3, 4, 0, 7, 2, 64, 1, 1, 2),"
          "  (5, 6, 0, 7, 3, 64, 1, 0, 2);"
          "CREATE TABLE CUPTI_ACTIVITY_KIND_MEMSET (start INTEGER, \"end\" "
          "  INTEGER, deviceId INTEGER, streamId INTEGER, bytes INTEGER,"
          "  memKind INTEGER);"
          "INSERT INTO CUPTI_ACTIVITY_KIND_MEMSET VALUES (7, 8, 0, 7, 8, 2);"));
  absl::StatusOr<Trace> trace = ReadNsysExport(path);
  ASSERT_TRUE(trace.ok()) << trace.status();
  ASSERT_EQ(trace->gpu.size(), 4);
  EXPECT_EQ(trace->Name(trace->gpu[0].name),
            "Memcpy DtoH (Device -> Pageable)");
  EXPECT_TRUE(trace->gpu[0].pageable);
  EXPECT_EQ(trace->gpu[0].bytes, 64);
  EXPECT_EQ(trace->Name(trace->gpu[1].name), "Memcpy HtoD (Pinned -> Device)");
  EXPECT_FALSE(trace->gpu[1].pageable);
  EXPECT_TRUE(trace->gpu[2].pageable);
  EXPECT_EQ(trace->gpu[3].kind, GpuActivityKind::kMemset);
  EXPECT_EQ(trace->Name(trace->gpu[3].name), "Memset (Device)");
}

TEST(NsysReader, EndBeforeStartIsAnErrorNamingTableAndRow) {
  std::string path = TempPath("backwards.sqlite");
  CreateDatabase(path, MinimalExport("INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL "
                                     "VALUES (1, 2, 0, 7, 1, 1, 2), "
                                     "(50, 40, 0, 7, 2, 1, 2);"));
  absl::StatusOr<Trace> trace = ReadNsysExport(path);
  ASSERT_FALSE(trace.ok());
  EXPECT_EQ(trace.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(trace.status().message(),
              HasSubstr("CUPTI_ACTIVITY_KIND_KERNEL row 1: end 40 ns is "
                        "before start 50 ns"));
}

TEST(NsysReader, SqliteFromAnotherProgramNamesTheMissingKernelTable) {
  std::string path = TempPath("other_program.sqlite");
  CreateDatabase(path,
                 "CREATE TABLE moz_places (id INTEGER PRIMARY KEY, url TEXT);"
                 "INSERT INTO moz_places VALUES (1, 'https://example.org');");
  absl::StatusOr<Trace> trace = ReadNsysExport(path);
  ASSERT_FALSE(trace.ok());
  EXPECT_EQ(trace.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(trace.status().message(),
            "not an Nsight Systems export: table CUPTI_ACTIVITY_KIND_KERNEL "
            "is missing");
}

TEST(NsysReader, KernelTableWithoutStartColumnIsAnError) {
  std::string path = TempPath("no_start.sqlite");
  CreateDatabase(path,
                 "CREATE TABLE StringIds (id INTEGER PRIMARY KEY, value TEXT);"
                 "CREATE TABLE CUPTI_ACTIVITY_KIND_KERNEL (begin INTEGER, "
                 "  \"end\" INTEGER);");
  absl::StatusOr<Trace> trace = ReadNsysExport(path);
  ASSERT_FALSE(trace.ok());
  EXPECT_THAT(trace.status().message(),
              HasSubstr("table CUPTI_ACTIVITY_KIND_KERNEL has no column "
                        "\"start\""));
}

TEST(NsysReader, NonSqliteFileIsAClearError) {
  absl::StatusOr<Trace> trace = ReadNsysExport(
      absl::StrCat(BUBBLEWATCH_TESTDATA_DIR, "/real/hta/rank0.json.gz"));
  ASSERT_FALSE(trace.ok());
  EXPECT_EQ(trace.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(trace.status().message(),
            "not an Nsight Systems export: not an SQLite database");
}

TEST(NsysReader, MissingFileIsNotFound) {
  absl::StatusOr<Trace> trace = ReadNsysExport(TempPath("absent.sqlite"));
  EXPECT_EQ(trace.status().code(), absl::StatusCode::kNotFound);
}

TEST(NsysReader, PathWithUriSpecialCharactersOpens) {
  std::string path = TempPath("odd name?#%.sqlite");
  CreateDatabase(path, MinimalExport(""));
  absl::StatusOr<Trace> trace = ReadNsysExport(path);
  ASSERT_TRUE(trace.ok()) << trace.status();
  EXPECT_THAT(trace->gpu, IsEmpty());
}

TEST(NsysReader, TrimmedExportWithMissingTablesAndColumnsReads) {
  // healthy_1pct: StringIds, KERNEL (no globalPid), RUNTIME, empty MEMCPY
  // without srcKind/dstKind; no MEMSET, DRIVER, NVTX or session start.
  absl::StatusOr<Trace> trace =
      ReadNsysExport(RealExport("healthy_1pct.sqlite"));
  ASSERT_TRUE(trace.ok()) << trace.status();
  EXPECT_EQ(trace->gpu.size(), 400);
  EXPECT_EQ(trace->cpu.size(), 400);
  EXPECT_EQ(trace->Name(trace->gpu[0].name), "elementwise_add");
  EXPECT_EQ(trace->gpu[0].start_ns, 0);  // No epoch offset without it.
  EXPECT_EQ(trace->cpu[0].start_ns, -3000);
  absl::flat_hash_set<CorrelationId> launches;
  for (const CpuEvent& e : trace->cpu) launches.insert(e.correlation);
  for (const GpuActivity& a : trace->gpu) {
    EXPECT_TRUE(launches.contains(a.correlation)) << a.correlation;
  }
}

TEST(NsysReader, ShiftsTimesToEpochWithSessionStart) {
  // TARGET_INFO_SESSION_START_TIME: utcEpochNs 1779630014975716426,
  // systemClockNs 35255823190; the earliest kernel starts at 155360295935.
  absl::StatusOr<Trace> trace =
      ReadNsysExport(RealExport("h100_2gpu_1s.sqlite"));
  ASSERT_TRUE(trace.ok()) << trace.status();
  int64_t first = trace->gpu.at(0).start_ns;
  for (const GpuActivity& a : trace->gpu) {
    if (a.kind == GpuActivityKind::kKernel) first = std::min(first, a.start_ns);
  }
  EXPECT_EQ(first, int64_t{155360295935} + 1779630014975716426 - 35255823190);
}

}  // namespace
}  // namespace bubblewatch
