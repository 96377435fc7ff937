// Trace::collectives as the readers fill it: one CollectiveKernel
// per NCCL/RCCL kernel beside its GpuActivity, with what the source says and
// nothing guessed. Real traces are checked against a second reading (a
// simdjson DOM pass over the kernel args, SQL over the export); small
// hand-written traces pin Seq, the wrong types and the thread count.
#include <sqlite3.h>

#include <algorithm>
#include <cctype>
#include <cstdint>
#include <string>
#include <tuple>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "ingest/chrome/chrome_trace_reader.h"
#include "ingest/nsys/nsys_reader.h"
#include "ingest/timeline_reader.h"
#include "ingest/trace_io/trace_file.h"
#include "ingest/trace_reader.h"
#include "simdjson.h"
#include "tests/testing/files.h"

namespace bubblewatch {
namespace {

using ::testing::IsEmpty;

using testing::RealTrace;

absl::StatusOr<Trace> ReadChromeFile(const std::string& path, int threads) {
  absl::StatusOr<simdjson::padded_string> json = LoadTraceFile(path);
  if (!json.ok()) return json.status();
  return ReadChromeTrace(*json, nullptr, threads);
}

// A collective record with its names resolved, for comparisons and messages.
struct Resolved {
  int64_t start_ns, end_ns;
  int32_t device, stream;
  std::string kernel, collective, process_group, group_ranks, dtype;
  int64_t seq, in_elements, out_elements;
  int32_t group_size;
  bool operator==(const Resolved&) const = default;
};

std::ostream& operator<<(std::ostream& os, const Resolved& r) {
  return os << "{" << r.start_ns << ".." << r.end_ns << " dev " << r.device
            << " stream " << r.stream << " '" << r.kernel << "' coll '"
            << r.collective << "' pg '" << r.process_group << "' ranks '"
            << r.group_ranks << "' dtype '" << r.dtype << "' seq " << r.seq
            << " in " << r.in_elements << " out " << r.out_elements << " size "
            << r.group_size << "}";
}

constexpr const char* kAbsent = "<absent>";

std::vector<Resolved> Resolve(const Trace& trace) {
  auto name = [&trace](NameId id) -> std::string {
    if (id == kNoName) return kAbsent;
    EXPECT_LT(id, trace.names.size());
    return id < trace.names.size() ? trace.names[id] : "<bad id>";
  };
  std::vector<Resolved> out;
  for (const CollectiveKernel& c : trace.collectives) {
    out.push_back(Resolved{
        c.start_ns, c.end_ns, c.device, c.stream, name(c.kernel_name),
        name(c.collective), name(c.process_group), name(c.group_ranks),
        name(c.dtype), c.seq, c.in_elements, c.out_elements, c.group_size});
  }
  return out;
}

// Every record has its kernel in Trace::gpu (same times, device, stream,
// name), and every collective-named kernel has exactly one record.
void ExpectRecordsMatchKernels(const Trace& trace) {
  std::vector<std::tuple<int64_t, int64_t, int32_t, int32_t, NameId>> kernels;
  for (const GpuActivity& a : trace.gpu) {
    if (a.kind == GpuActivityKind::kKernel &&
        IsCollectiveKernelName(trace.Name(a.name))) {
      kernels.emplace_back(a.start_ns, a.end_ns, a.device, a.stream, a.name);
    }
  }
  std::vector<std::tuple<int64_t, int64_t, int32_t, int32_t, NameId>> records;
  for (const CollectiveKernel& c : trace.collectives) {
    records.emplace_back(c.start_ns, c.end_ns, c.device, c.stream,
                         c.kernel_name);
  }
  std::sort(kernels.begin(), kernels.end());
  std::sort(records.begin(), records.end());
  EXPECT_EQ(records, kernels);
}

// --- Chrome: real traces -------------------------------------------------

// The second reading: the kernels' args through the simdjson DOM, the
// expected record of each collective kernel in file order (times and
// stream/device are checked against Trace::gpu instead).
struct DomCollective {
  std::string kernel, collective, process_group, group_ranks, dtype;
  int64_t in_elements = -1, out_elements = -1, group_size = -1;
  bool operator==(const DomCollective&) const = default;
};

std::vector<DomCollective> DomCollectives(const std::string& path) {
  absl::StatusOr<simdjson::padded_string> json = LoadTraceFile(path);
  EXPECT_TRUE(json.ok()) << json.status();
  simdjson::dom::parser parser;
  simdjson::dom::element root = parser.parse(*json).value();
  std::vector<DomCollective> out;
  simdjson::dom::array events = root["traceEvents"].get_array().value();
  for (simdjson::dom::element e : events) {
    std::string_view ph, cat, name;
    if (e["ph"].get(ph) || ph != "X" || e["cat"].get(cat) ||
        (cat != "kernel" && cat != "Kernel") || e["name"].get(name)) {
      continue;
    }
    std::string lower(name.substr(0, 4));
    for (char& ch : lower) ch = static_cast<char>(std::tolower(ch));
    if (lower != "nccl" && lower != "rccl") continue;
    DomCollective c;
    c.kernel = std::string(name);
    simdjson::dom::object args;
    if (e["args"].get(args)) args = {};
    auto text = [&args](const char* key) -> std::string {
      std::string_view v;
      simdjson::dom::element value;
      if (args.at_key(key).get(value) || value.get(v)) return kAbsent;
      return std::string(v);
    };
    auto number = [&args](const char* key) -> int64_t {
      int64_t v = -1;
      simdjson::dom::element value;
      if (args.at_key(key).get(value) || value.get(v)) return -1;
      return v;
    };
    c.collective = text("Collective name");
    c.process_group = text("Process Group Name");
    c.group_ranks = text("Process Group Ranks");
    c.dtype = text("dtype");
    c.in_elements = number("In msg nelems");
    c.out_elements = number("Out msg nelems");
    c.group_size = number("Group size");
    out.push_back(c);
  }
  return out;
}

std::vector<DomCollective> AsDom(const std::vector<Resolved>& records) {
  std::vector<DomCollective> out;
  for (const Resolved& r : records) {
    out.push_back(DomCollective{r.kernel, r.collective, r.process_group,
                                r.group_ranks, r.dtype, r.in_elements,
                                r.out_elements, r.group_size});
  }
  return out;
}

TEST(ChromeCollectives, NcclDataHas21CollectivesOfGroup0OfTwoRanks) {
  const std::string path = RealTrace("hta/nccl_data.json.gz");
  absl::StatusOr<Trace> trace = ReadChromeFile(path, kChromeParseThreadsAuto);
  ASSERT_TRUE(trace.ok()) << trace.status();
  EXPECT_EQ(trace->rank, 0);
  EXPECT_EQ(trace->world_size, 2);
  std::vector<Resolved> records = Resolve(*trace);
  ASSERT_EQ(records.size(), 21u);
  ExpectRecordsMatchKernels(*trace);
  EXPECT_EQ(AsDom(records), DomCollectives(path));
  int allreduce = 0, broadcast = 0, float_dtype = 0;
  for (const Resolved& r : records) {
    EXPECT_EQ(r.process_group, "0") << r;
    EXPECT_EQ(r.group_ranks, "[0, 1]") << r;
    EXPECT_EQ(r.group_size, 2) << r;
    EXPECT_GT(r.in_elements, 0) << r;
    EXPECT_EQ(r.seq, -1) << r;  // This PyTorch wrote no Seq.
    allreduce += r.collective == "allreduce";
    broadcast += r.collective == "broadcast";
    float_dtype += r.dtype == "Float";
  }
  // python3 json over the file: 15 allreduce (Float), 3 broadcast Float,
  // 3 broadcast Long.
  EXPECT_EQ(allreduce, 15);
  EXPECT_EQ(broadcast, 6);
  EXPECT_EQ(float_dtype, 18);
  EXPECT_EQ(trace->skipped.count("collective arg 'Seq' not a non-negative "
                                 "integer"),
            0u);
}

TEST(ChromeCollectives, SampledRanksHaveTenSendRecvWithoutIdentity) {
  for (int rank : {0, 1}) {
    const std::string path =
        RealTrace(absl::StrCat("hta/sampled_rank-", rank, ".json.gz"));
    absl::StatusOr<Trace> trace = ReadChromeFile(path, kChromeParseThreadsAuto);
    ASSERT_TRUE(trace.ok()) << trace.status();
    EXPECT_EQ(trace->rank, rank);
    EXPECT_EQ(trace->world_size, 128);
    std::vector<Resolved> records = Resolve(*trace);
    ASSERT_EQ(records.size(), 10u) << path;
    ExpectRecordsMatchKernels(*trace);
    EXPECT_EQ(AsDom(records), DomCollectives(path));
    for (const Resolved& r : records) {
      EXPECT_TRUE(r.kernel.starts_with("ncclKernel_SendRecv")) << r;
      EXPECT_EQ(r.collective, kAbsent) << r;
      EXPECT_EQ(r.process_group, kAbsent) << r;
      EXPECT_EQ(r.group_ranks, kAbsent) << r;
      EXPECT_EQ(r.dtype, kAbsent) << r;
      EXPECT_EQ(r.seq, -1) << r;
      EXPECT_EQ(r.in_elements, -1) << r;
      EXPECT_EQ(r.out_elements, -1) << r;
      EXPECT_EQ(r.group_size, -1) << r;
    }
  }
}

TEST(ChromeCollectives, ThreadCountAndStreamingDoNotChangeTheRecords) {
  for (const char* name : {"hta/nccl_data.json.gz", "hta/rank0.json.gz",
                           "hta/sampled_rank-1.json.gz"}) {
    absl::StatusOr<Trace> one = ReadChromeFile(RealTrace(name), 0);
    absl::StatusOr<Trace> many = ReadChromeFile(RealTrace(name), 3);
    absl::StatusOr<Trace> streamed = ReadTraceFile(RealTrace(name));
    ASSERT_TRUE(one.ok()) << one.status();
    ASSERT_TRUE(many.ok()) << many.status();
    ASSERT_TRUE(streamed.ok()) << streamed.status();
    EXPECT_FALSE(one->collectives.empty()) << name;
    EXPECT_EQ(Resolve(*many), Resolve(*one)) << name;
    EXPECT_EQ(Resolve(*streamed), Resolve(*one)) << name;
    // Ids too, not only the strings: the string table is the same.
    EXPECT_EQ(many->names, one->names) << name;
  }
}

// --- Chrome: hand-written ------------------------------------------------

std::string CollectiveKernelJson(int64_t ts, const std::string& name,
                                 const std::string& args) {
  return absl::StrCat(R"({"ph": "X", "cat": "kernel", "name": ")", name,
                      R"(", "pid": 0, "tid": 7, "ts": )", ts,
                      R"(, "dur": 10, "args": {"device": 1, "stream": 9)",
                      args.empty() ? "" : ", ", args, "}}");
}

