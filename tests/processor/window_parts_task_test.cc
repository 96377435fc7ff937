// Stage 2 of a split job (processor/window_parts_task.h) without a broker:
// the hosts' window parts of a TP2×DP2×PP4 job (8 hosts of 2 ranks), made
// as stage 1 makes them (each host's events windowed alone, its ranks
// digested, world size 16, the host's ranks so far, `last` on its final
// window), go through WindowPartsTask over the in-memory Kafka
// (memory_kafka.h) and a real RocksDB store:
//   - interleaved across hosts in random orders (each host's own order
//     kept), with stage-1 republishes (copies), the stored and published
//     windows are the single-stage windows, and no window is stored before
//     every part of it was read;
//   - a window waits for a host that sent nothing yet, and for a host's
//     missing last part until the idle timeout;
//   - bad bytes, a job that is not its key, a conflicting part: dead
//     letters with their reasons, the windows unharmed;
//   - the crash harness (as crash_harness_test.cc): a crash after every
//     write of the commit protocol, then a restart from the store and the
//     topics, gives the uninterrupted run's store and windows topic, byte
//     for byte.
#include "processor/window_parts_task.h"

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <random>
#include <set>
#include <span>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "analysis/collective_windows.h"
#include "analysis/collectives.h"
#include "analysis/rank_digest.h"
#include "analysis/window_merge.h"
#include "gtest/gtest.h"
#include "ingest/batched_trace.h"
#include "ingest/synthetic/synthetic_parallel_job.h"
#include "processor/batch_validator.h"
#include "processor/broker_health.h"
#include "processor/fleet_topics.h"
#include "processor/job_windower.h"
#include "rocksdb/env.h"
#include "rocksdb/file_system.h"
#include "schemas/window_summary_codec.h"
#include "storage/rocksdb_window_store.h"
#include "tests/processor/memory_kafka.h"
#include "tests/processor/split_job_parts.h"
#include "tests/testing/temp_dir.h"

