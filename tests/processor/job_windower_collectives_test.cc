// The windower's collective analysis against its oracle
// (docs/semantics.md#streaming-collectives): for a multi-rank job streamed
// through the windower, each stored window's ranks, stragglers and counts
// equal AnalyzeCollectives over the ranks' own traces cut into the same
// window (events starting in it), whatever the batching and interleaving.
#include <algorithm>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "analysis/collective_windows.h"
#include "analysis/collectives.h"
#include "analysis/rank_digest.h"
#include "analysis/window_accumulator.h"
#include "analysis/window_merge.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "ingest/batched_trace.h"
#include "ingest/synthetic/synthetic_parallel_job.h"
#include "ingest/synthetic/synthetic_straggler.h"
#include "ingest/trace_reader.h"
#include "processor/batch_validator.h"
#include "processor/job_windower.h"
#include "schemas/window_summary_codec.h"
#include "storage/window_queries.h"
#include "storage/window_store.h"
#include "tests/processor/windower_streams.h"
#include "tests/testing/temp_dir.h"

namespace bubblewatch {
namespace {

// The windowers here close their jobs as the idle timeout does.
constexpr WindowSummary::ClosedBy kIdleClose =
    WindowSummary::ClosedBy::kIdleTimeout;

// The shared stream helpers (tests/processor/windower_streams.h).
using Source = testing::StreamSource;
using testing::PipelineJobOptions;
using testing::WindowTraces;
std::vector<DecodedBatch> Batches(const std::vector<Source>& sources,
                                  int64_t max_events, uint32_t seed) {
  return testing::InterleavedBatches(sources, max_events, seed);
}
std::vector<WindowSummary> Stream(const std::vector<DecodedBatch>& batches,
                                  const WindowerOptions& options) {
  return testing::StreamWindows(batches, options);
}

// Checks one stored window against AnalyzeCollectives over the sources cut
// into it; adds 1 to `analyzed` when it holds a collective analysis.
void ExpectWindowEqualsTheOracle(const std::vector<Source>& sources,
                                 const WindowSummary& w, int* analyzed) {
  {
    SCOPED_TRACE(absl::StrCat("window ", w.window.start_ns));
    EXPECT_EQ(w.late_collectives, 0);
    std::vector<std::string> labels;
    const std::vector<Trace> cut =
        WindowTraces(sources, w.window.start_ns, w.window.end_ns, &labels);
    std::vector<RankInput> ranks = RanksOfTraces(cut, labels);
    int with_collectives = 0;
    for (const RankInput& r : ranks) {
      with_collectives += std::any_of(
          r.trace->collectives.begin(), r.trace->collectives.end(),
          [&](const CollectiveKernel& c) { return c.device == r.device; });
    }
    if (with_collectives < 2) {
      EXPECT_FALSE(w.collectives.has_value());
      return;
    }
    absl::StatusOr<CollectiveAnalysis> want =
        AnalyzeCollectives(ranks, WindowCollectiveOptions());
    ASSERT_TRUE(want.ok()) << want.status();
    ASSERT_TRUE(w.collectives.has_value()) << "no collective analysis stored";
    ++*analyzed;
    const WindowCollectives& got = *w.collectives;
    EXPECT_EQ(got.key, static_cast<uint8_t>(want->key));
    EXPECT_EQ(got.kernels, want->collective_kernels);
    EXPECT_EQ(got.matched, want->matched);
    EXPECT_EQ(got.unmatched, want->unmatched);
    EXPECT_EQ(got.unsynchronized, want->unsynchronized);
    EXPECT_EQ(got.used, want->used);
    EXPECT_EQ(got.unattributed, want->unattributed);
    EXPECT_EQ(got.seq_backwards, want->seq_backwards);
    EXPECT_EQ(got.seq_jumps, want->seq_jumps);
    ASSERT_EQ(got.ranks.size(), want->ranks.size());
    for (size_t i = 0; i < got.ranks.size(); ++i) {
      const RankWindow& g = got.ranks[i];
      const RankCollectiveStats& r = want->ranks[i];
      SCOPED_TRACE(absl::StrCat("rank ", r.rank));
      EXPECT_EQ(g.rank, r.rank);
      EXPECT_EQ(g.host, r.host);
      EXPECT_EQ(g.device, r.device);
      EXPECT_EQ(g.span_ns, r.stats.span_ns);
      EXPECT_EQ(g.compute_ns, r.stats.compute_ns);
      EXPECT_EQ(g.comm_ns, r.comm_ns);
      EXPECT_EQ(g.comm_exposed_ns, r.comm_exposed_ns);
      EXPECT_EQ(g.comm_wait_ns, r.comm_wait_ns);
      EXPECT_EQ(g.wait_caused_ns, r.wait_caused_ns);
      EXPECT_EQ(g.arrived_last, r.arrived_last);
      EXPECT_EQ(g.clock_offset_ns, r.clock_offset_ns);
      EXPECT_DOUBLE_EQ(g.busy_useful_utilization(),
                       r.busy_useful_utilization());
    }
    // Each rank's timeline (docs/state.md#rank-timelines): its totals per
    // state are the rank's stored figures, within what compaction merged
    // plus 1 us of rounding per segment.
    ASSERT_EQ(got.timelines.size(), got.ranks.size());
    for (size_t i = 0; i < got.ranks.size(); ++i) {
      const RankWindow& g = got.ranks[i];
      const RankTimeline& t = got.timelines[i];
      SCOPED_TRACE(absl::StrCat("timeline of rank ", g.rank));
      ASSERT_FALSE(t.segments.empty());
      EXPECT_LE(t.segments.size(), static_cast<size_t>(kMaxTimelineSegments));
      int64_t compute = 0, wait = 0, transfer = 0, bubble = 0, all = 0;
      for (const TimelineSegment& seg : t.segments) {
        const int64_t ns = int64_t{seg.us} * 1000;
        all += ns;
        switch (static_cast<TimelineState>(seg.state)) {
          case TimelineState::kCompute:
            compute += ns;
            break;
          case TimelineState::kWait:
            wait += ns;
            break;
          case TimelineState::kTransfer:
            transfer += ns;
            break;
          default:
            bubble += ns;
        }
      }
      const int64_t slack = int64_t{t.merged_us} * 1000 +
                            static_cast<int64_t>(t.segments.size()) * 1000 +
                            1000;
      EXPECT_NEAR(all, g.span_ns, 1000);
      EXPECT_NEAR(compute, g.compute_ns - g.comm_exposed_ns, slack);
      EXPECT_NEAR(wait, g.comm_wait_ns, slack);
      EXPECT_NEAR(transfer, g.comm_exposed_ns - g.comm_wait_ns, slack);
      EXPECT_NEAR(bubble, g.span_ns - g.compute_ns, slack);
    }
    ASSERT_EQ(got.stragglers.size(), want->stragglers.size());
    for (size_t i = 0; i < got.stragglers.size(); ++i) {
      const StragglerWindow& g = got.stragglers[i];
      const Straggler& s = want->stragglers[i];
      EXPECT_EQ(g.rank, s.rank);
      EXPECT_EQ(g.wait_caused_ns, s.wait_caused_ns);
      EXPECT_EQ(g.arrived_last, s.arrived_last);
      EXPECT_EQ(g.compute_ns, s.compute_ns);
      EXPECT_EQ(g.comm_ns, s.comm_ns);
      EXPECT_EQ(g.causes, s.causes);
      EXPECT_EQ(g.unattributed_ns, s.unattributed_ns);
    }
    // What is stored round-trips.
    absl::StatusOr<WindowSummary> decoded =
        DecodeWindowSummary(EncodeWindowSummary(w));
    ASSERT_TRUE(decoded.ok()) << decoded.status();
    std::string diff;
    EXPECT_TRUE(SameWindow(*decoded, w, &diff)) << diff;
  }
}

// Every window against the oracle; returns how many hold an analysis.
int ExpectWindowsEqualTheOracle(const std::vector<Source>& sources,
                                const std::vector<WindowSummary>& windows) {
  int analyzed = 0;
  for (const WindowSummary& w : windows) {
    ExpectWindowEqualsTheOracle(sources, w, &analyzed);
  }
  return analyzed;
}

StragglerJobOptions Job(int ranks, int ranks_per_host, int steps,
                        int late_rank) {
  StragglerJobOptions o;
  o.ranks = ranks;
  o.ranks_per_host = ranks_per_host;
  o.steps = steps;
  o.late_rank = late_rank;
  return o;
}

std::vector<Source> StragglerSources(const StragglerJobOptions& options,
                                     StragglerTruth* truth = nullptr) {
  StragglerJob job = MakeStragglerJob(options);
  if (truth != nullptr) *truth = job.truth;
  std::vector<Source> sources;
  for (Trace& t : job.ranks) {
    Source s;
    s.host = t.host;
    s.rank = t.rank;
    s.trace = std::move(t);
    sources.push_back(std::move(s));
  }
  return sources;
}

TEST(JobWindowerCollectives, StragglerWindowsEqualTheOfflineOracle) {
  for (StragglerCause cause :
       {StragglerCause::kDataLoading, StragglerCause::kHostSync,
        StragglerCause::kCompute}) {
    SCOPED_TRACE(StragglerCauseName(cause));
    // Two hosts of two ranks, their clocks 3 ms apart; the straggler comes
    // and goes.
    StragglerJobOptions job = Job(4, 2, 300, 2);
    job.late_from_step = 60;
    job.late_until_step = 200;
    job.cause = cause;
    job.host_skew_ns = {0, 3'000'000};
    job.seed = static_cast<uint64_t>(cause) + 1;
    StragglerTruth truth;
    std::vector<Source> sources = StragglerSources(job, &truth);
    // Short windows: many of them, each checked against the oracle.
    WindowerOptions options;
    options.window_ns = 100'000'000;
    options.lateness_ns = 30'000'000;
    std::vector<WindowSummary> windows =
        Stream(Batches(sources, 200, static_cast<uint32_t>(cause)), options);
    ASSERT_GT(windows.size(), 15u);
    const int analyzed = ExpectWindowsEqualTheOracle(sources, windows);
    EXPECT_GE(analyzed, static_cast<int>(windows.size()) - 1);
    // 1 s windows: the planted rank and cause carry at least 95 % of the
    // planted wait (each window loses its first instance, which has no
    // earlier sync point in the window).
    options.window_ns = 1'000'000'000;
    windows =
        Stream(Batches(sources, 200, static_cast<uint32_t>(cause)), options);
    EXPECT_GE(ExpectWindowsEqualTheOracle(sources, windows), 2);
    int64_t blamed = 0;
    for (const WindowSummary& w : windows) {
      if (!w.collectives) continue;
      for (const StragglerWindow& s : w.collectives->stragglers) {
        if (s.rank != truth.late_rank) continue;
        switch (cause) {
          case StragglerCause::kDataLoading:
            blamed += s.causes[static_cast<int>(BubbleCause::kDataLoading)];
            break;
          case StragglerCause::kHostSync:
            blamed += s.causes[static_cast<int>(BubbleCause::kHostSync)];
            break;
          case StragglerCause::kCompute:
            blamed += s.compute_ns;
            break;
        }
      }
    }
    EXPECT_GE(static_cast<double>(blamed),
              0.95 * static_cast<double>(truth.planted_wait_ns));
  }
}

// Through the store: the windows of a straggler job, committed and read back
// by QueryJob, name the planted rank first among the period's stragglers
// with the planted cause carrying >= 95 % of the planted wait; each rank's
// period figures are the sums of its windows'.
TEST(JobWindowerCollectives, QueryJobNamesThePlantedStragglerAndCause) {
  StragglerJobOptions job = Job(4, 2, 400, 3);
  job.late_from_step = 100;
  job.late_until_step = 300;
  job.cause = StragglerCause::kHostSync;
  job.host_skew_ns = {0, -4'000'000};
  StragglerTruth truth;
  std::vector<Source> sources = StragglerSources(job, &truth);
  WindowerOptions options;
  options.window_ns = 1'000'000'000;
  options.lateness_ns = 100'000'000;
  std::vector<WindowSummary> windows =
      Stream(Batches(sources, 300, /*seed=*/9), options);
  ASSERT_GE(windows.size(), 3u);
  testing::TempDir dir;
  absl::StatusOr<std::unique_ptr<WindowStore>> store =
      OpenRocksDbWindowStore(dir.path());
  ASSERT_TRUE(store.ok()) << store.status();
  StoreBatch batch;
  batch.windows = windows;
  batch.jobs.push_back(JobUpdate{.job = "job",
                                 .last_event_ns = truth.end_ns,
                                 .last_seen_wall = absl::Now()});
  ASSERT_TRUE((*store)->Commit(batch).ok());
  absl::StatusOr<JobReport> report =
      QueryJob(**store, "job", JobPeriod::Last(absl::Hours(1)));
  ASSERT_TRUE(report.ok()) << report.status();
  ASSERT_EQ(report->windows.size(), windows.size());
  ASSERT_TRUE(report->collectives.has_value());
  const WindowCollectives& period = *report->collectives;
  ASSERT_FALSE(period.stragglers.empty());
  EXPECT_EQ(period.stragglers[0].rank, truth.late_rank);
  const int64_t host_sync =
      period.stragglers[0].causes[static_cast<int>(BubbleCause::kHostSync)];
  EXPECT_GE(static_cast<double>(host_sync),
            0.95 * static_cast<double>(truth.planted_wait_ns));
  ASSERT_EQ(period.ranks.size(), 4u);
  for (const RankWindow& r : period.ranks) {
    int64_t wait = 0;
    int64_t caused = 0;
    for (const WindowSummary& w : windows) {
      if (!w.collectives) continue;
      for (const RankWindow& x : w.collectives->ranks) {
        if (x.rank != r.rank) continue;
        wait += x.comm_wait_ns;
        caused += x.wait_caused_ns;
      }
    }
    EXPECT_EQ(r.comm_wait_ns, wait) << "rank " << r.rank;
    EXPECT_EQ(r.wait_caused_ns, caused) << "rank " << r.rank;
    EXPECT_EQ(r.host, sources[r.rank].host);
  }
  // The late rank waits least and causes the wait of the others.
  EXPECT_GT(period.ranks[truth.late_rank].wait_caused_ns,
            period.ranks[0].wait_caused_ns);
}

// Bad input: two hosts claiming one rank. The windows are stored without a
// collective analysis, each counted with the reason; nothing crashes.
TEST(JobWindowerCollectives, ARankClaimedByTwoHostsIsCountedNotAnalyzed) {
  std::vector<Source> sources = StragglerSources(Job(2, 1, 100, 1));
  sources[1].rank = 0;  // Host 1 says it is rank 0 too.
  WindowerOptions options;
  options.window_ns = 100'000'000;
  options.lateness_ns = 30'000'000;
  JobWindower windower("job", options);
  const absl::Time now = absl::UnixEpoch();
  int64_t offset = 0;
  size_t windows = 0;
  for (const DecodedBatch& b : Batches(sources, 200, 1)) {
    windower.Add(b, offset++, /*replay=*/false, now);
    for (const WindowSummary& w : windower.FinalizeReady(now, absl::Hours(1))) {
      EXPECT_FALSE(w.collectives.has_value());
      ++windows;
    }
  }
  for (const WindowSummary& w : windower.FinalizeAll(kIdleClose)) {
    EXPECT_FALSE(w.collectives.has_value());
    ++windows;
  }
  ASSERT_GT(windows, 3u);
  std::string reason;
  EXPECT_EQ(windower.TakeCollectiveErrors(&reason),
            static_cast<int64_t>(windows));
  EXPECT_THAT(reason, ::testing::HasSubstr("rank 0 appears twice"));
  EXPECT_EQ(windower.TakeCollectiveErrors(), 0);
  EXPECT_EQ(windower.collective_errors(), static_cast<int64_t>(windows));
}

// The windows of `sources` as the windower stores them, without requiring
// every window to be analyzed; `errors` gets collective_errors() and
// `reason` the last refusal's reason.
std::vector<WindowSummary> StreamCountingErrors(
    const std::vector<Source>& sources, const WindowerOptions& options,
    int64_t* errors, std::string* reason) {
  JobWindower windower("job", options);
  std::vector<WindowSummary> out;
  const absl::Time now = absl::UnixEpoch();
  int64_t offset = 0;
  // Batches of 50 events (about 10 ms of a 2-rank job): none arrives
  // after the lateness.
  for (const DecodedBatch& b : Batches(sources, 50, 1)) {
    EXPECT_EQ(windower.Add(b, offset++, /*replay=*/false, now), 0);
    for (WindowSummary& w : windower.FinalizeReady(now, absl::Hours(1))) {
      out.push_back(std::move(w));
    }
  }
  for (WindowSummary& w : windower.FinalizeAll(kIdleClose))
    out.push_back(std::move(w));
  *errors = windower.collective_errors();
  windower.TakeCollectiveErrors(reason);
  return out;
}

struct Counts {
  int64_t matched = 0;
  int64_t unmatched = 0;
  int64_t seq_backwards = 0;
  int64_t seq_jumps = 0;
};

Counts Sum(const std::vector<WindowSummary>& windows) {
  Counts c;
  for (const WindowSummary& w : windows) {
    if (!w.collectives) continue;
    c.matched += w.collectives->matched;
    c.unmatched += w.collectives->unmatched;
    c.seq_backwards += w.collectives->seq_backwards;
    c.seq_jumps += w.collectives->seq_jumps;
  }
  return c;
}

WindowerOptions ShortWindows() {
  WindowerOptions options;
  options.window_ns = 100'000'000;
  options.lateness_ns = 30'000'000;
  return options;
}

// Bad input: a collective seen on one rank only (rank 1 lost one all-reduce
// kernel, record and all). Its instance is counted unmatched, once, and not
// used; the windows still equal the oracle; nothing is refused.
TEST(JobWindowerCollectives, ACollectiveSeenOnOneRankOnlyIsCountedUnmatched) {
  std::vector<Source> sources = StragglerSources(Job(2, 1, 100, 1));
  const WindowerOptions options = ShortWindows();
  int64_t errors = -1;
  std::string reason;
  const Counts before =
      Sum(StreamCountingErrors(sources, options, &errors, &reason));
  ASSERT_EQ(errors, 0) << reason;
  // An instance in the middle of a window on both ranks (instances cut by a
  // window's start are unmatched already).
  Trace& t = sources[1].trace;
  size_t drop = t.collectives.size() / 2;
  auto window_of = [&](int64_t ns) { return ns / options.window_ns; };
  auto inside = [&](const CollectiveKernel& c) {
    for (const CollectiveKernel& other : sources[0].trace.collectives) {
      if (other.seq == c.seq) {
        return window_of(other.start_ns) == window_of(c.start_ns);
      }
    }
    return false;
  };
  while (drop < t.collectives.size() && !inside(t.collectives[drop])) ++drop;
  ASSERT_LT(drop, t.collectives.size());
  const CollectiveKernel gone = t.collectives[drop];
  t.collectives.erase(t.collectives.begin() + static_cast<ptrdiff_t>(drop));
  std::erase_if(t.gpu, [&](const GpuActivity& a) {
    return a.start_ns == gone.start_ns && a.end_ns == gone.end_ns &&
           a.device == gone.device;
  });

  std::vector<WindowSummary> windows =
      StreamCountingErrors(sources, options, &errors, &reason);
  EXPECT_EQ(errors, 0) << reason;
  ExpectWindowsEqualTheOracle(sources, windows);
  const Counts after = Sum(windows);
  EXPECT_EQ(after.unmatched, before.unmatched + 1);
  EXPECT_EQ(after.matched, before.matched - 1);
}

// Bad input: sequence numbers that jump. Rank 1's Seq leaps ahead by a
// million from its 40th all-reduce on (and its last is INT64_MAX), and one
// after the 50th goes back. The instances no longer meet their partners:
// counted unmatched; the jumps counted in seq_jumps; the backward one counted
// in seq_backwards and skipped; the windows equal the oracle; nothing is
// refused.
TEST(JobWindowerCollectives, SequenceNumbersThatJumpAreCountedNotUsed) {
  std::vector<Source> sources = StragglerSources(Job(2, 1, 100, 1));
  const WindowerOptions options = ShortWindows();
  int64_t errors = -1;
  std::string reason;
  const Counts before =
      Sum(StreamCountingErrors(sources, options, &errors, &reason));
  std::vector<CollectiveKernel>& c = sources[1].trace.collectives;
  ASSERT_GT(c.size(), 60u);
  std::sort(c.begin(), c.end(), [](const auto& a, const auto& b) {
    return a.start_ns < b.start_ns;
  });
  for (size_t i = 40; i < c.size(); ++i) c[i].seq += 1'000'000;
  // Not after the previous one, in the same window: backwards.
  size_t back = 50;
  while (back < c.size() && c[back].start_ns / options.window_ns !=
                                c[back - 1].start_ns / options.window_ns) {
    ++back;
  }
  ASSERT_LT(back, c.size() - 1);
  c[back].seq = c[back - 1].seq;
  c.back().seq = INT64_MAX;

  std::vector<WindowSummary> windows =
      StreamCountingErrors(sources, options, &errors, &reason);
  EXPECT_EQ(errors, 0) << reason;
  ExpectWindowsEqualTheOracle(sources, windows);
  const Counts after = Sum(windows);
  EXPECT_EQ(before.seq_backwards, 0);
  EXPECT_EQ(after.seq_backwards, 1);
  // The jumps have a count of their own: at most the leap of the 40th, the
  // one after the skipped backward kernel, and the last (each only when
  // the kernel before it is in the same window).
  EXPECT_EQ(before.seq_jumps, 0);
  EXPECT_GE(after.seq_jumps, 1);
  EXPECT_LE(after.seq_jumps, 3);
  // Of the last 60 instances at most a few were matched (none after the
  // jump); each is now unmatched on both ranks' sides.
  EXPECT_LE(after.matched, before.matched - 50);
  EXPECT_GE(after.unmatched, before.unmatched + 100);
}

// Bad input: two ranks disagree on the size of their process group. The
// window holding the bad record is stored without a collective analysis,
// counted with the reason; the other windows are analyzed as before.
TEST(JobWindowerCollectives, GroupSizesThatDisagreeAreCountedNotAnalyzed) {
  std::vector<Source> sources = StragglerSources(Job(2, 1, 100, 1));
  const WindowerOptions options = ShortWindows();
  std::vector<CollectiveKernel>& c = sources[1].trace.collectives;
  ASSERT_GT(c.size(), 50u);
  ASSERT_EQ(c[50].group_size, 2);
  c[50].group_size = 3;  // Rank 0 says 2.
  const int64_t bad_window = c[50].start_ns / options.window_ns;

  int64_t errors = -1;
  std::string reason;
  std::vector<WindowSummary> windows =
      StreamCountingErrors(sources, options, &errors, &reason);
  EXPECT_EQ(errors, 1);
  EXPECT_THAT(reason, ::testing::HasSubstr(
                          "group size disagrees in process group '0': rank 0 "
                          "says 2"));
  EXPECT_THAT(reason, ::testing::HasSubstr("rank 1 says 3"));
  int analyzed = 0;
  for (const WindowSummary& w : windows) {
    if (w.window.start_ns / options.window_ns == bad_window) {
      EXPECT_FALSE(w.collectives.has_value());
      continue;
    }
    ExpectWindowEqualsTheOracle(sources, w, &analyzed);
  }
  EXPECT_GT(analyzed, 5);
}

TEST(JobWindowerCollectives, StoredKeyNamesAreTheAnalyzersNames) {
  for (CollectiveKey key :
       {CollectiveKey::kProcessGroupSeq, CollectiveKey::kProcessGroupOrder,
        CollectiveKey::kStreamOrder}) {
    EXPECT_EQ(WindowCollectiveKeyName(static_cast<uint8_t>(key)),
              CollectiveKeyName(key));
  }
}

TEST(JobWindowerCollectives, SingleRankJobsStoreNoCollectives) {
  std::vector<Source> sources = StragglerSources(Job(2, 2, 100, 1));
  sources.resize(1);  // One rank of the job: nothing to match with.
  WindowerOptions options;
  options.window_ns = 100'000'000;
  options.lateness_ns = 30'000'000;
  std::vector<WindowSummary> windows = Stream(Batches(sources, 50, 1), options);
  ASSERT_GT(windows.size(), 3u);
  for (const WindowSummary& w : windows) {
    EXPECT_FALSE(w.collectives.has_value()) << w.window.start_ns;
  }
}

TEST(JobWindowerCollectives, LateCollectiveRecordsAreCountedNotUsed) {
  std::vector<Source> sources = StragglerSources(Job(2, 1, 100, 1));
  WindowerOptions options;
  options.window_ns = 100'000'000;
  options.lateness_ns = 30'000'000;
  std::vector<DecodedBatch> batches = Batches(sources, 200, 1);
  // Rank 1's first batch holding a collective record arrives after
  // everything else.
  auto held = std::find_if(batches.begin(), batches.end(), [](const auto& b) {
    return b.header.rank == 1 && !b.trace.collectives.empty();
  });
  ASSERT_NE(held, batches.end());
  DecodedBatch late = *held;
  batches.erase(held);
  JobWindower windower("job", options);
  const absl::Time now = absl::UnixEpoch();
  int64_t offset = 0;
  std::vector<WindowSummary> windows;
  for (const DecodedBatch& b : batches) {
    windower.Add(b, offset++, /*replay=*/false, now);
    for (WindowSummary& w : windower.FinalizeReady(now, absl::Hours(1)))
      windows.push_back(std::move(w));
  }
  ASSERT_FALSE(windows.empty());
  const int64_t window =
      WindowStartOf(late.trace.collectives.front().start_ns, options.window_ns);
  ASSERT_LT(window, windower.finalized_through_ns());
  windower.Add(late, offset++, /*replay=*/false, now);
  absl::flat_hash_map<int64_t, int64_t> counts =
      windower.TakeLateCollectiveCounts();
  int64_t in_window = 0;
  for (const CollectiveKernel& c : late.trace.collectives) {
    in_window += WindowStartOf(c.start_ns, options.window_ns) == window;
  }
  EXPECT_EQ(counts[window], in_window);
  // Not again on replay.
  windower.Add(late, offset - 1, /*replay=*/true, now);
  EXPECT_TRUE(windower.TakeLateCollectiveCounts().empty());
}

// Effectively once: a windower restored from the finalized edge after any
// batch, replaying from its resume offset, stores the same windows,
// collective analyses included (the root blame, saved time, clocks and
// what-if too: byte for byte once encoded), as one that never stopped; and a
// replay counts no late collective records again.
TEST(JobWindowerCollectives, RestartsAtEveryBatchGiveTheUninterruptedWindows) {
  StragglerJobOptions job = Job(3, 2, 120, 1);
  job.host_skew_ns = {0, 2'000'000};
  std::vector<DecodedBatch> batches =
      Batches(StragglerSources(job), 150, /*seed=*/5);
  WindowerOptions options;
  options.window_ns = 100'000'000;
  options.lateness_ns = 30'000'000;
  const absl::Time now = absl::UnixEpoch();
  auto feed = [&](JobWindower& w, size_t from, size_t to, bool replay) {
    std::vector<WindowSummary> out;
    for (size_t i = from; i < to; ++i) {
      w.Add(batches[i], static_cast<int64_t>(i), replay, now);
      for (WindowSummary& s : w.FinalizeReady(now, absl::Hours(1)))
        out.push_back(std::move(s));
    }
    return out;
  };
  JobWindower live("job", options);
  std::vector<std::vector<WindowSummary>> live_after(batches.size());
  for (size_t i = 0; i < batches.size(); ++i) {
    live_after[i] = feed(live, i, i + 1, false);
  }
  const std::vector<WindowSummary> live_idle = live.FinalizeAll(kIdleClose);
  int with_collectives = 0;
  int with_root_blame = 0;  // A straggler with its host and saved time.
  int with_clock = 0;       // A rank on a corrected clock.
  int with_what_if = 0;
  for (const auto& ws : live_after) {
    for (const WindowSummary& w : ws) {
      with_collectives += w.collectives.has_value();
      if (!w.collectives) continue;
      const WindowCollectives& c = *w.collectives;
      with_what_if += c.job_ns >= 0;
      with_root_blame += !c.stragglers.empty() &&
                         !c.stragglers.front().host.empty() &&
                         c.stragglers.front().saved_ns >= 0 &&
                         c.stragglers.front().direct_wait_caused_ns > 0;
      for (const RankWindow& r : c.ranks) {
        if (r.clock_corrected) {
          ++with_clock;
          break;
        }
      }
      // What the store and the topic hold reads back as it was.
      absl::StatusOr<WindowSummary> back =
          DecodeWindowSummary(EncodeWindowSummary(w));
      ASSERT_TRUE(back.ok()) << back.status();
      std::string diff;
      EXPECT_TRUE(SameWindow(*back, w, &diff)) << diff;
    }
  }
  ASSERT_GT(with_collectives, 5);
  EXPECT_GT(with_root_blame, 0);
  EXPECT_GT(with_clock, 0);
  EXPECT_GT(with_what_if, 0);
  JobWindower before("job", options);
  for (size_t cut = 0; cut + 1 < batches.size(); ++cut) {
    SCOPED_TRACE(absl::StrCat("cut ", cut));
    feed(before, cut, cut + 1, false);
    if (!before.ResumeOffset()) continue;
    JobWindower restored("job", options);
    restored.RestoreFinalizedThrough(before.finalized_through_ns());
    EXPECT_TRUE(feed(restored, static_cast<size_t>(*before.ResumeOffset()),
                     cut + 1, /*replay=*/true)
                    .empty());
    EXPECT_EQ(restored.buffered_collectives(), before.buffered_collectives());
    EXPECT_TRUE(restored.TakeLateCollectiveCounts().empty());
    std::vector<WindowSummary> got =
        feed(restored, cut + 1, batches.size(), false);
    for (WindowSummary& w : restored.FinalizeAll(kIdleClose))
      got.push_back(std::move(w));
    std::vector<WindowSummary> want;
    for (size_t i = cut + 1; i < batches.size(); ++i) {
      want.insert(want.end(), live_after[i].begin(), live_after[i].end());
    }
    want.insert(want.end(), live_idle.begin(), live_idle.end());
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < got.size(); ++i) {
      // Host skew is measured on wall time and hosts seen since the start
      // (not part of the guarantee, as for the bubble windows).
      got[i].host_skew_ns = want[i].host_skew_ns;
      std::string diff;
      EXPECT_TRUE(SameWindow(got[i], want[i], &diff)) << diff;
      EXPECT_EQ(EncodeWindowSummary(got[i]), EncodeWindowSummary(want[i]));
    }
  }
}

// The real two-GPU Nsight Systems export (one source, two devices: the
// ranks are its devices) and the two sampled ranks of a 128-rank job (two
// sources), streamed: the same as the offline analysis of each window.
TEST(JobWindowerCollectives, RealPairsEqualTheOfflineOracle) {
  auto read = [](const std::string& relative) {
    absl::StatusOr<Trace> t = ReadTraceFile(
        absl::StrCat(BUBBLEWATCH_TESTDATA_DIR, "/real/", relative),
        TraceReadOptions{});
    EXPECT_TRUE(t.ok()) << relative << ": " << t.status();
    return t.ok() ? *std::move(t) : Trace{};
  };
  std::vector<std::vector<Source>> jobs(2);
  jobs[0].push_back(
      {.trace = read("nsys/mfu_2gpu_before.sqlite"), .host = "node"});
  for (int r = 0; r < 2; ++r) {
    Trace t = read(absl::StrCat("hta/sampled_rank-", r, ".json.gz"));
    const int32_t rank = t.rank;
    jobs[1].push_back(
        {.trace = std::move(t), .host = absl::StrCat("h", r), .rank = rank});
  }
  for (std::vector<Source>& sources : jobs) {
    // Windows a quarter of the job's span, lateness one window: every event
    // is in time however the streams interleave.
    int64_t first = INT64_MAX;
    int64_t last = INT64_MIN;
    for (const Source& s : sources) {
      for (const GpuActivity& a : s.trace.gpu) {
        first = std::min(first, a.start_ns);
        last = std::max(last, a.end_ns);
      }
    }
    ASSERT_LT(first, last);
    WindowerOptions options;
    options.window_ns = std::max<int64_t>(1'000'000, (last - first) / 4);
    options.lateness_ns = options.window_ns;
    options.max_launch_lead_ns = options.window_ns;
    std::vector<WindowSummary> windows =
        Stream(Batches(sources, 500, 7), options);
    EXPECT_GE(ExpectWindowsEqualTheOracle(sources, windows), 1);
  }
}

// A pipeline-parallel job as Megatron sets it up (docs/semantics.md,
// "Point-to-point pairs"): send/recv name the group of all PP stages and a
// Seq that repeats, so only each kernel's peer (`Dst Rank`/`Src Rank`, sent
// as EventBatch.collective_peers) tells the pair. Streamed one file per rank
// with no host names and host clocks milliseconds apart, the windows pair
// every send with its recv exactly as the offline analysis of the same
// files does, put every clock on rank 0's, and name the planted rank.
// `cut`: the job starts at a window's start, so that the clocks put some
// ranks' first kernels in the window before: a pair whose two ends fall in
// different windows must not shift the pairs after it (the producer numbers
// them over the whole stream: docs/semantics.md#streaming-collectives).
TEST(JobWindowerCollectives, PipelineGroupPairsEqualTheOfflineOracle) {
  for (bool cut : {false, true}) {
    SCOPED_TRACE(cut ? "cut by a window's start" : "in one window");
    ParallelJobOptions o = PipelineJobOptions();
    o.roots = {{.rank = 9, .step = 4, .extra_ns = 8'000'000, .steps = 4}};
    o.start_time_ns = kDefaultSyntheticStartNs + (cut ? 0 : 100'000'000);
    ParallelJob job = MakeParallelJob(o);
    std::vector<Source> sources;
    for (Trace& t : job.ranks) {
      const int32_t rank = t.rank;
      sources.push_back({.trace = std::move(t), .rank = rank});
    }
    WindowerOptions options;
    options.window_ns = 1'000'000'000;
    options.lateness_ns = 100'000'000;
    std::vector<WindowSummary> windows =
        Stream(Batches(sources, 300, 3), options);
    ASSERT_EQ(windows.size(), cut ? 2u : 1u);
    EXPECT_EQ(ExpectWindowsEqualTheOracle(sources, windows), cut ? 2 : 1);
    const WindowCollectives& c = *windows.back().collectives;
    // 12 steps: per step 8 TP all-gathers (one per host), 8 DP all-reduces
    // (one per (t, p)) and 24 pairs (3 stage boundaries × 2 directions × 4
    // (t, d) replicas). Cut: the first window holds a few ranks' first
    // kernels, all unmatched; their instances are unmatched in the second
    // window too, and every other instance is matched.
    const int64_t split =
        cut ? windows.front().collectives->unmatched : int64_t{0};
    EXPECT_EQ(windows.front().collectives->matched, cut ? 0 : c.matched);
    EXPECT_EQ(c.matched + split, 12 * (8 + 8 + 24));
    EXPECT_EQ(c.unmatched, split);
    EXPECT_EQ(c.unsynchronized, 0);
    for (const RankWindow& r : c.ranks) {
      EXPECT_TRUE(r.clock_connected) << "rank " << r.rank;
    }
    ASSERT_FALSE(c.stragglers.empty());
    EXPECT_EQ(c.stragglers[0].rank, 9);
  }
}

// A job split across processors (docs/architecture.md#one-job-across-
// processors): each host's events windowed alone, as a stage 1 that owns
// only that host would, and its ranks digested; the hosts' parts merged
// (analysis/window_merge.h) give the window one windower holding every
// host's events makes, every field, the ranks' timelines included (each
// part carries its ranks' TimelineParts). A TP×DP×PP job, clocks milliseconds
// apart and drifting, roots planted; with hosts (two ranks each), and without
// (each rank its own part, as a split keys JOB@rank-R).
TEST(JobWindowerCollectives, HostPartsMergeIntoTheSingleStageWindow) {
  for (bool host_names : {true, false}) {
    SCOPED_TRACE(host_names ? "8 hosts of 2 ranks" : "16 ranks, no hosts");
    ParallelJob job = MakeParallelJob(testing::SplitJobOptions(host_names));
    std::vector<Source> sources;
    std::vector<std::string> parts_of;  // The part each source belongs to.
    for (Trace& t : job.ranks) {
      const int32_t rank = t.rank;
      const std::string host = t.host;
      parts_of.push_back(host_names ? host : absl::StrCat("rank-", rank));
      sources.push_back({.trace = std::move(t), .host = host, .rank = rank});
    }
    WindowerOptions options;
    // Several windows, each cutting steps, so that instances, pairs and
    // gaps cross window starts.
    options.window_ns = 40'000'000;
    options.lateness_ns = 1'000'000'000;
    const std::vector<WindowSummary> single =
        Stream(Batches(sources, 300, 5), options);
    ASSERT_GE(single.size(), 5u);

    // Stage 1: one windower per part, and each part's ranks digested per
    // window as the windower cuts them.
    std::vector<std::string> part_names = parts_of;
    std::sort(part_names.begin(), part_names.end());
    part_names.erase(std::unique(part_names.begin(), part_names.end()),
                     part_names.end());
    ASSERT_EQ(part_names.size(), host_names ? 8u : 16u);
    absl::flat_hash_map<int64_t, std::vector<HostWindowPart>> parts;
    for (const std::string& name : part_names) {
      std::vector<Source> own;
      for (size_t i = 0; i < sources.size(); ++i) {
        if (parts_of[i] == name) own.push_back(sources[i]);
      }
      const std::vector<DecodedBatch> batches = Batches(own, 300, 5);
      // The part's observations, as its windower's observed set holds them.
      std::vector<Interval> observations;
      for (const DecodedBatch& b : batches) {
        ASSERT_TRUE(b.header.observation.has_value());
        observations.push_back(
            {b.header.observation->start_ns, b.header.observation->end_ns});
      }
      const IntervalSet observed =
          IntervalSet::FromIntervals(std::move(observations));
      for (WindowSummary& w : Stream(batches, options)) {
        HostWindowPart part{.job = "job",
                            .host = name,
                            .window = w.window,
                            .gpu_events = w.gpu_events,
                            .cpu_events = w.cpu_events,
                            .observed = observed};
        std::vector<std::string> labels;
        const std::vector<Trace> traces =
            WindowTraces(own, w.window.start_ns, w.window.end_ns, &labels);
        const std::vector<RankInput> ranks = RanksOfTraces(traces, labels);
        for (const RankInput& r : ranks) {
          // As JobWindower::MakePart: the digest, and the timeline's part.
          AnalyzerOptions analyzer;
          analyzer.top_bubbles = 0;
          const absl::Status s = DigestRanksInto({r}, analyzer, part);
          ASSERT_TRUE(s.ok()) << s;
        }
        ASSERT_EQ(part.timelines.size(), part.digests.size());
        // Through the wire, as a part travels to stage 2.
        const std::string bytes = EncodeHostWindowPart(part);
        absl::StatusOr<HostWindowPart> decoded = DecodeHostWindowPart(bytes);
        ASSERT_TRUE(decoded.ok()) << decoded.status();
        EXPECT_EQ(EncodeHostWindowPart(*decoded), bytes);
        parts[w.window.start_ns].push_back(*std::move(decoded));
      }
    }

    // Stage 2: every window of the single stage, and no other.
    ASSERT_EQ(parts.size(), single.size());
    int with_collectives = 0;
    for (const WindowSummary& want : single) {
      SCOPED_TRACE(absl::StrCat("window ", want.window.start_ns));
      ASSERT_TRUE(parts.contains(want.window.start_ns));
      absl::StatusOr<WindowSummary> got = MergeHostWindowParts(
          parts[want.window.start_ns], options.top_bubbles_per_window);
      ASSERT_TRUE(got.ok()) << got.status();
      // What the single stage knows and a part does not (the merge leaves
      // them to its caller): why the window closed, and the spread of the
      // hosts' newest events at that moment.
      got->closed_by = want.closed_by;
      got->host_skew_ns = want.host_skew_ns;
      WindowSummary expected = want;
      if (expected.collectives) {
        ++with_collectives;
        // The ranks' timelines too (stage 1 sent its share of each).
        EXPECT_FALSE(expected.collectives->timelines.empty());
      }
      std::string diff;
      EXPECT_TRUE(SameWindow(*got, expected, &diff)) << diff;
      // The merge is no copy of one part: a window's devices come from
      // every part that had events in it.
      EXPECT_EQ(got->window.devices.size(), want.window.devices.size());
    }
    EXPECT_GE(with_collectives, static_cast<int>(single.size()) - 1);
    // The planted root is named first where it ran late. Without hosts
    // each rank is its own clock domain, and a 40 ms window of the slowed
    // steps holds two TP all-gathers of a pair of ranks, fewer than a clock
    // link needs (CollectiveOptions::min_clock_instances): what matters
    // there is only that both stages agree.
    if (!host_names) continue;
    bool root_named = false;
    for (const WindowSummary& w : single) {
      if (w.collectives && !w.collectives->stragglers.empty() &&
          w.collectives->stragglers[0].rank == 9) {
        root_named = true;
      }
    }
    EXPECT_TRUE(root_named);
  }
}

// The ranks of a job sent without host names (docs/semantics.md#multi-device,
// "Ranks in the stream"): each rank's trace, numbered by its own process (both
// real files start their correlation ids and threads alike), is its own
// device in the job's windows, with the figures it has streamed alone.
TEST(JobWindowerCollectives, RanksKeepTheirOwnDevicesAndIds) {
  std::vector<Source> ranks;
  for (int r = 0; r < 2; ++r) {
    absl::StatusOr<Trace> t =
        ReadTraceFile(absl::StrCat(BUBBLEWATCH_TESTDATA_DIR,
                                   "/real/hta/sampled_rank-", r, ".json.gz"),
                      TraceReadOptions{});
    ASSERT_TRUE(t.ok()) << t.status();
    // Both on device 0, as two hosts' first GPUs are.
    for (GpuActivity& a : t->gpu) a.device = 0;
    for (CollectiveKernel& c : t->collectives) c.device = 0;
    const int32_t rank = t->rank;
    ASSERT_EQ(rank, r);
    ranks.push_back({.trace = *std::move(t), .rank = rank});
  }
  int64_t first = INT64_MAX;
  int64_t last = INT64_MIN;
  for (const Source& s : ranks) {
    for (const GpuActivity& a : s.trace.gpu) {
      first = std::min(first, a.start_ns);
      last = std::max(last, a.end_ns);
    }
  }
  WindowerOptions options;
  options.window_ns = std::max<int64_t>(1'000'000, (last - first) / 4);
  options.lateness_ns = options.window_ns;
  options.max_launch_lead_ns = options.window_ns;
  // Every window closed at the end, with every event in: what the ranks'
  // watermarks would close earlier is not what this compares.
  auto all_at_once = [&](const std::vector<DecodedBatch>& batches) {
    JobWindower windower("job", options);
    int64_t offset = 0;
    for (const DecodedBatch& b : batches) {
      EXPECT_EQ(windower.Add(b, offset++, /*replay=*/false, absl::UnixEpoch()),
                0);
    }
    return windower.FinalizeAll(kIdleClose);
  };
  const std::vector<WindowSummary> job = all_at_once(Batches(ranks, 500, 3));
  ASSERT_FALSE(job.empty());
  for (int r = 0; r < 2; ++r) {
    SCOPED_TRACE(absl::StrCat("rank ", r));
    Source alone = ranks[r];
    alone.rank = -1;  // A job of its own: its ids as given.
    const std::vector<WindowSummary> own =
        all_at_once(Batches({alone}, 500, 3));
    int compared = 0;
    for (const WindowSummary& o : own) {
      ASSERT_EQ(o.window.devices.size(), 1u);
      const DeviceWindow& expected = o.window.devices[0];
      auto w =
          std::find_if(job.begin(), job.end(), [&](const WindowSummary& j) {
            return j.window.start_ns == o.window.start_ns;
          });
      ASSERT_NE(w, job.end()) << o.window.start_ns;
      auto d =
          std::find_if(w->window.devices.begin(), w->window.devices.end(),
                       [&](const DeviceWindow& dw) { return dw.device == r; });
      ASSERT_NE(d, w->window.devices.end()) << "no device " << r;
      EXPECT_EQ(d->kernels, expected.kernels);
      EXPECT_EQ(d->stats.span_ns, expected.stats.span_ns);
      EXPECT_EQ(d->stats.compute_ns, expected.stats.compute_ns);
      EXPECT_EQ(d->stats.bubble_ns, expected.stats.bubble_ns);
      EXPECT_EQ(d->stats.attribution, expected.stats.attribution);
      ++compared;
    }
    EXPECT_GE(compared, 3);
  }
  for (const WindowSummary& w : job) {
    EXPECT_LE(w.window.devices.size(), 2u);
  }
}

}  // namespace
}  // namespace bubblewatch