std::string TraceJson(const std::vector<std::string>& events) {
  std::string out = R"({"distributedInfo": {"rank": 3, "world_size": 8},)"
                    R"( "traceEvents": [)";
  for (size_t i = 0; i < events.size(); ++i) {
    if (i > 0) out += ",\n";
    out += events[i];
  }
  return out + "]}";
}

TEST(ChromeCollectives, ReadsSeqBothSpellingsAndEveryArg) {
  const std::string json = TraceJson({
      CollectiveKernelJson(
          100, "ncclDevKernel_AllGather_RING_LL",
          R"("Collective name": "allgather", "Process Group Name": "7", )"
          R"("Process Group Ranks": "[0, 2, 4]", "Group size": 3, )"
          R"("Seq": 41, "In msg nelems": 1024, "Out msg nelems": 3072, )"
          R"("dtype": "BFloat16")"),
      CollectiveKernelJson(200, "void rcclKernel_Foo", R"("seq": 5)"),
      // "Seq" wins over "seq" whatever the order.
      CollectiveKernelJson(300, "NCCLKERNEL", R"("seq": 5, "Seq": 6)"),
      // Not collectives: no records, and their args are not read.
      CollectiveKernelJson(400, "elementwise_kernel", R"("Seq": "x")"),
      R"({"ph": "X", "cat": "cpu_op", "name": "nccl:all_gather", "pid": 0,)"
      R"( "tid": 7, "ts": 1, "dur": 1, "args": {"Seq": "x"}})",
  });
  absl::StatusOr<Trace> trace = ReadChromeTrace(simdjson::padded_string(json));
  ASSERT_TRUE(trace.ok()) << trace.status();
  EXPECT_EQ(trace->rank, 3);
  EXPECT_EQ(trace->world_size, 8);
  EXPECT_EQ(trace->gpu.size(), 4u);  // GpuActivities as ever.
  ExpectRecordsMatchKernels(*trace);
  std::vector<Resolved> records = Resolve(*trace);
  ASSERT_EQ(records.size(), 3u);
  EXPECT_EQ(
      records[0],
      (Resolved{100000, 110000, 1, 9, "ncclDevKernel_AllGather_RING_LL",
                "allgather", "7", "[0, 2, 4]", "BFloat16", 41, 1024, 3072, 3}));
  EXPECT_EQ(records[1],
            (Resolved{200000, 210000, 1, 9, "void rcclKernel_Foo", kAbsent,
                      kAbsent, kAbsent, kAbsent, 5, -1, -1, -1}));
  EXPECT_EQ(records[2].seq, 6);
  EXPECT_THAT(trace->skipped, IsEmpty());
}

