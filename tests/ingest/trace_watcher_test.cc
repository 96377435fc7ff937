// TraceWatcher and its parts: file-name patterns with named groups, the
// completeness check, the state file, and the watcher itself against the
// embedded (mock) Kafka cluster with a fake clock (PollOnce(now)), so that
// no test sleeps. The kill-and-restart test against a real broker is in
// tests/cli/produce_watch_kafka_test.cc.
#include "ingest/watch/trace_watcher.h"

#include <sys/stat.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "ingest/watch/job_name_pattern.h"
#include "ingest/watch/watch_state.h"
#include "kafka/embedded_kafka_cluster.h"
#include "schemas/event_batch_codec.h"
#include "schemas/state_record.h"
#include "tests/testing/big_input.h"
#include "tests/testing/files.h"
#include "tests/testing/temp_dir.h"
#include "tests/testing/topic_reader.h"

namespace bubblewatch {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using ::testing::Pair;
using ::testing::UnorderedElementsAre;

const std::string kRealDir = std::string(BUBBLEWATCH_TESTDATA_DIR) + "/real";
// A small real Kineto trace (rank 0 in distributedInfo, no job) and a small
// real Nsight Systems export.
const std::string kSmallChrome =
    kRealDir + "/hta/benchmark_result_2869224_1695835535_trace.json.gz";
const std::string kSmallNsys = kRealDir + "/nsys/healthy_1pct.sqlite";

using testing::ReadFile;
using testing::WriteFile;

using testing::kGiB;
using testing::PeakRssGrowth;
using testing::WriteGzipKernels;
using testing::WriteGzipWithBlanks;

// Far below the GiB the files below hold (inflated or sparse), and far
// above the few MiB that streaming them needs.
constexpr int64_t kMaxRssGrowth = 200 << 20;

// --- JobNamePattern -------------------------------------------------------

TEST(TranslateNamedGroups, BothSyntaxesBecomeNumberedGroups) {
  auto t = TranslateNamedGroups(R"((?<job>[^.]+)\.rank(?P<rank>\d+))");
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->ecmascript, R"(([^.]+)\.rank(\d+))");
  EXPECT_THAT(t->groups, UnorderedElementsAre(Pair("job", 1), Pair("rank", 2)));
}

TEST(TranslateNamedGroups, EscapesClassesAndNonCapturingGroupsKeepNumbers) {
  // Plain group 1; "\(" and "[(]" are literal; "(?:" and "(?=" do not
  // capture; so job is group 2 and rank group 3.
  auto t =
      TranslateNamedGroups(R"((a)\((?:b)[(\]](?=c)(?<job>x)(?:(?P<rank>\d)))");
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->ecmascript, R"((a)\((?:b)[(\]](?=c)(x)(?:(\d)))");
  EXPECT_THAT(t->groups, UnorderedElementsAre(Pair("job", 2), Pair("rank", 3)));
}

TEST(TranslateNamedGroups, RejectsBadNames) {
  EXPECT_FALSE(TranslateNamedGroups("(?<job").ok());
  EXPECT_FALSE(TranslateNamedGroups("(?<>x)").ok());
  EXPECT_FALSE(TranslateNamedGroups("(?<job>a)(?<job>b)").ok());
  EXPECT_FALSE(TranslateNamedGroups("[abc").ok());
}

TEST(JobNamePattern, DefaultPatternFindsJobAndRankInTorchNames) {
  auto p = JobNamePattern::Create(kDefaultJobNamePattern);
  ASSERT_TRUE(p.ok()) << p.status();
  auto m = p->Match("llama-7b.rank3.1732943012345.pt.trace.json.gz");
  ASSERT_TRUE(m.has_value());
  EXPECT_EQ(m->job, "llama-7b");
  EXPECT_EQ(m->rank, 3);
  EXPECT_FALSE(p->Match("rank0.json.gz").has_value());
  EXPECT_FALSE(p->Match("worker0.1732943012.pt.trace.json").has_value());
}

TEST(JobNamePattern, UserPatternWithOnlyAJob) {
  auto p = JobNamePattern::Create(R"(^(?P<job>[a-z]+)_)");
  ASSERT_TRUE(p.ok()) << p.status();
  auto m = p->Match("sampled_rank-1.json.gz");
  ASSERT_TRUE(m.has_value());
  EXPECT_EQ(m->job, "sampled");
  EXPECT_EQ(m->rank, -1);
}

TEST(JobNamePattern, ReadmePatternForTorchAndDynologNames) {
  // docs/deploying.md: one pattern for both
  // bubblewatch_torch names and Dynolog's "<log-file stem>_<pid>.json".
  auto p = JobNamePattern::Create(
      R"(^(?<job>[A-Za-z0-9_-]+?)(?:\.rank(?<rank>\d+)\..*|_\d+\.json)$)");
  ASSERT_TRUE(p.ok()) << p.status();
  auto torch = p->Match("run_42.rank7.1732943012345.pt.trace.json.gz");
  ASSERT_TRUE(torch.has_value());
  EXPECT_EQ(torch->job, "run_42");
  EXPECT_EQ(torch->rank, 7);
  auto dyno = p->Match("run_42_151419.json");
  ASSERT_TRUE(dyno.has_value());
  EXPECT_EQ(dyno->job, "run_42");
  EXPECT_EQ(dyno->rank, -1);  // Then from the trace's distributedInfo.
  EXPECT_FALSE(p->Match("notes.txt.json.gz").has_value());
}

TEST(JobNamePattern, RejectsPatternsWithoutGroupsOrBadSyntax) {
  EXPECT_THAT(JobNamePattern::Create("rank\\d+").status().message(),
              HasSubstr("neither"));
  EXPECT_THAT(JobNamePattern::Create("(?<job>[a-").status().message(),
              HasSubstr("unterminated"));
  EXPECT_THAT(JobNamePattern::Create("(?<job>a{2,1})").status().message(),
              HasSubstr("regular expression"));
}

