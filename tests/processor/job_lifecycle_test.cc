// The job lifecycle (docs/semantics.md#job-lifecycle): the phase rule
// (schemas/job_lifecycle.h), its persistence in JobState, and the state
// machine PartitionJobs::AddBatch runs on end markers, gaps and data after
// an end.
#include "schemas/job_lifecycle.h"

#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "processor/job_state.h"
#include "processor/partition_jobs.h"
#include "processor/processor_options.h"
#include "processor/runtime_shared.h"
#include "storage/window_store.h"
#include "tests/testing/temp_dir.h"
#include "tests/testing/units.h"

namespace bubblewatch {
namespace {

using testing::kS;

TEST(JobLifecycle, LearnsTheCadenceFromTwoGapsAsTheirMedian) {
  JobLifecycle l;
  EXPECT_EQ(l.cadence_ns(), 0);
  l.NoteGap(58 * kS);
  EXPECT_EQ(l.cadence_ns(), 0) << "one gap is a pause, not a cadence";
  l.NoteGap(62 * kS);
  EXPECT_EQ(l.cadence_ns(), 58 * kS) << "the lower middle of an even count";
  l.NoteGap(60 * kS);
  EXPECT_EQ(l.cadence_ns(), 60 * kS);
  for (int i = 0; i < 10; ++i) l.NoteGap(300 * kS);
  EXPECT_EQ(l.gaps_ns.size(), static_cast<size_t>(JobLifecycle::kMaxGaps));
  EXPECT_EQ(l.cadence_ns(), 300 * kS) << "only the last gaps count";
}

TEST(JobLifecycle, PhaseFollowsTheRules) {
  const absl::Duration s = absl::Seconds(1);
  JobLifecycle plain;
  EXPECT_EQ(PhaseAt(plain, 0 * s), JobPhase::kActive);
  EXPECT_EQ(PhaseAt(plain, 3600 * s), JobPhase::kActive)
      << "without a marker a silent job stays active (job_silent's case)";
  JobLifecycle ended = plain;
  ended.ended = true;
  EXPECT_EQ(PhaseAt(ended, 0 * s), JobPhase::kEnded);

  JobLifecycle cycle;  // 2 s snapshots every 60 s: gaps of 58 s.
  cycle.NoteGap(58 * kS);
  cycle.NoteGap(58 * kS);
  EXPECT_EQ(PhaseAt(cycle, 1 * s), JobPhase::kActive) << "sending";
  EXPECT_EQ(PhaseAt(cycle, kPausedAfter - s), JobPhase::kActive);
  EXPECT_EQ(PhaseAt(cycle, kPausedAfter), JobPhase::kPaused);
  EXPECT_EQ(PhaseAt(cycle, 116 * s), JobPhase::kPaused);
  EXPECT_EQ(PhaseAt(cycle, 117 * s), JobPhase::kActive)
      << "two gaps without a snapshot: overdue, no longer paused";
  cycle.ended = true;  // The snapshot ended with a marker.
  EXPECT_EQ(PhaseAt(cycle, 1 * s), JobPhase::kPaused);
  EXPECT_EQ(PhaseAt(cycle, 116 * s), JobPhase::kPaused);
  EXPECT_EQ(PhaseAt(cycle, 117 * s), JobPhase::kEnded)
      << "no snapshot came within two gaps: the duty cycle ended";
  cycle.expired = true;
  EXPECT_EQ(PhaseAt(cycle, 1 * s), JobPhase::kEnded);
  EXPECT_EQ(JobPhaseName(JobPhase::kPaused), "paused");

  JobLifecycle waiting;  // 1 of 4 ranks ended, the others expected.
  waiting.world_size = 4;
  waiting.ended_ranks = {2};
  waiting.awaiting_ranks_since_ns = 0;
  EXPECT_EQ(PhaseAt(waiting, 0 * s), JobPhase::kWaiting);
  EXPECT_EQ(PhaseAt(waiting, 3600 * s), JobPhase::kWaiting)
      << "silent on purpose: no job_silent";
  EXPECT_EQ(JobPhaseName(JobPhase::kWaiting), "waiting");
}

TEST(JobLifecycle, PersistsWithTheJobStateAndLeavesOldBytesAlone) {
  JobState state;
  state.finalized_through_ns = 40 * kS;
  state.producer_sequences = {{7, 3}, {9, 1}};
  state.NoteProducerEvents(7, 39 * kS);
  state.NoteProducerEvents(9, 20 * kS);
  const std::string plain = state.Serialize();
  EXPECT_EQ(ReadJobLifecycle(plain), JobLifecycle());
  state.ended_producers = {9, 7};
  state.lifecycle.ended = true;
  state.lifecycle.NoteGap(12 * kS);
  state.lifecycle.batches_after_end = 2;
  const std::string bytes = state.Serialize();
  EXPECT_NE(bytes, plain);
  absl::StatusOr<JobState> parsed = JobState::Parse(bytes);
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(parsed->lifecycle, state.lifecycle);
  EXPECT_EQ(parsed->ended_producers, state.ended_producers);
  EXPECT_EQ(ReadJobLifecycle(bytes), state.lifecycle);
  EXPECT_EQ(parsed->Serialize(), bytes);
  // Back to the defaults: the bytes of a state that never had them.
  parsed->ended_producers.clear();
  parsed->lifecycle = JobLifecycle();
  EXPECT_EQ(parsed->Serialize(), plain);
  // A producer forgotten is forgotten as ended too.
  state.ForgetProducersBefore(30 * kS);
  EXPECT_FALSE(state.ended_producers.contains(9));
  EXPECT_TRUE(state.AllProducersEnded());
  // Text and garbage read as the default.
  EXPECT_EQ(ReadJobLifecycle("v1 5000 3:9"), JobLifecycle());
}

// Drives PartitionJobs as the admission does: duplicates checked, then added.
class PartitionJobsLifecycle : public ::testing::Test {
 protected:
  void SetUp() override {
    absl::StatusOr<std::unique_ptr<WindowStore>> store =
        OpenRocksDbWindowStore(dir_.Sub("store"));
    ASSERT_TRUE(store.ok()) << store.status();
    store_ = *std::move(store);
    jobs_ = std::make_unique<PartitionJobs>(options_, store_.get(), &stats_);
  }