TEST(ChromeCollectives, WrongTypesAreLeftAbsentAndCountedNotFatal) {
  const std::string json = TraceJson({
      CollectiveKernelJson(
          100, "ncclKernel_AllReduce",
          R"("Collective name": 5, "Process Group Name": ["0"], )"
          R"("Process Group Ranks": null, "Group size": "2", )"
          R"("Seq": 1.5, "In msg nelems": -3, "Out msg nelems": {"a": 1}, )"
          R"("dtype": true)"),
      CollectiveKernelJson(200, "ncclKernel_AllReduce",
                           R"("Seq": "12", "Group size": 4294967296, )"
                           R"("dtype": "Fl\"oat")"),
  });
  for (int threads : {0, 3}) {
    absl::StatusOr<Trace> trace =
        ReadChromeTrace(simdjson::padded_string(json), nullptr, threads);
    ASSERT_TRUE(trace.ok()) << trace.status();
    std::vector<Resolved> records = Resolve(*trace);
    ASSERT_EQ(records.size(), 2u);
    EXPECT_EQ(records[0],
              (Resolved{100000, 110000, 1, 9, "ncclKernel_AllReduce", kAbsent,
                        kAbsent, kAbsent, kAbsent, -1, -1, -1, -1}));
    // Escapes are unescaped like names.
    EXPECT_EQ(records[1],
              (Resolved{200000, 210000, 1, 9, "ncclKernel_AllReduce", kAbsent,
                        kAbsent, kAbsent, "Fl\"oat", -1, -1, -1, -1}));
    const std::string kInt = "' not a non-negative integer";
    const std::string kString = "' not a string";
    EXPECT_THAT(
        trace->skipped,
        ::testing::UnorderedElementsAre(
            ::testing::Pair("collective arg 'Collective name" + kString, 1),
            ::testing::Pair("collective arg 'Process Group Name" + kString, 1),
            ::testing::Pair("collective arg 'dtype" + kString, 1),
            ::testing::Pair("collective arg 'Group size" + kInt, 2),
            ::testing::Pair("collective arg 'Seq" + kInt, 2),
            ::testing::Pair("collective arg 'In msg nelems" + kInt, 1),
            ::testing::Pair("collective arg 'Out msg nelems" + kInt, 1)));
  }
}

