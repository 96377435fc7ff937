// The crash harness (docs/architecture.md#testing-the-commit-protocol): a
// stream runs through the processor's core (PartitionTask: BatchAdmission,
// PartitionJobs, CommitPipeline) over the in-memory Kafka (memory_kafka.h) and
// a real RocksDB store whose WAL writes go through a file system that can
// "crash" (RocksDB's FileSystem API). Every write of the commit protocol counts
// against one CrashBudget: windows delivered to the windows topic, group
// offset commits, appends to the store's WAL. A run crashes after N
// writes, for every N from 0 to the writes of an uninterrupted run (so
// before and after each write), then a new process restarts from the
// store and the topics; the store's contents and the windows topic must
// equal the uninterrupted run's byte for byte. Then random crash points,
// several per run, over long random streams (seeded).
//
// The same again with the state changelog (the in-memory Kafka's, its
// deliveries writes too) and each restart as a *different owner*: a fresh
// empty store, the partition restored from the changelog and the group
// offset alone, as after a rebalance to another instance. That is what
// checks the order of the changelog writes and the group-offset commit
// (a restart of the same instance finds its own store, which always wins).
// The new owner's store holds only the windows it made: each must equal
// the uninterrupted run's; its job states and progress, the changelog's
// latest snapshot and the windows topic must equal that run's.
//
// The harness drives PartitionTask as StreamProcessor does (Assign,
// OnMessage and Tick per message, Finish), with the clock a function of the
// offset (so that a replay sees the time the first pass saw) and a commit
// interval of 4 ms of it: a commit after every window or 4 messages. It
// reads no end of partition, so no job closes for idleness: every window
// closes by partition order.
#include <algorithm>
#include <atomic>
#include <cstdint>
#include <iostream>
#include <map>
#include <memory>
#include <random>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "analysis/window_merge.h"
#include "gtest/gtest.h"
#include "processor/broker_health.h"
#include "processor/job_state.h"
#include "processor/partition_task.h"
#include "processor/state_changelog.h"
#include "rocksdb/env.h"
#include "rocksdb/file_system.h"
#include "schemas/event_batch_codec.h"
#include "schemas/window_summary_codec.h"
#include "storage/rocksdb_window_store.h"
#include "tests/processor/memory_kafka.h"
#include "tests/testing/temp_dir.h"

