// The processor's persisted state (docs/state.md): round trips through
// schemas/state.fbs, and the formats written before it, read from fixtures
// that the old encoders wrote (tests/testdata/state/README.md).
#include <fstream>
#include <iterator>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "processor/job_state.h"
#include "processor/legacy_state.h"
#include "processor/partition_limits.h"
#include "processor/state_changelog.h"
#include "schemas/state_record.h"

namespace bubblewatch {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Pair;
using ::testing::UnorderedElementsAre;

std::string Fixture(const std::string& name) {
  std::ifstream in(std::string(BUBBLEWATCH_TESTDATA_DIR) + "/state/" + name,
                   std::ios::binary);
  EXPECT_TRUE(in) << name;
  return std::string(std::istreambuf_iterator<char>(in), {});
}

constexpr uint64_t kBigProducer = 0x1234567890abcdefull;

// The state of job "train-a" in every fixture.
void ExpectTrainA(const JobState& s) {
  EXPECT_EQ(s.finalized_through_ns, 1'700'000'000'000'000'000);
  EXPECT_THAT(s.producer_sequences,
              UnorderedElementsAre(Pair(7, 3u), Pair(kBigProducer, 41u)));
  EXPECT_THAT(
      s.producer_newest_ns,
      UnorderedElementsAre(Pair(7, 1'699'999'990'000'000'000),
                           Pair(kBigProducer, 1'700'000'005'000'000'000)));
}

JobState TrainA() {
  absl::StatusOr<JobState> s = JobState::Parse(Fixture("job_state_v2.txt"));
  EXPECT_TRUE(s.ok()) << s.status();
  return s.value_or(JobState());
}

const std::string kOddName("odd\0name\n", 9);

// The fixtures' jobs and ledger, decoded; every job state is current.
void ExpectFixtureJobsAndLedger(const PartitionSnapshot& s) {
  ASSERT_EQ(s.jobs.size(), 2u);
  for (const auto& [job, state] : s.jobs) {
    EXPECT_TRUE(IsStateRecord(state)) << job;
  }
  ASSERT_TRUE(s.jobs.contains("train-a"));
  ASSERT_TRUE(s.jobs.contains(kOddName));
  absl::StatusOr<JobState> a = JobState::Parse(s.jobs.at("train-a"));
  ASSERT_TRUE(a.ok()) << a.status();
  ExpectTrainA(*a);
  absl::StatusOr<JobState> odd = JobState::Parse(s.jobs.at(kOddName));
  ASSERT_TRUE(odd.ok()) << odd.status();
  // Stored as kNoneOnWire: none.
  EXPECT_EQ(odd->finalized_through_ns, std::nullopt);
  EXPECT_TRUE(odd->producer_sequences.empty());
  EXPECT_EQ(s.ledger.newest_event_ns(), 1'700'000'006'000'000'000);
  EXPECT_THAT(s.ledger.rejected_offsets(), ElementsAre(100, 205));
}

TEST(LegacyState, ReadsJobStatesTheOldEncoderWrote) {
  ExpectTrainA(TrainA());
  absl::StatusOr<JobState> v1 = JobState::Parse(Fixture("job_state_v1.txt"));
  ASSERT_TRUE(v1.ok()) << v1.status();
  EXPECT_THAT(v1->producer_sequences,
              UnorderedElementsAre(Pair(7, 3u), Pair(kBigProducer, 41u)));
  // v1 knew no newest event: the finalized edge stands in.
  EXPECT_EQ(v1->producer_newest_ns.at(7), 1'700'000'000'000'000'000);
  absl::StatusOr<JobState> empty =
      JobState::Parse(Fixture("job_state_empty_v2.txt"));
  ASSERT_TRUE(empty.ok()) << empty.status();
  EXPECT_EQ(empty->finalized_through_ns, std::nullopt);
  EXPECT_TRUE(empty->producer_sequences.empty());
  // Re-serialized, a legacy state is a StateRecord and reads back equal.
  const std::string now = TrainA().Serialize();
  ASSERT_TRUE(IsStateRecord(now));
  absl::StatusOr<JobState> again = JobState::Parse(now);
  ASSERT_TRUE(again.ok()) << again.status();
  ExpectTrainA(*again);
}

TEST(LegacyState, ReadsTheLedgerTextAndRejectsGarbage) {
  absl::StatusOr<LimitLedger> ledger =
      LegacyParseLimitLedger(Fixture("limit_ledger_l1.txt"));
  ASSERT_TRUE(ledger.ok()) << ledger.status();
  EXPECT_EQ(ledger->newest_event_ns(), 1'700'000'006'000'000'000);
  EXPECT_THAT(ledger->rejected_offsets(), ElementsAre(100, 205));
  for (const char* bad : {"", "L1", "L2 0", "L1 x", "L1 0 7 3", "L1 0 a"}) {
    EXPECT_EQ(LegacyParseLimitLedger(bad).status().code(),
              absl::StatusCode::kDataLoss)
        << bad;
  }
}

TEST(LegacyState, ReadsAStoreProgressStateTheOldEncoderWrote) {
  absl::StatusOr<PartitionSnapshot> s =
      DecodeStoredPartitionState(Fixture("local_job_states_v1.bin"));
  ASSERT_TRUE(s.ok()) << s.status();
  ExpectFixtureJobsAndLedger(*s);
  EXPECT_FALSE(s->jobs.contains(""));  // The ledger is no job any more.
}

TEST(LegacyState, ReadsChangelogSnapshotsTheOldEncoderWrote) {
  absl::StatusOr<PartitionSnapshot> s =
      DecodePartitionSnapshot(Fixture("partition_snapshot_v1.bin"));
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->topic, "bubblewatch.events");
  EXPECT_EQ(s->partition, 3);
  EXPECT_EQ(s->resume_offset, 90);
  EXPECT_EQ(s->committed_position, 250);
  ExpectFixtureJobsAndLedger(*s);

