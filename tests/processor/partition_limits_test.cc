#include "processor/partition_limits.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace bubblewatch {
namespace {

using ::testing::HasSubstr;

TEST(PartitionLimits, OpenWindowsAtTheLimitPassAndOneMoreIsRejected) {
  ProcessorLimits limits;
  limits.max_open_windows = 720;
  EXPECT_EQ(CheckOpenWindows(0, 10'000'000'000, limits), std::nullopt);
  EXPECT_EQ(CheckOpenWindows(720, 10'000'000'000, limits), std::nullopt);
  std::optional<BatchRejection> r =
      CheckOpenWindows(721, 10'000'000'000, limits);
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->reason, "too_many_open_windows");
  EXPECT_THAT(r->detail, HasSubstr("721 open windows of 10s (limit 720)"));
}

TEST(PartitionLimits, NewJobsUpToTheLimitPassAndTheNextIsRejected) {
  ProcessorLimits limits;
  limits.max_jobs_per_partition = 3;
  // `tracked` jobs already: the new one would be number tracked + 1.
  EXPECT_EQ(CheckNewJob(0, limits), std::nullopt);
  EXPECT_EQ(CheckNewJob(2, limits), std::nullopt);  // Becomes the 3rd.
  std::optional<BatchRejection> r = CheckNewJob(3, limits);
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->reason, "too_many_jobs");
  EXPECT_THAT(r->detail, HasSubstr("already tracks 3 jobs (limit 3)"));
}

TEST(PartitionLimits, DefaultsLeaveRoomForMinutesOfClockSkew) {
  ProcessorLimits limits;
  // 10 minutes of skew between two hosts with 10 s windows and 2 s of
  // lateness keep about 62 windows open.
  EXPECT_EQ(CheckOpenWindows(62, 10'000'000'000, limits), std::nullopt);
  EXPECT_GE(limits.max_open_windows, 360);
  EXPECT_GE(limits.max_jobs_per_partition, 1000);
}

// Regression: one forged batch with a real producer id and
// sequence 2^64 - 1 was adopted, and the next real batches were dropped as
// duplicates. A jump beyond the step is rejected instead.
TEST(PartitionLimits, SequenceMayOnlyAdvanceByABoundedStep) {
  ProcessorLimits limits;
  limits.max_sequence_step = 1024;
  absl::flat_hash_map<uint64_t, uint64_t> counted = {{7, 100}};
  auto check = [&](uint64_t producer, uint64_t sequence) {
    BatchHeader header;
    header.producer_id = producer;
    header.sequence = sequence;
    return CheckSequenceStep(counted, header, limits);
  };
  EXPECT_EQ(check(7, 101), std::nullopt);
  EXPECT_EQ(check(7, 100 + 1024), std::nullopt);
  EXPECT_EQ(check(7, 50), std::nullopt);  // A duplicate: not this check's.
  std::optional<BatchRejection> r = check(7, UINT64_MAX);
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->reason, "sequence_gap");
  EXPECT_THAT(r->detail, HasSubstr("from batch 100 to 18446744073709551615"));
  EXPECT_EQ(check(7, 100 + 1025)->reason, "sequence_gap");
  // A producer the job does not track starts within the step of batch 0
  // (as if it had counted batch -1), so a forged first batch cannot shadow
  // the real stream either. One without an id is not deduplicated.
  EXPECT_EQ(check(8, 0), std::nullopt);
  EXPECT_EQ(check(8, 1023), std::nullopt);
  r = check(8, 1024);
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->reason, "sequence_gap");
  EXPECT_THAT(r->detail, HasSubstr("not tracked by its job and starts at "
                                   "batch 1024 (a stream starts below 1024)"));
  EXPECT_EQ(check(8, UINT64_MAX)->reason, "sequence_gap");
  EXPECT_EQ(check(0, UINT64_MAX), std::nullopt);
}

TEST(LimitLedger, RemembersRejectionsUntilTheResumeOffsetPassesThem) {
  LimitLedger ledger;
  EXPECT_TRUE(ledger.empty());
  ledger.RecordRejection(5);
  ledger.RecordRejection(9);
  ledger.RecordRejection(9);  // Once.
  ledger.RecordRejection(12);
  EXPECT_EQ(ledger.rejections(), 3u);
  EXPECT_TRUE(ledger.WasRejected(9));
  EXPECT_FALSE(ledger.WasRejected(10));
  ledger.ForgetBefore(9);
  EXPECT_FALSE(ledger.WasRejected(5));
  EXPECT_TRUE(ledger.WasRejected(9));
  ledger.ForgetBefore(100);
  EXPECT_TRUE(ledger.empty());
}

TEST(LimitLedger, RestoresWhatASnapshotHeldAndRefusesDisorder) {
  LimitLedger ledger;
  ledger.NoteEvent(1'700'000'000'000'000'000);
  ledger.NoteEvent(5);  // Not newer.
  ledger.RecordRejection(3);
  ledger.RecordRejection(40);
  absl::StatusOr<LimitLedger> back =
      LimitLedger::Restore(ledger.newest_event_ns(), ledger.rejected_offsets());
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->newest_event_ns(), 1'700'000'000'000'000'000);
  EXPECT_TRUE(back->WasRejected(3));
  EXPECT_TRUE(back->WasRejected(40));
  EXPECT_EQ(back->rejections(), 2u);
  for (const std::vector<int64_t>& bad :
       {std::vector<int64_t>{7, 3}, std::vector<int64_t>{4, 4}}) {
    EXPECT_EQ(LimitLedger::Restore(0, bad).status().code(),
              absl::StatusCode::kDataLoss);
  }
}

}  // namespace
}  // namespace bubblewatch
