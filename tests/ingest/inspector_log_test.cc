// The Inspector log reader (ingest/inspector/inspector_log.h) and the job it
// builds (inspector_job.h): the plugin README's documented examples (plain
// and verbose, v4.0 and v4.3 forms), gzip, streaming across buffer
// boundaries, and bad input as counted outcomes.
#include "ingest/inspector/inspector_log.h"

#include <zlib.h>

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "analysis/collectives.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "ingest/inspector/inspector_job.h"
#include "ingest/synthetic/synthetic_inspector_job.h"
#include "ingest/trace_reader.h"
#include "tests/testing/files.h"
#include "tests/testing/temp_dir.h"

namespace bubblewatch {
namespace {

std::string Example(const std::string& name) {
  return absl::StrCat(BUBBLEWATCH_TESTDATA_DIR, "/inspector/", name);
}

std::string Gzip(const std::string& text) {
  z_stream z{};
  EXPECT_EQ(deflateInit2(&z, 6, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY),
            Z_OK);
  std::string out(deflateBound(&z, text.size()) + 64, '\0');
  z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(text.data()));
  z.avail_in = static_cast<uInt>(text.size());
  z.next_out = reinterpret_cast<Bytef*>(out.data());
  z.avail_out = static_cast<uInt>(out.size());
  EXPECT_EQ(deflate(&z, Z_FINISH), Z_STREAM_END);
  out.resize(z.total_out);
  deflateEnd(&z);
  return out;
}

// The values the README documents for its examples, written out here
// independently of the test data files.
void ExpectReadmeExamples(const InspectorLog& log, const std::string& version) {
  EXPECT_EQ(log.hostname, "example-hostname");
  EXPECT_EQ(log.pid, 1639453);
  EXPECT_EQ(log.version, version);
  EXPECT_EQ(log.last_dump_timestamp_us, 1748030377748202);
  ASSERT_EQ(log.comms.size(), 1u);
  EXPECT_EQ(log.comms[0].id, "0x7f8c496ae9f661");
  EXPECT_EQ(log.comms[0].rank, 2);
  EXPECT_EQ(log.comms[0].n_ranks, 8);
  EXPECT_EQ(log.comms[0].nnodes, 1);
  ASSERT_EQ(log.ops.size(), 2u);
  EXPECT_EQ(log.coll_records, 2);
  EXPECT_EQ(log.p2p_records, 0);

  const InspectorOp& plain = log.ops[0];
  EXPECT_EQ(log.op_names[plain.name], "AllReduce");
  EXPECT_FALSE(plain.p2p);
  EXPECT_EQ(plain.sn, 1407);
  EXPECT_EQ(plain.msg_bytes, 17179869184);
  EXPECT_EQ(plain.exec_us, 61974);
  EXPECT_DOUBLE_EQ(plain.algobw_gbs, 277.210914);
  EXPECT_DOUBLE_EQ(plain.busbw_gbs, 485.119099);
  EXPECT_EQ(plain.kernel_start_us, -1);
  EXPECT_EQ(plain.kernel_stop_us, -1);

  const InspectorOp& verbose = log.ops[1];
  EXPECT_EQ(log.op_names[verbose.name], "ReduceScatter");
  EXPECT_EQ(verbose.sn, 1231);
  EXPECT_EQ(verbose.msg_bytes, 2147483648);
  EXPECT_EQ(verbose.exec_us, 41057);
  ASSERT_GE(verbose.timing_source, 0);
  EXPECT_EQ(log.op_names[verbose.timing_source], "kernel_gpu");
  EXPECT_DOUBLE_EQ(verbose.algobw_gbs, 418.439467);
  EXPECT_DOUBLE_EQ(verbose.busbw_gbs, 366.134533);
  EXPECT_EQ(verbose.kernel_start_us, 1752867229235181);
  EXPECT_EQ(verbose.kernel_stop_us, 1752867229275811);
  EXPECT_EQ(log.verbose_records, 1);
}

TEST(InspectorLogTest, ReadmeExamplesV40) {
  absl::StatusOr<InspectorLog> log =
      ReadInspectorLog(Example("readme_v4_0-pid1639453.log"));
  ASSERT_TRUE(log.ok()) << log.status();
  ExpectReadmeExamples(*log, "v4.0");
  EXPECT_TRUE(log->skipped.empty());
  EXPECT_EQ(log->dump_markers, 0);
  EXPECT_EQ(log->coll_dropped(), 0);
}

TEST(InspectorLogTest, ReadmeExamplesV43WithDumpMarker) {
  absl::StatusOr<InspectorLog> log =
      ReadInspectorLog(Example("readme_v4_3-pid1639453.log"));
  ASSERT_TRUE(log.ok()) << log.status();
  ExpectReadmeExamples(*log, "v4.3");
  // Proxy counters are known; nothing unknown, nothing skipped.
  EXPECT_TRUE(log->skipped.empty()) << log->skipped.begin()->first;
  EXPECT_EQ(log->dump_markers, 1);
  // The marker's cumulative total (4096) beats the since-last sum (512).
  EXPECT_EQ(log->coll_dropped(), 4096);
}

TEST(InspectorLogTest, GzipAndStreamingGiveTheSameLog) {
  InspectorJobSpec spec;
  spec.steps = 800;  // > 1 MiB a file: lines cross the read buffer.
  InspectorJobLogs job = GenerateInspectorJob(spec);
  const std::string& text = job.files[0].text;
  ASSERT_GT(text.size(), size_t{1} << 20);
  testing::TempDir dir;
  const std::string plain = dir.Sub(job.files[0].name);
  const std::string gz = dir.Sub(job.files[0].name + ".gz");
  testing::WriteFile(plain, text);
  testing::WriteFile(gz, Gzip(text));
  const InspectorLog whole = ParseInspectorLog(text, job.files[0].name);
  for (const std::string& path : {plain, gz}) {
    absl::StatusOr<InspectorLog> log = ReadInspectorLog(path);
    ASSERT_TRUE(log.ok()) << log.status();
    EXPECT_EQ(log->ops.size(), whole.ops.size());
    EXPECT_EQ(log->lines, whole.lines);
    EXPECT_TRUE(log->skipped.empty());
    for (size_t i = 0; i < log->ops.size() && i < whole.ops.size(); ++i) {
      ASSERT_EQ(log->ops[i].sn, whole.ops[i].sn) << i;
      ASSERT_EQ(log->ops[i].exec_us, whole.ops[i].exec_us) << i;
      ASSERT_EQ(log->ops[i].kernel_start_us, whole.ops[i].kernel_start_us);
    }
  }
  EXPECT_EQ(whole.hostname, job.truth.hosts[0]);
  EXPECT_EQ(whole.pid, job.truth.pids[0]);
  EXPECT_EQ(static_cast<int64_t>(whole.ops.size()) * 4, job.truth.coll_records);
}

TEST(InspectorLogTest, HostAndPidFromTheFileNameWithoutMetadata) {
  const InspectorLog log = ParseInspectorLog(
      "{\"header\":{\"id\":\"0x1\",\"rank\":0,\"n_ranks\":2,\"nnodes\":1},"
      "\"coll_perf\":{\"coll\":\"AllReduce\",\"coll_sn\":1,"
      "\"coll_exec_time_us\":5}}\n",
      "/logs/gpu-node-7-pid4242.jsonl.gz");
  EXPECT_EQ(log.hostname, "gpu-node-7");
  EXPECT_EQ(log.pid, 4242);
  EXPECT_EQ(log.ops.size(), 1u);
}

const char kMarker[] =
    "{\"header\":{\"id\":\"0xc0\",\"rank\":0,\"n_ranks\":2,\"nnodes\":1},"
    "\"metadata\":{\"inspector_output_format_version\":\"v4.3\","
    "\"dump_timestamp_us\":5,\"hostname\":\"h\",\"pid\":1},\"dump_stats\":{"
    "\"coll_records\":2,\"coll_dropped_total\":%d,"
    "\"coll_dropped_since_last_dump\":%d,\"p2p_records\":0,"
    "\"p2p_dropped_total\":0,\"p2p_dropped_since_last_dump\":0}}\n";

std::string Marker(int total, int since) {
  char buf[512];
  std::snprintf(buf, sizeof buf, kMarker, total, since);
  return buf;
}

std::string Coll(int sn) {
  return absl::StrCat("{\"coll_perf\":{\"coll\":\"AllReduce\",\"coll_sn\":", sn,
                      ",\"coll_exec_time_us\":", 10 + sn, "}}\n");
}

TEST(InspectorLogTest, BadLinesAreCountedSkipsNotTheEnd) {
  std::string text = Marker(0, 0) + Coll(1);
  text += "{\"coll_perf\":{\"coll\":\"AllRed\n";  // Cut mid-line.
  text += "not json at all\n";
  text += Coll(2);
  text += "[1, 2]\n";
  text += "{\"coll_perf\":{\"coll\":\"AllReduce\"}}\n";  // No sn.
  text += Marker(0, 0) + Coll(3) + "{\"coll_perf\":{\"coll\":\"All";
  const InspectorLog log = ParseInspectorLog(text);
  ASSERT_EQ(log.ops.size(), 3u);
  EXPECT_EQ(log.ops[2].sn, 3);
  EXPECT_EQ(log.skipped.at("bad JSON line (line skipped)"), 3);
  EXPECT_EQ(log.skipped.at("truncated last line (line skipped)"), 1);
  EXPECT_EQ(log.skipped.at("coll_perf without a sequence number (line "
                           "skipped)"),
            1);
  EXPECT_EQ(log.lines_skipped(), 5);
  // The second marker announced 2 records; one came.
  EXPECT_EQ(log.skipped.at("records announced by a dump marker, missing"), 1);
  EXPECT_EQ(log.lines, 10);
}

TEST(InspectorLogTest, UnknownFieldsAndVersionsAreReadAndCounted) {
  const InspectorLog log = ParseInspectorLog(
      "{\"header\":{\"id\":\"0x1\",\"rank\":0,\"n_ranks\":2,\"nnodes\":1,"
      "\"color\":\"red\"},\"metadata\":{\"inspector_output_format_version\":"
      "\"v9.1\",\"hostname\":\"h\",\"pid\":3,\"rack\":[1,{\"a\":2}]},"
      "\"coll_perf\":{\"coll\":\"AllGather\",\"coll_sn\":4,"
      "\"coll_exec_time_us\":7,\"coll_new_thing\":{\"x\":1},"
      "\"coll_msg_size_bytes\":\"big\"},\"extra\":true}\n");
  ASSERT_EQ(log.ops.size(), 1u);
  EXPECT_EQ(log.ops[0].sn, 4);
  EXPECT_EQ(log.ops[0].msg_bytes, -1);
  EXPECT_EQ(log.version, "v9.1");
  EXPECT_EQ(log.skipped.at("unknown format version 'v9.1' (read as v5)"), 1);
  EXPECT_EQ(log.skipped.at("unknown field 'color'"), 1);
  EXPECT_EQ(log.skipped.at("unknown field 'rack'"), 1);
  EXPECT_EQ(log.skipped.at("unknown field 'coll_new_thing'"), 1);
  EXPECT_EQ(log.skipped.at("unknown field 'extra'"), 1);
  EXPECT_EQ(log.skipped.at("field 'coll_msg_size_bytes' of the wrong type"), 1);
  EXPECT_EQ(log.lines_skipped(), 0);
}

TEST(InspectorLogTest, RingDropsAreSummedAndAMissingMarkerStillCounts) {
  // Dumps report 100, then 50 more (total 150); a third marker is lost but
  // the fourth's total says 400: the drops are 400, not 150 + 0.
  std::string text = Marker(100, 100) + Coll(1) + Coll(2) + Marker(150, 50) +
                     Coll(3) + Coll(4) + Marker(400, 10) + Coll(5) + Coll(6);
  InspectorLog log = ParseInspectorLog(text);
  EXPECT_EQ(log.coll_dropped(), 400);
  EXPECT_EQ(log.ops.size(), 6u);
  // A lost total (an older writer sending only since-last counts) is the
  // sum of the increments.
  log = ParseInspectorLog(Marker(0, 30) + Coll(1) + Coll(2) + Marker(0, 12) +
                          Coll(3) + Coll(4));
  EXPECT_EQ(log.coll_dropped(), 42);
}

TEST(InspectorLogTest, TimesBeyondTheAcceptedRangeAreCountedSkips) {
  const std::string head =
      "{\"header\":{\"id\":\"0x1\",\"rank\":0,\"n_ranks\":1},"
      "\"coll_perf\":{\"coll\":\"AllReduce\",\"coll_sn\":";
  const InspectorLog log = ParseInspectorLog(
      head + "1,\"coll_exec_time_us\":9223372036854775807}}\n" + head +
      "2,\"coll_exec_time_us\":5,\"event_trace_ts\":{\"kernel_events\":"
      "[{\"kernel_start_ts\":9223372036854775000,\"kernel_stop_ts\":"
      "9223372036854775001}]}}}\n" +
      head + "9223372036854775807,\"coll_exec_time_us\":5}}\n");
  EXPECT_EQ(log.skipped.at("coll_perf with an exec time over a day (line "
                           "skipped)"),
            1);
  EXPECT_EQ(log.skipped.at("kernel timestamp out of the accepted time range "
                           "(line skipped)"),
            1);
  ASSERT_EQ(log.ops.size(), 1u);
  EXPECT_EQ(log.ops[0].sn, INT64_MAX);
  // The largest coll_sn goes through the job (exec-time order) intact.
  std::vector<InspectorLog> logs = {log};
  absl::StatusOr<InspectorJob> job = BuildInspectorJob(logs, {"a"});
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_EQ(job->traces[0].collectives.size(), 1u);
}

TEST(InspectorLogTest, BareRecordWithoutMarkerIsACountedSkip) {
  const InspectorLog log = ParseInspectorLog(Coll(1) + Coll(2));
  EXPECT_TRUE(log.ops.empty());
  EXPECT_EQ(log.skipped.at("record without a header or a dump marker before "
                           "it (line skipped)"),
            2);
}

TEST(InspectorLogTest, DetectedByContentThroughReadTraceFile) {
  EXPECT_TRUE(LooksLikeInspectorLog(Marker(0, 0)));
  EXPECT_TRUE(LooksLikeInspectorLog("\n  " + Coll(1)));
  EXPECT_FALSE(LooksLikeInspectorLog("{\"traceEvents\": []}"));
  EXPECT_FALSE(LooksLikeInspectorLog("{\"gpu_kernels\": []}"));
  absl::StatusOr<Trace> trace =
      ReadTraceFile(Example("readme_v4_3-pid1639453.log"));
  ASSERT_TRUE(trace.ok()) << trace.status();
  EXPECT_EQ(trace->source_format, "inspector");
  EXPECT_EQ(trace->host, "example-hostname");
  EXPECT_EQ(trace->collectives.size(), 2u);
  EXPECT_EQ(trace->gpu.size(), 2u);
}

// A log holding more records than the caller's limit (what bounds analyze's
// memory: docs/analyze.md#inspector-logs) is kResourceExhausted, plain or
// gzipped, once it holds more than the limit: it does not read on to the
// end. At the limit exactly it reads whole.
TEST(InspectorLogTest, MoreRecordsThanTheLimitStopsReading) {
  InspectorJobSpec spec;
  spec.steps = 800;  // > 1 MiB: several read buffers.
  InspectorJobLogs job = GenerateInspectorJob(spec);
  const std::string& text = job.files[0].text;
  testing::TempDir dir;
  const std::string plain = dir.Sub(job.files[0].name);
  const std::string gz = dir.Sub(job.files[0].name + ".gz");
  testing::WriteFile(plain, text);
  testing::WriteFile(gz, Gzip(text));
  const int64_t records = static_cast<int64_t>(
      ParseInspectorLog(text, job.files[0].name).ops.size());
  ASSERT_GT(records, 1000);
  for (const std::string& path : {plain, gz}) {
    absl::StatusOr<InspectorLog> whole = ReadInspectorLog(path, records);
    ASSERT_TRUE(whole.ok()) << whole.status();
    EXPECT_EQ(static_cast<int64_t>(whole->ops.size()), records);
    for (int64_t limit : {records - 1, int64_t{100}, int64_t{0}}) {
      absl::StatusOr<InspectorLog> over = ReadInspectorLog(path, limit);
      ASSERT_FALSE(over.ok()) << path << " " << limit;
      EXPECT_EQ(over.status().code(), absl::StatusCode::kResourceExhausted);
      EXPECT_EQ(over.status().message(),
                absl::StrCat("more than ", limit, " records"));
    }
  }
}

TEST(InspectorLogTest, AHugeLineIsOneCountedSkipAndTheRestIsRead) {
  // 20 MiB of one line (past the 16 MiB a line may take) between records:
  // memory stays bounded, the line is one skip, the records around it read.
  std::string text = Marker(0, 0) + Coll(1);
  text += "{\"coll_perf\":{\"coll\":\"";
  text.append(size_t{20} << 20, 'x');
  text += "\"}}\n";
  text += Coll(2) + Marker(0, 0) + Coll(3) + Coll(4);
  testing::TempDir dir;
  const std::string path = dir.Sub("huge-pid9.log");
  testing::WriteFile(path, text);
  absl::StatusOr<InspectorLog> log = ReadInspectorLog(path);
  ASSERT_TRUE(log.ok()) << log.status();
  ASSERT_EQ(log->ops.size(), 4u);
  EXPECT_EQ(log->ops[1].sn, 2);
  EXPECT_EQ(log->skipped.at("line over 16 MiB (line skipped)"), 1);
  EXPECT_EQ(log->lines_skipped(), 1);
  EXPECT_EQ(log->lines, 7);
}

TEST(InspectorJobTest, TwoProcessesClaimingOneRankAreCounted) {
  auto log = [](const std::string& host, int pid, int rank) {
    return ParseInspectorLog(absl::StrCat(
        "{\"header\":{\"id\":\"0xaa\",\"rank\":", rank,
        ",\"n_ranks\":2,\"nnodes\":2},\"metadata\":{"
        "\"inspector_output_format_version\":\"v4.2\",\"hostname\":\"",
        host, "\",\"pid\":", pid,
        "},\"coll_perf\":{\"coll\":\"AllReduce\",\"coll_sn\":1,"
        "\"coll_exec_time_us\":10}}\n"));
  };
  std::vector<InspectorLog> logs;
  logs.push_back(log("a", 1, 0));
  logs.push_back(log("b", 2, 1));
  logs.push_back(log("c", 3, 1));  // Claims b's rank.
  absl::StatusOr<InspectorJob> job =
      BuildInspectorJob(std::move(logs), {"a", "b", "c"});
  ASSERT_TRUE(job.ok()) << job.status();
  ASSERT_EQ(job->processes.size(), 3u);
  EXPECT_FALSE(job->job_ranks_known);  // No communicator spans all three.
  ASSERT_EQ(job->communicators.size(), 1u);
  EXPECT_EQ(job->communicators[0].members, (std::vector<int>{0, 1}));
  EXPECT_EQ(job->skipped.at("rank 1 of communicator 0xaa claimed by b pid 2 "
                            "and c pid 3: the second's records of it "
                            "dropped"),
            1);
  EXPECT_EQ(job->skipped.at("records of a communicator rank claimed twice or "
                            "out of range (dropped)"),
            1);
  EXPECT_TRUE(job->traces[2].collectives.empty());
  EXPECT_EQ(job->traces[1].collectives.size(), 1u);
}

TEST(InspectorJobTest, JobRanksFromTheWholeJobCommunicator) {
  InspectorJobSpec spec;
  spec.tp = 2;
  spec.dp = 3;
  spec.steps = 3;
  InspectorJobLogs gen = GenerateInspectorJob(spec);
  std::vector<InspectorLog> logs;
  std::vector<std::string> files;
  // Reverse order: job ranks must come from the world communicator.
  for (auto it = gen.files.rbegin(); it != gen.files.rend(); ++it) {
    logs.push_back(ParseInspectorLog(it->text, it->name));
    files.push_back(it->name);
  }
  absl::StatusOr<InspectorJob> job = BuildInspectorJob(std::move(logs), files);
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_TRUE(job->job_ranks_known);
  EXPECT_TRUE(job->verbose);
  EXPECT_EQ(job->world_size, 6);
  EXPECT_EQ(job->communicators.size(), 1u + 3u + 2u);
  for (const InspectorProcess& p : job->processes) {
    ASSERT_GE(p.job_rank, 0);
    EXPECT_EQ(p.host, gen.truth.hosts[p.job_rank]);
    EXPECT_EQ(p.pid, gen.truth.pids[p.job_rank]);
  }
  for (const InspectorCommunicator& c : job->communicators) {
    EXPECT_EQ(c.complete, c.instances) << c.id;
  }
}

// Point-to-point records with kernel times are paired by (communicator, the
// two processes, k), k counted per peer in p2p_sn order: not by p2p_sn,
// which counts a process's operations with every peer. b receives from a
// twice and sends to c between: b's second recv (p2p_sn 3) pairs with a's
// second send (p2p_sn 2). The analysis then matches the three pairs and
// finds the waits the kernel times give (b 100 + 50 us, c 20 us).
TEST(InspectorJobTest, PointToPointRecordsArePairedPerPeerInOrder) {
  auto line = [](int pid, int rank, const std::string& body) {
    return absl::StrCat(
        "{\"header\":{\"id\":\"0xaa\",\"rank\":", rank,
        ",\"n_ranks\":3,\"nnodes\":1},\"metadata\":{"
        "\"inspector_output_format_version\":\"v4.2\",\"dump_timestamp_us\":"
        "1800000000000000,\"hostname\":\"h\",\"pid\":",
        pid, "},", body, "}\n");
  };
  auto ts = [](int64_t start, int64_t stop) {
    constexpr int64_t kBase = 1'800'000'000'000'000;
    return absl::StrCat(
        ",\"event_trace_ts\":{\"kernel_events\":[{\"channel_id\":0,"
        "\"kernel_start_ts\":",
        kBase + start, ",\"kernel_stop_ts\":", kBase + stop,
        ",\"kernel_record_ts\":", kBase + stop, "}]}");
  };
  auto coll = [&](int64_t start, int64_t stop) {
    return absl::StrCat(
        "\"coll_perf\":{\"coll\":\"AllReduce\",\"coll_sn\":1,"
        "\"coll_exec_time_us\":10,\"coll_timing_source\":\"kernel_gpu\"",
        ts(start, stop), "}");
  };
  auto p2p = [&](const std::string& op, int64_t sn, int peer, int64_t start,
                 int64_t stop) {
    return absl::StrCat(
        "\"p2p_perf\":{\"p2p\":\"", op, "\",\"p2p_sn\":", sn,
        ",\"p2p_peer\":", peer, ",\"p2p_exec_time_us\":", stop - start,
        ",\"p2p_timing_source\":\"kernel_gpu\"", ts(start, stop), "}");
  };
  std::vector<InspectorLog> logs;
  logs.push_back(ParseInspectorLog(line(1, 0, coll(10, 20)) +
                                   line(1, 0, p2p("Send", 1, 1, 1000, 1100)) +
                                   line(1, 0, p2p("Send", 2, 1, 3000, 3100))));
  logs.push_back(ParseInspectorLog(line(2, 1, coll(10, 20)) +
                                   line(2, 1, p2p("Recv", 1, 0, 900, 1100)) +
                                   line(2, 1, p2p("Send", 2, 2, 2000, 2050)) +
                                   line(2, 1, p2p("Recv", 3, 0, 2950, 3100))));
  logs.push_back(ParseInspectorLog(line(3, 2, coll(10, 20)) +
                                   line(3, 2, p2p("Recv", 1, 1, 1980, 2050))));
  absl::StatusOr<InspectorJob> job =
      BuildInspectorJob(std::move(logs), {"a", "b", "c"});
  ASSERT_TRUE(job.ok()) << job.status();
  ASSERT_TRUE(job->verbose);
  ASSERT_TRUE(job->job_ranks_known);
  EXPECT_EQ(job->p2p_records, 6);
  // (peer, k) of each process's point-to-point kernels, in p2p_sn order.
  std::vector<std::vector<std::pair<int32_t, int64_t>>> pairs(3);
  for (size_t p = 0; p < 3; ++p) {
    const Trace& t = job->traces[p];
    EXPECT_EQ(t.pid, job->processes[p].pid);
    for (const auto& [reason, n] : t.skipped) ADD_FAILURE() << reason;
    for (const CollectiveKernel& k : t.collectives) {
      if (!IsPointToPointName(t.Name(k.collective))) continue;
      pairs[p].push_back({k.peer, k.pair_index});
    }
  }
  using P = std::vector<std::pair<int32_t, int64_t>>;
  EXPECT_EQ(pairs[0], (P{{1, 0}, {1, 1}}));
  EXPECT_EQ(pairs[1], (P{{0, 0}, {2, 0}, {0, 1}}));
  EXPECT_EQ(pairs[2], (P{{1, 0}}));

  std::vector<RankInput> ranks;
  for (size_t p = 0; p < 3; ++p) {
    RankInput in;
    in.trace = &job->traces[p];
    in.rank = job->processes[p].rank;
    in.clock_domain = "host:h";
    ranks.push_back(in);
  }
  absl::StatusOr<CollectiveAnalysis> c =
      AnalyzeCollectives(ranks, CollectiveOptions{}, AnalyzerOptions{});
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->matched, 1 + 3);  // The all-reduce and three pairs.
  EXPECT_EQ(c->unmatched, 0);
  EXPECT_EQ(c->unpaired, 0);
  ASSERT_EQ(c->ranks.size(), 3u);
  EXPECT_EQ(c->ranks[0].comm_wait_ns, 0);
  EXPECT_EQ(c->ranks[1].comm_wait_ns, 150'000);
  EXPECT_EQ(c->ranks[2].comm_wait_ns, 20'000);

  // A ring drop of point-to-point records on one member: its
  // communicator's records are counted, not paired.
  std::vector<InspectorLog> dropped;
  dropped.push_back(ParseInspectorLog(
      line(1, 0, coll(10, 20)) + line(1, 0, p2p("Send", 1, 1, 1000, 1100))));
  dropped.push_back(ParseInspectorLog(
      line(2, 1, coll(10, 20)) + line(2, 1, p2p("Recv", 1, 0, 900, 1100)) +
      line(2, 1,
           "\"dump_stats\":{\"coll_records\":0,\"p2p_records\":0,"
           "\"p2p_dropped_total\":4,\"p2p_dropped_since_last_dump\":4}")));
  dropped.push_back(ParseInspectorLog(line(3, 2, coll(10, 20))));
  absl::StatusOr<InspectorJob> lost =
      BuildInspectorJob(std::move(dropped), {"a", "b", "c"});
  ASSERT_TRUE(lost.ok()) << lost.status();
  for (size_t p = 0; p < 2; ++p) {
    EXPECT_EQ(lost->traces[p].collectives.size(), 1u);
    EXPECT_EQ(lost->traces[p].skipped.begin()->second, 1);
  }
}

}  // namespace
}  // namespace bubblewatch