// --- Completeness, after-send parsing ---------------------------------------

TEST(CheckCompleteness, GzipWithoutItsTrailerIsIncomplete) {
  testing::TempDir dir;
  const std::string whole = ReadFile(kSmallChrome);
  const std::string gz = dir.Sub("a.json.gz");
  std::string why;
  WriteFile(gz, whole);
  EXPECT_EQ(CheckCompleteness(gz, &why), Completeness::kComplete);
  // The gzip trailer is the last 8 bytes (CRC32, size).
  WriteFile(gz, absl::string_view(whole).substr(0, whole.size() - 8));
  EXPECT_EQ(CheckCompleteness(gz, &why), Completeness::kIncomplete);
  EXPECT_THAT(why, HasSubstr("gzip"));
  WriteFile(gz, whole.substr(0, whole.size() / 2));
  EXPECT_EQ(CheckCompleteness(gz, &why), Completeness::kIncomplete);
  WriteFile(gz, "");
  EXPECT_EQ(CheckCompleteness(gz, &why), Completeness::kIncomplete);
  EXPECT_THAT(why, HasSubstr("gzip header"));
}

TEST(CheckCompleteness, JsonMustEndWithItsClosingBrace) {
  testing::TempDir dir;
  const std::string json = dir.Sub("a.json");
  std::string why;
  WriteFile(json, "{\"traceEvents\": [] }\n");
  EXPECT_EQ(CheckCompleteness(json, &why), Completeness::kComplete);
  WriteFile(json, "{\"traceEvents\": [{\"ph\":");
  EXPECT_EQ(CheckCompleteness(json, &why), Completeness::kIncomplete);
  EXPECT_THAT(why, HasSubstr("'}'"));
  // Only the end is read: a '}' 64 bytes before it, under blanks, is not
  // seen, as when the whole file was read.
  WriteFile(json, "{\"traceEvents\": [] }" + std::string(64, '\n'));
  EXPECT_EQ(CheckCompleteness(json, &why), Completeness::kIncomplete);
}

TEST(CheckCompleteness, GunzippedJsonIsJudgedByTheEndOfItsContent) {
  testing::TempDir dir;
  const std::string gz = dir.Sub("b.json.gz");
  std::string why;
  // The end crosses the check's inflation pieces (64 KiB), and a second
  // gzip member.
  WriteGzipWithBlanks(gz, "{\"traceEvents\": [", (64 << 10) - 20, "] }");
  EXPECT_EQ(CheckCompleteness(gz, &why), Completeness::kComplete) << why;
  WriteGzipWithBlanks(gz, "{\"traceEvents\": [", 3 << 20, "");
  EXPECT_EQ(CheckCompleteness(gz, &why), Completeness::kIncomplete);
  EXPECT_THAT(why, HasSubstr("'}'"));
  WriteGzipWithBlanks(dir.Sub("part2.gz"), "", 10, "]}\n");
  std::string both = ReadFile(gz) + ReadFile(dir.Sub("part2.gz"));
  WriteFile(gz, both);
  EXPECT_EQ(CheckCompleteness(gz, &why), Completeness::kComplete) << why;
}

TEST(CheckCompleteness, SqliteWithAJournalBesideItIsIncomplete) {
  testing::TempDir dir;
  const std::string db = dir.Sub("x.sqlite");
  fs::copy_file(kSmallNsys, db);
  const std::string bytes = ReadFile(db);
  std::string why;
  EXPECT_EQ(CheckCompleteness(db, &why), Completeness::kComplete);
  // Cut short: the header's page count says how long it must be.
  WriteFile(db, absl::string_view(bytes).substr(0, bytes.size() / 2));
  EXPECT_EQ(CheckCompleteness(db, &why), Completeness::kIncomplete);
  EXPECT_THAT(why, HasSubstr("bytes"));
  WriteFile(db, absl::string_view(bytes).substr(0, 50));
  EXPECT_EQ(CheckCompleteness(db, &why), Completeness::kIncomplete);
  EXPECT_THAT(why, HasSubstr("header"));
  WriteFile(db, bytes);
  WriteFile(db + "-journal", "j");
  EXPECT_EQ(CheckCompleteness(db, &why), Completeness::kIncomplete);
  EXPECT_THAT(why, HasSubstr("-journal"));
}

TEST(ParseAfterSend, KeepMoveDelete) {
  EXPECT_EQ(ParseAfterSend("keep")->action, AfterSend::Action::kKeep);
  EXPECT_EQ(ParseAfterSend("delete")->action, AfterSend::Action::kDelete);
  auto move = ParseAfterSend("move:/var/spool/sent");
  ASSERT_TRUE(move.ok());
  EXPECT_EQ(move->action, AfterSend::Action::kMove);
  EXPECT_EQ(move->move_dir, "/var/spool/sent");
  EXPECT_FALSE(ParseAfterSend("move:").ok());
  EXPECT_FALSE(ParseAfterSend("archive").ok());
}

TEST(WatchedTraceName, PicksTracesAndSkipsHiddenAndOtherFiles) {
  EXPECT_TRUE(IsWatchedTraceName("w.1.pt.trace.json"));
  EXPECT_TRUE(IsWatchedTraceName("w.1.pt.trace.json.gz"));
  EXPECT_TRUE(IsWatchedTraceName("report.sqlite"));
  EXPECT_FALSE(IsWatchedTraceName(".w.1.pt.trace.json.gz"));
  EXPECT_FALSE(IsWatchedTraceName("report.nsys-rep"));
  EXPECT_FALSE(IsWatchedTraceName("x.json.gz.tmp"));
}

// --- WatchState
// ---------------------------------------------------------------