namespace bubblewatch {
namespace crash_harness_test {
namespace {

using testing::CrashBudget;
using testing::CrashingFileSystem;
using testing::MemoryKafka;
using testing::MemoryRecord;
using testing::MemoryTopics;

constexpr int64_t kMs = 1'000'000;
constexpr int64_t kBase = int64_t{1'767'225'600} * 1'000'000'000;
constexpr char kTopic[] = "events";
constexpr char kWindows[] = "events.windows";
constexpr char kState[] = "events.state";

// A seeded stream on one partition: `jobs` jobs of one rank each, their
// batches interleaved at random; each sends a batch per 100 ms of kernels
// on two devices with random gaps for 2 to 5 s, and ends with an end marker
// (so every window closes by partition order, none by wall time).
// `short_first`: job0 sends 3 batches, before any other job's, so that its
// window closes and the first commit already moves the resume offset (the
// group offset a new owner without a snapshot starts from).
// `two_ranks`: each job's batches alternate between ranks 0 and 1 of host
// "h", each rank a producer of its own that ends with its last batch.
std::vector<std::string> Stream(uint32_t seed, int jobs,
                                bool short_first = false,
                                bool two_ranks = false) {
  std::mt19937 random(seed);
  struct Job {
    std::string name;
    int batches;
    int sent = 0;
  };
  std::vector<Job> left;
  for (int j = 0; j < jobs; ++j) {
    left.push_back({absl::StrCat("job", j),
                    std::uniform_int_distribution<int>(20, 50)(random)});
  }
  if (short_first) left[0].batches = 3;
  std::vector<std::string> out;
  while (!left.empty()) {
    const size_t pick =
        short_first && left[0].name == "job0"
            ? 0
            : std::uniform_int_distribution<size_t>(0, left.size() - 1)(random);
    Job& job = left[pick];
    Trace t;
    t.job = job.name;
    t.names = {"k", "cudaLaunchKernel"};
    const int64_t from = kBase + job.sent * 100 * kMs;
    CorrelationId correlation = 1;
    for (int32_t device = 0; device < 2; ++device) {
      int64_t at = from + device * kMs;
      while (at < from + 100 * kMs) {
        const int64_t length =
            std::uniform_int_distribution<int64_t>(1, 8)(random) * kMs;
        const int64_t gap =
            std::uniform_int_distribution<int64_t>(0, 30)(random) == 0
                ? 40 * kMs
                : std::uniform_int_distribution<int64_t>(0, 3)(random) * kMs;
        t.gpu.push_back(GpuActivity{.start_ns = at,
                                    .end_ns = at + length,
                                    .correlation = correlation++,
                                    .name = 0,
                                    .device = device,
                                    .stream = 7});
        at += length + gap;
      }
    }
    std::sort(t.gpu.begin(), t.gpu.end(),
              [](const GpuActivity& a, const GpuActivity& b) {
                return a.start_ns < b.start_ns;
              });
    EventBatchEncoder encoder(&t);
    const int32_t rank = two_ranks ? job.sent % 2 : 0;
    const bool last =
        two_ranks ? job.sent + 2 >= job.batches : job.sent + 1 == job.batches;
    std::span<const uint8_t> bytes = encoder.Encode(
        BatchHeader{
            .job = job.name,
            .host = "h",
            .rank = rank,
            .world_size = 1,
            .producer_id = two_ranks ? 100 + 2 * pick + rank : 100 + pick,
            .sequence =
                static_cast<uint64_t>(two_ranks ? job.sent / 2 : job.sent),
            .end_of_stream = last},
        0, t.gpu.size(), 0, 0);
    out.emplace_back(reinterpret_cast<const char*>(bytes.data()), bytes.size());
    if (++job.sent == job.batches) left.erase(left.begin() + pick);
  }
  return out;
}

// `stream` keyed as a split job's producers key it
// (docs/architecture.md#one-job-across-processors): each batch `JOB@h`, so
// that each job is a split unit of stage 1 and publishes window parts.
std::vector<MemoryRecord> SplitKeyed(const std::vector<std::string>& stream) {
  std::vector<MemoryRecord> out;
  for (const std::string& m : stream) {
    absl::StatusOr<DecodedBatch> batch = DecodeEventBatch(
        std::span(reinterpret_cast<const uint8_t*>(m.data()), m.size()));
    EXPECT_TRUE(batch.ok()) << batch.status();
    if (!batch.ok()) continue;
    out.push_back(MemoryRecord{
        absl::StrCat(batch->header.job, "@", batch->header.host), m});
  }
  return out;
}

// How a run is set up: with the state changelog or without.
struct RunSetup {
  bool changelog = false;
  // Each restart is another instance: a new, empty store.
  bool new_owner = false;
};

// What survives a crash: the store's directory and the topics.
struct World {
  explicit World(const std::vector<std::string>& stream) {
    topics.topics[kTopic].resize(1);
    topics.topics[kWindows].resize(1);
    for (const std::string& m : stream) {
      topics.topics[kTopic][0].push_back(MemoryRecord{"", m});
    }
  }
  explicit World(const std::vector<MemoryRecord>& records) {
    topics.topics[kTopic].resize(1);
    topics.topics[kWindows].resize(1);
    topics.topics[kTopic][0] = records;
  }
  ::bubblewatch::testing::TempDir dir;
  MemoryTopics topics;
  int owner = 0;  // The instance whose store is "store<owner>".
  std::string StoreDir() { return dir.Sub(absl::StrCat("store", owner)); }
};

StreamProcessorOptions Options(const RunSetup& setup) {
  StreamProcessorOptions o;
  o.topic = kTopic;
  o.windows_topic = kWindows;
  if (setup.changelog) o.state_topic = kState;
  o.windower.window_ns = 1'000 * kMs;
  o.windower.lateness_ns = 100 * kMs;
  // One message per millisecond of the harness's clock (RunProcess).
  o.commit_interval = absl::Milliseconds(4);
  return o;
}

// One process over `world` until the stream's end (true) or a crash
// (false): what StreamProcessor does with one partition, without wall
// time. `budget`: the writes allowed.
bool RunProcess(World& world, CrashBudget& budget, const RunSetup& setup = {}) {
  const StreamProcessorOptions options = Options(setup);
  auto fs = std::make_shared<CrashingFileSystem>();
  fs->set_budget(&budget);
  std::unique_ptr<rocksdb::Env> env = rocksdb::NewCompositeEnv(fs);
  absl::StatusOr<std::unique_ptr<RocksDbWindowStore>> opened =
      RocksDbWindowStore::Open(world.StoreDir(), {},
                               RocksDbWindowStore::Mode::kPrimary, env.get());
  if (!opened.ok()) {
    EXPECT_TRUE(budget.crashed) << opened.status();
    return false;
  }
  std::unique_ptr<RocksDbWindowStore> store = *std::move(opened);
  RuntimeShared shared;
  BrokerHealth health;
  std::atomic<bool> stop{false};
  PartitionTask task(options, store.get(), &health, &shared);
  auto kafka = std::make_unique<MemoryKafka>(&world.topics, &shared);
  kafka->ShareCrashBudget(&budget);
  MemoryKafka* memory = kafka.get();
  // One MemoryKafka for all, as one producer serves all in `process`:
  // the pipeline's flush delivers the snapshots.
  std::unique_ptr<StateChangelog> changelog;
  if (setup.changelog) {
    changelog = std::make_unique<StateChangelog>(kState, memory);
  }
  task.Connect(std::move(kafka), std::move(changelog), memory);
  memory->set_dead_letter_sink(task.dead_letters());
  task.set_stop(&stop);
  auto now_at = [](int64_t offset) {
    return absl::FromUnixSeconds(1'700'000'000) + absl::Milliseconds(offset);
  };
  // The assignment: resume where the store or the changelog says, else at
  // the group offset.
  PartitionTask::Assigned assigned{.partition = 0, .offset = -1};
  task.Assign(std::span(&assigned, 1));
  if (!shared.fatal.ok()) {
    EXPECT_TRUE(budget.crashed) << shared.fatal;
    return false;
  }
  int64_t offset = assigned.offset;
  if (offset < 0) {
    auto it = world.topics.group_offsets.find({kTopic, 0});
    offset = it == world.topics.group_offsets.end() ? 0 : it->second;
  }
  task.Start(now_at(offset));

  const std::vector<MemoryRecord>& input = world.topics.topics[kTopic][0];
  const int64_t end = static_cast<int64_t>(input.size());
  auto fail = [&](const absl::Status& s) {
    // Only the crash may fail a run.
    EXPECT_TRUE(budget.crashed) << "at offset " << offset << ": " << s;
    return false;
  };
  for (; offset < end; ++offset) {
    const absl::Time now = now_at(offset);
    const std::string& value = input[offset].value;
    const ConsumedMessage message{
        .partition = 0,
        .offset = offset,
        .payload = {reinterpret_cast<const uint8_t*>(value.data()),
                    value.size()},
        .key = input[offset].key};
    if (absl::Status s = task.OnMessage(message, now); !s.ok()) return fail(s);
    // A commit after every window, or every 4 messages without one (the
    // commit interval on this clock).
    if (absl::Status s = task.Tick(now); !s.ok()) return fail(s);
  }
  EXPECT_EQ(task.stats().dlq_by_reason.size(), 0u) << "a dead letter";
  if (absl::Status s = task.Finish(now_at(end)); !s.ok()) return fail(s);
  return !budget.crashed;
}

// Everything the store holds, as text (windows, job states and the
// partition's progress record as their bytes, in hex), so that two stores
// compare byte for byte and a difference shows. Left out: the wall-clock
// stamps (a job's last_seen_wall, in its JobInfo and its record's activity)
// and which commit a job record's version is labelled with (its committed
// position, and the version it replaced): both depend on when commits
// happen, which a restart changes (a replayed window that was already
// stored asks for no commit), and neither decides a window
// (docs/semantics.md#effectively-once).
//
// The windows go to `windows` ("job start" -> bytes in hex), each job's
// newest event and state to `jobs` and its window count and latest window
// to `counts`: a new owner's store holds only the windows it made and the
// jobs it committed itself (the partition's job records, in `rest`, hold
// them all).
struct StoreDump {
  std::string rest;
  std::map<std::string, std::string> windows;
  std::map<std::string, std::string> jobs;
  std::string counts;
};

StoreDump DumpStore(World& world) {
  absl::StatusOr<std::unique_ptr<WindowStore>> store =
      OpenRocksDbWindowStore(world.StoreDir());
  EXPECT_TRUE(store.ok()) << store.status();
  if (!store.ok()) return {};
  StoreDump dump;
  std::string& out = dump.rest;
  absl::StatusOr<std::vector<JobInfo>> infos = (*store)->ListJobs();
  EXPECT_TRUE(infos.ok());
  for (const JobInfo& info : *infos) {
    std::string& job = dump.jobs[info.job];
    absl::StrAppend(&job, "last_event ", NsText(info.last_event_ns));
    absl::StrAppend(&dump.counts, "job ", info.job, " windows ",
                    info.window_count, " latest ", info.latest_window_start_ns,
                    "\n");
    auto state = (*store)->JobState(info.job);
    EXPECT_TRUE(state.ok());
    if (state.ok() && state->has_value()) {
      absl::StrAppend(&job, " state ", absl::BytesToHexString(**state));
    }
    auto windows =
        (*store)->Scan(info.job, absl::InfinitePast(), absl::InfiniteFuture());
    EXPECT_TRUE(windows.ok());
    for (const WindowSummary& w : *windows) {
      dump.windows[absl::StrCat(info.job, " ", w.window.start_ns)] =
          absl::BytesToHexString(EncodeWindowSummary(w));
    }
  }
  auto progress = (*store)->Progress(kTopic, 0);
  EXPECT_TRUE(progress.ok());
  if (progress.ok() && progress->has_value()) {
    absl::StrAppend(&out, "progress resume ", (*progress)->resume_offset,
                    " committed ", (*progress)->committed_position, " state ",
                    absl::BytesToHexString((*progress)->state), "\n");
  }
  auto records = (*store)->PartitionJobRecords(kTopic, 0);
  EXPECT_TRUE(records.ok());
  for (const auto& [job, bytes] : *records) {
    absl::StatusOr<PartitionJobRecord> r = DecodePartitionJob(bytes);
    EXPECT_TRUE(r.ok()) << r.status();
    if (!r.ok()) continue;
    absl::StrAppend(
        &out, "record ", job, " state ",
        absl::BytesToHexString(r->current.state.value_or("-")), " alerts ",
        absl::BytesToHexString(r->current.alerts.value_or("-")), " last_event ",
        NsText(r->current.activity.last_event_ns), "\n");
  }
  return dump;
}

// The changelog's latest snapshot of the partition, as a restore assembles
// it, in hex; without the jobs' activity (wall-clock stamps, as above).
// "" without a changelog topic.
std::string DumpChangelog(World& world) {
  if (!world.topics.topics.contains(kState)) return "";
  MemoryTopics copy = world.topics;
  RuntimeShared shared;
  MemoryKafka kafka(&copy, &shared);
  StateChangelog changelog(kState, &kafka);
  absl::StatusOr<std::optional<PartitionSnapshot>> latest =
      changelog.ReadLatest(kTopic, 0);
  EXPECT_TRUE(latest.ok()) << latest.status();
  if (!latest.ok() || !latest->has_value()) return "none";
  PartitionSnapshot s = **latest;
  s.activity.clear();
  return absl::BytesToHexString(EncodePartitionSnapshot(s));
}

// The windows topic as a compacted topic keeps it (the last record per
// key), checking that every copy of a key is the same bytes: a crash may
// publish a window again, never a different one.
std::map<std::string, std::string> Published(const World& world) {
  std::map<std::string, std::string> out;
  for (const MemoryRecord& r : world.topics.topics.at(kWindows)[0]) {
    auto [it, inserted] = out.try_emplace(r.key, r.value);
    EXPECT_TRUE(inserted || it->second == r.value)
        << "window " << r.key << " published twice, differently";
  }
  return out;
}

// The window parts topic as stage 2 keeps it: one part per (job, host,
// window start), in hex, checking that every copy is the same bytes (a
// replay publishes a part again, never a different one).
std::map<std::string, std::string> PublishedParts(const World& world) {
  std::map<std::string, std::string> out;
  auto topic = world.topics.topics.find(StreamProcessorOptions().parts_topic);
  if (topic == world.topics.topics.end()) return out;
  for (const auto& partition : topic->second) {
    for (const MemoryRecord& r : partition) {
      absl::StatusOr<HostWindowPart> part = DecodeHostWindowPart(r.value);
      EXPECT_TRUE(part.ok()) << part.status();
      if (!part.ok()) continue;
      EXPECT_EQ(r.key, part->job);
      // An end or late part shares its window with a window part.
      const std::string key = absl::StrCat(
          part->job, " ", part->host, " ", part->window.start_ns, " ",
          static_cast<int>(part->kind), " ", part->late_offset);
      const std::string bytes = absl::BytesToHexString(r.value);
      auto [it, inserted] = out.try_emplace(key, bytes);
      EXPECT_TRUE(inserted || it->second == bytes)
          << "part " << key << " published twice, differently";
    }
  }
  return out;
}

struct Outcome {
  StoreDump store;
  std::string changelog;
  std::map<std::string, std::string> published;
  std::map<std::string, std::string> parts;
  std::map<std::pair<std::string, int32_t>, int64_t> group_offsets;
  int64_t writes = 0;
};

Outcome Finish(World& world, int64_t writes) {
  return Outcome{DumpStore(world),           DumpChangelog(world),
                 Published(world),           PublishedParts(world),
                 world.topics.group_offsets, writes};
}

template <typename Stream>
Outcome Uninterrupted(const Stream& stream, const RunSetup& setup = {}) {
  World world(stream);
  CrashBudget budget;
  EXPECT_TRUE(RunProcess(world, budget, setup));
  return Finish(world, budget.writes);
}

void ExpectSame(const Outcome& got, const Outcome& want,
                const RunSetup& setup = {}) {
  if (setup.new_owner) {
    // A new owner that restored a snapshot covering the whole stream has
    // nothing to commit (as StreamProcessor after an assignment): its store
    // stays empty and the group offset where the crashed owner left it,
    // behind the snapshot, never ahead.
    if (!got.store.rest.empty()) {
      EXPECT_EQ(got.store.rest, want.store.rest);
    }
    for (const auto& [tp, offset] : got.group_offsets) {
      auto it = want.group_offsets.find(tp);
      EXPECT_TRUE(it != want.group_offsets.end() && offset <= it->second)
          << "group offset " << offset << " past the uninterrupted run's";
    }
    // Only what this owner made, each as the uninterrupted run's.
    for (const auto& [key, bytes] : got.store.windows) {
      auto it = want.store.windows.find(key);
      EXPECT_TRUE(it != want.store.windows.end() && it->second == bytes)
          << "stored window " << key << " differs from the uninterrupted run's";
    }
    for (const auto& [job, row] : got.store.jobs) {
      auto it = want.store.jobs.find(job);
      EXPECT_TRUE(it != want.store.jobs.end() && it->second == row)
          << "stored job " << job << ": " << row
          << " differs from the uninterrupted run's";
    }
  } else {
    EXPECT_EQ(got.store.rest, want.store.rest);
    EXPECT_EQ(got.group_offsets, want.group_offsets);
    EXPECT_EQ(got.store.windows, want.store.windows);
    EXPECT_EQ(got.store.jobs, want.store.jobs);
    EXPECT_EQ(got.store.counts, want.store.counts);
  }
  EXPECT_EQ(got.changelog, want.changelog);
  EXPECT_EQ(got.published, want.published);
  EXPECT_EQ(got.parts, want.parts);
}

TEST(CrashHarness, ACrashAtEveryWriteChangesNothing) {
  const std::vector<std::string> stream = Stream(/*seed=*/1, /*jobs=*/3);
  const Outcome want = Uninterrupted(stream);
  ASSERT_GT(want.published.size(), 10u) << "the stream must make windows";
  ASSERT_FALSE(want.store.windows.empty());
  std::cout << stream.size() << " messages, " << want.published.size()
            << " windows, " << want.writes << " writes: " << want.writes + 1
            << " crash points\n";
  for (int64_t n = 0; n <= want.writes; ++n) {
    SCOPED_TRACE(absl::StrCat("crash after ", n, " writes"));
    World world(stream);
    CrashBudget crashing{.writes_left = n};
    const bool completed = RunProcess(world, crashing);
    // Only a crash after the last write lets the run complete.
    EXPECT_EQ(completed, n == want.writes);
    CrashBudget restarted;
    ASSERT_TRUE(RunProcess(world, restarted));
    ExpectSame(Finish(world, 0), want);
    if (::testing::Test::HasFailure()) break;  // The first point tells.
  }
}

TEST(CrashHarness, RandomCrashesOverLongRandomStreamsChangeNothing) {
  for (uint32_t seed : {11u, 12u, 13u}) {
    SCOPED_TRACE(absl::StrCat("seed ", seed));
    const std::vector<std::string> stream = Stream(seed, /*jobs=*/8);
    const Outcome want = Uninterrupted(stream);
    ASSERT_GT(want.published.size(), 15u);
    std::mt19937 random(seed);
    World world(stream);
    // Eight crashes after a random number of writes each (a restart
    // replays from the oldest batch an open window needs, often the
    // stream's start: it may crash before it gets further), each restart
    // resuming from what the last one left; then a run to the end.
    int crashes = 0;
    for (int i = 0; i < 8; ++i) {
      CrashBudget budget{.writes_left = std::uniform_int_distribution<int64_t>(
                             0, want.writes)(random)};
      if (RunProcess(world, budget)) break;
      ++crashes;
    }
    CrashBudget last;
    ASSERT_TRUE(RunProcess(world, last));
    std::cout << "seed " << seed << ": " << stream.size() << " messages, "
              << want.published.size() << " windows, " << crashes
              << " crashes\n";
    EXPECT_GE(crashes, 1);
    ExpectSame(Finish(world, 0), want);
  }
}

// With the changelog, every restart a different owner (RunSetup::new_owner):
// at every crash point, before and after each write (windows, snapshot
// records, group offsets, the store's WAL).
TEST(CrashHarness, ANewOwnerAfterACrashAtEveryWriteChangesNothing) {
  const RunSetup setup{.changelog = true, .new_owner = true};
  const std::vector<std::string> stream =
      Stream(/*seed=*/1, /*jobs=*/3, /*short_first=*/true);
  const Outcome want = Uninterrupted(stream, setup);
  ASSERT_GT(want.published.size(), 10u) << "the stream must make windows";
  ASSERT_NE(want.changelog, "none");
  std::cout << stream.size() << " messages, " << want.published.size()
            << " windows, " << want.writes << " writes: " << want.writes + 1
            << " crash points\n";
  for (int64_t n = 0; n <= want.writes; ++n) {
    SCOPED_TRACE(absl::StrCat("crash after ", n, " writes, then a new owner"));
    World world(stream);
    CrashBudget crashing{.writes_left = n};
    const bool completed = RunProcess(world, crashing, setup);
    EXPECT_EQ(completed, n == want.writes);
    ++world.owner;
    CrashBudget restarted;
    ASSERT_TRUE(RunProcess(world, restarted, setup));
    ExpectSame(Finish(world, 0), want, setup);
    if (::testing::Test::HasFailure()) break;  // The first point tells.
  }
}

// The same instance restarting with the changelog on: its store wins
// where it is as new; the changelog must still end as the uninterrupted
// run's.
TEST(CrashHarness, TheSameOwnerWithAChangelogAfterACrashAtEveryWrite) {
  const RunSetup setup{.changelog = true};
  const std::vector<std::string> stream = Stream(/*seed=*/2, /*jobs=*/4);
  const Outcome want = Uninterrupted(stream, setup);
  ASSERT_GT(want.published.size(), 10u);
  for (int64_t n = 0; n <= want.writes; ++n) {
    SCOPED_TRACE(absl::StrCat("crash after ", n, " writes"));
    World world(stream);
    CrashBudget crashing{.writes_left = n};
    EXPECT_EQ(RunProcess(world, crashing, setup), n == want.writes);
    CrashBudget restarted;
    ASSERT_TRUE(RunProcess(world, restarted, setup));
    ExpectSame(Finish(world, 0), want, setup);
    if (::testing::Test::HasFailure()) break;
  }
}

TEST(CrashHarness, RandomCrashesEachANewOwnerChangeNothing) {
  const RunSetup setup{.changelog = true, .new_owner = true};
  for (uint32_t seed : {21u, 22u, 23u}) {
    SCOPED_TRACE(absl::StrCat("seed ", seed));
    const std::vector<std::string> stream = Stream(seed, /*jobs=*/8);
    const Outcome want = Uninterrupted(stream, setup);
    ASSERT_GT(want.published.size(), 15u);
    std::mt19937 random(seed);
    World world(stream);
    int crashes = 0;
    for (int i = 0; i < 8; ++i) {
      CrashBudget budget{.writes_left = std::uniform_int_distribution<int64_t>(
                             0, want.writes)(random)};
      const bool completed = RunProcess(world, budget, setup);
      ++world.owner;
      if (completed) break;
      ++crashes;
    }
    CrashBudget last;
    ASSERT_TRUE(RunProcess(world, last, setup));
    std::cout << "seed " << seed << ": " << stream.size() << " messages, "
              << want.published.size() << " windows, " << crashes
              << " crashes, " << world.owner + 1 << " owners\n";
    EXPECT_GE(crashes, 1);
    ExpectSame(Finish(world, 0), want, setup);
  }
}

// Stage 1 of split jobs (docs/architecture.md#one-job-across-processors):
// every job keyed JOB@h is a split unit that publishes window parts instead
// of storing windows. At every crash point, a restart (the same instance,
// and a new owner from the changelog) ends with the uninterrupted run's
// distinct parts, byte for byte, and its progress and unit states.
TEST(CrashHarness, SplitUnitsPublishTheSamePartsAfterACrashAtEveryWrite) {
  for (const RunSetup& setup :
       {RunSetup{}, RunSetup{.changelog = true, .new_owner = true}}) {
    SCOPED_TRACE(setup.new_owner ? "a new owner" : "the same instance");
    // Two ranks a unit: a part names both, also after a restart that
    // replays only some of their batches.
    const std::vector<MemoryRecord> stream =
        SplitKeyed(Stream(/*seed=*/3, /*jobs=*/3,
                          /*short_first=*/setup.new_owner, /*two_ranks=*/true));
    const Outcome want = Uninterrupted(stream, setup);
    ASSERT_GE(want.parts.size(), 5u) << "the stream must make parts";
    EXPECT_TRUE(want.published.empty()) << "a split unit publishes no window";
    EXPECT_TRUE(want.store.windows.empty()) << "nor stores one";
    EXPECT_TRUE(want.store.jobs.empty()) << "nor lists a job";
    for (const auto& [key, hex] : want.parts) {
      absl::StatusOr<HostWindowPart> part =
          DecodeHostWindowPart(absl::HexStringToBytes(hex));
      ASSERT_TRUE(part.ok()) << part.status();
      if (part->kind != HostWindowPart::Kind::kWindow) continue;
      EXPECT_EQ(part->ranks, (std::vector<int32_t>{0, 1})) << key;
    }
    std::cout << stream.size() << " messages, " << want.parts.size()
              << " parts, " << want.writes << " writes: " << want.writes + 1
              << " crash points\n";
    for (int64_t n = 0; n <= want.writes; ++n) {
      SCOPED_TRACE(absl::StrCat("crash after ", n, " writes"));
      World world(stream);
      CrashBudget crashing{.writes_left = n};
      EXPECT_EQ(RunProcess(world, crashing, setup), n == want.writes);
      if (setup.new_owner) ++world.owner;
      CrashBudget restarted;
      ASSERT_TRUE(RunProcess(world, restarted, setup));
      ExpectSame(Finish(world, 0), want, setup);
      if (::testing::Test::HasFailure()) break;  // The first point tells.
    }
  }
}

// A batch of `job` from `producer` with a 1 ms kernel at each start.
std::string Batch(const std::string& job, uint64_t producer, uint64_t sequence,
                  const std::vector<int64_t>& starts, bool last) {
  Trace t;
  t.names = {"gemm"};
  for (int64_t at : starts) {
    t.gpu.push_back(GpuActivity{
        .start_ns = at, .end_ns = at + kMs, .name = 0, .device = 0});
  }
  EventBatchEncoder encoder(&t);
  std::span<const uint8_t> bytes =
      encoder.Encode(BatchHeader{.job = job,
                                 .host = "h",
                                 .world_size = 1,
                                 .producer_id = producer,
                                 .sequence = sequence,
                                 .end_of_stream = last},
                     0, t.gpu.size(), 0, 0);
  return std::string(reinterpret_cast<const char*>(bytes.data()), bytes.size());
}

// What an older processor left in the changelog: one partition record
// holding its jobs (no per-key job records), here a job whose producer 77
// counted batches up to sequence 5. A new owner restores it (the batch
// with sequence 5 is a duplicate, only 6 counts) and rewrites it per key.
// (Was ProcessorHostileKafka.ASnapshotWrittenBeforePerKeyJobsStillRestores
// on a real broker: the restore is the protocol's logic, not Kafka's.)
TEST(ChangelogRestore, ASnapshotWrittenBeforePerKeyJobsStillRestores) {
  World world({Batch("old-job", 77, 5, {kBase}, false),
               Batch("old-job", 77, 6, {kBase + 2'000 * kMs}, true)});
  JobState old;
  old.producer_sequences[77] = 5;
  old.producer_newest_ns[77] = kBase;
  PartitionSnapshot snapshot{.topic = kTopic,
                             .partition = 0,
                             .resume_offset = 0,
                             .committed_position = 0,
                             .jobs = {{"old-job", old.Serialize()}}};
  ASSERT_FALSE(snapshot.jobs_per_key);
  world.topics.topics[kState].resize(1);
  world.topics.topics[kState][0].push_back(MemoryRecord{
      absl::StrCat(kTopic, "/0"), EncodePartitionSnapshot(snapshot)});
  CrashBudget budget;
  ASSERT_TRUE(RunProcess(world, budget, RunSetup{.changelog = true}));

  absl::StatusOr<std::unique_ptr<WindowStore>> store =
      OpenRocksDbWindowStore(world.StoreDir());
  ASSERT_TRUE(store.ok()) << store.status();
  absl::StatusOr<std::vector<WindowSummary>> windows =
      (*store)->Scan("old-job", absl::InfinitePast(), absl::InfiniteFuture());
  ASSERT_TRUE(windows.ok()) << windows.status();
  ASSERT_EQ(windows->size(), 1u) << "only sequence 6: the restore counted 5";
  EXPECT_EQ((*windows)[0].window.job.compute_ns, kMs);
  EXPECT_EQ((*windows)[0].window.start_ns, kBase + 2'000 * kMs);
  // Rewritten per key: the job has a record of its own now.
  bool job_record = false;
  for (const MemoryRecord& r : world.topics.topics[kState][0]) {
    job_record |= r.key == PartitionJobKey(kTopic, 0, "old-job");
  }
  EXPECT_TRUE(job_record);
}

}  // namespace
}  // namespace crash_harness_test
}  // namespace bubblewatch
