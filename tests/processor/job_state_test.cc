#include "processor/job_state.h"

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
  EXPECT_EQ(parsed->Serialize(), bytes);
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
  EXPECT_EQ(state.NewestEventNs(), INT64_MIN);
  state.finalized_through_ns = 40;
  EXPECT_EQ(state.NewestEventNs(), 40);
  state.NoteProducerEvents(1, 55);
  state.NoteProducerEvents(2, 30);
  EXPECT_EQ(state.NewestEventNs(), 55);
}

}  // namespace
}  // namespace bubblewatch