  absl::StatusOr<PartitionSnapshot> t =
      DecodePartitionSnapshot(Fixture("partition_snapshot_v1_no_ledger.bin"));
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->topic, "t");
  EXPECT_EQ(t->committed_position, 5);
  EXPECT_TRUE(t->ledger.empty());
  ASSERT_THAT(t->jobs, ::testing::SizeIs(1));
  ExpectTrainA(*JobState::Parse(t->jobs.at("train-a")));

  // Written again, it is the new format and reads back the same.
  const std::string now = EncodePartitionSnapshot(*s);
  ASSERT_TRUE(IsStateRecord(now));
  absl::StatusOr<PartitionSnapshot> back = DecodePartitionSnapshot(now);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->topic, s->topic);
  EXPECT_EQ(back->committed_position, 250);
  ExpectFixtureJobsAndLedger(*back);
}

TEST(LegacyState, ATruncatedOldRecordIsDataLoss) {
  for (const char* name :
       {"partition_snapshot_v1.bin", "local_job_states_v1.bin"}) {
    std::string bytes = Fixture(name);
    for (size_t cut : {size_t{0}, size_t{1}, size_t{9}, bytes.size() - 1}) {
      const std::string part = bytes.substr(0, cut);
      absl::Status status = std::string(name).starts_with("partition")
                                ? DecodePartitionSnapshot(part).status()
                                : DecodeStoredPartitionState(part).status();
      EXPECT_EQ(status.code(), absl::StatusCode::kDataLoss)
          << name << " cut at " << cut;
    }
  }
}

PartitionSnapshot Example() {
  PartitionSnapshot s{.topic = "events",
                      .partition = 11,
                      .resume_offset = 1000,
                      .committed_position = 1234};
  JobState a = TrainA();
  s.jobs["train-a"] = a.Serialize();
  s.jobs[kOddName] = JobState().Serialize();
  JobState c;
  c.finalized_through_ns = -5;  // Any clock, even before the epoch.
  c.producer_sequences[UINT64_MAX] = UINT64_MAX;
  c.NoteProducerEvents(UINT64_MAX, INT64_MAX);
  s.jobs["c"] = c.Serialize();
  s.ledger.NoteEvent(77);
  s.ledger.RecordRejection(1001);
  s.ledger.RecordRejection(1200);
  return s;
}