namespace bubblewatch {
namespace window_parts_task_test {
namespace {

using testing::CrashBudget;
using testing::CrashingFileSystem;
using testing::ExpectSingleStageWindows;
using testing::Interleave;
using testing::MemoryKafka;
using testing::MemoryRecord;
using testing::MemoryTopics;
using testing::Sent;
using testing::SplitJob;
using testing::TheSplitJob;

constexpr char kParts[] = "parts";
constexpr char kWindows[] = "parts.windows";
constexpr char kDlq[] = "parts.dlq";
constexpr char kJob[] = "job";

std::vector<MemoryRecord> Records(const SplitJob& job,
                                  const std::vector<Sent>& sent) {
  std::vector<MemoryRecord> out;
  for (const Sent& s : sent) {
    out.push_back(MemoryRecord{kJob, job.parts.at(s.host)[s.index]});
  }
  return out;
}

// ---------------------------------------------------------------------------
// A process over the in-memory Kafka and a store that can crash.

struct World {
  explicit World(const std::vector<MemoryRecord>& input) {
    topics.topics[kParts].resize(1);
    topics.topics[kWindows].resize(1);
    topics.topics[kDlq].resize(1);
    topics.topics[kParts][0] = input;
  }
  ::bubblewatch::testing::TempDir dir;
  MemoryTopics topics;
  // The running instance's store: another name is another instance (its
  // store empty at first).
  std::string store = "store";
  // The options' state topic ("": none).
  std::string state_topic;
  // >= 0: the partition is revoked before this offset is read, and the
  // process returns (a rebalance moving it away).
  int64_t revoke_at = -1;
  // The options' job expiry (event time).
  absl::Duration job_expiry = absl::Hours(6);
  std::string StoreDir() const { return dir.Sub(store); }
};

StreamProcessorOptions Options() {
  StreamProcessorOptions o;
  o.topic = kParts;
  o.windows_topic = kWindows;
  o.dlq_topic = kDlq;
  o.state_topic = "";
  o.windower = TheSplitJob().options;
  o.commit_interval = absl::Milliseconds(4);
  o.idle_timeout = absl::Seconds(3);
  return o;
}

absl::Time NowAt(int64_t offset) {
  return absl::FromUnixSeconds(1'700'000'000) + absl::Milliseconds(offset);
}

// Called after each message (and its tick) with the task, the store and
// the message's offset.
using AfterMessage =
    std::function<void(WindowPartsTask&, WindowStore&, int64_t offset)>;

// One process over `world` until the input's end (true) or a crash (false),
// as the events stage's crash harness runs PartitionTask: Assign, then
// OnMessage and Tick per message on a clock that is a function of the
// offset, then Finish. No end of partition: nothing closes for idleness.
bool RunProcess(World& world, CrashBudget& budget,
                const AfterMessage& after = nullptr,
                ProcessorStats* stats = nullptr) {
  StreamProcessorOptions options = Options();
  options.state_topic = world.state_topic;
  options.job_expiry = world.job_expiry;
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
  WindowPartsTask task(options, store.get(), &health, &shared);
  auto kafka = std::make_unique<MemoryKafka>(&world.topics, &shared);
  kafka->ShareCrashBudget(&budget);
  MemoryKafka* memory = kafka.get();
  task.Connect(std::move(kafka), memory);
  task.ConnectChangelog(memory);
  memory->set_dead_letter_sink(task.dead_letters());
  task.set_stop(&stop);
  PartitionTask::Assigned assigned{.partition = 0, .offset = -1};
  task.Assign(std::span(&assigned, 1));
  if (!shared.fatal.ok()) {
    EXPECT_TRUE(budget.crashed) << shared.fatal;
    return false;
  }
  int64_t offset = assigned.offset;
  if (offset < 0) {
    auto it = world.topics.group_offsets.find({kParts, 0});
    offset = it == world.topics.group_offsets.end() ? 0 : it->second;
  }
  task.Start(NowAt(offset));
  const std::vector<MemoryRecord>& input = world.topics.topics[kParts][0];
  const int64_t end = static_cast<int64_t>(input.size());
  auto fail = [&](const absl::Status& s) {
    EXPECT_TRUE(budget.crashed) << "at offset " << offset << ": " << s;
    return false;
  };
  for (; offset < end; ++offset) {
    const absl::Time now = NowAt(offset);
    if (offset == world.revoke_at) {
      const int32_t partition = 0;
      task.Revoke(std::span(&partition, 1), now);
      if (!shared.fatal.ok()) return fail(shared.fatal);
      return !budget.crashed;
    }
    if (absl::Status s = task.OnMessage(
            testing::ConsumedRecord(0, offset, input[offset]), now);
        !s.ok()) {
      return fail(s);
    }
    if (absl::Status s = task.Tick(now); !s.ok()) return fail(s);
    if (after) after(task, *store, offset);
  }
  if (absl::Status s = task.Finish(NowAt(end)); !s.ok()) return fail(s);
  if (stats != nullptr) *stats = task.stats();
  return !budget.crashed;
}

std::vector<WindowSummary> StoredWindows(const WindowStoreReader& store) {
  absl::StatusOr<std::vector<WindowSummary>> windows =
      store.Scan(kJob, absl::InfinitePast(), absl::InfiniteFuture());
  EXPECT_TRUE(windows.ok()) << windows.status();
  return windows.ok() ? *std::move(windows) : std::vector<WindowSummary>{};
}

std::vector<WindowSummary> StoredWindows(const World& world) {
  absl::StatusOr<std::unique_ptr<WindowStoreReader>> store =
      OpenRocksDbWindowStoreReadOnly(world.StoreDir());
  EXPECT_TRUE(store.ok()) << store.status();
  if (!store.ok()) return {};
  return StoredWindows(**store);
}

// The windows topic as compaction keeps it, each copy of a key the same
// (but with `rewrites`: a window whose late counts grew is published again,
// the newest copy kept).
std::map<std::string, std::string> Published(const World& world,
                                             bool rewrites = false) {
  std::map<std::string, std::string> out;
  for (const MemoryRecord& r : world.topics.topics.at(kWindows)[0]) {
    auto [it, inserted] = out.try_emplace(r.key, r.value);
    if (rewrites) it->second = r.value;
    EXPECT_TRUE(rewrites || inserted || it->second == r.value)
        << "window " << r.key << " published twice, differently";
  }
  return out;
}

// ---------------------------------------------------------------------------

TEST(WindowPartsTask, InterleavedHostPartsMergeIntoTheSingleStageWindows) {
  const SplitJob& job = TheSplitJob();
  ASSERT_GE(job.single.size(), 5u);
  ASSERT_EQ(job.parts.size(), 8u);
  ASSERT_EQ(job.world, 16);
  for (uint32_t seed : {1u, 2u, 3u, 4u}) {
    SCOPED_TRACE(absl::StrCat("seed ", seed));
    const std::vector<Sent> sent = Interleave(job, seed);
    World world(Records(job, sent));
    // The parts read so far, per window start, and each window's hosts.
    std::map<int64_t, std::set<std::string>> read, expected_hosts;
    for (const auto& [host, starts] : job.starts) {
      for (int64_t s : starts) expected_hosts[s].insert(host);
    }
    int64_t early = 0;
    auto after = [&](WindowPartsTask& task, WindowStore& store,
                     int64_t offset) {
      read[job.starts.at(sent[offset].host)[sent[offset].index]].insert(
          sent[offset].host);
      // A stored window has every part it gets.
      for (const WindowSummary& w : StoredWindows(store)) {
        if (read[w.window.start_ns] != expected_hosts[w.window.start_ns]) {
          ++early;
          ADD_FAILURE() << "window " << w.window.start_ns
                        << " stored at offset " << offset << " with "
                        << read[w.window.start_ns].size() << " of its "
                        << expected_hosts[w.window.start_ns].size()
                        << " parts read";
        }
      }
    };
    CrashBudget budget;
    ProcessorStats stats;
    ASSERT_TRUE(RunProcess(world, budget, after, &stats));
    EXPECT_EQ(early, 0);
    EXPECT_GT(stats.duplicate_batches, 0) << "no copy was sent";
    EXPECT_TRUE(stats.dlq_by_reason.empty());
    const std::vector<WindowSummary> stored = StoredWindows(world);
    ExpectSingleStageWindows(stored);
    // Closed as the hosts moved past them; the last by the hosts' ends.
    ASSERT_FALSE(stored.empty());
    EXPECT_EQ(stored.front().closed_by, WindowSummary::ClosedBy::kWatermark);
    EXPECT_EQ(stored.back().closed_by, WindowSummary::ClosedBy::kEndMarker);
    for (const WindowSummary& w : stored) {
      EXPECT_NE(w.closed_by, WindowSummary::ClosedBy::kIdleTimeout);
    }
    // Published as stored.
    const std::map<std::string, std::string> published = Published(world);
    ASSERT_EQ(published.size(), stored.size());
    for (const WindowSummary& w : stored) {
      auto it = published.find(WindowTopicKey(kJob, w.window.start_ns));
      ASSERT_NE(it, published.end());
      EXPECT_EQ(it->second, EncodeWindowSummary(w));
    }
  }
}

// Drives a task by hand: messages, ends of partition, wall time.
struct Manual {
  explicit Manual(std::vector<MemoryRecord> input)
      : world(input), options(Options()) {
    absl::StatusOr<std::unique_ptr<WindowStore>> opened =
        OpenRocksDbWindowStore(world.StoreDir());
    EXPECT_TRUE(opened.ok()) << opened.status();
    store = *std::move(opened);
    task = std::make_unique<WindowPartsTask>(options, store.get(), &health,
                                             &shared);
    auto kafka = std::make_unique<MemoryKafka>(&world.topics, &shared);
    memory = kafka.get();
    task->Connect(std::move(kafka), memory);
    memory->set_dead_letter_sink(task->dead_letters());
    PartitionTask::Assigned assigned{.partition = 0, .offset = -1};
    task->Assign(std::span(&assigned, 1));
    task->Start(now);
  }
  // Reads the next `n` messages (all: -1), each with a tick, then the end
  // of the partition and a tick.
  void Read(int64_t n = -1) {
    const auto& input = world.topics.topics[kParts][0];
    for (; next < static_cast<int64_t>(input.size()) && n != 0; ++next, --n) {
      now += absl::Milliseconds(1);
      ASSERT_TRUE(
          task->OnMessage(testing::ConsumedRecord(0, next, input[next]), now)
              .ok());
      ASSERT_TRUE(task->Tick(now).ok());
    }
    if (next == static_cast<int64_t>(input.size())) {
      task->OnEndOfPartition(0);
      ASSERT_TRUE(task->Tick(now).ok());
    }
  }
  void Send(const MemoryRecord& r) {
    world.topics.topics[kParts][0].push_back(r);
  }
  void Advance(absl::Duration by) {
    for (absl::Duration d; d < by; d += absl::Milliseconds(100)) {
      now += absl::Milliseconds(100);
      ASSERT_TRUE(task->Tick(now).ok());
    }
  }
  World world;
  StreamProcessorOptions options;
  RuntimeShared shared;
  BrokerHealth health;
  std::unique_ptr<WindowStore> store;
  MemoryKafka* memory = nullptr;
  std::unique_ptr<WindowPartsTask> task;
  absl::Time now = absl::FromUnixSeconds(1'700'000'000);
  int64_t next = 0;
};

// A host's missing last part holds its window open until the idle timeout,
// which closes it without that host's devices; a host that has sent
// nothing yet holds every window (its ranks are not held).
TEST(WindowPartsTask, AWindowWaitsForEveryHostUntilTheIdleTimeout) {
  const SplitJob& job = TheSplitJob();
  const std::string lagging = job.parts.rbegin()->first;
  const size_t last_index = job.parts.at(lagging).size() - 1;
  const int64_t last_start = job.starts.at(lagging)[last_index];
  {
    SCOPED_TRACE("a host's last part missing");
    Manual m(Records(job, Interleave(job, 7, {{lagging, last_index}})));
    m.Read();
    // Every window before the host's last closed, its last did not.
    std::vector<WindowSummary> stored = StoredWindows(*m.store);
    ASSERT_FALSE(stored.empty());
    EXPECT_LT(stored.back().window.start_ns, last_start);
    EXPECT_EQ(m.task->OpenWindows(kJob).front(), last_start);
    m.Advance(Options().idle_timeout - absl::Milliseconds(200));
    EXPECT_FALSE(m.task->OpenWindows(kJob).empty());
    m.Advance(absl::Milliseconds(300));
    EXPECT_TRUE(m.task->OpenWindows(kJob).empty());
    stored = StoredWindows(*m.store);
    ASSERT_EQ(stored.size(), job.single.size());
    EXPECT_EQ(stored.back().closed_by, WindowSummary::ClosedBy::kIdleTimeout);
    EXPECT_LT(stored.back().window.devices.size(),
              job.single.back().window.devices.size());
  }
  {
    SCOPED_TRACE("a host that sent nothing yet");
    std::vector<Sent> sent = Interleave(job, 8);
    std::stable_partition(sent.begin(), sent.end(),
                          [&](const Sent& s) { return s.host != lagging; });
    const std::vector<MemoryRecord> records = Records(job, sent);
    const auto first_of_lagging =
        std::find_if(sent.begin(), sent.end(),
                     [&](const Sent& s) { return s.host == lagging; }) -
        sent.begin();
    Manual m(records);
    m.Read(first_of_lagging);
    // Every other host ended: still nothing closes, two ranks unheld.
    const std::optional<MergeJobRecord> record = m.task->JobRecord(kJob);
    ASSERT_TRUE(record.has_value());
    EXPECT_EQ(record->hosts.size(), job.parts.size() - 1);
    for (const auto& [host, h] : record->hosts) {
      EXPECT_TRUE(h.ended) << host;
    }
    EXPECT_TRUE(StoredWindows(*m.store).empty());
    EXPECT_FALSE(m.task->OpenWindows(kJob).empty());
    m.Read();
    ExpectSingleStageWindows(StoredWindows(*m.store));
    EXPECT_TRUE(m.task->AllClosed());
  }
}

// A job whose hosts all ended and that starts a new run: a window of the
// new run waits for every host again, not only for the first one back.
TEST(WindowPartsTask, AJobThatEndedWaitsForEveryHostInItsNextRun) {
  constexpr int64_t kW = 1'000'000'000;
  auto part = [](const std::string& host, int32_t rank, int64_t window,
                 bool last) {
    HostWindowPart p{.job = kJob, .host = host};
    p.window.start_ns = window * kW;
    p.window.end_ns = (window + 1) * kW;
    p.world_size = 2;
    p.ranks = {rank};
    p.last = last;
    return MemoryRecord{kJob, EncodeHostWindowPart(p)};
  };
  Manual m({part("a", 0, 0, true), part("b", 1, 0, true)});
  m.Read();
  ASSERT_EQ(StoredWindows(*m.store).size(), 1u);
  EXPECT_EQ(StoredWindows(*m.store)[0].closed_by,
            WindowSummary::ClosedBy::kEndMarker);
  m.Send(part("a", 0, 5, false));
  m.Read();
  EXPECT_EQ(m.task->OpenWindows(kJob), std::vector<WindowStartNs>{5 * kW});
  m.Send(part("b", 1, 5, true));
  m.Read();
  EXPECT_TRUE(m.task->OpenWindows(kJob).empty());
  const std::vector<WindowSummary> stored = StoredWindows(*m.store);
  ASSERT_EQ(stored.size(), 2u);
  EXPECT_EQ(stored[1].closed_by, WindowSummary::ClosedBy::kEndMarker);
}

// ---------------------------------------------------------------------------
// Stage 1's split windowers (JobWindower::SplitAs) feeding stage 2: two hosts
// of one rank each (world 2), kernels every 10 ms, batches cut every 100 ms
// of true time, as a producer flushing on a timer cuts them.

constexpr int64_t kMs = 1'000'000;

struct HostStream {
  std::string host;
  int32_t rank = 0;
  int64_t ahead_ns = 0;      // Its clock runs this far ahead.
  int64_t gpu_until_ns = 0;  // Kernels (4 ms, every 10 ms) until then.
  int64_t cpu_until_ns = 0;  // CPU ranges (no launch) until then.
};

WindowerOptions SplitOptions() {
  WindowerOptions o;
  o.window_ns = 1'000 * kMs;
  o.lateness_ns = 500 * kMs;
  return o;
}

DecodedBatch EmptyBatch(const HostStream& h) {
  DecodedBatch b;
  b.header =
      BatchHeader{.job = kJob, .host = h.host, .rank = h.rank, .world_size = 2};
  b.trace.names = {"kernel", "nccl:all_reduce"};
  return b;
}

std::vector<DecodedBatch> HostBatches(const HostStream& h) {
  std::vector<DecodedBatch> out;
  const int64_t until = std::max(h.gpu_until_ns, h.cpu_until_ns);
  for (int64_t chunk = 0; chunk < until; chunk += 100 * kMs) {
    DecodedBatch b = EmptyBatch(h);
    for (int64_t t = chunk + 5 * kMs; t < chunk + 100 * kMs && t < until;
         t += 10 * kMs) {
      if (t < h.gpu_until_ns) {
        b.trace.gpu.push_back(GpuActivity{.start_ns = t + h.ahead_ns,
                                          .end_ns = t + h.ahead_ns + 4 * kMs});
      } else {
        b.trace.cpu.push_back(CpuEvent{.start_ns = t + h.ahead_ns,
                                       .end_ns = t + h.ahead_ns + 4 * kMs,
                                       .thread = 1});
      }
    }
    out.push_back(std::move(b));
  }
  return out;
}

// A split windower of `h`'s unit over `batches` (input offsets from
// `first_offset`), finalizing after each, then its end marker (`end`):
// the parts it made, in order.
std::vector<HostWindowPart> UnitParts(const HostStream& h,
                                      const std::vector<DecodedBatch>& batches,
                                      bool end, int64_t first_offset = 0) {
  JobWindower windower(absl::StrCat(kJob, "@", h.host), SplitOptions());
  windower.SplitAs(kJob, h.host);
  const absl::Time now = absl::FromUnixSeconds(1'700'000'000);
  int64_t offset = first_offset;
  for (const DecodedBatch& b : batches) {
    windower.Add(b, offset++, /*replay=*/false, now);
    EXPECT_TRUE(windower.FinalizeReady(now, absl::InfiniteDuration()).empty());
  }
  if (end) windower.FinalizeAll(WindowSummary::ClosedBy::kEndMarker);
  EXPECT_TRUE(windower.analysis_error().ok()) << windower.analysis_error();
  return windower.TakeParts();
}

std::vector<MemoryRecord> Encoded(const std::vector<HostWindowPart>& parts) {
  std::vector<MemoryRecord> out;
  for (const HostWindowPart& p : parts) {
    out.push_back(MemoryRecord{kJob, EncodeHostWindowPart(p)});
  }
  return out;
}

// A host whose watermark closed every window of its own before its end
// marker came (its last events are CPU ranges, long after its last kernel)
// sends a kEnd part; stage 2 then closes the job's last windows, which the
// other host alone has parts of, by the end markers, with no idle timeout.
TEST(WindowPartsTask, AHostEndingAfterItsWatermarkClosedItsWindowsSaysSo) {
  const HostStream a{.host = "a", .rank = 0, .gpu_until_ns = 4'500 * kMs};
  const HostStream b{.host = "b",
                     .rank = 1,
                     .gpu_until_ns = 1'500 * kMs,
                     .cpu_until_ns = 3'700 * kMs};
  const std::vector<HostWindowPart> a_parts =
      UnitParts(a, HostBatches(a), /*end=*/true);
  const std::vector<HostWindowPart> b_parts =
      UnitParts(b, HostBatches(b), /*end=*/true);
  ASSERT_FALSE(a_parts.empty());
  ASSERT_FALSE(b_parts.empty());
  EXPECT_TRUE(a_parts.back().last);
  EXPECT_EQ(a_parts.back().kind, HostWindowPart::Kind::kWindow);
  EXPECT_EQ(a_parts.back().window.end_ns, 5'000 * kMs);
  // B's watermark (3.7 s - 0.5 s) closed its windows through 3 s; its end
  // marker finds none left: its last part is a kEnd part there.
  const HostWindowPart& b_end = b_parts.back();
  EXPECT_EQ(b_end.kind, HostWindowPart::Kind::kEnd);
  EXPECT_TRUE(b_end.last);
  EXPECT_EQ(b_end.window.end_ns, 3'000 * kMs);
  for (size_t i = 0; i + 1 < b_parts.size(); ++i) {
    EXPECT_EQ(b_parts[i].kind, HostWindowPart::Kind::kWindow);
    EXPECT_FALSE(b_parts[i].last);
    EXPECT_LE(b_parts[i].window.end_ns, b_end.window.end_ns);
  }
  // The end part is a function of the edge: made again, the same bytes.
  EXPECT_EQ(
      EncodeHostWindowPart(b_end),
      EncodeHostWindowPart(UnitParts(b, HostBatches(b), /*end=*/true).back()));

  for (bool b_first : {true, false}) {
    SCOPED_TRACE(b_first ? "b's parts first" : "a's parts first");
    std::vector<MemoryRecord> input = Encoded(b_first ? b_parts : a_parts);
    for (MemoryRecord& r : Encoded(b_first ? a_parts : b_parts)) {
      input.push_back(std::move(r));
    }
    // The end part again (a stage-1 replay): nothing changes.
    input.push_back(MemoryRecord{kJob, EncodeHostWindowPart(b_end)});
    Manual m(input);
    m.Read();
    EXPECT_TRUE(m.task->OpenWindows(kJob).empty());
    const std::vector<WindowSummary> stored = StoredWindows(*m.store);
    ASSERT_EQ(stored.size(), 5u);
    EXPECT_EQ(stored.back().window.end_ns, 5'000 * kMs);
    EXPECT_EQ(stored.back().closed_by, WindowSummary::ClosedBy::kEndMarker);
    // The windows after b's end hold a's device only.
    EXPECT_EQ(stored.back().window.devices.size(), 1u);
    for (const WindowSummary& w : stored) {
      EXPECT_NE(w.closed_by, WindowSummary::ClosedBy::kIdleTimeout);
    }
    EXPECT_EQ(m.task->parts_stats().end_parts, 2);
    const std::optional<MergeJobRecord> record = m.task->JobRecord(kJob);
    ASSERT_TRUE(record.has_value());
    EXPECT_TRUE(record->hosts.at("b").ended);
    EXPECT_EQ(record->hosts.at("b").newest_end_ns, 3'000 * kMs);
  }
}

// The split's late counts (docs/semantics.md#split-jobs): a host's batch
// with events (and a collective record) in windows its own watermark
// closed makes a kLate part; stage 2 adds each host's to the merged
// window: to the open window when it closes, to the stored window when it
// had closed (rewritten, published again); a republished one counts once.
TEST(WindowPartsTask, LateCountsOfSplitWindowsAreTheHostsSum) {
  const HostStream a{.host = "a", .rank = 0, .gpu_until_ns = 4'500 * kMs};
  const HostStream b{.host = "b", .rank = 1, .gpu_until_ns = 4'500 * kMs};
  // A late batch of each host after its watermark passed 2 s (its batch
  // 25, at 2.5 s): two kernels of window 0 and one of window 1 from a,
  // one kernel and one collective record of window 0 from b.
  auto with_late = [](const HostStream& h, int kernels0, int kernels1,
                      int collectives0) {
    std::vector<DecodedBatch> batches = HostBatches(h);
    DecodedBatch late = EmptyBatch(h);
    for (int i = 0; i < kernels0; ++i) {
      late.trace.gpu.push_back(GpuActivity{.start_ns = (300 + i) * kMs,
                                           .end_ns = (300 + i) * kMs + 1});
    }
    for (int i = 0; i < kernels1; ++i) {
      late.trace.gpu.push_back(GpuActivity{.start_ns = (1'300 + i) * kMs,
                                           .end_ns = (1'300 + i) * kMs + 1});
    }
    for (int i = 0; i < collectives0; ++i) {
      late.trace.collectives.push_back(CollectiveKernel{
          .start_ns = 400 * kMs, .end_ns = 401 * kMs, .kernel_name = 1});
    }
    batches.insert(batches.begin() + 26, std::move(late));
    return batches;
  };
  const std::vector<HostWindowPart> a_parts =
      UnitParts(a, with_late(a, 2, 1, 0), /*end=*/true);
  const std::vector<HostWindowPart> b_parts =
      UnitParts(b, with_late(b, 1, 0, 1), /*end=*/true);
  auto late_of = [](const std::vector<HostWindowPart>& parts) {
    std::vector<HostWindowPart> out;
    for (const HostWindowPart& p : parts) {
      if (p.kind == HostWindowPart::Kind::kLate) out.push_back(p);
    }
    return out;
  };
  ASSERT_EQ(late_of(a_parts).size(), 1u);
  ASSERT_EQ(late_of(b_parts).size(), 1u);
  EXPECT_EQ(late_of(a_parts)[0].late_offset, 26);
  EXPECT_EQ(
      late_of(a_parts)[0].late,
      (std::vector<HostWindowPart::Late>{
          {.window_start_ns = 0, .events = 2, .collectives = 0},
          {.window_start_ns = 1'000 * kMs, .events = 1, .collectives = 0}}));
  EXPECT_EQ(late_of(b_parts)[0].late,
            (std::vector<HostWindowPart::Late>{
                {.window_start_ns = 0, .events = 1, .collectives = 1}}));

  // a's parts, with its late part, come while window 0 waits for b's part;
  // b's late part comes after window 0 closed and was stored; both again.
  std::vector<MemoryRecord> input = Encoded(a_parts);
  for (MemoryRecord& r : Encoded(b_parts)) input.push_back(std::move(r));
  input.push_back(
      MemoryRecord{kJob, EncodeHostWindowPart(late_of(a_parts)[0])});
  input.push_back(
      MemoryRecord{kJob, EncodeHostWindowPart(late_of(b_parts)[0])});
  Manual m(input);
  m.Read();
  EXPECT_TRUE(m.task->OpenWindows(kJob).empty());
  const std::vector<WindowSummary> stored = StoredWindows(*m.store);
  ASSERT_EQ(stored.size(), 5u);
  EXPECT_EQ(stored[0].late_events, 3);
  EXPECT_EQ(stored[0].late_collectives, 1);
  EXPECT_EQ(stored[1].late_events, 1);
  EXPECT_EQ(stored[1].late_collectives, 0);
  for (size_t i = 2; i < stored.size(); ++i) {
    EXPECT_EQ(stored[i].late_events, 0) << i;
  }
  EXPECT_EQ(m.task->parts_stats().late_parts, 2);
  EXPECT_EQ(m.task->stats().late_events, 4);
  EXPECT_EQ(m.task->stats().late_collectives, 1);
  // Published as stored: the rewritten window's last copy on the topic.
  std::map<std::string, std::string> newest;
  for (const MemoryRecord& r : m.world.topics.topics.at(kWindows)[0]) {
    newest[r.key] = r.value;
  }
  EXPECT_EQ(newest.at(WindowTopicKey(kJob, 0)), EncodeWindowSummary(stored[0]));
}

// The split's host skew (docs/semantics.md#split-jobs): b's clock runs
// 3 ms ahead of a's. Each part carries its host's newest event start when
// its stage 1 made it; the merged window's host skew is their spread: the
// 3 ms, as the single stage's (one windower over both hosts' batches)
// records it.
TEST(WindowPartsTask, HostSkewOfSplitWindowsIsTheSpreadOfThePartsNewestStarts) {
  const HostStream a{.host = "a", .rank = 0, .gpu_until_ns = 4'500 * kMs};
  const HostStream b{
      .host = "b", .rank = 1, .ahead_ns = 3 * kMs, .gpu_until_ns = 4'500 * kMs};
  const std::vector<DecodedBatch> a_batches = HostBatches(a);
  const std::vector<DecodedBatch> b_batches = HostBatches(b);
  std::vector<MemoryRecord> input = Encoded(UnitParts(a, a_batches, true));
  for (MemoryRecord& r : Encoded(UnitParts(b, b_batches, true))) {
    input.push_back(std::move(r));
  }
  Manual m(input);
  m.Read();
  const std::vector<WindowSummary> stored = StoredWindows(*m.store);
  ASSERT_EQ(stored.size(), 5u);

  // The single stage: both hosts' batches, a's then b's of each 100 ms.
  JobWindower single(kJob, SplitOptions());
  const absl::Time now = absl::FromUnixSeconds(1'700'000'000);
  std::map<int64_t, int64_t> single_skew;  // Window start -> skew.
  for (size_t i = 0; i < a_batches.size(); ++i) {
    single.Add(a_batches[i], 2 * i, false, now);
    single.Add(b_batches[i], 2 * i + 1, false, now);
    for (const WindowSummary& w :
         single.FinalizeReady(now, absl::InfiniteDuration())) {
      single_skew[w.window.start_ns] = w.host_skew_ns;
    }
  }
  ASSERT_GE(single_skew.size(), 3u);
  for (const WindowSummary& w : stored) {
    SCOPED_TRACE(absl::StrCat("window ", w.window.start_ns));
    EXPECT_EQ(w.host_skew_ns, 3 * kMs);
    if (single_skew.contains(w.window.start_ns)) {
      EXPECT_EQ(w.host_skew_ns, single_skew[w.window.start_ns]);
    }
  }
}

std::string DeadLetterReason(const MemoryRecord& r) {
  for (const auto& [key, value] : r.headers) {
    if (key == "bubblewatch.reason") return value;
  }
  return "";
}

// Bad parts go to the dead-letter topic with their reasons, once (a replay
// sends none again); the job's windows are unharmed.
TEST(WindowPartsTask, BadPartsAreDeadLetteredWithTheirReason) {
  const SplitJob& job = TheSplitJob();
  std::vector<MemoryRecord> records = Records(job, Interleave(job, 9));
  const std::string first = job.parts.begin()->second.front();
  // Another part of the first host's first window: its bytes changed.
  absl::StatusOr<HostWindowPart> other = DecodeHostWindowPart(first);
  ASSERT_TRUE(other.ok());
  other->gpu_events += 1;
  const std::vector<MemoryRecord> bad = {
      {kJob, "not a part"},
      {kJob, first.substr(0, first.size() / 2)},
      {"another-job", first},
      {kJob, EncodeHostWindowPart(*other)},
  };
  records.insert(records.begin() + 5, bad.begin(), bad.end());
  // A host claiming another host's devices in a window, right after that
  // host's part of it.
  const std::string victim = std::next(job.parts.begin())->first;
  absl::StatusOr<HostWindowPart> intruder =
      DecodeHostWindowPart(job.parts.at(victim).front());
  ASSERT_TRUE(intruder.ok());
  intruder->host = "intruder";
  const auto victim_at =
      std::find(records.begin(), records.end(),
                MemoryRecord{kJob, job.parts.at(victim).front()});
  ASSERT_NE(victim_at, records.end());
  records.insert(victim_at + 1,
                 MemoryRecord{kJob, EncodeHostWindowPart(*intruder)});
  World world(records);
  CrashBudget budget;
  ProcessorStats stats;
  ASSERT_TRUE(RunProcess(world, budget, nullptr, &stats));
  EXPECT_EQ(stats.dlq_by_reason[WindowPartsTask::kBadPart], 2);
  EXPECT_EQ(stats.dlq_by_reason[WindowPartsTask::kKeyMismatch], 1);
  EXPECT_EQ(stats.dlq_by_reason[WindowPartsTask::kPartConflict], 2);
  const auto& letters = world.topics.topics[kDlq][0];
  ASSERT_EQ(letters.size(), 5u);
  std::multiset<std::string> reasons;
  for (const MemoryRecord& r : letters) reasons.insert(DeadLetterReason(r));
  EXPECT_EQ(reasons,
            (std::multiset<std::string>{
                WindowPartsTask::kBadPart, WindowPartsTask::kBadPart,
                WindowPartsTask::kKeyMismatch, WindowPartsTask::kPartConflict,
                WindowPartsTask::kPartConflict}));
  ExpectSingleStageWindows(StoredWindows(world));
}

// Two hosts' parts of a window claiming one rank: the collective analysis
// refuses them, and the window is stored without it, counted (as the
// events stage stores such a window), never a stop.
TEST(WindowPartsTask, ARankClaimedTwiceIsStoredWithoutCollectives) {
  const SplitJob& job = TheSplitJob();
  std::map<std::string, std::vector<std::string>> parts = job.parts;
  // The second host's digests of its second window say the first host's
  // ranks.
  auto first = parts.begin();
  auto second = std::next(first);
  absl::StatusOr<HostWindowPart> a = DecodeHostWindowPart(first->second[1]);
  absl::StatusOr<HostWindowPart> b = DecodeHostWindowPart(second->second[1]);
  ASSERT_TRUE(a.ok() && b.ok());
  ASSERT_EQ(a->window.start_ns, b->window.start_ns);
  ASSERT_FALSE(a->digests.empty());
  ASSERT_FALSE(b->digests.empty());
  b->digests[0].rank = a->digests[0].rank;
  second->second[1] = EncodeHostWindowPart(*b);
  std::vector<MemoryRecord> records;
  for (const Sent& s : Interleave(job, 12)) {
    records.push_back(MemoryRecord{kJob, parts.at(s.host)[s.index]});
  }
  World world(records);
  CrashBudget budget;
  ProcessorStats stats;
  ASSERT_TRUE(RunProcess(world, budget, nullptr, &stats));
  EXPECT_EQ(stats.collective_errors, 1);
  const std::vector<WindowSummary> stored = StoredWindows(world);
  ASSERT_EQ(stored.size(), job.single.size());
  for (size_t i = 0; i < stored.size(); ++i) {
    EXPECT_EQ(stored[i].collectives.has_value(),
              stored[i].window.start_ns != a->window.start_ns &&
                  job.single[i].collectives.has_value())
        << i;
  }
}

// ---------------------------------------------------------------------------
// The crash harness.

// The store as text: windows, job rows, progress and job records as bytes.
// Left out: last_seen_wall (when commits happened).
std::string DumpStore(const World& world) {
  absl::StatusOr<std::unique_ptr<WindowStoreReader>> store =
      OpenRocksDbWindowStoreReadOnly(world.StoreDir());
  EXPECT_TRUE(store.ok()) << store.status();
  if (!store.ok()) return "";
  std::string out;
  absl::StatusOr<std::vector<JobInfo>> infos = (*store)->ListJobs();
  EXPECT_TRUE(infos.ok());
  for (const JobInfo& info : *infos) {
    absl::StrAppend(&out, "job ", info.job, " windows ", info.window_count,
                    " latest ", info.latest_window_start_ns, "\n");
    auto windows =
        (*store)->Scan(info.job, absl::InfinitePast(), absl::InfiniteFuture());
    EXPECT_TRUE(windows.ok());
    for (const WindowSummary& w : *windows) {
      absl::StrAppend(&out, "window ", w.window.start_ns, " ",
                      absl::BytesToHexString(EncodeWindowSummary(w)), "\n");
    }
  }
  auto progress = (*store)->Progress(kParts, 0);
  EXPECT_TRUE(progress.ok());
  if (progress.ok() && progress->has_value()) {
    absl::StrAppend(&out, "progress resume ", (*progress)->resume_offset,
                    " committed ", (*progress)->committed_position, "\n");
  }
  auto records = (*store)->PartitionJobRecords(kParts, 0);
  EXPECT_TRUE(records.ok());
  for (const auto& [job, bytes] : *records) {
    absl::StrAppend(&out, "record ", job, " ", absl::BytesToHexString(bytes),
                    "\n");
  }
  return out;
}

struct Outcome {
  std::string store;
  std::map<std::string, std::string> published;
  std::map<std::pair<std::string, int32_t>, int64_t> group_offsets;
};

Outcome Finish(const World& world, bool rewrites = false) {
  return Outcome{DumpStore(world), Published(world, rewrites),
                 world.topics.group_offsets};
}

void ExpectSameOutcome(const Outcome& got, const Outcome& want) {
  EXPECT_EQ(got.store, want.store);
  EXPECT_EQ(got.published, want.published);
  EXPECT_EQ(got.group_offsets, want.group_offsets);
}

// A crash after every write of the protocol (windows delivered, group
// offsets committed, WAL appends), then a restart from the store and the
// topics, to the end: the uninterrupted run's store and windows topic.
TEST(WindowPartsTaskCrashHarness, ACrashAtEveryWriteGivesTheSameWindows) {
  const SplitJob& job = TheSplitJob();
  const std::vector<MemoryRecord> input = Records(job, Interleave(job, 11));
  World clean(input);
  CrashBudget unlimited;
  ASSERT_TRUE(RunProcess(clean, unlimited));
  const Outcome want = Finish(clean);
  ExpectSingleStageWindows(StoredWindows(clean));
  const int64_t writes = unlimited.writes;
  ASSERT_GT(writes, 20);
  int crashed = 0;
  for (int64_t n = 0; n <= writes; ++n) {
    SCOPED_TRACE(absl::StrCat("crash after ", n, " of ", writes, " writes"));
    World world(input);
    CrashBudget budget{.writes_left = n};
    if (!RunProcess(world, budget)) ++crashed;
    CrashBudget rest;
    ASSERT_TRUE(RunProcess(world, rest));
    ExpectSameOutcome(Finish(world), want);
    if (::testing::Test::HasFailure()) break;
  }
  EXPECT_GE(crashed, writes - 1);
}

// Late parts (docs/semantics.md#split-jobs) under the crash harness: one
// taken while its window is open, one after its windows closed (the stored
// windows rewritten), a copy and an older one of a host (a stage-1 replay):
// a crash after every write, then a restart, adds each once.
TEST(WindowPartsTaskCrashHarness, LateCountsAreAddedOnceWhateverTheCrash) {
  const SplitJob& job = TheSplitJob();
  std::vector<MemoryRecord> input = Records(job, Interleave(job, 11));
  const std::string h1 = job.parts.begin()->first;
  const std::string h2 = std::next(job.parts.begin())->first;
  const int64_t s0 = job.single[0].window.start_ns;
  const int64_t s1 = job.single[1].window.start_ns;
  auto late = [&](const std::string& host, int64_t offset,
                  std::vector<HostWindowPart::Late> counts) {
    HostWindowPart p{.job = kJob, .host = host};
    p.kind = HostWindowPart::Kind::kLate;
    p.window.start_ns = counts.front().window_start_ns;
    p.window.end_ns = p.window.start_ns + job.options.window_ns;
    p.late_offset = offset;
    p.late = std::move(counts);
    return MemoryRecord{kJob, EncodeHostWindowPart(p)};
  };
  const MemoryRecord h1_late =
      late(h1, 100, {{.window_start_ns = s0, .events = 2, .collectives = 1}});
  const auto h1_first = std::find(input.begin(), input.end(),
                                  MemoryRecord{kJob, job.parts.at(h1)[0]});
  ASSERT_NE(h1_first, input.end());
  input.insert(h1_first + 1, h1_late);
  input.insert(input.begin() + static_cast<int64_t>(input.size() * 3 / 4),
               late(h2, 7,
                    {{.window_start_ns = s0, .events = 3, .collectives = 0},
                     {.window_start_ns = s1, .events = 1, .collectives = 0}}));
  input.insert(input.end() - 2, h1_late);
  input.insert(input.end() - 1,
               late(h1, 90, {{.window_start_ns = s1, .events = 50}}));

  World clean(input);
  CrashBudget unlimited;
  ProcessorStats stats;
  ASSERT_TRUE(RunProcess(clean, unlimited, nullptr, &stats));
  const std::vector<WindowSummary> stored = StoredWindows(clean);
  ASSERT_EQ(stored.size(), job.single.size());
  EXPECT_EQ(stored[0].late_events, 5);
  EXPECT_EQ(stored[0].late_collectives, 1);
  EXPECT_EQ(stored[1].late_events, 1);
  EXPECT_EQ(stats.late_events, 6);
  EXPECT_GT(stats.duplicate_batches, 0);
  const Outcome want = Finish(clean, /*rewrites=*/true);
  // The topic's newest copy of each window is the stored one.
  ASSERT_EQ(want.published.size(), stored.size());
  for (const WindowSummary& w : stored) {
    EXPECT_EQ(want.published.at(WindowTopicKey(kJob, w.window.start_ns)),
              EncodeWindowSummary(w));
  }
  const int64_t writes = unlimited.writes;
  ASSERT_GT(writes, 20);
  for (int64_t n = 0; n <= writes; ++n) {
    SCOPED_TRACE(absl::StrCat("crash after ", n, " of ", writes, " writes"));
    World world(input);
    CrashBudget budget{.writes_left = n};
    RunProcess(world, budget);
    CrashBudget rest;
    ASSERT_TRUE(RunProcess(world, rest));
    ExpectSameOutcome(Finish(world, /*rewrites=*/true), want);
    if (::testing::Test::HasFailure()) break;
  }
}

// Several crashes in a row at random points of several interleavings.
TEST(WindowPartsTaskCrashHarness, RepeatedRandomCrashesGiveTheSameWindows) {
  const SplitJob& job = TheSplitJob();
  for (uint32_t seed : {21u, 22u, 23u}) {
    SCOPED_TRACE(absl::StrCat("seed ", seed));
    const std::vector<MemoryRecord> input = Records(job, Interleave(job, seed));
    World clean(input);
    CrashBudget unlimited;
    ASSERT_TRUE(RunProcess(clean, unlimited));
    const Outcome want = Finish(clean);
    std::mt19937 rng(seed);
    World world(input);
    for (int i = 0; i < 4; ++i) {
      CrashBudget budget{.writes_left = static_cast<int64_t>(
                             rng() % static_cast<uint32_t>(unlimited.writes))};
      RunProcess(world, budget);
    }
    CrashBudget rest;
    ASSERT_TRUE(RunProcess(world, rest));
    ExpectSameOutcome(Finish(world), want);
  }
}

// ---------------------------------------------------------------------------
// A partition moving to another instance (a rebalance, a new instance with
// an empty store): the state topic carries the progress and job records.

constexpr char kState[] = "parts.state";

// The stored windows (start -> bytes; a window stored by both instances
// must have the same bytes) and, apart, the progress and job records.
struct StoreParts {
  std::map<std::string, std::string> windows;
  std::string progress;
};

void AddStore(const World& world, StoreParts& out) {
  const std::string dump = DumpStore(world);
  for (absl::string_view line : absl::StrSplit(dump, '\n')) {
    if (absl::StartsWith(line, "window ")) {
      std::vector<std::string> f = absl::StrSplit(line, ' ');
      ASSERT_EQ(f.size(), 3u) << line;
      auto [it, inserted] = out.windows.try_emplace(f[1], f[2]);
      EXPECT_TRUE(inserted || it->second == f[2])
          << "window " << f[1] << " stored twice, differently";
    } else if (absl::StartsWith(line, "progress ") ||
               absl::StartsWith(line, "record ")) {
      absl::StrAppend(&out.progress, line, "\n");
    }
  }
}

// Runs `input` on instance A until offset `revoke_at` (revoked there) or
// until `crash_after` writes, then on instance B, with an empty store, to
// the end. Expects, unless `expect_same` is false, the uninterrupted run's
// windows (A's and B's stores together, and the windows topic), B's
// progress and records as the uninterrupted run's, and its group offset;
// returns whether they were all the same.
bool MoveToAnEmptyInstance(const std::vector<MemoryRecord>& input,
                           int64_t revoke_at,
                           std::optional<int64_t> crash_after,
                           const std::string& b_state_topic,
                           bool expect_same = true,
                           absl::Duration job_expiry = absl::Hours(6),
                           const std::function<void(World&)>& between = {}) {
  World clean(input);
  clean.job_expiry = job_expiry;
  CrashBudget unlimited;
  EXPECT_TRUE(RunProcess(clean, unlimited));
  StoreParts want;
  AddStore(clean, want);
  EXPECT_FALSE(want.windows.empty());

  World world(input);
  world.job_expiry = job_expiry;
  world.state_topic = kState;
  world.revoke_at = revoke_at;
  CrashBudget a_budget{.writes_left = crash_after};
  RunProcess(world, a_budget);
  StoreParts got;
  AddStore(world, got);
  if (between) between(world);
  world.store = "b";
  world.state_topic = b_state_topic;
  world.revoke_at = -1;
  CrashBudget rest;
  ProcessorStats b_stats;
  EXPECT_TRUE(RunProcess(world, rest, nullptr, &b_stats));
  // Revoked, A committed: B restores from the state topic when it has one.
  if (revoke_at >= 0) {
    EXPECT_EQ(b_stats.state_restores, b_state_topic.empty() ? 0 : 1);
  }
  StoreParts b;
  AddStore(world, b);
  got.windows.merge(b.windows);
  got.progress = b.progress;
  const bool same = got.windows == want.windows &&
                    got.progress == want.progress &&
                    Published(world) == Published(clean) &&
                    world.topics.group_offsets == clean.topics.group_offsets;
  if (expect_same) {
    EXPECT_EQ(got.windows, want.windows);
    EXPECT_EQ(got.progress, want.progress);
    EXPECT_EQ(Published(world), Published(clean));
    EXPECT_EQ(world.topics.group_offsets, clean.topics.group_offsets);
  }
  return same;
}

std::vector<MemoryRecord> AHostEndsEarly(size_t k, int64_t& cut) {
  std::vector<MemoryRecord> out;
  for (std::string& bytes : testing::AHostEndsEarly(TheSplitJob(), k, cut)) {
    out.push_back(MemoryRecord{kJob, std::move(bytes)});
  }
  return out;
}

// Revoked halfway, the partition goes to an instance with an empty store:
// it restores from the state topic and gives the uninterrupted run's
// windows, progress and records, byte for byte.
TEST(WindowPartsTaskMove, ARevokedPartitionResumesOnAnEmptyInstance) {
  const SplitJob& job = TheSplitJob();
  for (uint32_t seed : {31u, 32u}) {
    SCOPED_TRACE(absl::StrCat("seed ", seed));
    const std::vector<MemoryRecord> input = Records(job, Interleave(job, seed));
    for (int64_t at : {static_cast<int64_t>(input.size() / 3),
                       static_cast<int64_t>(input.size() / 2),
                       static_cast<int64_t>(input.size() * 4 / 5)}) {
      SCOPED_TRACE(absl::StrCat("revoked at ", at, " of ", input.size()));
      MoveToAnEmptyInstance(input, at, std::nullopt, kState);
    }
  }
}

// A host that ended below the resume offset: only the state topic tells
// the new owner that it ended and which ranks it held. Without it (no
// state topic on B: the group offset only) the windows differ.
TEST(WindowPartsTaskMove, AHostThatEndedBeforeTheResumeOffsetIsRestored) {
  int64_t cut = 0;
  const std::vector<MemoryRecord> input = AHostEndsEarly(2, cut);
  EXPECT_TRUE(MoveToAnEmptyInstance(input, cut, std::nullopt, kState));
  EXPECT_FALSE(MoveToAnEmptyInstance(input, cut, std::nullopt, "",
                                     /*expect_same=*/false))
      << "the test cannot fail: the group offset alone gives the same";
}

// Instance A crashes after each write of its run (before or after a
// snapshot reached the state topic, the store batch, the group offsets);
// instance B, with an empty store, takes over: the uninterrupted run's
// windows.
TEST(WindowPartsTaskMove, ACrashThenAnEmptyInstanceGivesTheSameWindows) {
  int64_t cut = 0;
  const std::vector<MemoryRecord> input = AHostEndsEarly(2, cut);
  World clean(input);
  clean.state_topic = kState;
  CrashBudget unlimited;
  ASSERT_TRUE(RunProcess(clean, unlimited));
  const int64_t writes = unlimited.writes;
  ASSERT_GT(writes, 10);
  for (int64_t n = 0; n <= writes; ++n) {
    SCOPED_TRACE(absl::StrCat("crash after ", n, " of ", writes, " writes"));
    MoveToAnEmptyInstance(input, -1, n, kState);
    if (::testing::Test::HasFailure()) break;
  }
}

TEST(WindowPartsTask, PartitionSnapshotsRoundTripAndRefuseBadBytes) {
  MergePartitionSnapshot s{.topic = "t",
                           .partition = 3,
                           .resume_offset = 17,
                           .committed_position = 40};
  s.jobs["a"] = EncodeMergeJobRecord(MergeJobRecord{.world_size = 4});
  s.jobs["b"] = "";
  const std::string bytes = EncodeMergePartitionSnapshot(s);
  absl::StatusOr<MergePartitionSnapshot> back =
      DecodeMergePartitionSnapshot(bytes);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(*back, s);
  EXPECT_TRUE(absl::IsDataLoss(
      DecodeMergePartitionSnapshot(bytes.substr(0, bytes.size() - 1))
          .status()));
  EXPECT_TRUE(absl::IsDataLoss(
      DecodeMergePartitionSnapshot(absl::StrCat(bytes, "x")).status()));
  EXPECT_TRUE(absl::IsDataLoss(
      DecodeMergePartitionSnapshot(absl::StrCat("\x03", bytes.substr(1)))
          .status()));
  // The per-key form: the progress only.
  s.jobs.clear();
  s.jobs_per_key = true;
  const std::string per_key = EncodeMergePartitionSnapshot(s);
  back = DecodeMergePartitionSnapshot(per_key);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(*back, s);
  EXPECT_LT(per_key.size(), 16u);
  EXPECT_TRUE(absl::IsDataLoss(
      DecodeMergePartitionSnapshot(absl::StrCat(per_key, "x")).status()));
}

TEST(WindowPartsTask, JobSnapshotsRoundTripAndPickTheVersionAtAPosition) {
  MergeJobSnapshot s{.topic = "t",
                     .partition = 2,
                     .job = "j/1",
                     .current = {.committed_position = 50,
                                 .record = EncodeMergeJobRecord(MergeJobRecord{
                                     .world_size = 4, .idle_closed = true})},
                     .previous = MergeJobVersion{.committed_position = 30,
                                                 .record = std::nullopt}};
  const std::string bytes = EncodeMergeJobSnapshot(s);
  absl::StatusOr<MergeJobSnapshot> back = DecodeMergeJobSnapshot(bytes);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(*back, s);
  for (size_t cut = 0; cut < bytes.size(); ++cut) {
    EXPECT_FALSE(DecodeMergeJobSnapshot(bytes.substr(0, cut)).ok()) << cut;
  }
  EXPECT_FALSE(DecodeMergeJobSnapshot(bytes + "x").ok());
  EXPECT_EQ(MergeJobKey("t", 2, "j/1"), "t/2/job/j/1");
  EXPECT_EQ(MergeJobVersionAt(s, 50), s.current);
  EXPECT_EQ(MergeJobVersionAt(s, 49), s.previous);
  EXPECT_EQ(MergeJobVersionAt(s, 29), std::nullopt);
  s.previous.reset();
  EXPECT_EQ(MergeJobVersionAt(s, 49), std::nullopt);
}

TEST(WindowPartsTask, JobRecordsRoundTripAndRefuseBadBytes) {
  MergeJobRecord r;
  r.world_size = 16;
  r.finalized_edge_ns = -40;
  r.hosts["a"] = {.ranks = {0, 1}, .newest_end_ns = 80, .ended = false};
  r.hosts["b"] = {.ranks = {}, .newest_end_ns = std::nullopt, .ended = true};
  // A version 1 record (before the late counts and idle_closed) still
  // reads: the same bytes without the two empty counts and the flag.
  std::string v1 = EncodeMergeJobRecord(r);
  ASSERT_EQ(v1.substr(v1.size() - 3), std::string("\0\0\0", 3));
  v1.resize(v1.size() - 3);
  v1[0] = 1;
  absl::StatusOr<MergeJobRecord> old = DecodeMergeJobRecord(v1);
  ASSERT_TRUE(old.ok()) << old.status();
  EXPECT_EQ(*old, r);
  r.pending_late[-40] = {.events = 3, .collectives = 1};
  r.pending_late[80] = {.events = 0, .collectives = 2};
  r.late_offsets["a"] = 17;
  const std::string bytes = EncodeMergeJobRecord(r);
  absl::StatusOr<MergeJobRecord> back = DecodeMergeJobRecord(bytes);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(*back, r);
  for (size_t cut = 0; cut < bytes.size(); ++cut) {
    EXPECT_FALSE(DecodeMergeJobRecord(bytes.substr(0, cut)).ok()) << cut;
  }
  EXPECT_FALSE(DecodeMergeJobRecord(bytes + "x").ok());
  // A version 1 record with version 2's fields is refused (trailing bytes).
  std::string v1_long = bytes;
  v1_long[0] = 1;
  EXPECT_FALSE(DecodeMergeJobRecord(v1_long).ok());
  r.idle_closed = true;
  back = DecodeMergeJobRecord(EncodeMergeJobRecord(r));
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(*back, r);
}

// ---------------------------------------------------------------------------
// Many small split jobs: stage 2 forgets the ended ones, and its state topic
// stays per job (docs/state.md#stage-2-state-topic).

constexpr int64_t kSmallWindowNs = 10'000'000'000;  // 10 s.

std::string SmallJobName(int i) { return absl::StrCat("small-", i); }

// One host's part of small job `i`'s window `w`: two hosts (`a` holds rank
// 0 and device 0, `b` rank 1 and device 1) of a world of 2; each job's
// windows lie after the previous job's, so the partition's clock moves.
MemoryRecord SmallPart(int i, int w, bool host_a, bool last,
                       std::vector<int32_t> ranks = {}) {
  HostWindowPart part;
  part.job = SmallJobName(i);
  part.host = host_a ? "a" : "b";
  part.window.start_ns =
      1'700'000'000'000'000'000 + (int64_t{i} * 4 + w) * kSmallWindowNs;
  part.window.end_ns = part.window.start_ns + kSmallWindowNs;
  DeviceWindow d;
  d.device = host_a ? 0 : 1;
  d.kernels = 1 + i % 7;
  part.window.devices.push_back(d);
  part.gpu_events = 1 + i % 5;
  part.world_size = 2;
  part.ranks = ranks.empty() ? std::vector<int32_t>{host_a ? 0 : 1} : ranks;
  part.last = last;
  return MemoryRecord{part.job, EncodeHostWindowPart(part)};
}

// `jobs` small jobs, each one window of both hosts, the last one's host b
// part after the next job's host a part (so a job's parts may lie above
// the resume offset after it ended).
std::vector<MemoryRecord> SmallJobs(int jobs) {
  std::vector<MemoryRecord> out;
  for (int i = 0; i < jobs; ++i) {
    out.push_back(SmallPart(i, 0, /*host_a=*/true, /*last=*/true));
    if (i > 0) out.push_back(SmallPart(i - 1, 0, false, true));
  }
  out.push_back(SmallPart(jobs - 1, 0, false, true));
  return out;
}

struct StateRecordStats {
  size_t largest_record = 0;  // Key and value bytes.
  // Per commit (its records up to its progress record): bytes, and the
  // jobs whose new version it wrote.
  std::vector<size_t> commit_bytes;
  std::vector<std::set<std::string>> commit_jobs;
  std::vector<int64_t> commit_positions;
  int64_t gone_records = 0;
  int64_t tombstones = 0;
  std::set<std::string> live_keys;  // As compaction would leave them.
};

StateRecordStats ReadStateTopic(const World& world) {
  StateRecordStats out;
  size_t bytes = 0;
  std::set<std::string> jobs;
  const std::string progress_key = MergePartitionKey(kParts, 0);
  for (const MemoryRecord& r : world.topics.topics.at(kState)[0]) {
    const size_t size = r.key.size() + r.value.size();
    out.largest_record = std::max(out.largest_record, size);
    bytes += size;
    if (r.tombstone) {
      ++out.tombstones;
      out.live_keys.erase(r.key);
      continue;
    }
    out.live_keys.insert(r.key);
    if (r.key == progress_key) {
      absl::StatusOr<MergePartitionSnapshot> s =
          DecodeMergePartitionSnapshot(r.value);
      EXPECT_TRUE(s.ok()) << s.status();
      EXPECT_TRUE(s.ok() && s->jobs_per_key && s->jobs.empty());
      out.commit_bytes.push_back(bytes);
      out.commit_jobs.push_back(std::move(jobs));
      out.commit_positions.push_back(s.ok() ? s->committed_position : -1);
      bytes = 0;
      jobs.clear();
      continue;
    }
    absl::StatusOr<MergeJobSnapshot> j = DecodeMergeJobSnapshot(r.value);
    EXPECT_TRUE(j.ok()) << r.key << ": " << j.status();
    if (!j.ok()) continue;
    EXPECT_EQ(r.key, MergeJobKey(kParts, 0, j->job));
    if (j->current.record) {
      jobs.insert(j->job);
    } else {
      ++out.gone_records;
    }
  }
  return out;
}

// 5,000 small split jobs through one partition: every job is forgotten
// once it ended and lies --job-expiry behind; no state record grows with
// the jobs, and a commit writes the records of the jobs its parts changed
// only (not every job), a forgotten job's record goes (gone, then a
// tombstone), and stage 2 holds a handful of jobs at a time.
TEST(WindowPartsTaskGrowth, ManyJobsKeepEveryStateRecordSmall) {
  constexpr int kJobs = 5'000;
  const std::vector<MemoryRecord> input = SmallJobs(kJobs);
  World world(input);
  world.state_topic = kState;
  world.job_expiry = absl::Minutes(1);  // 1.5 jobs' windows.
  int64_t most_jobs = 0;
  WindowPartsStats last;
  CrashBudget unlimited;
  ProcessorStats stats;
  ASSERT_TRUE(RunProcess(
      world, unlimited,
      [&](WindowPartsTask& task, WindowStore&, int64_t) {
        last = task.parts_stats();
        most_jobs = std::max(most_jobs, last.jobs);
      },
      &stats));
  EXPECT_EQ(last.windows_closed, kJobs);
  EXPECT_GE(stats.jobs_forgotten, kJobs - 10);
  EXPECT_LE(most_jobs, 10);

  const StateRecordStats topic = ReadStateTopic(world);
  // One job's record: its key, two versions of ~40 bytes (2 hosts).
  EXPECT_LT(topic.largest_record, 200u);
  ASSERT_GT(topic.commit_bytes.size(), 100u);
  size_t most_bytes = 0;
  KafkaOffset from = 0;
  for (size_t c = 0; c < topic.commit_bytes.size(); ++c) {
    // The jobs whose parts this commit read (offsets [from, position)).
    const KafkaOffset to = topic.commit_positions[c];
    std::set<std::string> read;
    for (KafkaOffset o = from; o < to; ++o) read.insert(input[o].key);
    for (const std::string& job : topic.commit_jobs[c]) {
      EXPECT_TRUE(read.contains(job))
          << "commit " << c << " wrote " << job << ", whose parts it did "
          << "not read (offsets " << from << " to " << to << ")";
    }
    // Bytes: O(jobs it read), each record under the bound.
    EXPECT_LE(topic.commit_bytes[c], (2 * read.size() + 3) * 200) << c;
    most_bytes = std::max(most_bytes, topic.commit_bytes[c]);
    from = std::max(from, to);
  }
  // In one record, the jobs of the partition would be ~250 KB by the end
  // (~50 bytes a job), written at every commit.
  EXPECT_LT(most_bytes, 10'000u);
  // The figures, in the test's XML output (--gtest_output=xml).
  RecordProperty("largest_record_bytes",
                 static_cast<int>(topic.largest_record));
  RecordProperty("most_bytes_of_a_commit", static_cast<int>(most_bytes));
  RecordProperty("commits", static_cast<int>(topic.commit_bytes.size()));
  RecordProperty("most_jobs_held", static_cast<int>(most_jobs));
  RecordProperty("jobs_forgotten", static_cast<int>(stats.jobs_forgotten));
  RecordProperty("live_keys", static_cast<int>(topic.live_keys.size()));
  EXPECT_EQ(topic.gone_records, stats.jobs_forgotten);
  EXPECT_GE(topic.tombstones, stats.jobs_forgotten - 10);
  EXPECT_LE(topic.live_keys.size(), 20u);

  // A new instance restores what the topic says: the jobs not forgotten.
  World& b = world;
  b.store = "b";
  std::vector<MemoryRecord>& log = b.topics.topics[kParts][0];
  log.push_back(SmallPart(kJobs, 0, true, true));
  log.push_back(SmallPart(kJobs, 0, false, true));
  WindowPartsStats b_last;
  ProcessorStats b_stats;
  ASSERT_TRUE(RunProcess(
      b, unlimited,
      [&](WindowPartsTask& task, WindowStore&, int64_t) {
        b_last = task.parts_stats();
      },
      &b_stats));
  EXPECT_EQ(b_stats.state_restores, 1);
  EXPECT_LE(b_last.jobs, 10);
  EXPECT_EQ(b_last.windows_closed, 1);
}

// The windows of `job` in the store, start -> encoding.
std::map<WindowStartNs, std::string> JobWindows(const World& world,
                                                const std::string& job) {
  std::map<WindowStartNs, std::string> out;
  absl::StatusOr<std::unique_ptr<WindowStoreReader>> store =
      OpenRocksDbWindowStoreReadOnly(world.StoreDir());
  EXPECT_TRUE(store.ok()) << store.status();
  if (!store.ok()) return out;
  auto windows =
      (*store)->Scan(job, absl::InfinitePast(), absl::InfiniteFuture());
  EXPECT_TRUE(windows.ok());
  if (!windows.ok()) return out;
  for (const WindowSummary& w : *windows) {
    out[w.window.start_ns] = EncodeWindowSummary(w);
  }
  return out;
}

// A job forgotten, then a slow host's part of its stored window: counted
// stale (the store's newest window of the job is its edge), not merged
// into another window of that start; a part of a later window starts a new
// run.
TEST(WindowPartsTaskForget, APartOfAForgottenJobsStoredWindowIsStale) {
  // small-0: host a holds both ranks and ends: its window closes with a's
  // part alone. Then 20 jobs move the clock; then host b's part of that
  // window, which alone would make a window (both ranks, ended), then a
  // later window of both hosts.
  std::vector<MemoryRecord> input = {SmallPart(0, 0, true, true, {0, 1})};
  for (int i = 1; i <= 20; ++i) {
    input.push_back(SmallPart(i, 0, true, true));
    input.push_back(SmallPart(i, 0, false, true));
  }
  std::vector<MemoryRecord> clean_input = input;
  input.push_back(SmallPart(0, 0, false, true, {0, 1}));
  const size_t late = input.size() - 1;
  for (std::vector<MemoryRecord>* in : {&input, &clean_input}) {
    in->push_back(SmallPart(0, 2, true, true));
    in->push_back(SmallPart(0, 2, false, true));
  }
  for (const std::string& state_topic : {std::string(), std::string(kState)}) {
    SCOPED_TRACE(absl::StrCat("state topic \"", state_topic, "\""));
    World clean(clean_input);
    clean.job_expiry = absl::Minutes(1);
    clean.state_topic = state_topic;
    CrashBudget unlimited;
    ASSERT_TRUE(RunProcess(clean, unlimited));
    const std::map<WindowStartNs, std::string> want =
        JobWindows(clean, SmallJobName(0));
    ASSERT_EQ(want.size(), 2u);

    World world(input);
    world.job_expiry = absl::Minutes(1);
    world.state_topic = state_topic;
    bool forgotten_before = false;
    WindowPartsStats last;
    ASSERT_TRUE(RunProcess(
        world, unlimited,
        [&](WindowPartsTask& task, WindowStore&, int64_t offset) {
          if (offset + 1 == static_cast<int64_t>(late)) {
            forgotten_before = !task.JobRecord(SmallJobName(0)).has_value();
          }
          last = task.parts_stats();
        }));
    EXPECT_TRUE(forgotten_before) << "the job was not forgotten: the test "
                                     "checks nothing";
    EXPECT_EQ(last.stale_parts, 1);
    // (Compared as a whole: the bytes would flood the log.)
    EXPECT_TRUE(JobWindows(world, SmallJobName(0)) == want)
        << "the forgotten job's windows differ from the run without the "
           "stale part";
    EXPECT_TRUE(Published(world) == Published(clean))
        << "the windows topic differs from the run without the stale part";
  }
}

// A job whose window closed by the idle timeout (its host b never sent a
// part) is forgotten like one that ended, once quiet for --job-expiry.
TEST(WindowPartsTaskForget, AJobClosedByIdlenessIsForgotten) {
  std::vector<MemoryRecord> input = {SmallPart(0, 0, true, false)};
  for (int i = 1; i <= 6; ++i) {
    input.push_back(SmallPart(i, 0, true, true));
    input.push_back(SmallPart(i, 0, false, true));
  }
  World world(input);
  world.state_topic = kState;
  world.job_expiry = absl::Minutes(1);
  std::optional<MergeJobRecord> after_idle;
  bool forgotten = false;
  CrashBudget unlimited;
  ASSERT_TRUE(RunProcess(
      world, unlimited, [&](WindowPartsTask& task, WindowStore&, int64_t o) {
        if (o == 0) {
          // Caught up, then silent past the idle timeout.
          task.OnEndOfPartition(0);
          ASSERT_TRUE(task.Tick(NowAt(0) + Options().idle_timeout).ok());
          after_idle = task.JobRecord(SmallJobName(0));
        }
        forgotten = !task.JobRecord(SmallJobName(0)).has_value();
      }));
  ASSERT_TRUE(after_idle.has_value());
  EXPECT_TRUE(after_idle->idle_closed);
  EXPECT_EQ(JobWindows(world, SmallJobName(0)).size(), 1u);
  EXPECT_TRUE(forgotten);
}

// The state topic as a version before the per-key form left it: one
// progress record holding every job (of the newest snapshot), no job keys.
void ToTheOldForm(World& world) {
  std::vector<MemoryRecord>& log = world.topics.topics.at(kState)[0];
  std::optional<MergePartitionSnapshot> newest;
  std::map<std::string, MergeJobSnapshot> jobs;
  for (const MemoryRecord& r : log) {
    if (r.key == MergePartitionKey(kParts, 0)) {
      absl::StatusOr<MergePartitionSnapshot> s =
          DecodeMergePartitionSnapshot(r.value);
      ASSERT_TRUE(s.ok()) << s.status();
      if (!newest || s->committed_position >= newest->committed_position) {
        newest = *s;
      }
    } else if (r.tombstone) {
      jobs.erase(r.key);
    } else {
      absl::StatusOr<MergeJobSnapshot> j = DecodeMergeJobSnapshot(r.value);
      ASSERT_TRUE(j.ok()) << j.status();
      jobs[r.key] = *j;
    }
  }
  ASSERT_TRUE(newest.has_value());
  for (const auto& [key, j] : jobs) {
    std::optional<MergeJobVersion> v =
        MergeJobVersionAt(j, newest->committed_position);
    if (v && v->record) newest->jobs[j.job] = *v->record;
  }
  ASSERT_FALSE(newest->jobs.empty());
  newest->jobs_per_key = false;
  log = {MemoryRecord{MergePartitionKey(kParts, 0),
                      EncodeMergePartitionSnapshot(*newest)}};
}

// A state topic written before the per-key form (one record holding every
// job) is restored as the per-key one.
TEST(WindowPartsTaskMove, AnOldFormStateTopicIsRestored) {
  int64_t cut = 0;
  const std::vector<MemoryRecord> input = AHostEndsEarly(2, cut);
  EXPECT_TRUE(MoveToAnEmptyInstance(input, cut, std::nullopt, kState, true,
                                    absl::Hours(6), ToTheOldForm));
}

// Small jobs around one that stays open (small-1, host b's part near the
// end) and pins the resume offset: small-0's parts lie below and above
// it, so small-0 may be forgotten only once small-1 closed (a replay from
// the pinned offset would read small-0's second part alone).
std::vector<MemoryRecord> PinnedSmallJobs() {
  std::vector<MemoryRecord> out = {SmallPart(0, 0, true, true),
                                   SmallPart(1, 0, true, true),
                                   SmallPart(0, 0, false, true)};
  for (int i = 2; i < 10; ++i) {
    out.push_back(SmallPart(i, 0, true, true));
    out.push_back(SmallPart(i, 0, false, true));
  }
  out.push_back(SmallPart(1, 0, false, true));
  for (int i = 10; i < 13; ++i) {
    out.push_back(SmallPart(i, 0, true, true));
    out.push_back(SmallPart(i, 0, false, true));
  }
  return out;
}

// Jobs forgotten while the process crashes after every write (the gone
// records, tombstones and store deletions are crash points too), then a
// new instance with an empty store takes over from the state topic: every
// window once, with the uninterrupted run's bytes, and the same progress
// and records. (A job forgotten with a part above the resume offset would
// be made again from that part alone.)
TEST(WindowPartsTaskMove, ACrashWhileJobsAreForgottenThenAnEmptyInstance) {
  const std::vector<MemoryRecord> input = PinnedSmallJobs();
  World clean(input);
  clean.state_topic = kState;
  clean.job_expiry = absl::Minutes(1);
  CrashBudget unlimited;
  ProcessorStats stats;
  ASSERT_TRUE(RunProcess(clean, unlimited, nullptr, &stats));
  ASSERT_GE(stats.jobs_forgotten, 8);
  const int64_t writes = unlimited.writes;
  for (int64_t n = 0; n <= writes; ++n) {
    SCOPED_TRACE(absl::StrCat("crash after ", n, " of ", writes, " writes"));
    MoveToAnEmptyInstance(input, -1, n, kState, true, absl::Minutes(1));
    if (::testing::Test::HasFailure()) break;
  }
}

// The same crashes, restarting on the same instance (its store).
TEST(WindowPartsTaskCrashHarness, ACrashWhileJobsAreForgottenGivesTheSame) {
  const std::vector<MemoryRecord> input = PinnedSmallJobs();
  World clean(input);
  clean.state_topic = kState;
  clean.job_expiry = absl::Minutes(1);
  CrashBudget unlimited;
  ASSERT_TRUE(RunProcess(clean, unlimited));
  const Outcome want = Finish(clean);
  const int64_t writes = unlimited.writes;
  for (int64_t n = 0; n <= writes; ++n) {
    SCOPED_TRACE(absl::StrCat("crash after ", n, " of ", writes, " writes"));
    World world(input);
    world.state_topic = kState;
    world.job_expiry = absl::Minutes(1);
    CrashBudget budget{.writes_left = n};
    RunProcess(world, budget);
    CrashBudget rest;
    ASSERT_TRUE(RunProcess(world, rest));
    ExpectSameOutcome(Finish(world), want);
    if (::testing::Test::HasFailure()) break;
  }
}

}  // namespace
}  // namespace window_parts_task_test
}  // namespace bubblewatch