TEST(WatchState, SurvivesReopeningAndForgetsFilesThatAreGone) {
  testing::TempDir dir;
  const std::string state_dir = dir.Sub("state");
  {
    auto state = WatchState::Open(state_dir);
    ASSERT_TRUE(state.ok()) << state.status();
    EXPECT_EQ(state->size(), 0u);
    ASSERT_TRUE(state->Add(0x1234, "a.json.gz").ok());
    ASSERT_TRUE(state->Add(0xfedcba9876543210, "b with space.json").ok());
  }
  auto state = WatchState::Open(state_dir);
  ASSERT_TRUE(state.ok()) << state.status();
  EXPECT_TRUE(state->Contains(0x1234));
  EXPECT_TRUE(state->Contains(0xfedcba9876543210));
  EXPECT_FALSE(state->Contains(0x1235));
  EXPECT_FALSE(fs::exists(state->path() + ".tmp"));
  ASSERT_TRUE(state->Retain({"b with space.json"}).ok());
  auto again = WatchState::Open(state_dir);
  ASSERT_TRUE(again.ok());
  EXPECT_FALSE(again->Contains(0x1234));
  EXPECT_TRUE(again->Contains(0xfedcba9876543210));
}

TEST(WatchState, ACorruptFileIsDataLossNamingTheFile) {
  testing::TempDir dir;
  fs::create_directories(dir.Sub("state"));
  WriteFile(dir.Sub("state/watch-state"), "something else\n");
  auto state = WatchState::Open(dir.Sub("state"));
  EXPECT_EQ(state.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(state.status().message(), HasSubstr("watch-state"));
}

TEST(WatchState, ReadsTheTextFileTheOldWriterWroteAndReplacesIt) {
  testing::TempDir dir;
  fs::create_directories(dir.Sub("state"));
  // Written by WatchState::Write before schemas/state.fbs.
  WriteFile(dir.Sub("state/watch-state"),
            ReadFile(std::string(BUBBLEWATCH_TESTDATA_DIR) +
                     "/state/watch_state_v1.txt"));
  auto state = WatchState::Open(dir.Sub("state"));
  ASSERT_TRUE(state.ok()) << state.status();
  EXPECT_EQ(state->size(), 2u);
  EXPECT_TRUE(state->Contains(0xfedcba9876543210));
  EXPECT_TRUE(state->Contains(0x00ff00ff00ff00ff));
  // The next change writes the current format, keeping the old entries.
  ASSERT_TRUE(state->Add(0x42, "new\nline.json").ok());
  EXPECT_TRUE(IsStateRecord(ReadFile(state->path())));
  auto again = WatchState::Open(dir.Sub("state"));
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->size(), 3u);
  EXPECT_TRUE(again->Contains(0xfedcba9876543210));
  EXPECT_TRUE(again->Contains(0x42));
  // Names are kept exactly (the old text file could not hold a newline).
  ASSERT_TRUE(again->Retain({"new\nline.json", "rank0.pt.trace.json"}).ok());
  again = WatchState::Open(dir.Sub("state"));
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->size(), 2u);
  EXPECT_TRUE(again->Contains(0x42));
  EXPECT_FALSE(again->Contains(0xfedcba9876543210));
}