TEST(ChromeCollectives, DuplicateKernelGivesOneRecordAndBaseTimeShiftsIt) {
  const std::string kernel = CollectiveKernelJson(
      100, "ncclKernel_Broadcast", R"("Seq": "bad", "Collective name": "b")");
  const std::string json =
      absl::StrCat(R"({"baseTimeNanoseconds": 1000000000000, "traceEvents": [)",
                   kernel, ",", kernel, "]}");
  absl::StatusOr<Trace> trace = ReadChromeTrace(simdjson::padded_string(json));
  ASSERT_TRUE(trace.ok()) << trace.status();
  ASSERT_EQ(trace->collectives.size(), 1u);
  EXPECT_EQ(trace->collectives[0].start_ns, 1000000000000 + 100000);
  EXPECT_EQ(trace->collectives[0].start_ns, trace->gpu[0].start_ns);
  EXPECT_EQ(trace->collectives[0].end_ns, trace->gpu[0].end_ns);
  EXPECT_EQ(trace->skipped["duplicate event"], 1);
  // The repeat is dropped whole: its bad arg is not counted twice.
  EXPECT_EQ(trace->skipped["collective arg 'Seq' not a non-negative integer"],
            1);
}

TEST(ChromeCollectives, ManyBlocksOnManyThreadsMatchOneThread) {
  // Enough kernels for many 64 KiB blocks, each with its own args.
  std::vector<std::string> events;
  for (int i = 0; i < 6000; ++i) {
    events.push_back(CollectiveKernelJson(
        i * 20, i % 3 == 0 ? "elementwise_kernel" : "ncclKernel_AllReduce",
        absl::StrCat(R"("Collective name": "op)", i % 7,
                     R"(", "Process Group Name": ")", i % 5, R"(", "Seq": )",
                     i % 11 == 0 ? "\"x\"" : absl::StrCat(i))));
  }
  const simdjson::padded_string json(TraceJson(events));
  absl::StatusOr<Trace> one = ReadChromeTrace(json, nullptr, 0);
  absl::StatusOr<Trace> many = ReadChromeTrace(json, nullptr, 3);
  ASSERT_TRUE(one.ok()) << one.status();
  ASSERT_TRUE(many.ok()) << many.status();
  EXPECT_EQ(one->collectives.size(), 4000u);
  EXPECT_EQ(Resolve(*many), Resolve(*one));
  EXPECT_EQ(many->names, one->names);
  EXPECT_EQ(many->skipped, one->skipped);
  for (size_t i = 0; i < one->collectives.size(); ++i) {
    const int event = static_cast<int>(i / 2 * 3 + i % 2 + 1);
    EXPECT_EQ(one->collectives[i].seq, event % 11 == 0 ? -1 : event) << i;
  }
}

