#include "processor/job_state.h"

#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "schemas/state_record.h"

namespace bubblewatch {
namespace {

TEST(JobState, RoundTripsEveryField) {
  JobState state;
  state.finalized_through_ns = 40'000'000'000;
  state.producer_sequences = {{7, 12}, {3, 99}};
  state.NoteProducerEvents(7, 39'000'000'000);
  state.NoteProducerEvents(3, 12'000'000'000);
  state.NoteProducerEvents(3, 11'000'000'000);  // Older: kept the newer.
  const std::string bytes = state.Serialize();
  EXPECT_TRUE(IsStateRecord(bytes));
  absl::StatusOr<JobState> parsed = JobState::Parse(bytes);
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(parsed->finalized_through_ns, state.finalized_through_ns);
  EXPECT_EQ(parsed->producer_sequences, state.producer_sequences);
  EXPECT_THAT(
      parsed->producer_newest_ns,
      ::testing::UnorderedElementsAre(::testing::Pair(7, 39'000'000'000),
                                      ::testing::Pair(3, 12'000'000'000)));
  EXPECT_FALSE(parsed->split_unit);
  EXPECT_EQ(parsed->Serialize(), bytes);
  // A split unit's mark travels, and only it changes the bytes.
  JobState unit = state;
  unit.split_unit = true;
  absl::StatusOr<JobState> unit_parsed = JobState::Parse(unit.Serialize());
  ASSERT_TRUE(unit_parsed.ok()) << unit_parsed.status();
  EXPECT_TRUE(unit_parsed->split_unit);
  EXPECT_NE(unit.Serialize(), bytes);
}

TEST(JobState, EqualStatesSerializeEquallyWhateverTheirHistory) {
  JobState a, b;
  for (uint64_t p = 1; p <= 50; ++p) {
    a.producer_sequences[p] = p * 3;
    a.NoteProducerEvents(p, static_cast<int64_t>(p) * 100);
  }
  for (uint64_t p = 50; p >= 1; --p) {
    b.producer_sequences[p] = p * 3;
    b.NoteProducerEvents(p, static_cast<int64_t>(p) * 100);
  }
  b.producer_sequences[99] = 1;  // Added and forgotten again.
  b.NoteProducerEvents(99, 1);
  EXPECT_EQ(b.ForgetProducersBefore(100), 1);
  EXPECT_EQ(a.Serialize(), b.Serialize());
  EXPECT_NE(a.Serialize(), JobState().Serialize());
}

TEST(JobState, ReadsTheFormerFormatKeepingItsProducersForAFullExpiry) {
  absl::StatusOr<JobState> parsed = JobState::Parse("v1 5000 3:9 8:1");
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(parsed->producer_sequences.at(3), 9u);
  EXPECT_EQ(parsed->producer_newest_ns.at(3), 5000);
  EXPECT_EQ(parsed->ForgetProducersBefore(5000), 0);
  EXPECT_EQ(parsed->ForgetProducersBefore(5001), 2);
  EXPECT_TRUE(parsed->producer_sequences.empty());
}

TEST(JobState, ForgetsOnlyProducersWhoseNewestEventIsOlderThanTheCutoff) {
  JobState state;
  state.producer_sequences = {{1, 5}, {2, 5}, {3, 5}};
  state.NoteProducerEvents(1, 100);
  state.NoteProducerEvents(2, 200);
  state.NoteProducerEvents(3, 300);
  EXPECT_EQ(state.ForgetProducersBefore(200), 1);
  EXPECT_THAT(state.producer_sequences,
              ::testing::UnorderedElementsAre(::testing::Pair(2, 5u),
                                              ::testing::Pair(3, 5u)));
  EXPECT_EQ(state.producer_newest_ns.count(1), 0u);
  EXPECT_EQ(state.ForgetProducersBefore(INT64_MIN), 0);
}

TEST(JobState, RejectsWhatItDidNotWrite) {
  for (const char* bad : {"", "v3 1", "v2 x", "v2 1 3:4", "v1 1 3:4:5",
                          "v2 1 a:4:5", "v2 1 3:4:z", "v1 1 3"}) {
    EXPECT_EQ(JobState::Parse(bad).status().code(), absl::StatusCode::kDataLoss)
        << bad;
  }
}

// What job expiry compares with its partition's clock.
TEST(JobState, NewestEventIsTheLatestOfTheEdgeAndTheProducers) {
  JobState state;
  EXPECT_EQ(state.NewestEventNs(), std::nullopt);
  state.finalized_through_ns = 40;
  EXPECT_EQ(state.NewestEventNs(), 40);
  state.NoteProducerEvents(1, 55);
  state.NoteProducerEvents(2, 30);
  EXPECT_EQ(state.NewestEventNs(), 55);
}

// a job's bad input about observations and the last observation
// of each stream persist with its state, in the same bytes whatever the
// order they were noted in, and a state without them keeps its old bytes.
// None is std::optional in memory and kNoneOnWire (INT64_MIN) in the
// stored record, the bytes written before the optional fields
// (docs/architecture.md#times-offsets-and-none); "not waiting for ranks" is
// the field's schema default.
TEST(JobState, NoneIsStoredAsTheFormatsOwnNone) {
  JobState state;
  state.producer_sequences = {{5, 0}, {6, 1}};
  state.NoteProducerEvents(5, std::nullopt);  // A batch without events.
  state.NoteProducerEvents(6, -7);            // Before the epoch: a time.
  const std::string bytes = state.Serialize();
  absl::StatusOr<const fb::StateRecord*> record =
      ReadStateRecord(bytes, fb::StateBody::JobStateRecord, "test");
  ASSERT_TRUE(record.ok()) << record.status();
  const fb::JobStateRecord& r = *(*record)->body_as_JobStateRecord();
  EXPECT_EQ(r.finalized_through_ns(), kNoneOnWire);
  EXPECT_EQ(r.awaiting_ranks_since_ns(), kNoneOnWire);
  ASSERT_NE(r.producers(), nullptr);
  ASSERT_EQ(r.producers()->size(), 2u);
  EXPECT_EQ(r.producers()->Get(0)->newest_event_ns(), kNoneOnWire);
  EXPECT_EQ(r.producers()->Get(1)->newest_event_ns(), -7);

  absl::StatusOr<JobState> parsed = JobState::Parse(bytes);
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(parsed->finalized_through_ns, std::nullopt);
  EXPECT_EQ(parsed->producer_newest_ns.at(5), std::nullopt);
  EXPECT_EQ(parsed->producer_newest_ns.at(6), -7);
  EXPECT_FALSE(parsed->lifecycle.awaiting_ranks());
  EXPECT_EQ(parsed->Serialize(), bytes);

  // Waiting since a time is that time on the wire, and reads back.
  state.lifecycle.awaiting_ranks_since_ns = 0;
  absl::StatusOr<JobState> waiting = JobState::Parse(state.Serialize());
  ASSERT_TRUE(waiting.ok()) << waiting.status();
  EXPECT_EQ(waiting->lifecycle.awaiting_ranks_since_ns, 0);
}

TEST(JobState, ObservationCountsAndLastObservationsRoundTrip) {
  JobState state;
  state.finalized_through_ns = 40'000'000'000;
  state.producer_sequences = {{7, 12}};
  state.NoteProducerEvents(7, 39'000'000'000);
  state.lifecycle.batches_after_end = 1;
  const std::string plain = state.Serialize();

  JobState with = state;
  with.lifecycle.overlapping_observations = 3;
  with.lifecycle.observations_backwards = 2;
  const ObservationInfo a{.id = 11, .start_ns = 5, .end_ns = 90};
  const ObservationInfo b{.id = 12, .start_ns = -7, .end_ns = INT64_MAX};
  const ObservationInfo c{.id = UINT64_MAX, .start_ns = 1, .end_ns = 2};
  with.last_observations[{"node-b", 0, 0}] = a;
  with.last_observations[{"node-a", 3, 0}] = b;
  with.last_observations[{"node-a", -1, 0xfeedull}] = c;
  with.last_observations[{"", -1, 1}] = a;
  const std::string bytes = with.Serialize();
  EXPECT_GT(bytes.size(), plain.size());
  absl::StatusOr<JobState> parsed = JobState::Parse(bytes);
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(parsed->lifecycle, with.lifecycle);
  EXPECT_EQ(parsed->lifecycle.overlapping_observations, 3);
  EXPECT_EQ(parsed->lifecycle.observations_backwards, 2);
  EXPECT_EQ(ReadJobLifecycle(bytes), with.lifecycle);
  EXPECT_EQ(parsed->last_observations, with.last_observations);
  EXPECT_EQ(parsed->Serialize(), bytes);

  // The same streams noted in another order: the same bytes.
  JobState reordered = state;
  reordered.lifecycle = with.lifecycle;
  reordered.last_observations[{"", -1, 1}] = a;
  reordered.last_observations[{"node-a", -1, 0xfeedull}] = c;
  reordered.last_observations[{"node-b", 0, 0}] = a;
  reordered.last_observations[{"node-a", 3, 0}] = b;
  EXPECT_EQ(reordered.Serialize(), bytes);

  // Back to none: the bytes of a state that never had them.
  parsed->lifecycle.overlapping_observations = 0;
  parsed->lifecycle.observations_backwards = 0;
  parsed->last_observations.clear();
  EXPECT_EQ(parsed->Serialize(), plain);
}

TEST(JobState, ForgetsStreamsWhoseLastObservationEndedBeforeTheCutoff) {
  JobState state;
  state.last_observations[{"h", 0, 0}] = {
      .id = 1, .start_ns = 0, .end_ns = 100};
  state.last_observations[{"h", 1, 0}] = {
      .id = 2, .start_ns = 0, .end_ns = 200};
  state.last_observations[{"h", -1, 9}] = {
      .id = 3, .start_ns = 0, .end_ns = 300};
  EXPECT_EQ(state.ForgetObservationsBefore(200), 1);
  EXPECT_FALSE(state.last_observations.contains({"h", 0, 0}));
  EXPECT_EQ(state.last_observations.size(), 2u);
  EXPECT_EQ(state.ForgetObservationsBefore(INT64_MIN), 0);
  EXPECT_EQ(state.ForgetObservationsBefore(INT64_MAX), 2);
  EXPECT_TRUE(state.last_observations.empty());
}

TEST(JobState, AStreamStoredTwiceIsDataLoss) {
  flatbuffers::FlatBufferBuilder builder;
  std::vector<flatbuffers::Offset<fb::ObservationStreamRecord>> streams;
  for (int i = 0; i < 2; ++i) {
    auto host = builder.CreateString("h");
    fb::ObservationStreamRecordBuilder stream(builder);
    stream.add_host(host);
    stream.add_rank(4);
    stream.add_observation_id(10 + i);
    streams.push_back(stream.Finish());
  }
  auto vector = builder.CreateVector(streams);
  fb::JobStateRecordBuilder record(builder);
  record.add_last_observations(vector);
  auto body = record.Finish();
  const std::string bytes =
      FinishStateRecord(builder, fb::StateBody::JobStateRecord, body.Union());
  absl::StatusOr<JobState> parsed = JobState::Parse(bytes);
  EXPECT_EQ(parsed.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(parsed.status().message(),
              ::testing::HasSubstr("host h rank 4 producer 0 twice"));
}

}  // namespace
}  // namespace bubblewatch