TEST(WatchState, RefusesARecordOfANewerVersionOrAnotherKind) {
  testing::TempDir dir;
  fs::create_directories(dir.Sub("state"));
  flatbuffers::FlatBufferBuilder b;
  auto body = fb::CreateWatchStateRecord(b);
  fb::FinishStateRecordBuffer(
      b, fb::CreateStateRecord(b, kStateFormatVersion + 1,
                               fb::StateBody::WatchStateRecord, body.Union()));
  WriteFile(
      dir.Sub("state/watch-state"),
      absl::string_view(reinterpret_cast<const char*>(b.GetBufferPointer()),
                        b.GetSize()));
  auto state = WatchState::Open(dir.Sub("state"));
  EXPECT_EQ(state.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(state.status().message(), HasSubstr("newer bubblewatch"));
  EXPECT_THAT(state.status().message(), HasSubstr("watch-state"));

  flatbuffers::FlatBufferBuilder j;
  auto job = fb::CreateJobStateRecord(j, 5);
  WriteFile(dir.Sub("state/watch-state"),
            FinishStateRecord(j, fb::StateBody::JobStateRecord, job.Union()));
  state = WatchState::Open(dir.Sub("state"));
  EXPECT_EQ(state.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(state.status().message(), HasSubstr("not a WatchStateRecord"));
}

TEST(TraceWatcherOptions, ReportsEveryProblemAndCreateRefusesThem) {
  TraceWatcherOptions options;
  options.rank = -2;
  options.settle = absl::Seconds(10);
  options.incomplete_timeout = absl::Seconds(1);
  options.poll_interval = absl::ZeroDuration();
  options.max_file_bytes = 0;
  options.max_file_events = -1;
  options.inspector_pool.expire = absl::ZeroDuration();
  options.inspector_pool.lag = absl::Seconds(-1);
  options.inspector_pool_idle = absl::ZeroDuration();
  absl::Status s = options.Validate();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(),
            "invalid TraceWatcherOptions: dir is required; rank must be >= -1, "
            "not -2; incomplete_timeout must be at least settle (10s), not "
            "1s; poll_interval must be > 0, not 0; max_file_bytes must be > "
            "0; max_file_events must be > 0, not -1; inspector_pool.expire "
            "must be > 0, not 0; inspector_pool.lag must be >= 0, not -1s; "
            "inspector_pool_idle must be > 0, not 0");
  auto watcher = TraceWatcher::Create(options, /*producer=*/nullptr);
  EXPECT_EQ(watcher.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(watcher.status().message(), HasSubstr("rank must be >= -1"));
}

TEST(ContentHash, IsStableAcrossRuns) {
  // FNV-1a 64 of "a": a fixed value, not a per-process seed.
  EXPECT_EQ(ContentHash("a"), 0xaf63dc4c8601ec8cull);
  EXPECT_NE(ContentHash("ab"), ContentHash("ba"));
}

// The hash as it was when whole files were hashed in one call: the states
// on disk hold these values, so a streamed hash must give the same ones.
uint64_t WholeFileHashAsStored(absl::string_view bytes) {
  uint64_t h = 14695981039346656037ull;
  for (unsigned char c : bytes) {
    h ^= c;
    h *= 1099511628211ull;
  }
  return h;
}

TEST(ContentHash, StreamedInPiecesEqualsTheWholeFileHash) {
  // Over 3 MiB, so that the file's hash crosses its reader's 1 MiB pieces.
  std::string bytes = ReadFile(kSmallChrome);
  for (uint32_t i = 0; bytes.size() < (3 << 20) + 5; ++i) {
    bytes.push_back(static_cast<char>((i * 2654435761u) >> 13));
  }
  const uint64_t stored = WholeFileHashAsStored(bytes);
  EXPECT_EQ(ContentHash(bytes), stored);
  for (size_t piece : {size_t{1}, size_t{7}, size_t{65537}, bytes.size()}) {
    ContentHasher hasher;
    for (size_t at = 0; at < bytes.size(); at += piece) {
      hasher.Update(absl::string_view(bytes).substr(at, piece));
    }
    EXPECT_EQ(hasher.hash(), stored) << "pieces of " << piece;
  }
  EXPECT_EQ(ContentHasher().hash(), WholeFileHashAsStored(""));

  // And from the file, in the reader's own pieces, with its size and mtime.
  testing::TempDir dir;
  const std::string path = dir.Sub("t.json.gz");
  WriteFile(path, bytes);
  int64_t size = 0;
  int64_t mtime_ns = 0;
  absl::StatusOr<uint64_t> hashed = ContentHashOfFile(path, &size, &mtime_ns);
  ASSERT_TRUE(hashed.ok()) << hashed.status();
  EXPECT_EQ(*hashed, stored);
  EXPECT_EQ(size, static_cast<int64_t>(bytes.size()));
  EXPECT_GT(mtime_ns, 0);
  EXPECT_FALSE(ContentHashOfFile(dir.Sub("missing"), &size, &mtime_ns).ok());
  // A FIFO in a trace's place is refused at once, not waited on.
  ASSERT_EQ(::mkfifo(dir.Sub("fifo.json").c_str(), 0600), 0);
  EXPECT_THAT(ContentHashOfFile(dir.Sub("fifo.json"), &size, &mtime_ns)
                  .status()
                  .message(),
              HasSubstr("not a regular file"));
}

// --- TraceWatcher against the mock cluster --------------------------------

class TraceWatcherTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto cluster = EmbeddedKafkaCluster::Create();
    ASSERT_TRUE(cluster.ok()) << cluster.status();
    cluster_ = *std::move(cluster);
    ASSERT_TRUE(cluster_->CreateTopic("events", /*partitions=*/2).ok());
    EventProducerOptions options;
    options.topic = "events";
    options.delivery_timeout = absl::Seconds(20);
    options.linger = absl::Milliseconds(5);
    auto producer = EventProducer::Create(
        KafkaConfig(cluster_->bootstrap_servers()), options);
    ASSERT_TRUE(producer.ok()) << producer.status();
    producer_ = *std::move(producer);
    ASSERT_TRUE(producer_->WaitUntilReachable(absl::Seconds(10)).ok());
    watched_ = dir_.Sub("watched");
    fs::create_directories(watched_);
  }

  TraceWatcherOptions Options() {
    TraceWatcherOptions o;
    o.dir = watched_;
    o.host = "test-host";
    o.use_inotify = false;
    o.settle = absl::Seconds(2);
    o.incomplete_timeout = absl::Seconds(30);
    o.batching.max_events = 500;
    o.flush_timeout = absl::Seconds(20);
    return o;
  }

  std::unique_ptr<TraceWatcher> Watcher(TraceWatcherOptions o) {
    auto w = TraceWatcher::Create(std::move(o), producer_.get());
    EXPECT_TRUE(w.ok()) << w.status();
    return w.ok() ? *std::move(w) : nullptr;
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
  std::unique_ptr<EmbeddedKafkaCluster> cluster_;
  std::unique_ptr<EventProducer> producer_;
  const absl::Time t0_ = absl::FromUnixSeconds(1'800'000'000);
};

TEST_F(TraceWatcherTest, PartialGzipWaitsUntilCompletedThenSendsOnce) {
  const std::string bytes = ReadFile(kSmallChrome);
  const std::string path = watched_ + "/jobA.rank2.100.pt.trace.json.gz";
  WriteFile(path, absl::string_view(bytes).substr(0, bytes.size() / 2));
  TraceWatcherOptions o = Options();
  o.job_pattern = *JobNamePattern::Create(kDefaultJobNamePattern);
  auto w = Watcher(o);
  ASSERT_NE(w, nullptr);

  ASSERT_TRUE(w->PollOnce(t0_).ok());  // Just seen: not settled.
  ASSERT_TRUE(w->PollOnce(t0_ + absl::Seconds(3)).ok());  // Settled, partial.
  EXPECT_EQ(w->stats().files_sent, 0);
  EXPECT_EQ(w->stats().files_rejected, 0);
  EXPECT_EQ(producer_->stats().batches_sent, 0);

  WriteFile(path, bytes);  // The writer finishes.
  ASSERT_TRUE(w->PollOnce(t0_ + absl::Seconds(4)).ok());  // Changed: settle.
  EXPECT_EQ(w->stats().files_sent, 0);
  ASSERT_TRUE(w->PollOnce(t0_ + absl::Seconds(7)).ok());
  ASSERT_EQ(w->stats().files_sent, 1);
  ASSERT_TRUE(w->PollOnce(t0_ + absl::Seconds(20)).ok());  // Kept, not resent.
  EXPECT_EQ(w->stats().files_sent, 1);
  EXPECT_TRUE(fs::exists(path));

  const int64_t batches = w->stats().batches_sent;
  ASSERT_GT(batches, 1);
  std::vector<DecodedBatch> got = Batches(batches);
  ASSERT_EQ(static_cast<int64_t>(got.size()), batches);
  const uint64_t id =
      WatchedFileProducerId(ContentHash(bytes), "jobA", 2, o.batching);
  std::set<uint64_t> sequences;
  int64_t events = 0;
  // The file's last batch is its end marker, and no other is.
  EXPECT_TRUE(got.back().header.end_of_stream);
  EXPECT_TRUE(got.back().trace.gpu.empty() && got.back().trace.cpu.empty());
  for (size_t i = 0; i + 1 < got.size(); ++i) {
    EXPECT_FALSE(got[i].header.end_of_stream) << i;
  }
  for (const DecodedBatch& b : got) {
    EXPECT_EQ(b.header.job, "jobA");
    EXPECT_EQ(b.header.rank, 2);  // The name wins over distributedInfo's 0.
    EXPECT_EQ(b.header.host, "test-host");
    EXPECT_EQ(b.header.producer_id, id);
    sequences.insert(b.header.sequence);
    events += static_cast<int64_t>(b.trace.gpu.size() + b.trace.cpu.size());
  }
  EXPECT_EQ(sequences.size(), got.size());
  EXPECT_EQ(*sequences.rbegin(), got.size() - 1);
  EXPECT_EQ(events, w->stats().events_sent);

  // A restarted watcher finds the file in its state and sends nothing.
  w.reset();
  auto again = Watcher(o);
  ASSERT_TRUE(again->PollOnce(t0_ + absl::Seconds(30)).ok());
  ASSERT_TRUE(again->PollOnce(t0_ + absl::Seconds(33)).ok());
  EXPECT_EQ(again->stats().files_already_sent, 1);
  EXPECT_EQ(again->stats().files_sent, 0);
  EXPECT_EQ(producer_->stats().batches_sent, batches);
}

TEST_F(TraceWatcherTest, AStableButTruncatedFileIsRejectedAfterTheTimeout) {
  const std::string bytes = ReadFile(kSmallChrome);
  WriteFile(watched_ + "/cut.json.gz",
            absl::string_view(bytes).substr(0, bytes.size() - 8));
  TraceWatcherOptions o = Options();
  o.job = "fixed";
  auto w = Watcher(o);
  ASSERT_TRUE(w->PollOnce(t0_).ok());
  ASSERT_TRUE(w->PollOnce(t0_ + absl::Seconds(10)).ok());
  EXPECT_EQ(w->stats().files_rejected, 0);  // Maybe still being written.
  ASSERT_TRUE(w->PollOnce(t0_ + absl::Seconds(31)).ok());
  EXPECT_EQ(w->stats().files_rejected, 1);
  EXPECT_EQ(w->stats().rejected_by_reason.at("truncated"), 1);
  EXPECT_TRUE(fs::exists(watched_ + "/.bubblewatch-rejected/cut.json.gz"));
  EXPECT_FALSE(fs::exists(watched_ + "/cut.json.gz"));
}

TEST_F(TraceWatcherTest, BadFilesAndFilesWithoutAJobAreSetAsideAndCounted) {
  WriteFile(watched_ + "/notatrace.json", "{\"hello\": 1}\n");
  fs::copy_file(kSmallChrome, watched_ + "/nojob.json.gz");
  fs::copy_file(kSmallNsys, watched_ + "/good.rank0.x.sqlite");
  // Only the nsys file matches; "good" job, rank 0.
  TraceWatcherOptions o = Options();
  o.job_pattern = *JobNamePattern::Create(R"((?<job>good)\.rank(?<rank>\d+))");
  o.reject_dir = dir_.Sub("rejected");
  auto w = Watcher(o);
  ASSERT_TRUE(w->PollOnce(t0_).ok());
  ASSERT_TRUE(w->PollOnce(t0_ + absl::Seconds(3)).ok());
  WatcherStats s = w->stats();
  EXPECT_EQ(s.files_sent, 1);
  EXPECT_EQ(s.files_rejected, 2);
  EXPECT_EQ(s.rejected_by_reason.at("no job"), 1);
  EXPECT_EQ(s.rejected_by_reason.at("not a trace"), 1);
  EXPECT_TRUE(fs::exists(dir_.Sub("rejected/nojob.json.gz")));
  EXPECT_TRUE(fs::exists(dir_.Sub("rejected/notatrace.json")));
  std::vector<DecodedBatch> got = Batches(s.batches_sent);
  ASSERT_FALSE(got.empty());
  EXPECT_EQ(got[0].header.job, "good");
}

TEST_F(TraceWatcherTest, AfterSendMoveAndDelete) {
  fs::copy_file(kSmallChrome, watched_ + "/a.rank0.1.json.gz");
  TraceWatcherOptions o = Options();
  o.job = "j";
  o.after_send = *ParseAfterSend("move:" + dir_.Sub("sent"));
  {
    auto w = Watcher(o);
    ASSERT_TRUE(w->PollOnce(t0_).ok());
    ASSERT_TRUE(w->PollOnce(t0_ + absl::Seconds(3)).ok());
    EXPECT_EQ(w->stats().files_sent, 1);
  }
  EXPECT_FALSE(fs::exists(watched_ + "/a.rank0.1.json.gz"));
  EXPECT_TRUE(fs::exists(dir_.Sub("sent/a.rank0.1.json.gz")));

  // Delete: gone once acknowledged.
  fs::copy_file(kSmallNsys, watched_ + "/b.sqlite");
  o.after_send = *ParseAfterSend("delete");
  auto w = Watcher(o);
  ASSERT_TRUE(w->PollOnce(t0_).ok());
  ASSERT_TRUE(w->PollOnce(t0_ + absl::Seconds(3)).ok());
  EXPECT_EQ(w->stats().files_sent, 1);
  EXPECT_FALSE(fs::exists(watched_ + "/b.sqlite"));
  // The state forgets files that are gone, so it stays small.
  auto state = WatchState::Open(watched_ + "/.bubblewatch-state");
  ASSERT_TRUE(state.ok());
  EXPECT_EQ(state->size(), 0u);
}

// The earliest event start of a batch.
int64_t FirstStart(const DecodedBatch& b) {
  int64_t first = INT64_MAX;
  for (const GpuActivity& a : b.trace.gpu) first = std::min(first, a.start_ns);
  for (const CpuEvent& e : b.trace.cpu) first = std::min(first, e.start_ns);
  return first;
}

TEST_F(TraceWatcherTest, FilesReadyTogetherAreSentMergedByEventTime) {
  // Two ranks of one job covering the same second.
  fs::copy_file(kRealDir + "/hta/sampled_rank-0.json.gz",
                watched_ + "/sampled.rank0.1.json.gz");
  fs::copy_file(kRealDir + "/hta/sampled_rank-1.json.gz",
                watched_ + "/sampled.rank1.1.json.gz");
  TraceWatcherOptions o = Options();
  o.job_pattern = *JobNamePattern::Create(kDefaultJobNamePattern);
  auto w = Watcher(o);
  ASSERT_TRUE(w->PollOnce(t0_).ok());
  ASSERT_TRUE(w->PollOnce(t0_ + absl::Seconds(3)).ok());
  ASSERT_EQ(w->stats().files_sent, 2);
  std::vector<DecodedBatch> all = Batches(w->stats().batches_sent);
  ASSERT_EQ(static_cast<int64_t>(all.size()), w->stats().batches_sent);
  // Each file ends with its end marker, after its last batch.
  std::vector<DecodedBatch> got;
  std::set<uint64_t> ended;
  for (DecodedBatch& b : all) {
    EXPECT_FALSE(ended.contains(b.header.producer_id))
        << "a batch after its producer's end marker";
    if (b.header.end_of_stream) {
      ended.insert(b.header.producer_id);
    } else {
      got.push_back(std::move(b));
    }
  }
  EXPECT_EQ(ended.size(), 2u);
  // One job, one partition: the topic holds the two ranks interleaved in
  // event time, not one file after the other.
  std::set<int32_t> ranks_in_first_half;
  for (size_t i = 0; i < got.size(); ++i) {
    if (i > 0) {
      EXPECT_LE(FirstStart(got[i - 1]), FirstStart(got[i])) << i;
    }
    if (i < got.size() / 2) ranks_in_first_half.insert(got[i].header.rank);
  }
  EXPECT_EQ(ranks_in_first_half, (std::set<int32_t>{0, 1}));
}

TEST_F(TraceWatcherTest, AReadyFileWaitsForAnotherStillBeingWritten) {
  const std::string b_bytes =
      ReadFile(kRealDir + "/hta/sampled_rank-1.json.gz");
  fs::copy_file(kRealDir + "/hta/sampled_rank-0.json.gz",
                watched_ + "/s.rank0.1.json.gz");
  const std::string b = watched_ + "/s.rank1.1.json.gz";
  TraceWatcherOptions o = Options();  // settle 2 s: gathering up to 20 s.
  o.job_pattern = *JobNamePattern::Create(kDefaultJobNamePattern);
  auto w = Watcher(o);
  // B grows by a chunk before every look, while A is long complete.
  size_t written = 0;
  for (int second = 0; second <= 14; second += 2) {
    written += b_bytes.size() / 10;
    WriteFile(b, absl::string_view(b_bytes).substr(0, written));
    ASSERT_TRUE(w->PollOnce(t0_ + absl::Seconds(second)).ok());
    EXPECT_EQ(w->stats().files_sent, 0)
        << "A sent while B was written, at " << second << " s";
  }
  WriteFile(b, b_bytes);  // B done: both go together once B settles.
  ASSERT_TRUE(w->PollOnce(t0_ + absl::Seconds(15)).ok());
  EXPECT_EQ(w->stats().files_sent, 0);
  ASSERT_TRUE(w->PollOnce(t0_ + absl::Seconds(17)).ok());
  EXPECT_EQ(w->stats().files_sent, 2);
}

TEST_F(TraceWatcherTest, AReadyFileWaitsAtMostTenSettleTimes) {
  const std::string b_bytes =
      ReadFile(kRealDir + "/hta/sampled_rank-1.json.gz");
  fs::copy_file(kRealDir + "/hta/sampled_rank-0.json.gz",
                watched_ + "/s.rank0.1.json.gz");
  const std::string b = watched_ + "/s.rank1.1.json.gz";
  TraceWatcherOptions o = Options();
  o.job_pattern = *JobNamePattern::Create(kDefaultJobNamePattern);
  auto w = Watcher(o);
  for (int second = 0; second <= 22; ++second) {
    WriteFile(b, absl::string_view(b_bytes).substr(0, 1000 + 100 * second));
    ASSERT_TRUE(w->PollOnce(t0_ + absl::Seconds(second)).ok());
    EXPECT_EQ(w->stats().files_sent, second >= 20 ? 1 : 0) << second << " s";
  }
}

TEST_F(TraceWatcherTest, JobFromTraceMetadataWhenTheNameSaysNothing) {
  const std::string json =
      R"({"bubblewatch_job": "meta-job", "distributedInfo": {"rank": 4},
          "traceEvents": [
            {"ph": "X", "cat": "kernel", "name": "k", "ts": 10, "dur": 5,
             "pid": 0, "tid": 7, "args": {"device": 0, "stream": 7,
             "correlation": 1}}]})";
  WriteFile(watched_ + "/worker0.123.pt.trace.json", json);
  TraceWatcherOptions o = Options();
  o.job_pattern = *JobNamePattern::Create(kDefaultJobNamePattern);
  auto w = Watcher(o);
  ASSERT_TRUE(w->PollOnce(t0_).ok());
  ASSERT_TRUE(w->PollOnce(t0_ + absl::Seconds(3)).ok());
  ASSERT_EQ(w->stats().files_sent, 1) << w->stats().files_rejected;
  std::vector<DecodedBatch> got = Batches(2);  // The batch and its marker.
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(got[0].header.job, "meta-job");
  EXPECT_EQ(got[0].header.rank, 4);
  EXPECT_TRUE(got[1].header.end_of_stream);
  EXPECT_EQ(got[1].header.job, "meta-job");
}