  // A batch of `producer` with kernels every 100 ms in [from_s, to_s).
  static DecodedBatch Batch(uint64_t producer, uint64_t sequence,
                            int64_t from_s, int64_t to_s, bool end = false) {
    DecodedBatch b;
    b.header = BatchHeader{.job = "job",
                           .host = "h",
                           .rank = 0,
                           .world_size = 1,
                           .producer_id = producer,
                           .sequence = sequence,
                           .end_of_stream = end};
    b.trace.job = "job";
    b.trace.names = {"k"};
    for (int64_t t = from_s * kS; t < to_s * kS; t += kS / 10) {
      b.trace.gpu.push_back(GpuActivity{.start_ns = t,
                                        .end_ns = t + kS / 20,
                                        .name = 0,
                                        .device = 0,
                                        .stream = 7,
                                        .kind = GpuActivityKind::kKernel});
    }
    return b;
  }
  static DecodedBatch Marker(uint64_t producer, uint64_t sequence) {
    return Batch(producer, sequence, 0, 0, /*end=*/true);
  }

  // Rank `rank` of a job of 4 ranks (one host each), as uploaded from its
  // own file: its own producer.
  static DecodedBatch RankBatch(int32_t rank, uint64_t sequence, int64_t from_s,
                                int64_t to_s, bool end = false) {
    DecodedBatch b = Batch(100 + rank, sequence, from_s, to_s, end);
    b.header.rank = rank;
    b.header.world_size = 4;
    b.header.host = absl::StrCat("h", rank);
    return b;
  }