// --- Nsight Systems ------------------------------------------------------

int64_t SqlInt(const std::string& path, const std::string& sql) {
  sqlite3* db = nullptr;
  EXPECT_EQ(sqlite3_open_v2(path.c_str(), &db, SQLITE_OPEN_READONLY, nullptr),
            SQLITE_OK);
  sqlite3_stmt* stmt = nullptr;
  int64_t n = -1;
  if (sqlite3_prepare_v2(db, sql.c_str(), -1, &stmt, nullptr) == SQLITE_OK &&
      sqlite3_step(stmt) == SQLITE_ROW) {
    n = sqlite3_column_int64(stmt, 0);
  }
  sqlite3_finalize(stmt);
  sqlite3_close(db);
  return n;
}

TEST(NsysCollectives, MfuBeforeHas33SendRecvOnEachDevice) {
  const std::string path = RealTrace("nsys/mfu_2gpu_before.sqlite");
  absl::StatusOr<Trace> trace = ReadNsysExport(path);
  ASSERT_TRUE(trace.ok()) << trace.status();
  ExpectRecordsMatchKernels(*trace);
  int per_device[2] = {0, 0};
  for (const Resolved& r : Resolve(*trace)) {
    ASSERT_TRUE(r.device == 0 || r.device == 1) << r;
    ++per_device[r.device];
    EXPECT_EQ(r.kernel, "ncclDevKernel_SendRecv") << r;
    EXPECT_EQ(r.collective, kAbsent) << r;
    EXPECT_EQ(r.process_group, kAbsent) << r;
    EXPECT_EQ(r.group_ranks, kAbsent) << r;
    EXPECT_EQ(r.dtype, kAbsent) << r;
    EXPECT_EQ(r.seq, -1) << r;
    EXPECT_EQ(r.in_elements, -1) << r;
    EXPECT_EQ(r.out_elements, -1) << r;
    EXPECT_EQ(r.group_size, -1) << r;
  }
  for (int device : {0, 1}) {
    EXPECT_EQ(per_device[device], 33);
    EXPECT_EQ(
        per_device[device],
        SqlInt(path,
               absl::StrCat("SELECT COUNT(*) FROM CUPTI_ACTIVITY_KIND_KERNEL "
                            "k JOIN StringIds s ON s.id = k.shortName WHERE "
                            "s.value LIKE 'nccl%' AND k.deviceId = ",
                            device)));
  }
}

TEST(NsysCollectives, ExportsWithoutNcclKernelsHaveNoRecords) {
  for (const char* name :
       {"nsys/h100_2gpu_1s.sqlite", "nsys/healthy_1pct.sqlite"}) {
    absl::StatusOr<Trace> trace = ReadNsysExport(RealTrace(name));
    ASSERT_TRUE(trace.ok()) << trace.status();
    EXPECT_FALSE(trace->gpu.empty()) << name;
    EXPECT_THAT(trace->collectives, IsEmpty()) << name;
  }
}

// --- Timeline ------------------------------------------------------------

TEST(TimelineCollectives, CollectiveKernelNamesGetRecordsWithNamesOnly) {
  const std::string json = R"({"gpu_kernels": [
      {"name": "ncclKernel_AllReduce_RING", "start_us": 1, "end_us": 3,
       "stream": 4, "device": 2},
      {"name": "gemm", "start_us": 3, "end_us": 5, "stream": 4},
      {"name": "ncclKernel_Copy", "start_us": 5, "end_us": 6, "stream": 4,
       "kind": "memcpy"}],
    "cpu_events": [{"name": "ncclAllReduce", "start_us": 0, "end_us": 1}]})";
  absl::StatusOr<Trace> trace = ReadTimelineJson(simdjson::padded_string(json));
  ASSERT_TRUE(trace.ok()) << trace.status();
  EXPECT_EQ(trace->gpu.size(), 3u);
  EXPECT_THAT(Resolve(*trace),
              ::testing::ElementsAre(Resolved{
                  1000, 3000, 2, 4, "ncclKernel_AllReduce_RING", kAbsent,
                  kAbsent, kAbsent, kAbsent, -1, -1, -1, -1}));
}

}  // namespace
}  // namespace bubblewatch