// the watcher read a file whole, hashed it whole and
// gunzipped it whole for its last 64 bytes: 5.9 GB RSS for a 2 MB .json.gz
// of 2 GiB of blanks. Streamed, its memory must not follow the content.
TEST_F(TraceWatcherTest, AGzipInflatingToAGibibyteOfBlanksNeverSitsInMemory) {
  const std::string path = watched_ + "/blanks.json.gz";
  WriteGzipWithBlanks(path, "", kGiB, "");
  ASSERT_LT(fs::file_size(path), 8u << 20);
  TraceWatcherOptions o = Options();
  o.job = "j";
  auto w = Watcher(o);
  PeakRssGrowth rss;
  ASSERT_TRUE(w->PollOnce(t0_).ok());
  ASSERT_TRUE(w->PollOnce(t0_ + absl::Seconds(3)).ok());
  EXPECT_EQ(w->stats().files_rejected, 0);  // No '}' yet: maybe still written.
  ASSERT_TRUE(w->PollOnce(t0_ + absl::Seconds(31)).ok());
  EXPECT_EQ(w->stats().rejected_by_reason["truncated"], 1);
  EXPECT_TRUE(fs::exists(watched_ + "/.bubblewatch-rejected/blanks.json.gz"));
  EXPECT_LT(rss.bytes(), kMaxRssGrowth)
      << "peak RSS grew by " << (rss.bytes() >> 20) << " MiB";
}

