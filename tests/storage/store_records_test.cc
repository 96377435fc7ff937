#include "storage/store_records.h"

#include <string>

#include "gtest/gtest.h"

namespace bubblewatch {
namespace {

TEST(StoreRecords, JobRecordRoundTrips) {
  const JobRecord in{.last_event_ns = -5,
                     .last_seen_wall_ns = 1'700'000'000'000'000'000,
                     .window_count = 2160,
                     .latest_window_start_ns = 90,
                     .oldest_window_start_ns = -10,
                     .state = std::string("a\0b", 3)};
  absl::StatusOr<JobRecord> out = DecodeJobRecord(EncodeJobRecord(in));
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(out->last_event_ns, -5);
  EXPECT_EQ(out->last_seen_wall_ns, in.last_seen_wall_ns);
  EXPECT_EQ(out->window_count, 2160);
  EXPECT_EQ(out->latest_window_start_ns, 90);
  EXPECT_EQ(out->oldest_window_start_ns, -10);
  EXPECT_EQ(out->state, in.state);
  out = DecodeJobRecord(EncodeJobRecord(in), /*with_state=*/false);
  ASSERT_TRUE(out.ok());
  EXPECT_TRUE(out->state.empty());
}

TEST(StoreRecords, FormatOneJobRecordHasUnknownOldest) {
  std::string v1(1 + 4 * 8, '\0');
  v1[0] = 1;
  v1[1 + 16] = 7;  // window_count = 7.
  v1 += "state";
  absl::StatusOr<JobRecord> out = DecodeJobRecord(v1);
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(out->window_count, 7);
  EXPECT_EQ(out->oldest_window_start_ns, JobRecord::kUnknownOldest);
  EXPECT_EQ(out->state, "state");
}

TEST(StoreRecords, MalformedRecordsAreDataLoss) {
  EXPECT_EQ(DecodeJobRecord("").status().code(), absl::StatusCode::kDataLoss);
  EXPECT_EQ(DecodeJobRecord(std::string(10, '\2')).status().code(),
            absl::StatusCode::kDataLoss);
  EXPECT_EQ(DecodeJobRecord(std::string(50, '\x09')).status().code(),
            absl::StatusCode::kDataLoss);
  EXPECT_EQ(DecodeProgressRecord("\1abc").status().code(),
            absl::StatusCode::kDataLoss);
  std::string progress =
      EncodeProgressRecord({.resume_offset = 3, .committed_position = 9});
  absl::StatusOr<ProgressRecord> p = DecodeProgressRecord(progress);
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->resume_offset, 3);
  EXPECT_EQ(p->committed_position, 9);
  EXPECT_EQ(p->state, "");
  // Format 1 (no state) is exactly 17 bytes; trailing bytes are corruption.
  std::string old = progress;
  old[0] = '\1';
  ASSERT_TRUE(DecodeProgressRecord(old).ok());
  EXPECT_EQ(DecodeProgressRecord(old + "x").status().code(),
            absl::StatusCode::kDataLoss);
  EXPECT_EQ(DecodeProgressRecord(progress.substr(0, 10)).status().code(),
            absl::StatusCode::kDataLoss);
  // Format 2 carries the processor's state blob, byte for byte.
  std::string with_state = EncodeProgressRecord(
      {.resume_offset = 4, .committed_position = 8, .state = {"a\0b", 3}});
  absl::StatusOr<ProgressRecord> q = DecodeProgressRecord(with_state);
  ASSERT_TRUE(q.ok());
  EXPECT_EQ(q->resume_offset, 4);
  EXPECT_EQ(q->committed_position, 8);
  EXPECT_EQ(q->state, std::string("a\0b", 3));
}

}  // namespace
}  // namespace bubblewatch