TEST(StateSchema, PartitionSnapshotsRoundTripByteForByte) {
  const PartitionSnapshot s = Example();
  const std::string bytes = EncodePartitionSnapshot(s);
  ASSERT_TRUE(IsStateRecord(bytes));
  for (auto decode : {&DecodePartitionSnapshot, &DecodeStoredPartitionState}) {
    absl::StatusOr<PartitionSnapshot> back = decode(bytes);
    ASSERT_TRUE(back.ok()) << back.status();
    EXPECT_EQ(back->topic, "events");
    EXPECT_EQ(back->partition, 11);
    EXPECT_EQ(back->resume_offset, 1000);
    EXPECT_EQ(back->committed_position, 1234);
    EXPECT_EQ(back->jobs, s.jobs);
    EXPECT_EQ(back->ledger.newest_event_ns(), 77);
    EXPECT_THAT(back->ledger.rejected_offsets(), ElementsAre(1001, 1200));
    EXPECT_EQ(EncodePartitionSnapshot(*back), bytes);
  }
  absl::StatusOr<JobState> c = JobState::Parse(s.jobs.at("c"));
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->finalized_through_ns, -5);
  EXPECT_EQ(c->producer_sequences.at(UINT64_MAX), UINT64_MAX);
  EXPECT_EQ(c->producer_newest_ns.at(UINT64_MAX), INT64_MAX);
}

// the jobs' alert state rides in the snapshot (opaque here); a
// snapshot without any leaves the field out.
TEST(StateSchema, JobAlertStatesRoundTripAndAreAbsentWhenEmpty) {
  PartitionSnapshot s = Example();
  const std::string without = EncodePartitionSnapshot(s);
  // Any StateRecord (alerts/ writes AlertStateRecords).
  s.job_alerts["train-a"] = JobState().Serialize();
  s.job_alerts["c"] = TrainA().Serialize();
  const std::string with = EncodePartitionSnapshot(s);
  EXPECT_GT(with.size(), without.size());
  absl::StatusOr<PartitionSnapshot> back = DecodePartitionSnapshot(with);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->job_alerts, s.job_alerts);
  EXPECT_EQ(back->jobs, s.jobs);
  EXPECT_EQ(EncodePartitionSnapshot(*back), with);
  s.job_alerts.clear();
  EXPECT_EQ(EncodePartitionSnapshot(s), without);
  back = DecodePartitionSnapshot(without);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_TRUE(back->job_alerts.empty());
}

// a job entry's activity (for serve --brokers) round-trips; an
// entry without it keeps the bytes it had before the fields existed.
TEST(StateSchema, JobActivityRoundTripsAndIsAbsentWhenUnknown) {
  PartitionSnapshot s = Example();
  const std::string without = EncodePartitionSnapshot(s);
  ASSERT_GE(s.jobs.size(), 2u);
  const std::string first = s.jobs.begin()->first;
  s.activity[first] = JobActivity{
      .last_event_ns = -5, .last_seen_wall_ns = 1'700'000'000'000'000'000};
  s.activity["not-a-job-of-it"] = JobActivity{.last_event_ns = 1};
  const std::string with = EncodePartitionSnapshot(s);
  EXPECT_GT(with.size(), without.size());
  absl::StatusOr<PartitionSnapshot> back = DecodePartitionSnapshot(with);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->jobs, s.jobs);
  // Only the snapshot's jobs carry activity.
  ASSERT_EQ(back->activity.size(), 1u);
  EXPECT_EQ(back->activity.at(first), s.activity.at(first));
  s.activity.clear();
  EXPECT_EQ(EncodePartitionSnapshot(s), without);
  back = DecodePartitionSnapshot(without);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_TRUE(back->activity.empty());
}