  // Returns the windows the batch closed.
  std::vector<WindowSummary> Feed(const DecodedBatch& b, bool replay = false) {
    absl::StatusOr<JobEntry*> job = jobs_->GetOrLoad(b.header.job, 0);
    EXPECT_TRUE(job.ok()) << job.status();
    if (!job.ok()) return {};
    if (PartitionJobs::IsDuplicateBatch(**job, b.header, replay)) return {};
    PartitionJobs::Added added =
        jobs_->AddBatch(0, b.header.job, **job, b, offset_++, replay,
                        absl::Now(), absl::InfiniteDuration());
    for (const auto& [window, count] : added.late_counts) late_ += count;
    return added.windows;
  }
  const JobEntry& Job() { return jobs_->live_jobs().at("job"); }
  ProcessorStats Stats() {
    absl::MutexLock lock(&stats_.mu);
    return stats_.stats;
  }

  testing::TempDir dir_;
  std::unique_ptr<WindowStore> store_;
  StreamProcessorOptions options_;
  StatsCell stats_;
  std::unique_ptr<PartitionJobs> jobs_;
  int64_t offset_ = 0;
  int64_t late_ = 0;
};

TEST_F(PartitionJobsLifecycle, TheEndMarkerEndsTheJobAndClosesItsWindows) {
  Feed(Batch(1, 0, 0, 5));
  EXPECT_TRUE(Feed(Batch(1, 1, 5, 12)).empty()) << "watermark 9.9 s";
  EXPECT_FALSE(Job().state.lifecycle.ended);
  ASSERT_NE(Job().windower, nullptr);
  std::vector<WindowSummary> closed = Feed(Marker(1, 2));
  EXPECT_TRUE(Job().state.lifecycle.ended);
  EXPECT_EQ(Job().windower, nullptr) << "every window closed at the marker";
  ASSERT_EQ(closed.size(), 2u);
  EXPECT_EQ(closed.back().window.end_ns, 20 * kS);
  for (const WindowSummary& w : closed) {
    EXPECT_EQ(w.closed_by, WindowSummary::ClosedBy::kEndMarker)
        << w.window.start_ns;
  }
  EXPECT_EQ(Job().state.finalized_through_ns, 20 * kS);
  EXPECT_EQ(Stats().end_markers, 1);
  EXPECT_EQ(Stats().jobs_ended, 1);
  EXPECT_EQ(Stats().batches_after_end, 0);
  EXPECT_TRUE(ReadJobLifecycle(Job().state.Serialize()).ended);
}

TEST_F(PartitionJobsLifecycle, AJobEndsWhenEveryProducerSentItsMarker) {
  Feed(Batch(1, 0, 0, 5));
  Feed(Batch(2, 0, 0, 5));
  EXPECT_TRUE(Feed(Marker(1, 1)).empty()) << "a marker that ends no job";
  EXPECT_FALSE(Job().state.lifecycle.ended) << "producer 2 still sends";
  EXPECT_NE(Job().windower, nullptr);
  Feed(Batch(2, 1, 5, 8));
  std::vector<WindowSummary> closed = Feed(Marker(2, 2));
  EXPECT_TRUE(Job().state.lifecycle.ended);
  ASSERT_EQ(closed.size(), 1u);
  EXPECT_EQ(closed[0].closed_by, WindowSummary::ClosedBy::kEndMarker);
  EXPECT_EQ(Stats().end_markers, 2);
  EXPECT_EQ(Stats().jobs_ended, 1);
}

TEST_F(PartitionJobsLifecycle, DataAfterTheMarkerIsCountedKeptAndRunsAgain) {
  Feed(Batch(1, 0, 0, 5));
  Feed(Marker(1, 1));
  ASSERT_TRUE(Job().state.lifecycle.ended);
  // The same producer goes on: bad input, counted; the data is kept.
  Feed(Batch(1, 2, 25, 27));
  EXPECT_EQ(Stats().batches_after_end, 1);
  EXPECT_EQ(Job().state.lifecycle.batches_after_end, 1);
  EXPECT_FALSE(Job().state.lifecycle.ended) << "active again: a new run";
  ASSERT_NE(Job().windower, nullptr);
  EXPECT_GT(Job().windower->buffered_events(), 0u);
  // Its next marker ends it again, and counts once.
  Feed(Marker(1, 3));
  EXPECT_TRUE(Job().state.lifecycle.ended);
  EXPECT_EQ(Stats().jobs_ended, 2);
  EXPECT_EQ(Stats().batches_after_end, 1);
}

TEST_F(PartitionJobsLifecycle, ANewRunIsNotBadInputAndItsGapsMakeACadence) {
  // Three snapshots of 2 s, each its own producer ending with a marker, 58 s
  // apart: the duty cycle of docs/semantics.md#job-lifecycle.
  for (uint64_t snapshot = 0; snapshot < 3; ++snapshot) {
    const int64_t start = static_cast<int64_t>(snapshot) * 60;
    Feed(Batch(10 + snapshot, 0, start, start + 2));
    EXPECT_FALSE(Job().state.lifecycle.ended);
    Feed(Marker(10 + snapshot, 1));
    EXPECT_TRUE(Job().state.lifecycle.ended);
  }
  EXPECT_EQ(Stats().batches_after_end, 0) << "new producers, new runs";
  const JobLifecycle& l = Job().state.lifecycle;
  ASSERT_EQ(l.gaps_ns.size(), 2u);
  // Each gap: from the last kernel's end (start + 1.95 s) to the next start.
  EXPECT_EQ(l.gaps_ns[0], 60 * kS - (2 * kS - kS / 20));
  EXPECT_EQ(l.cadence_ns(), l.gaps_ns[0]);
  EXPECT_EQ(PhaseAt(l, absl::Seconds(30)), JobPhase::kPaused);
  EXPECT_EQ(PhaseAt(l, absl::Seconds(200)), JobPhase::kEnded);
}

TEST_F(PartitionJobsLifecycle, AReplayedBatchLeavesTheLifecycleAsRestored) {
  Feed(Batch(1, 0, 0, 5));
  Feed(Marker(1, 1));
  const std::string before = Job().state.Serialize();
  // A restart replays what the restored state already counted.
  Feed(Batch(1, 0, 0, 5), /*replay=*/true);
  Feed(Marker(1, 1), /*replay=*/true);
  EXPECT_EQ(Job().state.Serialize(), before);
  EXPECT_EQ(Stats().batches_after_end, 0);
  EXPECT_EQ(Stats().end_markers, 1);
}

// The ranks of a finished job uploaded one file after another
// (docs/semantics.md#job-lifecycle, "Multi-rank jobs"): each rank's stream
// ends before the next one starts, and only the fourth marker ends the job.
TEST_F(PartitionJobsLifecycle, AMultiRankJobEndsWhenItsLastRankEnds) {
  for (int32_t rank = 0; rank < 4; ++rank) {
    EXPECT_TRUE(Feed(RankBatch(rank, 0, 0, 12)).empty()) << rank;
    std::vector<WindowSummary> closed = Feed(RankBatch(rank, 1, 0, 0, true));
    if (rank < 3) {
      EXPECT_TRUE(closed.empty()) << "rank " << rank << "'s marker";
      EXPECT_FALSE(Job().state.lifecycle.ended) << rank;
      EXPECT_EQ(Job().state.lifecycle.ended_ranks.size(),
                static_cast<size_t>(rank + 1));
      EXPECT_TRUE(Job().state.lifecycle.awaiting_ranks_since_ns.has_value());
      continue;
    }
    EXPECT_TRUE(Job().state.lifecycle.ended);
    EXPECT_EQ(Job().state.lifecycle.awaiting_ranks_since_ns, std::nullopt);
    ASSERT_EQ(closed.size(), 2u);
    for (const WindowSummary& w : closed) {
      EXPECT_EQ(w.closed_by, WindowSummary::ClosedBy::kEndMarker);
    }
  }
  EXPECT_EQ(late_, 0) << "no rank's events came after its windows closed";
  EXPECT_EQ(Job().state.lifecycle.world_size, 4);
  EXPECT_EQ(Stats().end_markers, 4);
  EXPECT_EQ(Stats().jobs_ended, 1);
}

// A restart between two ranks: the restored state waits for the same ranks.
TEST_F(PartitionJobsLifecycle, ARestoredMultiRankJobWaitsForTheSameRanks) {
  for (int32_t rank = 0; rank < 2; ++rank) {
    Feed(RankBatch(rank, 0, 0, 12));
    Feed(RankBatch(rank, 1, 0, 0, true));
  }
  const std::string saved = Job().state.Serialize();
  absl::StatusOr<JobState> restored = JobState::Parse(saved);
  ASSERT_TRUE(restored.ok()) << restored.status();
  EXPECT_EQ(restored->lifecycle.world_size, 4);
  EXPECT_EQ(restored->lifecycle.ended_ranks, Job().state.lifecycle.ended_ranks);
  EXPECT_EQ(restored->lifecycle.awaiting_ranks_since_ns,
            Job().state.lifecycle.awaiting_ranks_since_ns);
  EXPECT_EQ(restored->Serialize(), saved);
  // What query, serve and the alerts read of the stored state: waiting.
  const JobLifecycle read = ReadJobLifecycle(saved);
  EXPECT_EQ(read, Job().state.lifecycle);
  EXPECT_EQ(PhaseAt(read, absl::Hours(1)), JobPhase::kWaiting);
  // A fresh processor with the restored state, replaying the two ranks'
  // batches (their windows are not stored yet) and going on.
  jobs_ = std::make_unique<PartitionJobs>(options_, store_.get(), &stats_);
  absl::StatusOr<JobEntry*> loaded = jobs_->GetOrLoad("job", 0);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  (*loaded)->state = *restored;
  offset_ = 0;
  for (int32_t rank = 0; rank < 2; ++rank) {
    EXPECT_TRUE(Feed(RankBatch(rank, 0, 0, 12), /*replay=*/true).empty());
    EXPECT_TRUE(Feed(RankBatch(rank, 1, 0, 0, true), /*replay=*/true).empty());
  }
  EXPECT_EQ(Job().state.Serialize(), saved) << "replay changes nothing";
  Feed(RankBatch(2, 0, 0, 12));
  EXPECT_TRUE(Feed(RankBatch(2, 1, 0, 0, true)).empty());
  EXPECT_FALSE(Job().state.lifecycle.ended);
  Feed(RankBatch(3, 0, 0, 12));
  std::vector<WindowSummary> closed = Feed(RankBatch(3, 1, 0, 0, true));
  EXPECT_TRUE(Job().state.lifecycle.ended);
  ASSERT_EQ(closed.size(), 2u);
  EXPECT_EQ(late_, 0);
}

// A rank that never comes: the job ends once its partition's event time
// passes --rank-grace after the last marker.
TEST_F(PartitionJobsLifecycle, ARankThatNeverComesEndsTheJobAfterTheGrace) {
  options_.rank_grace = absl::Minutes(10);
  for (int32_t rank = 0; rank < 3; ++rank) {
    Feed(RankBatch(rank, 0, 0, 12));
    Feed(RankBatch(rank, 1, 0, 0, true));
  }
  EXPECT_FALSE(Job().state.lifecycle.ended);
  DecodedBatch other = Batch(7, 0, 9 * 60, 9 * 60 + 1);
  other.header.job = other.trace.job = "other";
  EXPECT_TRUE(Feed(other).empty());
  EXPECT_FALSE(Job().state.lifecycle.ended) << "9 minutes on: waiting";
  other = Batch(7, 1, 11 * 60, 11 * 60 + 1);
  other.header.job = other.trace.job = "other";
  Feed(other);
  std::vector<WindowSummary> closed;
  EXPECT_EQ(jobs_->CloseIdle(absl::Now(), closed), 1);
  EXPECT_TRUE(Job().state.lifecycle.ended);
  ASSERT_EQ(closed.size(), 2u);
  EXPECT_EQ(closed[0].closed_by, WindowSummary::ClosedBy::kEndMarker);
  EXPECT_EQ(Job().windower, nullptr);
}

}  // namespace
}  // namespace bubblewatch