// The same blanks inside a whole trace: hashed, checked and read streaming,
// then sent.
TEST_F(TraceWatcherTest, ATracePaddedWithAGibibyteOfBlanksIsSentStreaming) {
  const std::string path = watched_ + "/padded.json.gz";
  WriteGzipWithBlanks(
      path,
      R"({"traceEvents": [{"ph": "X", "cat": "kernel", "name": "k", "ts": 10,
          "dur": 5, "pid": 0, "tid": 7, "args": {"device": 0, "stream": 7,
          "correlation": 1}})",
      kGiB, "]}\n");
  TraceWatcherOptions o = Options();
  o.job = "j";
  auto w = Watcher(o);
  PeakRssGrowth rss;
  ASSERT_TRUE(w->PollOnce(t0_).ok());
  ASSERT_TRUE(w->PollOnce(t0_ + absl::Seconds(3)).ok());
  EXPECT_EQ(w->stats().files_sent, 1) << w->stats().files_rejected;
  EXPECT_EQ(w->stats().events_sent, 1);
  EXPECT_LT(rss.bytes(), kMaxRssGrowth)
      << "peak RSS grew by " << (rss.bytes() >> 20) << " MiB";
}

// A sparse GiB (all NUL, no disk blocks) took the watcher to 2.1 GB. It has
// no closing '}', so it waits as unfinished and is set aside after the
// timeout, without its bytes ever sitting in memory.
TEST_F(TraceWatcherTest, ASparseGibibyteFileNeverSitsInMemory) {
  const std::string path = watched_ + "/sparse.json";
  WriteFile(path, "");
  fs::resize_file(path, kGiB);
  TraceWatcherOptions o = Options();
  o.job = "j";
  auto w = Watcher(o);
  PeakRssGrowth rss;
  ASSERT_TRUE(w->PollOnce(t0_).ok());
  ASSERT_TRUE(w->PollOnce(t0_ + absl::Seconds(3)).ok());
  EXPECT_EQ(w->stats().files_rejected, 0);
  ASSERT_TRUE(w->PollOnce(t0_ + absl::Seconds(31)).ok());
  EXPECT_EQ(w->stats().rejected_by_reason["truncated"], 1);
  EXPECT_TRUE(fs::exists(watched_ + "/.bubblewatch-rejected/sparse.json"));
  EXPECT_LT(rss.bytes(), kMaxRssGrowth)
      << "peak RSS grew by " << (rss.bytes() >> 20) << " MiB";
}