// A snapshot inside a longer buffer (serve's store keeps several in one
// record; Kafka payloads carry no alignment promise) decodes alike at any
// offset. Under UBSan a misaligned read of the nested records fails.
TEST(StateSchema, ASnapshotAtAnyAlignmentDecodes) {
  PartitionSnapshot s = Example();
  s.activity[s.jobs.begin()->first] = JobActivity{.last_event_ns = 3};
  const std::string bytes = EncodePartitionSnapshot(s);
  for (size_t offset = 0; offset < 8; ++offset) {
    const std::string buffer = std::string(offset, 'x') + bytes;
    absl::StatusOr<PartitionSnapshot> back =
        DecodePartitionSnapshot(absl::string_view(buffer).substr(offset));
    ASSERT_TRUE(back.ok()) << offset << ": " << back.status();
    EXPECT_EQ(back->jobs, s.jobs) << offset;
    EXPECT_EQ(EncodePartitionSnapshot(*back), bytes) << offset;
  }
}

TEST(StateSchema, AnEmptyLedgerIsNotStoredAndReadsEmpty) {
  PartitionSnapshot s = Example();
  s.ledger = LimitLedger();
  absl::StatusOr<PartitionSnapshot> back =
      DecodePartitionSnapshot(EncodePartitionSnapshot(s));
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_TRUE(back->ledger.empty());
  EXPECT_EQ(back->jobs.size(), 3u);
  // A partition with nothing at all.
  back = DecodeStoredPartitionState(EncodePartitionSnapshot({}));
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_TRUE(back->jobs.empty());
}

// Builds a snapshot record by hand, for what the encoder never writes.
std::string HandBuilt(uint16_t version,
                      const std::vector<std::string>& job_names,
                      const std::string& job_state) {
  flatbuffers::FlatBufferBuilder b;
  std::vector<flatbuffers::Offset<fb::JobStateEntry>> entries;
  for (const std::string& name : job_names) {
    auto n = b.CreateString(name);
    auto st = b.CreateVector(reinterpret_cast<const uint8_t*>(job_state.data()),
                             job_state.size());
    entries.push_back(fb::CreateJobStateEntry(b, n, st));
  }
  auto body = fb::CreatePartitionSnapshotRecord(b, b.CreateString("t"), 0, 0, 0,
                                                b.CreateVector(entries));
  fb::FinishStateRecordBuffer(
      b, fb::CreateStateRecord(
             b, version, fb::StateBody::PartitionSnapshotRecord, body.Union()));
  return std::string(reinterpret_cast<const char*>(b.GetBufferPointer()),
                     b.GetSize());
}

TEST(StateSchema, RefusesWhatItCannotTrust) {
  const std::string job = JobState().Serialize();
  ASSERT_TRUE(DecodePartitionSnapshot(HandBuilt(1, {"a", "b"}, job)).ok());
  struct Case {
    std::string bytes;
    std::string message;
  } cases[] = {
      {HandBuilt(2, {"a"}, job), "written by a newer bubblewatch"},
      {HandBuilt(0, {"a"}, job), "version 0"},
      {HandBuilt(1, {"b", "a"}, job), "out of order"},
      {HandBuilt(1, {"a", "a"}, job), "repeated"},
      {HandBuilt(1, {""}, job), "empty"},
      // A job state that is a snapshot, and one that is legacy text.
      {HandBuilt(1, {"a"}, EncodePartitionSnapshot({})),
       "not a JobStateRecord"},
      {HandBuilt(1, {"a"}, "v2 1 1:2:3 and more"), "does not verify"},
      // The wrong body for the reader.
      {job, "not a PartitionSnapshotRecord"},
      {EncodePartitionSnapshot(Example()).substr(0, 60), "does not verify"},
  };
  for (const Case& c : cases) {
    absl::Status status = DecodePartitionSnapshot(c.bytes).status();
    EXPECT_EQ(status.code(), absl::StatusCode::kDataLoss) << c.message;
    EXPECT_THAT(status.message(), HasSubstr(c.message));
  }
  EXPECT_THAT(JobState::Parse(EncodePartitionSnapshot({})).status().message(),
              HasSubstr("not a JobStateRecord"));
}

}  // namespace
}  // namespace bubblewatch
