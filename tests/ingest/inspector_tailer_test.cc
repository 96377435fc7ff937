// InspectorTailer (ingest/watch/inspector_tailer.h) against the embedded
// (mock) Kafka cluster with a fake clock: a growing log is sent line by
// complete line once, a partial last line waits, truncation and
// replacement are counted and start a new producer, and a restart resumes
// from the offsets file, resending a pending chunk byte for byte. The live
// straggler check through a real broker is in
// tests/cli/produce_watch_inspector_kafka_test.cc.
#include "ingest/watch/inspector_tailer.h"

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "ingest/synthetic/synthetic_inspector_job.h"
#include "kafka/embedded_kafka_cluster.h"
#include "schemas/event_batch_codec.h"
#include "tests/testing/files.h"
#include "tests/testing/temp_dir.h"
#include "tests/testing/topic_reader.h"

namespace bubblewatch {
namespace {

namespace fs = std::filesystem;
using testing::WriteFile;

int64_t CountRecords(absl::string_view text) {
  int64_t n = 0;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    if (absl::StrContains(line, "\"coll_perf\"")) ++n;
  }
  return n;
}

void Append(const std::string& path, absl::string_view bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::app);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

TEST(InspectorTailerNames, DirectoryNameGivesTheJob) {
  EXPECT_EQ(JobFromInspectorDirName("/data/nccl-inspector-812345"), "812345");
  EXPECT_EQ(JobFromInspectorDirName("/data/nccl-inspector-812345/"), "812345");
  EXPECT_EQ(JobFromInspectorDirName("/data/nccl-inspector-unknown-jobid"), "");
  EXPECT_EQ(JobFromInspectorDirName("/data/logs"), "");
  EXPECT_TRUE(IsTailedInspectorName("node01-pid4242.log"));
  EXPECT_TRUE(IsTailedInspectorName("node01-pid4242.jsonl"));
  EXPECT_FALSE(IsTailedInspectorName("node01-pid4242.log.gz"));
  EXPECT_FALSE(IsTailedInspectorName(".node01-pid4242.log"));
}

TEST(InspectorTailerChunks, PartialLineAndUnfinishedDumpWait) {
  const std::string marker =
      R"({"header":{"id":"0x1","rank":0,"n_ranks":2},"dump_stats":{"coll_records":2,"p2p_records":0}})"
      "\n";
  const std::string rec = R"({"coll_perf":{"coll":"AllReduce","coll_sn":1}})"
                          "\n";
  EXPECT_EQ(ChunkLength("", true), 0);
  EXPECT_EQ(ChunkLength(rec.substr(0, 10), true), 0);
  // The marker announces 2 records, one followed: held back while growing.
  EXPECT_EQ(ChunkLength(rec + marker + rec, true),
            static_cast<int64_t>(rec.size()));
  EXPECT_EQ(ChunkLength(rec + marker + rec, false),
            static_cast<int64_t>(2 * rec.size() + marker.size()));
  EXPECT_EQ(ChunkLength(marker + rec + rec + rec.substr(0, 5), true),
            static_cast<int64_t>(marker.size() + 2 * rec.size()));
}

class InspectorTailerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto cluster = EmbeddedKafkaCluster::Create();
    ASSERT_TRUE(cluster.ok()) << cluster.status();
    cluster_ = *std::move(cluster);
    ASSERT_TRUE(cluster_->CreateTopic("events", /*partitions=*/1).ok());
    EventProducerOptions options;
    options.topic = "events";
    options.delivery_timeout = absl::Seconds(20);
    options.linger = absl::Milliseconds(5);
    auto producer = EventProducer::Create(
        KafkaConfig(cluster_->bootstrap_servers()), options);
    ASSERT_TRUE(producer.ok()) << producer.status();
    producer_ = *std::move(producer);
    ASSERT_TRUE(producer_->WaitUntilReachable(absl::Seconds(10)).ok());
    watched_ = dir_.Sub("nccl-inspector-4711");
    fs::create_directories(watched_);
    InspectorJobSpec spec;
    spec.steps = 12;
    spec.dump_every_steps = 3;
    const InspectorJobLogs gen = GenerateInspectorJob(spec);
    log_ = gen.files[0];
    pid_ = gen.truth.pids[0];
    path_ = watched_ + "/" + log_.name;
  }

  std::unique_ptr<InspectorTailer> Tailer(
      absl::Duration settle = absl::Seconds(2), int64_t max_chunk_bytes = -1) {
    InspectorTailerOptions o;
    if (max_chunk_bytes > 0) o.max_chunk_bytes = max_chunk_bytes;
    o.dir = watched_;
    o.state_dir = watched_ + "/.bubblewatch-state";
    o.batching.max_events = 7;
    o.settle = settle;
    o.flush_timeout = absl::Seconds(20);
    auto t = InspectorTailer::Create(std::move(o), producer_.get());
    EXPECT_TRUE(t.ok()) << t.status();
    return t.ok() ? *std::move(t) : nullptr;
  }

  std::vector<DecodedBatch> Batches(size_t expected) {
    std::vector<DecodedBatch> out;
    auto messages = testing::ReadTopic(cluster_->bootstrap_servers(), "events",
                                       expected, absl::Seconds(20));
    EXPECT_TRUE(messages.ok()) << messages.status();
    if (!messages.ok()) return out;
    for (const auto& m : *messages) {
      auto b = DecodeEventBatch(std::span<const uint8_t>(
          reinterpret_cast<const uint8_t*>(m.value.data()), m.value.size()));
      EXPECT_TRUE(b.ok());
      if (b.ok()) out.push_back(*std::move(b));
    }
    return out;
  }

  testing::TempDir dir_;
  std::string watched_;
  InspectorJobFile log_;
  int64_t pid_ = -1;  // The generator's pid of log_'s process.
  std::string path_;
  std::unique_ptr<EmbeddedKafkaCluster> cluster_;
  std::unique_ptr<EventProducer> producer_;
  const absl::Time t0_ = absl::FromUnixSeconds(1'800'000'000);
};

