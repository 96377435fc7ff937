// Stage 1 of a job split across processors, live
// (docs/architecture.md#one-job-across-processors): a TP2×DP2×PP4 job
// produced with its batches keyed JOB@HOST (or JOB@rank-R) over several
// input partitions runs through the partition task over the in-memory
// Kafka; the window parts it publishes, merged per window
// (MergeHostWindowParts, what stage 2 does), equal the windows the same
// job makes keyed by job alone (the single stage, stored), every field but
// those a part cannot know (why the window closed, the hosts' skew; the
// ranks' timelines are compared too). The split job stores no window and no job
// of its own.
#include <algorithm>
#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "analysis/window_merge.h"
#include "gtest/gtest.h"
#include "ingest/batched_trace.h"
#include "ingest/synthetic/synthetic_parallel_job.h"
#include "ingest/trace_replay.h"
#include "processor/fleet_topics.h"
#include "schemas/event_batch_codec.h"
#include "tests/processor/task_driver.h"
#include "tests/processor/windower_streams.h"
#include "tests/testing/temp_dir.h"

namespace bubblewatch {
namespace split_job_task_test {
namespace {

using testing::MemoryRecord;
using testing::TaskDriver;

// The job of JobWindowerCollectives.HostPartsMergeIntoTheSingleStageWindow:
// pipeline groups, host clocks milliseconds apart and drifting, two roots.
ParallelJob SplitJob(bool host_names) {
  return MakeParallelJob(testing::SplitJobOptions(host_names));
}

// The messages `produce --split-ranks split_ranks` sends for the job's
// rank files (one stream per rank, 300 events a batch).
std::vector<MemoryRecord> Produce(const ParallelJob& job, int split_ranks,
                                  bool end_markers) {
  std::vector<std::unique_ptr<BatchedTrace>> streams;
  for (const Trace& t : job.ranks) {
    streams.push_back(
        std::make_unique<BatchedTrace>(t,
                                       BatchHeader{.job = "split-job",
                                                   .host = t.host,
                                                   .rank = t.rank,
                                                   .world_size = t.world_size},
                                       BatchingOptions{.max_events = 300}));
  }
  std::vector<BatchedTrace*> ptrs;
  for (auto& s : streams) ptrs.push_back(s.get());
  std::vector<MemoryRecord> out;
  EXPECT_TRUE(
      ReplayTraces(
          ptrs,
          [&](absl::string_view key, std::span<const uint8_t> message,
              int64_t) {
            out.push_back(MemoryRecord{
                std::string(key),
                std::string(reinterpret_cast<const char*>(message.data()),
                            message.size())});
            return absl::OkStatus();
          },
          /*end_markers=*/true, split_ranks)
          .ok());
  return out;
}

StreamProcessorOptions Options() {
  StreamProcessorOptions o = testing::ProcessOptions("events");
  // Several windows, each cutting steps (as the windower test's).
  o.windower.window_ns = 40'000'000;
  o.windower.lateness_ns = 1'000'000'000;
  return o;
}

// The parts published, decoded, by (window start, host); a part published
// twice must be the same bytes.
std::map<int64_t, std::vector<HostWindowPart>> PublishedParts(
    TaskDriver& driver, int* published) {
  std::map<std::tuple<std::string, std::string, int64_t>, std::string> seen;
  std::map<int64_t, std::vector<HostWindowPart>> out;
  *published = 0;
  const auto& topic = driver.topics().topics[driver.options().parts_topic];
  for (size_t p = 0; p < topic.size(); ++p) {
    for (const MemoryRecord& r : topic[p]) {
      ++*published;
      absl::StatusOr<HostWindowPart> part = DecodeHostWindowPart(r.value);
      EXPECT_TRUE(part.ok()) << part.status();
      if (!part.ok()) continue;
      EXPECT_EQ(r.key, part->job);
      // Every part of a job in its job's partition.
      EXPECT_EQ(static_cast<int32_t>(p),
                WindowTopicPartition(part->job, topic.size()));
      auto [it, inserted] = seen.try_emplace(
          std::tuple(part->job, part->host, part->window.start_ns), r.value);
      EXPECT_TRUE(inserted || it->second == r.value)
          << "part " << part->host << " at " << part->window.start_ns
          << " published twice, differently";
      if (inserted) out[part->window.start_ns].push_back(*std::move(part));
    }
  }
  return out;
}

// With end markers and without (each unit then closes by its idle
// timeout): either way each unit's last part says so.
TEST(SplitJobTask, PublishedPartsMergeIntoTheSingleStageWindows) {
  for (const auto& [host_names, end_markers] :
       {std::pair(true, true), std::pair(false, true),
        std::pair(true, false)}) {
    SCOPED_TRACE(host_names ? "8 hosts of 2 ranks" : "16 ranks, no hosts");
    SCOPED_TRACE(end_markers ? "end markers" : "idle timeouts");
    const ParallelJob job = SplitJob(host_names);

    // The single stage: keyed by job, one partition.
    ::bubblewatch::testing::TempDir dir;
    TaskDriver single(Options(), dir.Sub("single"));
    const std::vector<MemoryRecord> whole =
        Produce(job, /*split_ranks=*/0, end_markers);
    for (const MemoryRecord& r : whole) ASSERT_EQ(r.key, "split-job");
    single.Send(whole);
    ASSERT_TRUE(single.RunUntilIdle().ok());
    const std::vector<WindowSummary> want = single.Stored({"split-job"});
    ASSERT_GE(want.size(), 5u);
    int parts_single = 0;
    EXPECT_TRUE(PublishedParts(single, &parts_single).empty());

    // Split: keyed by host (or rank), spread over 4 partitions by the
    // producer's partitioner.
    constexpr int kPartitions = 4;
    TaskDriver split(Options(), dir.Sub("split"), kPartitions);
    const std::vector<MemoryRecord> keyed =
        Produce(job, /*split_ranks=*/16, end_markers);
    ASSERT_EQ(keyed.size(), whole.size());
    std::set<std::string> keys;
    std::set<int32_t> partitions;
    for (const MemoryRecord& r : keyed) {
      keys.insert(r.key);
      const int32_t p = WindowTopicPartition(r.key, kPartitions);
      partitions.insert(p);
      split.Send(r.key, r.value, p);
    }
    ASSERT_EQ(keys.size(), host_names ? 8u : 16u);
    EXPECT_TRUE(
        keys.contains(host_names ? "split-job@host-0" : "split-job@rank-0"));
    EXPECT_GE(partitions.size(), 2u) << "the hosts must spread";
    ASSERT_TRUE(split.RunUntilIdle().ok());
    EXPECT_EQ(split.stats().late_events, 0);
    // No window and no job of the split units in the store: the user's
    // window is stage 2's.
    absl::StatusOr<std::vector<JobInfo>> jobs = split.store()->ListJobs();
    ASSERT_TRUE(jobs.ok()) << jobs.status();
    EXPECT_TRUE(jobs->empty()) << (*jobs)[0].job;
    EXPECT_TRUE(split.Published().empty());

    int published = 0;
    std::map<int64_t, std::vector<HostWindowPart>> parts =
        PublishedParts(split, &published);
    ASSERT_EQ(parts.size(), want.size());
    std::map<std::string, int64_t> last_start;  // Host -> its last part's.
    std::map<std::string, int64_t> newest;      // Host -> its newest part.
    for (const WindowSummary& w : want) {
      SCOPED_TRACE(absl::StrCat("window ", w.window.start_ns));
      ASSERT_TRUE(parts.contains(w.window.start_ns));
      const std::vector<HostWindowPart>& of = parts[w.window.start_ns];
      for (const HostWindowPart& p : of) {
        EXPECT_EQ(p.job, "split-job");
        EXPECT_EQ(p.world_size, 16);
        EXPECT_EQ(p.ranks.size(), host_names ? 2u : 1u) << p.host;
        if (p.last) {
          EXPECT_FALSE(last_start.contains(p.host)) << "two last parts";
          last_start[p.host] = p.window.start_ns;
        }
        newest[p.host] = std::max(newest[p.host], p.window.start_ns);
      }
      absl::StatusOr<WindowSummary> got =
          MergeHostWindowParts(of, Options().windower.top_bubbles_per_window);
      ASSERT_TRUE(got.ok()) << got.status();
      got->closed_by = w.closed_by;
      got->host_skew_ns = w.host_skew_ns;
      WindowSummary expected = w;
      std::string diff;
      EXPECT_TRUE(SameWindow(*got, expected, &diff)) << diff;
      EXPECT_EQ(got->window.devices.size(), w.window.devices.size());
    }
    // Each unit's stream ended (its end marker, or its idle timeout) with
    // its newest part, which says so.
    EXPECT_EQ(newest.size(), keys.size());
    EXPECT_EQ(last_start, newest);
  }
}

// A unit's batch with events in windows its watermark closed sends a late
// part (its counts by window, the batch's offset), and its end marker,
// coming when the watermark has closed every window (its last events are
// CPU ranges), a part that says the host ended (docs/semantics.md#split-
// jobs); each window part carries the host's newest event start.
TEST(SplitJobTask, LateEventsAndAnEndWithNoWindowLeftArePublished) {
  constexpr int64_t kMs = 1'000'000;
  constexpr int64_t kBase = 1'767'225'600'000'000'000;  // A window start.
  StreamProcessorOptions options = Options();
  options.windower.window_ns = 1'000 * kMs;
  options.windower.lateness_ns = 500 * kMs;
  ::bubblewatch::testing::TempDir dir;
  TaskDriver driver(options, dir.Sub("unit"));
  uint64_t sequence = 0;
  // Kernels (or CPU ranges) every 100 ms in [from, to) ms.
  auto send = [&](int64_t from, int64_t to, bool cpu, bool end) {
    Trace t;
    t.names = {"gemm"};
    for (int64_t at = from; at < to; at += 100) {
      if (cpu) {
        t.cpu.push_back(CpuEvent{.start_ns = kBase + at * kMs,
                                 .end_ns = kBase + at * kMs + kMs,
                                 .thread = 1});
      } else {
        t.gpu.push_back(GpuActivity{.start_ns = kBase + at * kMs,
                                    .end_ns = kBase + at * kMs + kMs});
      }
    }
    EventBatchEncoder encoder(&t);
    driver.Send("split-job@h",
                encoder.Encode(BatchHeader{.job = "split-job",
                                           .host = "h",
                                           .rank = 0,
                                           .world_size = 2,
                                           .producer_id = 1,
                                           .sequence = ++sequence,
                                           .end_of_stream = end},
                               0, t.gpu.size(), 0, t.cpu.size()));
  };
  send(0, 1'000, false, false);
  send(1'000, 2'000, false, false);
  send(2'000, 3'000, false, false);  // The watermark passes 2 s.
  send(250, 260, false, false);      // Late: offset 3, window 0.
  send(3'000, 5'000, true, false);   // CPU only: the watermark passes 4 s.
  send(0, 0, false, true);           // The end marker: no window left.
  ASSERT_TRUE(driver.RunUntilIdle().ok());
  EXPECT_EQ(driver.stats().late_events, 1);

  std::vector<HostWindowPart> parts;
  for (const MemoryRecord& r :
       driver.topics().topics[driver.options().parts_topic][0]) {
    absl::StatusOr<HostWindowPart> part = DecodeHostWindowPart(r.value);
    ASSERT_TRUE(part.ok()) << part.status();
    parts.push_back(*std::move(part));
  }
  ASSERT_GE(parts.size(), 4u);
  std::vector<HostWindowPart> late, end;
  for (const HostWindowPart& p : parts) {
    EXPECT_EQ(p.job, "split-job");
    EXPECT_EQ(p.host, "h");
    if (p.kind == HostWindowPart::Kind::kLate) late.push_back(p);
    if (p.kind == HostWindowPart::Kind::kEnd) end.push_back(p);
    if (p.kind == HostWindowPart::Kind::kWindow) {
      EXPECT_FALSE(p.last) << p.window.start_ns;
      ASSERT_TRUE(p.newest_start_ns.has_value()) << p.window.start_ns;
      EXPECT_GE(*p.newest_start_ns, p.window.end_ns + 500 * kMs);
    }
  }
  ASSERT_EQ(late.size(), 1u);
  EXPECT_EQ(late[0].late_offset, 3);
  EXPECT_EQ(late[0].late,
            (std::vector<HostWindowPart::Late>{
                {.window_start_ns = kBase, .events = 1, .collectives = 0}}));
  ASSERT_EQ(end.size(), 1u);
  EXPECT_TRUE(end[0].last);
  EXPECT_EQ(end[0].window.end_ns, kBase + 4'000 * kMs);
  EXPECT_EQ(parts.back().kind, HostWindowPart::Kind::kEnd);
}

// A key that names the batch's job then `@` makes a unit; any other key
// (none, the job itself, another job's) keeps the single stage.
TEST(SplitJobTask, OnlyAKeyOfTheBatchsJobMakesAUnit) {
  EXPECT_FALSE(SplitUnitOf("", "j").has_value());
  EXPECT_FALSE(SplitUnitOf("j", "j").has_value());
  EXPECT_FALSE(SplitUnitOf("j@", "j").has_value());
  EXPECT_FALSE(SplitUnitOf("k@h", "j").has_value());
  EXPECT_FALSE(SplitUnitOf("jj@h", "j").has_value());
  std::optional<SplitUnit> unit = SplitUnitOf("j@h@x", "j");
  ASSERT_TRUE(unit.has_value());
  EXPECT_EQ(unit->job, "j");
  EXPECT_EQ(unit->host, "h@x");
  unit = SplitUnitOf("a@b@h", "a@b");
  ASSERT_TRUE(unit.has_value());
  EXPECT_EQ(unit->host, "h");
}

}  // namespace
}  // namespace split_job_task_test
}  // namespace bubblewatch
