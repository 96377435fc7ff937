// A partition's snapshot kept per job (docs/state.md#partition-snapshots):
// the job records' codec, and which version of each job a restore takes
// for a given partition record, including an owner that died between its
// job records and its partition record, and snapshots of the old form that
// held their jobs themselves.
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "processor/job_state.h"
#include "processor/partition_jobs.h"
#include "processor/processor_options.h"
#include "processor/runtime_shared.h"
#include "processor/state_changelog.h"
#include "storage/window_store.h"
#include "tests/testing/temp_dir.h"

namespace bubblewatch {
namespace {

using ::testing::ElementsAre;
using ::testing::IsEmpty;
using ::testing::Pair;
using ::testing::UnorderedElementsAre;

// A distinct, valid job state per `edge`.
std::string StateAt(int64_t edge) {
  JobState s;
  s.finalized_through_ns = edge;
  s.producer_sequences[7] = static_cast<uint64_t>(edge);
  return s.Serialize();
}

JobSnapshotVersion Version(int64_t position, int64_t edge) {
  return JobSnapshotVersion{
      .committed_position = position,
      .state = StateAt(edge),
      .activity = {.last_event_ns = edge, .last_seen_wall_ns = position}};
}

PartitionJobRecord Record(const std::string& job, JobSnapshotVersion current,
                          std::optional<JobSnapshotVersion> previous) {
  return PartitionJobRecord{.topic = "events",
                            .partition = 3,
                            .job = job,
                            .current = std::move(current),
                            .previous = std::move(previous)};
}

PartitionSnapshot PartitionAt(int64_t position, bool per_key = true) {
  return PartitionSnapshot{.topic = "events",
                           .partition = 3,
                           .resume_offset = position - 5,
                           .committed_position = position,
                           .jobs_per_key = per_key};
}

TEST(PartitionJobRecords, RoundTripEveryFieldAndAnyAlignment) {
  PartitionJobRecord r =
      Record(std::string("odd\0job", 7), Version(20, 200), Version(10, 100));
  // Alert states are StateRecords too (opaque here): any one will do.
  r.current.alerts = StateAt(9);
  const std::string bytes = EncodePartitionJob(r);
  EXPECT_TRUE(IsPartitionJobRecord(bytes));
  EXPECT_FALSE(IsPartitionJobRecord(EncodePartitionSnapshot(PartitionAt(9))));
  for (size_t shift = 0; shift < 8; ++shift) {
    std::string shifted(shift, 'x');
    shifted += bytes;
    absl::StatusOr<PartitionJobRecord> back =
        DecodePartitionJob(absl::string_view(shifted).substr(shift));
    ASSERT_TRUE(back.ok()) << back.status();
    EXPECT_EQ(back->topic, "events");
    EXPECT_EQ(back->partition, 3);
    EXPECT_EQ(back->job, r.job);
    EXPECT_EQ(back->current.committed_position, 20);
    EXPECT_EQ(back->current.state, StateAt(200));
    EXPECT_EQ(back->current.alerts, StateAt(9));
    EXPECT_EQ(back->current.activity, r.current.activity);
    ASSERT_TRUE(back->previous.has_value());
    EXPECT_EQ(back->previous->committed_position, 10);
    EXPECT_EQ(back->previous->state, StateAt(100));
    EXPECT_FALSE(back->previous->alerts.has_value());
    EXPECT_EQ(EncodePartitionJob(*back), bytes);
  }
  EXPECT_EQ(PartitionJobKey("events", 3, "j"), "events/3/job/j");
}

TEST(PartitionJobRecords, AGoneJobHasNeitherStateNorAlerts) {
  PartitionJobRecord r = Record(
      "j", JobSnapshotVersion{.committed_position = 30}, Version(20, 200));
  absl::StatusOr<PartitionJobRecord> back =
      DecodePartitionJob(EncodePartitionJob(r));
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_TRUE(back->current.gone());
  EXPECT_FALSE(back->previous->gone());
}

TEST(PartitionJobRecords, RefusesWhatItCannotTrust) {
  EXPECT_FALSE(DecodePartitionJob("garbage").ok());
  EXPECT_FALSE(
      DecodePartitionJob(EncodePartitionSnapshot(PartitionAt(9))).ok());
  PartitionJobRecord r = Record("j", Version(20, 200), std::nullopt);
  r.current.state = "not a job state";
  EXPECT_FALSE(DecodePartitionJob(EncodePartitionJob(r)).ok());
}

// The partition record is at 20. Job a's newest version is at 10, b's at
// 20; c's at 30 (written by an owner that died before its partition record
// at 30): its previous version at 20 counts. d is new at 30: not in the
// snapshot at 20 at all.
TEST(AssemblePartitionSnapshot, TakesEachJobsVersionAtThePartitionsPosition) {
  std::vector<std::string> gone;
  PartitionSnapshot s = AssemblePartitionSnapshot(
      PartitionAt(20),
      {Record("a", Version(10, 100), std::nullopt),
       Record("b", Version(20, 200), Version(10, 101)),
       Record("c", Version(30, 300), Version(20, 201)),
       Record("d", Version(30, 302), std::nullopt)},
      &gone);
  EXPECT_TRUE(s.jobs_per_key);
  EXPECT_THAT(s.jobs, UnorderedElementsAre(Pair("a", StateAt(100)),
                                           Pair("b", StateAt(200)),
                                           Pair("c", StateAt(201))));
  EXPECT_EQ(s.activity.at("c").last_event_ns, 201);
  EXPECT_THAT(gone, IsEmpty());
}

TEST(AssemblePartitionSnapshot, AGoneJobIsAbsentAndReportedForDeletion) {
  std::vector<std::string> gone;
  PartitionSnapshot s = AssemblePartitionSnapshot(
      PartitionAt(40),
      {Record("e", JobSnapshotVersion{.committed_position = 40},
              Version(20, 200)),
       // Gone at 50, after the partition record: still there at 40.
       Record("f", JobSnapshotVersion{.committed_position = 50},
              Version(30, 300))},
      &gone);
  EXPECT_THAT(s.jobs, UnorderedElementsAre(Pair("f", StateAt(300))));
  EXPECT_THAT(gone, ElementsAre("e"));
}

TEST(AssemblePartitionSnapshot, AlertsWithoutStateKeepTheJob) {
  JobSnapshotVersion alerts_only{.committed_position = 20,
                                 .alerts = StateAt(9)};
  PartitionSnapshot s = AssemblePartitionSnapshot(
      PartitionAt(20), {Record("g", alerts_only, Version(10, 100))});
  EXPECT_THAT(s.jobs, IsEmpty());
  EXPECT_THAT(s.job_alerts, UnorderedElementsAre(Pair("g", StateAt(9))));
}

// A snapshot written before jobs were kept per key holds its jobs as of
// its position: only a job record of exactly that position is as new.
TEST(AssemblePartitionSnapshot, AnOldFormRecordKeepsItsJobs) {
  PartitionSnapshot old = PartitionAt(20, /*per_key=*/false);
  old.jobs = {{"a", StateAt(1)}, {"b", StateAt(2)}};
  PartitionSnapshot s = AssemblePartitionSnapshot(
      old, {Record("a", Version(10, 100), std::nullopt),
            Record("b", Version(30, 300), Version(20, 200))});
  EXPECT_THAT(s.jobs, UnorderedElementsAre(Pair("a", StateAt(1)),
                                           Pair("b", StateAt(200))));
}

TEST(PartitionState, NoteJobChangingKeepsTheVersionOfTheLastSnapshot) {
  PartitionState part;
  part.snapshot_position = 40;
  part.committed_states["a"] = *JobState::Parse(StateAt(1));
  part.activity["a"] = JobActivity{.last_event_ns = 5};
  NoteJobChanging(part, "a");
  part.committed_states["a"] = *JobState::Parse(StateAt(2));
  NoteJobChanging(part, "a");  // Once per commit: the first version stays.
  NoteJobChanging(part, "new");
  EXPECT_TRUE(part.changed);
  ASSERT_TRUE(part.changing.at("a").has_value());
  // Typed in memory; its stored form is the bytes of the last snapshot.
  const JobSnapshotVersion previous =
      ToStoredVersion(*part.changing.at("a"), part.snapshot_position);
  EXPECT_EQ(previous.state, StateAt(1));
  EXPECT_EQ(previous.committed_position, 40);
  EXPECT_EQ(previous.activity.last_event_ns, 5);
  EXPECT_FALSE(part.changing.at("new").has_value());
  EXPECT_FALSE(CurrentJobVersion(part, "new", 50).has_value());
  EXPECT_EQ(CurrentJobVersion(part, "a", 50)->state, StateAt(2));
}

// The boundary (docs/architecture.md#the-partition-task): a restored
// snapshot's job states are parsed once, kept typed, and the first commit
// after the assignment writes every job's record back with the very bytes
// it restored, whatever each state holds.
TEST(PartitionJobs, RestoredJobStatesAreWrittenBackAsTheBytesRestored) {
  testing::TempDir dir;
  absl::StatusOr<std::unique_ptr<WindowStore>> store =
      OpenRocksDbWindowStore(dir.Sub("store"));
  ASSERT_TRUE(store.ok()) << store.status();
  StreamProcessorOptions options;
  StatsCell stats;
  PartitionJobs jobs(options, store->get(), &stats);

  JobState rich;
  rich.finalized_through_ns = 40'000'000'000;
  rich.producer_sequences = {{7, 12}, {3, 99}};
  rich.NoteProducerEvents(7, 39'000'000'000);
  rich.NoteProducerEvents(3, std::nullopt);
  rich.ended_producers.insert(3);
  rich.lifecycle.world_size = 4;
  rich.lifecycle.ended_ranks = {0, 2};
  rich.lifecycle.awaiting_ranks_since_ns = 0;
  rich.lifecycle.batches_after_end = 1;
  rich.lifecycle.NoteGap(90'000'000'000);
  rich.last_observations[{"node-a", -1, 0xfeedull}] = {
      .id = 11, .start_ns = -7, .end_ns = INT64_MAX};
  rich.buffer_reset_offset = 17;
  RestoredPartition restored;
  restored.snapshot = PartitionSnapshot{.topic = "events",
                                        .partition = 0,
                                        .resume_offset = 20,
                                        .committed_position = 30};
  restored.snapshot.jobs = {{"empty", JobState().Serialize()},
                            {"rich", rich.Serialize()},
                            {"small", StateAt(5)}};
  restored.snapshot.activity["rich"] = {.last_event_ns = 39'000'000'000,
                                        .last_seen_wall_ns = 1};
  restored.write_all_jobs = true;
  const JobStates stored = restored.snapshot.jobs;
  ASSERT_TRUE(jobs.AddPartition(0, std::move(restored)).ok());
  EXPECT_EQ(jobs.partitions().at(0).committed_states.at("rich").Serialize(),
            stored.at("rich"));

  jobs.NoteMessage(0, 30);
  const std::vector<PartitionProgress> progress =
      jobs.CommitProgress("events", /*expire_jobs=*/false);
  ASSERT_EQ(progress.size(), 1u);
  absl::StatusOr<std::vector<JobRecordWrite>> writes =
      jobs.JobRecordsToWrite(progress[0]);
  ASSERT_TRUE(writes.ok()) << writes.status();
  ASSERT_EQ(writes->size(), stored.size());
  for (const JobRecordWrite& w : *writes) {
    ASSERT_TRUE(w.record.has_value()) << w.job;
    absl::StatusOr<PartitionJobRecord> r = DecodePartitionJob(*w.record);
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(r->current.state, stored.at(w.job)) << w.job;
    EXPECT_EQ(r->current.committed_position, 31);
    ASSERT_TRUE(r->previous.has_value()) << w.job;
    EXPECT_EQ(r->previous->state, stored.at(w.job)) << w.job;
    EXPECT_EQ(r->previous->committed_position, 30);
  }
}

// A restored job state that does not parse fails the assignment, with the
// job named, rather than the first batch of that job much later.
TEST(PartitionJobs, ARestoredJobStateThatDoesNotParseFailsTheAssignment) {
  StreamProcessorOptions options;
  StatsCell stats;
  PartitionJobs jobs(options, /*store=*/nullptr, &stats);
  RestoredPartition restored;
  restored.snapshot.jobs = {{"good", StateAt(1)}, {"bad", "not a state"}};
  const absl::Status s = jobs.AddPartition(3, std::move(restored));
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss) << s;
  EXPECT_THAT(s.message(), ::testing::HasSubstr("job 'bad'"));
  EXPECT_FALSE(jobs.partitions().contains(3));
}

}  // namespace
}  // namespace bubblewatch