TEST_F(InspectorTailerTest, GrowingLogIsSentOnceLineByCompleteLine) {
  const std::string& text = log_.text;
  const int64_t records = CountRecords(text);
  ASSERT_GT(records, 20);
  auto t = Tailer();
  ASSERT_NE(t, nullptr);
  // Written in three pieces, each cut inside a line.
  const size_t a = text.size() / 3 + 7;
  const size_t b = 2 * text.size() / 3 + 3;
  ASSERT_NE(text[a - 1], '\n');
  WriteFile(path_, text.substr(0, a));
  // Settled (the file did not grow for 2 s): no held-back dump.
  ASSERT_TRUE(t->PollOnce(t0_).ok());
  ASSERT_TRUE(t->PollOnce(t0_ + absl::Seconds(3)).ok());
  const int64_t first = t->stats().records_sent;
  EXPECT_GT(first, 0);
  EXPECT_EQ(first, CountRecords(text.substr(0, text.rfind('\n', a) + 1)));
  Append(path_, text.substr(a, b - a));
  ASSERT_TRUE(t->PollOnce(t0_ + absl::Seconds(4)).ok());
  ASSERT_TRUE(t->PollOnce(t0_ + absl::Seconds(7)).ok());
  Append(path_, text.substr(b));
  ASSERT_TRUE(t->PollOnce(t0_ + absl::Seconds(8)).ok());
  ASSERT_TRUE(t->PollOnce(t0_ + absl::Seconds(11)).ok());
  ASSERT_TRUE(t->PollOnce(t0_ + absl::Seconds(12)).ok());  // Nothing new.
  const InspectorTailStats s = t->stats();
  EXPECT_EQ(s.records_sent, records);
  for (const auto& [reason, n] : s.skipped)
    ADD_FAILURE() << reason << ": " << n;
  EXPECT_EQ(s.logs, 1);
  EXPECT_EQ(s.truncated + s.replaced, 0);
  EXPECT_EQ(s.bytes_read, static_cast<int64_t>(text.size()));

  std::vector<DecodedBatch> batches = Batches(s.batches_sent);
  ASSERT_EQ(static_cast<int64_t>(batches.size()), s.batches_sent);
  std::set<std::pair<std::string, int64_t>> instances;
  for (size_t i = 0; i < batches.size(); ++i) {
    const DecodedBatch& d = batches[i];
    EXPECT_EQ(d.header.job, "4711");
    EXPECT_EQ(d.header.host, "node00");
    EXPECT_EQ(d.header.rank, 0);
    EXPECT_EQ(d.header.world_size, 4);
    EXPECT_EQ(d.header.pid, pid_);
    EXPECT_EQ(d.header.producer_id, batches[0].header.producer_id);
    EXPECT_EQ(d.header.sequence, i);
    EXPECT_FALSE(d.header.observation.has_value());
    EXPECT_FALSE(d.header.end_of_stream);
    EXPECT_EQ(d.trace.gpu.size(), d.trace.collectives.size());
    for (const CollectiveKernel& k : d.trace.collectives) {
      EXPECT_GT(k.start_ns, int64_t{1'700'000'000} * 1'000'000'000);
      EXPECT_TRUE(
          instances.insert({std::string(d.trace.Name(k.process_group)), k.seq})
              .second);
    }
  }
  EXPECT_EQ(static_cast<int64_t>(instances.size()), records);
}

TEST_F(InspectorTailerTest, TruncationAndReplacementStartANewProducer) {
  const std::string& text = log_.text;
  auto t = Tailer();
  ASSERT_NE(t, nullptr);
  WriteFile(path_, text);
  ASSERT_TRUE(t->PollOnce(t0_).ok());
  ASSERT_TRUE(t->PollOnce(t0_ + absl::Seconds(3)).ok());
  const int64_t all = CountRecords(text);
  EXPECT_EQ(t->stats().records_sent, all);
  const int64_t sent_before = t->stats().batches_sent;

  // Cut to its first third in place (a copytruncate rotation).
  const std::string third =
      text.substr(0, text.rfind('\n', text.size() / 3) + 1);
  std::filesystem::resize_file(path_, 0);
  Append(path_, third);
  ASSERT_TRUE(t->PollOnce(t0_ + absl::Seconds(10)).ok());
  ASSERT_TRUE(t->PollOnce(t0_ + absl::Seconds(13)).ok());
  EXPECT_EQ(t->stats().truncated, 1);
  EXPECT_EQ(t->stats().records_sent, all + CountRecords(third));

  // Another file renamed over it.
  const std::string other = watched_ + "/.incoming";
  WriteFile(other, text);
  fs::rename(other, path_);
  ASSERT_TRUE(t->PollOnce(t0_ + absl::Seconds(20)).ok());
  ASSERT_TRUE(t->PollOnce(t0_ + absl::Seconds(23)).ok());
  EXPECT_EQ(t->stats().replaced, 1);
  EXPECT_EQ(t->stats().records_sent, 2 * all + CountRecords(third));

  // Rewritten in place, longer, with other first bytes (same inode).
  InspectorJobSpec spec;
  spec.steps = 16;
  spec.seed = 9;
  spec.start_us += 1'000'000;
  const std::string rewritten = GenerateInspectorJob(spec).files[0].text;
  ASSERT_GT(rewritten.size(), text.size());
  std::filesystem::resize_file(path_, 0);
  Append(path_, rewritten);
  ASSERT_TRUE(t->PollOnce(t0_ + absl::Seconds(30)).ok());
  ASSERT_TRUE(t->PollOnce(t0_ + absl::Seconds(33)).ok());
  EXPECT_EQ(t->stats().replaced, 2);
  EXPECT_EQ(t->stats().truncated, 1);
  EXPECT_EQ(t->stats().records_sent,
            2 * all + CountRecords(third) + CountRecords(rewritten));

  std::vector<DecodedBatch> batches = Batches(t->stats().batches_sent);
  ASSERT_EQ(static_cast<int64_t>(batches.size()), t->stats().batches_sent);
  // The truncated file's batches: a new producer from sequence 0.
  const DecodedBatch& cut = batches[sent_before];
  EXPECT_NE(cut.header.producer_id, batches[0].header.producer_id);
  EXPECT_EQ(cut.header.sequence, 0u);
}

TEST_F(InspectorTailerTest, RestartResumesAndResendsAPendingChunkExactly) {
  const std::string& text = log_.text;
  const size_t half = text.rfind('\n', text.size() / 2) + 1;
  WriteFile(path_, text.substr(0, half));
  int64_t first_batches = 0;
  {
    // No settle: the half goes as one chunk, whether its last dump is
    // whole or not.
    auto t = Tailer(absl::ZeroDuration());
    ASSERT_NE(t, nullptr);
    ASSERT_TRUE(t->PollOnce(t0_).ok());
    EXPECT_EQ(t->stats().chunks_sent, 1);
    first_batches = t->stats().batches_sent;
    ASSERT_GT(first_batches, 0);
  }
  // A crash after the chunk was sent, before its acknowledgement was
  // recorded: the offsets file as it was while the chunk was pending.
  const std::string state = watched_ + "/.bubblewatch-state";
  {
    auto offsets = InspectorOffsets::Open(state);
    ASSERT_TRUE(offsets.ok()) << offsets.status();
    ASSERT_EQ(offsets->logs().size(), 1u);
    TailedLog& l = offsets->logs().begin()->second;
    EXPECT_EQ(l.offset, static_cast<int64_t>(half));
    EXPECT_EQ(l.next_sequence, static_cast<uint64_t>(first_batches));
    l.pending_end = l.offset;
    l.offset = 0;
    l.next_sequence = 0;
    l.head_len = 0;
    l.rank = l.world_size = -1;
    l.rank_comm.clear();
    l.context.clear();
    l.context_seen = 0;
    ASSERT_TRUE(offsets->Write().ok());
  }
  Append(path_, text.substr(half));
  auto t = Tailer();
  ASSERT_NE(t, nullptr);
  ASSERT_TRUE(t->PollOnce(t0_ + absl::Seconds(10)).ok());  // The pending one.
  EXPECT_EQ(t->stats().resent_pending, 1);
  ASSERT_TRUE(t->PollOnce(t0_ + absl::Seconds(13)).ok());  // The rest.
  const int64_t total = first_batches + t->stats().batches_sent;
  std::vector<DecodedBatch> batches = Batches(total);
  ASSERT_EQ(static_cast<int64_t>(batches.size()), total);
  auto messages = testing::ReadTopic(cluster_->bootstrap_servers(), "events",
                                     total, absl::Seconds(20));
  ASSERT_TRUE(messages.ok());
  // The resent batches are the first ones, byte for byte.
  for (int64_t i = 0; i < first_batches; ++i) {
    EXPECT_TRUE((*messages)[i].value == (*messages)[first_batches + i].value)
        << "batch " << i;
  }
  // Then the rest continues the sequence.
  std::set<std::pair<std::string, int64_t>> instances;
  for (int64_t i = first_batches; i < total; ++i) {
    EXPECT_EQ(batches[i].header.sequence,
              static_cast<uint64_t>(i - first_batches));
    for (const CollectiveKernel& k : batches[i].trace.collectives) {
      instances.insert(
          {std::string(batches[i].trace.Name(k.process_group)), k.seq});
    }
  }
  EXPECT_EQ(static_cast<int64_t>(instances.size()), CountRecords(text));
}

// A log larger than a chunk (lowered here from 64 MiB to 4 KiB, the bound
// of what one poll reads of a log) is read a chunk a poll, each cut after a
// whole line: every record is sent once and the watcher never holds more
// than a chunk of the log. A line longer than a chunk is one counted
// outcome, and the log is not followed past it.
TEST_F(InspectorTailerTest, ALogLargerThanAChunkIsReadAChunkAPoll) {
  constexpr int64_t kChunk = 4096;
  const std::string& text = log_.text;
  ASSERT_GT(static_cast<int64_t>(text.size()), 8 * kChunk);
  WriteFile(path_, text);
  auto t = Tailer(absl::ZeroDuration(), kChunk);
  ASSERT_NE(t, nullptr);
  int polls = 0;
  int64_t read_before = 0;
  while (t->stats().bytes_read < static_cast<int64_t>(text.size()) &&
         polls < 10'000) {
    ASSERT_TRUE(t->PollOnce(t0_ + absl::Seconds(polls)).ok());
    const int64_t read = t->stats().bytes_read;
    EXPECT_LE(read - read_before, kChunk) << "poll " << polls;
    read_before = read;
    ++polls;
  }
  const InspectorTailStats s = t->stats();
  EXPECT_EQ(s.bytes_read, static_cast<int64_t>(text.size()));
  EXPECT_GE(s.chunks_sent, static_cast<int64_t>(text.size()) / kChunk);
  EXPECT_EQ(s.records_sent, CountRecords(text));
  for (const auto& [reason, n] : s.skipped) {
    ADD_FAILURE() << reason << ": " << n;
  }
  std::vector<DecodedBatch> batches = Batches(s.batches_sent);
  std::set<std::pair<std::string, int64_t>> instances;
  for (const DecodedBatch& d : batches) {
    for (const CollectiveKernel& k : d.trace.collectives) {
      EXPECT_TRUE(
          instances.insert({std::string(d.trace.Name(k.process_group)), k.seq})
              .second);
    }
  }
  EXPECT_EQ(static_cast<int64_t>(instances.size()), CountRecords(text));

  // A line of more than a chunk: counted once, nothing after it sent.
  Append(path_, std::string(2 * kChunk, 'x') + "\n" +
                    text.substr(0, text.find('\n') + 1));
  for (int i = 0; i < 5; ++i) {
    ASSERT_TRUE(t->PollOnce(t0_ + absl::Seconds(polls + 10 * i)).ok());
  }
  const InspectorTailStats after = t->stats();
  EXPECT_EQ(after.bytes_read, s.bytes_read);
  EXPECT_EQ(after.records_sent, s.records_sent);
  ASSERT_EQ(after.skipped.size(), 1u);
  EXPECT_EQ(after.skipped.begin()->first,
            "line over 4096 bytes (waits: the log is not followed past it)");
  EXPECT_EQ(after.skipped.begin()->second, 1);
}

// The offsets file keeps each log's pid (version 2); a version 1 file,
// written before the pid, still reads, its pids unknown until the log's
// next chunk names them, and is rewritten as version 2.
TEST_F(InspectorTailerTest, OffsetsKeepThePidAndVersionOneStillReads) {
  WriteFile(path_, log_.text);
  const std::string state = watched_ + "/.bubblewatch-state";
  {
    auto t = Tailer(absl::ZeroDuration());
    ASSERT_NE(t, nullptr);
    ASSERT_TRUE(t->PollOnce(t0_).ok());
  }
  const std::string offsets_path = state + "/inspector-offsets";
  const std::string v2 = testing::ReadFile(offsets_path);
  EXPECT_TRUE(absl::StartsWith(v2, "bubblewatch-inspector-offsets v2\n"));
  TailedLog written;
  {
    auto offsets = InspectorOffsets::Open(state);
    ASSERT_TRUE(offsets.ok()) << offsets.status();
    ASSERT_EQ(offsets->logs().size(), 1u);
    written = offsets->logs().begin()->second;
    EXPECT_EQ(written.pid, pid_);
    EXPECT_EQ(written.host, "node00");
  }
  // The same line as version 1 wrote it: no pid field after the host.
  std::vector<std::string> lines = absl::StrSplit(v2, '\n');
  ASSERT_GE(lines.size(), 2u);
  std::vector<std::string> f =
      absl::StrSplit(lines[1], absl::MaxSplits('\t', 16));
  ASSERT_EQ(f.size(), 17u);
  EXPECT_EQ(f[13], std::to_string(pid_));
  f.erase(f.begin() + 13);
  WriteFile(offsets_path, absl::StrCat("bubblewatch-inspector-offsets v1\n",
                                       absl::StrJoin(f, "\t"), "\n"));
  {
    auto offsets = InspectorOffsets::Open(state);
    ASSERT_TRUE(offsets.ok()) << offsets.status();
    TailedLog old = offsets->logs().begin()->second;
    EXPECT_EQ(old.pid, -1);
    old.pid = written.pid;
    EXPECT_EQ(old, written);
    ASSERT_TRUE(offsets->Write().ok());
  }
  EXPECT_TRUE(absl::StartsWith(testing::ReadFile(offsets_path),
                               "bubblewatch-inspector-offsets v2\n"));
  // A version after 2 is refused, naming the file.
  WriteFile(offsets_path, "bubblewatch-inspector-offsets v3\n");
  auto newer = InspectorOffsets::Open(state);
  ASSERT_FALSE(newer.ok());
  EXPECT_THAT(newer.status().message(),
              ::testing::HasSubstr("written by a newer bubblewatch"));
}

TEST_F(InspectorTailerTest, ExecTimeOnlyRecordsAreCountedNotSent) {
  InspectorJobSpec spec;
  spec.steps = 4;
  spec.verbose = false;
  const InspectorJobFile plain = GenerateInspectorJob(spec).files[1];
  WriteFile(watched_ + "/" + plain.name, plain.text);
  auto t = Tailer();
  ASSERT_NE(t, nullptr);
  ASSERT_TRUE(t->PollOnce(t0_).ok());
  ASSERT_TRUE(t->PollOnce(t0_ + absl::Seconds(3)).ok());
  const InspectorTailStats s = t->stats();
  EXPECT_EQ(s.records_sent, 0);
  EXPECT_EQ(s.batches_sent, 0);
  ASSERT_TRUE(s.skipped.contains(kExecTimeOnlySkip));
  EXPECT_EQ(s.skipped.at(kExecTimeOnlySkip), CountRecords(plain.text));
}

// Exec-time-only logs of a whole job: pooled and sent once complete; a
// crash with a range of instances in flight is followed by a restart that
// rebuilds the pool from the logs and resends that range byte for byte,
// then sends the rest, the last dumps once the logs stopped growing.
TEST_F(InspectorTailerTest, ExecTimeOnlyJobIsPooledAndResentExactly) {
  InspectorJobSpec spec;
  spec.steps = 12;
  spec.dump_every_steps = 3;
  spec.verbose = false;
  const InspectorJobLogs gen = GenerateInspectorJob(spec);
  const int64_t instances = 1 +
                            int64_t{spec.dp} * spec.steps * spec.tp_per_step +
                            int64_t{spec.tp} * spec.steps;
  std::vector<size_t> half;
  for (const InspectorJobFile& f : gen.files) {
    half.push_back(f.text.rfind('\n', f.text.size() / 2) + 1);
    WriteFile(watched_ + "/" + f.name, f.text.substr(0, half.back()));
  }
  int64_t first_batches = 0;
  {
    auto t = Tailer(absl::ZeroDuration());
    ASSERT_NE(t, nullptr);
    ASSERT_TRUE(t->PollOnce(t0_).ok());
    first_batches = t->stats().batches_sent;
    ASSERT_GT(first_batches, 0);
    EXPECT_GT(t->stats().exec_instances_sent, 0);
    EXPECT_LT(t->stats().exec_instances_sent, instances);
  }
  // A crash after the range was sent, before it was acknowledged.
  const std::string exec = watched_ + "/.bubblewatch-state/inspector-exec";
  {
    std::string text = testing::ReadFile(exec);
    std::string out;
    for (absl::string_view line : absl::StrSplit(text, '\n')) {
      std::vector<std::string> f = absl::StrSplit(line, '\t');
      if (f.size() == 6 && f[0] == "job") {
        ASSERT_EQ(f[3], "-1");
        f[3] = f[2];
        f[2] = "0";
      } else if (f.size() == 5 && f[0] == "stream") {
        f[4] = "0";
      }
      if (!line.empty()) absl::StrAppend(&out, absl::StrJoin(f, "\t"), "\n");
    }
    WriteFile(exec, out);
  }
  for (size_t i = 0; i < gen.files.size(); ++i) {
    Append(watched_ + "/" + gen.files[i].name,
           gen.files[i].text.substr(half[i]));
  }
  auto t = Tailer(absl::ZeroDuration());
  ASSERT_NE(t, nullptr);
  ASSERT_TRUE(t->PollOnce(t0_ + absl::Seconds(10)).ok());
  ASSERT_TRUE(t->PollOnce(t0_ + absl::Seconds(13)).ok());
  ASSERT_TRUE(t->PollOnce(t0_ + absl::Seconds(40)).ok());  // Idle: flush.
  const InspectorTailStats s = t->stats();
  EXPECT_EQ(s.exec_records_held, 0);
  const int64_t total = first_batches + s.batches_sent;
  auto messages = testing::ReadTopic(cluster_->bootstrap_servers(), "events",
                                     total, absl::Seconds(20));
  ASSERT_TRUE(messages.ok()) << messages.status();
  ASSERT_EQ(static_cast<int64_t>(messages->size()), total);
  for (int64_t i = 0; i < first_batches; ++i) {
    EXPECT_TRUE((*messages)[i].value == (*messages)[first_batches + i].value)
        << "batch " << i;
  }
  std::vector<DecodedBatch> batches = Batches(total);
  std::set<std::pair<uint64_t, uint64_t>> streams;
  std::map<std::pair<std::string, int64_t>, int> members;
  std::map<std::string, int64_t> wait_ns;
  std::map<std::pair<std::string, int64_t>,
           std::vector<std::pair<std::string, int64_t>>>
      kernels;
  for (int64_t i = first_batches; i < total; ++i) {
    const DecodedBatch& b = batches[i];
    EXPECT_TRUE(
        streams.insert({b.header.producer_id, b.header.sequence}).second);
    // Pooled from every process: each batch names its own process.
    ASSERT_GE(b.header.rank, 0);
    ASSERT_LT(b.header.rank, static_cast<int32_t>(gen.truth.pids.size()));
    EXPECT_EQ(b.header.pid, gen.truth.pids[b.header.rank]);
    for (const CollectiveKernel& k : b.trace.collectives) {
      kernels[{std::string(b.trace.Name(k.process_group)), k.seq}].push_back(
          {b.header.host + "/" + std::to_string(b.header.rank),
           k.end_ns - k.start_ns});
    }
  }
  EXPECT_EQ(static_cast<int64_t>(kernels.size()), instances);
  for (const auto& [inst, ks] : kernels) {
    int64_t shortest = INT64_MAX;
    for (const auto& [who, exec] : ks) shortest = std::min(shortest, exec);
    for (const auto& [who, exec] : ks) wait_ns[who] += exec - shortest;
  }
  for (size_t r = 0; r < gen.files.size(); ++r) {
    EXPECT_EQ(wait_ns[gen.truth.hosts[r] + "/" + std::to_string(r)],
              gen.truth.wait_us[r] * 1000)
        << "process " << r;
  }
}

// A process whose log stops: the others' instances are still sent, its
// communicators' instances after it stopped counted as never complete.
TEST_F(InspectorTailerTest, ExecTimeOnlyProcessThatStopsIsCounted) {
  InspectorJobSpec spec;
  spec.steps = 12;
  spec.dump_every_steps = 3;
  spec.verbose = false;
  const InspectorJobLogs gen = GenerateInspectorJob(spec);
  for (size_t i = 0; i < gen.files.size(); ++i) {
    std::string text = gen.files[i].text;
    if (i == 3) text.resize(text.rfind('\n', text.size() / 3) + 1);
    WriteFile(watched_ + "/" + gen.files[i].name, text);
  }
  InspectorTailerOptions o;
  o.dir = watched_;
  o.state_dir = watched_ + "/.bubblewatch-state";
  o.settle = absl::ZeroDuration();
  o.flush_timeout = absl::Seconds(20);
  o.exec.expire = absl::Milliseconds(50);
  auto t = InspectorTailer::Create(std::move(o), producer_.get());
  ASSERT_TRUE(t.ok()) << t.status();
  ASSERT_TRUE((*t)->PollOnce(t0_).ok());
  ASSERT_TRUE((*t)->PollOnce(t0_ + absl::Seconds(30)).ok());
  const InspectorTailStats s = (*t)->stats();
  EXPECT_GT(s.exec_instances_sent, 0);
  int64_t given_up = 0;
  for (const auto& [reason, n] : s.skipped) {
    if (absl::StrContains(reason, "instance never complete")) given_up += n;
  }
  EXPECT_GT(given_up, 0);
}

TEST_F(InspectorTailerTest, ACutLineIsACountedSkipAndTheRestIsSent) {
  const std::string& text = log_.text;
  const size_t cut = text.rfind('\n', text.size() / 2) + 1;
  const size_t next = text.find('\n', cut) + 1;
  // A writer that died inside a line and a new one that went on: the cut
  // line ends in a newline.
  WriteFile(path_, absl::StrCat(text.substr(0, cut),
                                text.substr(cut, (next - cut) / 2), "\n",
                                text.substr(next)));
  auto t = Tailer();
  ASSERT_NE(t, nullptr);
  ASSERT_TRUE(t->PollOnce(t0_).ok());
  ASSERT_TRUE(t->PollOnce(t0_ + absl::Seconds(3)).ok());
  const InspectorTailStats s = t->stats();
  EXPECT_EQ(s.skipped.at("bad JSON line (line skipped)"), 1);
  const bool record =
      absl::StrContains(text.substr(cut, next - cut), "\"coll_perf\"");
  EXPECT_EQ(s.records_sent, CountRecords(text) - (record ? 1 : 0));
}

TEST_F(InspectorTailerTest, RingDropsAreCountedOnceAcrossChunks) {
  InspectorJobSpec spec;
  spec.steps = 12;
  spec.dump_every_steps = 3;
  spec.drop_process = 0;
  spec.drop_from_sn = 5;
  spec.drop_count = 4;
  const InspectorJobLogs gen = GenerateInspectorJob(spec);
  ASSERT_EQ(gen.truth.dropped, 4);
  const std::string& text = gen.files[0].text;
  // Cut after every dump marker, so that each marker is also the next
  // chunk's context.
  auto t = Tailer(absl::ZeroDuration());
  ASSERT_NE(t, nullptr);
  size_t at = 0;
  int polls = 0;
  while (at < text.size()) {
    size_t marker = text.find("\"dump_stats\"", at);
    size_t end =
        marker == std::string::npos ? text.size() : text.find('\n', marker) + 1;
    Append(path_, text.substr(at, end - at));
    at = end;
    ASSERT_TRUE(t->PollOnce(t0_ + absl::Seconds(++polls)).ok());
  }
  EXPECT_EQ(t->stats().ring_dropped, 4);
  EXPECT_EQ(t->stats().records_sent, CountRecords(text));
}

TEST_F(InspectorTailerTest, NotAnInspectorLogIsLeftAlone) {
  WriteFile(watched_ + "/notes.log", "starting the job\nstep 1\n");
  auto t = Tailer();
  ASSERT_NE(t, nullptr);
  ASSERT_TRUE(t->PollOnce(t0_ + absl::Seconds(3)).ok());
  EXPECT_EQ(t->stats().logs, 0);
  EXPECT_EQ(t->stats().chunks_sent, 0);
}

}  // namespace
}  // namespace bubblewatch