// --- Bounds on one file (docs/produce.md, "Bounds") ------------------------

// A gzip bomb of valid events: 200,000 distinct kernels, about 1.5 MB
// gzipped. Over --max-file-events it is rejected once, as the reader passes
// the bound, and never read again; a normal file beside it goes out in the
// same look, not behind it.
TEST_F(TraceWatcherTest, ABombOfValidEventsIsRejectedOnceAtTheEventBound) {
  WriteGzipKernels(watched_ + "/bomb.rank0.1.json.gz", 200'000);
  ASSERT_LT(fs::file_size(watched_ + "/bomb.rank0.1.json.gz"), 4u << 20);
  fs::copy_file(kSmallChrome, watched_ + "/normal.rank0.1.json.gz");
  TraceWatcherOptions o = Options();
  o.job_pattern = *JobNamePattern::Create(kDefaultJobNamePattern);
  o.max_file_events = 50'000;  // The normal file holds about 1,400.
  auto w = Watcher(o);
  PeakRssGrowth rss;
  ASSERT_TRUE(w->PollOnce(t0_).ok());
  ASSERT_TRUE(w->PollOnce(t0_ + absl::Seconds(3)).ok());
  WatcherStats s = w->stats();
  EXPECT_EQ(s.files_sent, 1);
  EXPECT_EQ(s.files_rejected, 1);
  EXPECT_EQ(s.rejected_by_reason["too large"], 1);
  EXPECT_EQ(s.content_reads, 2);  // One each.
  EXPECT_TRUE(
      fs::exists(watched_ + "/.bubblewatch-rejected/bomb.rank0.1.json.gz"));
  for (int second : {10, 20, 40, 80}) {
    ASSERT_TRUE(w->PollOnce(t0_ + absl::Seconds(second)).ok());
  }
  s = w->stats();
  EXPECT_EQ(s.files_rejected, 1);
  EXPECT_EQ(s.files_sent, 1);
  EXPECT_EQ(s.content_reads, 2);
  // The bound, not the bomb: 200,000 events held would be about 45 MB.
  EXPECT_LT(rss.bytes(), int64_t{40} << 20)
      << "peak RSS grew by " << (rss.bytes() >> 20) << " MiB";
}

// The same bomb under --max-file-bytes: the completeness check stops
// inflating at the bound and rejects it at the first look, not after the
// incomplete timeout.
TEST_F(TraceWatcherTest, ABombIsRejectedWhereItsGzipPassesTheByteBound) {
  WriteGzipKernels(watched_ + "/bomb.json.gz", 200'000);
  TraceWatcherOptions o = Options();
  o.job = "j";
  o.max_file_bytes = 1 << 20;  // The bomb inflates to 20 MB.
  auto w = Watcher(o);
  ASSERT_TRUE(w->PollOnce(t0_).ok());
  ASSERT_TRUE(w->PollOnce(t0_ + absl::Seconds(3)).ok());
  WatcherStats s = w->stats();
  EXPECT_EQ(s.rejected_by_reason["too large"], 1);
  EXPECT_EQ(s.content_reads, 1);
  EXPECT_FALSE(fs::exists(watched_ + "/bomb.json.gz"));
  // A plain file over the bound on disk: rejected without being read.
  WriteFile(watched_ + "/big.json", std::string((1 << 20) + 1, ' ') + "{}");
  ASSERT_TRUE(w->PollOnce(t0_ + absl::Seconds(4)).ok());
  ASSERT_TRUE(w->PollOnce(t0_ + absl::Seconds(7)).ok());
  s = w->stats();
  EXPECT_EQ(s.rejected_by_reason["too large"], 2);
  EXPECT_EQ(s.content_reads, 1);
}

// A gzip that inflates to blanks and no trace (a zeros bomb under the byte
// bound) looks unfinished: it is read once, then only timed out. It was
// inflated again every few looks until the timeout.
TEST_F(TraceWatcherTest, AnUnfinishedLookingBombIsReadOnceThenTimedOut) {
  WriteGzipWithBlanks(watched_ + "/zeros.json.gz", "", 64 << 20, "");
  TraceWatcherOptions o = Options();
  o.job = "j";
  auto w = Watcher(o);
  ASSERT_TRUE(w->PollOnce(t0_).ok());
  for (int second = 3; second <= 29; second += 2) {
    ASSERT_TRUE(w->PollOnce(t0_ + absl::Seconds(second)).ok());
  }
  EXPECT_EQ(w->stats().files_rejected, 0);
  EXPECT_EQ(w->stats().content_reads, 1);
  ASSERT_TRUE(w->PollOnce(t0_ + absl::Seconds(31)).ok());
  EXPECT_EQ(w->stats().rejected_by_reason["truncated"], 1);
  EXPECT_EQ(w->stats().content_reads, 1);
}

// A rejected file whose move fails stays in place: the state remembers it,
// so that neither this watcher nor a restarted one reads it again.
TEST_F(TraceWatcherTest, ARejectedFileLeftInPlaceIsNotReadAfterARestart) {
  WriteGzipKernels(watched_ + "/bomb.json.gz", 20'000);
  WriteFile(dir_.Sub("not-a-dir"), "x");
  TraceWatcherOptions o = Options();
  o.job = "j";
  o.max_file_events = 1'000;
  o.reject_dir = dir_.Sub("not-a-dir") + "/rejected";  // Cannot be created.
  {
    auto w = Watcher(o);
    ASSERT_TRUE(w->PollOnce(t0_).ok());
    ASSERT_TRUE(w->PollOnce(t0_ + absl::Seconds(3)).ok());
    ASSERT_TRUE(w->PollOnce(t0_ + absl::Seconds(30)).ok());
    EXPECT_EQ(w->stats().rejected_by_reason["too large"], 1);
    EXPECT_EQ(w->stats().content_reads, 1);
  }
  EXPECT_TRUE(fs::exists(watched_ + "/bomb.json.gz"));
  auto again = Watcher(o);
  ASSERT_TRUE(again->PollOnce(t0_ + absl::Seconds(40)).ok());
  ASSERT_TRUE(again->PollOnce(t0_ + absl::Seconds(43)).ok());
  EXPECT_EQ(again->stats().files_already_rejected, 1);
  EXPECT_EQ(again->stats().files_rejected, 0);
  EXPECT_EQ(again->stats().content_reads, 0);
  // Once gone, it is forgotten.
  fs::remove(watched_ + "/bomb.json.gz");
  ASSERT_TRUE(again->PollOnce(t0_ + absl::Seconds(44)).ok());
  auto state = WatchState::Open(watched_ + "/.bubblewatch-state");
  ASSERT_TRUE(state.ok());
  EXPECT_EQ(state->size(), 0u);
}

}  // namespace
}  // namespace bubblewatch
