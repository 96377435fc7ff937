// ValidateBatch and CheckBatchBytes: every limit rejects with its own reason
// just past its value and accepts at it, and hostile times (whose differences
// overflow int64) are rejected, not undefined behaviour.
#include "processor/batch_validator.h"

#include <cstdint>
#include <limits>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace bubblewatch {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

DecodedBatch Batch(int events, const std::string& name = "gemm") {
  DecodedBatch b;
  b.header.job = "job-a";
  b.header.host = "host-1";
  NameInterner names(&b.trace);
  const NameId id = names.Intern(name);
  for (int i = 0; i < events; ++i) {
    b.trace.gpu.push_back(GpuActivity{
        .start_ns = 1000 + i * 10, .end_ns = 1005 + i * 10, .name = id});
  }
  return b;
}

std::string Reason(const std::optional<BatchRejection>& r) {
  return r ? r->reason : "accepted";
}

TEST(BatchValidator, AcceptsASaneBatch) {
  EXPECT_EQ(Reason(ValidateBatch(Batch(3))), "accepted");
}

TEST(BatchValidator, CollectiveRecordsAreCheckedLikeEvents) {
  DecodedBatch ok = Batch(2);
  ok.trace.collectives.push_back(
      CollectiveKernel{.start_ns = 1000, .end_ns = 1005, .kernel_name = 0});
  EXPECT_EQ(Reason(ValidateBatch(ok)), "accepted");

  DecodedBatch backwards = ok;
  backwards.trace.collectives[0].end_ns = 990;
  std::optional<BatchRejection> r = ValidateBatch(backwards);
  EXPECT_EQ(Reason(r), "end_before_start");
  EXPECT_THAT(r->detail, HasSubstr("collective kernel #0"));

  DecodedBatch far = ok;
  far.trace.collectives[0].end_ns = 1000 + int64_t{2} * 86'400'000'000'000;
  EXPECT_EQ(Reason(ValidateBatch(far)), "duration_over_limit");
  far.trace.collectives[0].start_ns = std::numeric_limits<int64_t>::max() - 1;
  far.trace.collectives[0].end_ns = std::numeric_limits<int64_t>::max();
  EXPECT_EQ(Reason(ValidateBatch(far)), "timestamps_out_of_range");

  DecodedBatch spread = ok;
  spread.trace.collectives[0].start_ns = int64_t{3} * 86'400'000'000'000;
  spread.trace.collectives[0].end_ns = spread.trace.collectives[0].start_ns;
  EXPECT_EQ(Reason(ValidateBatch(spread)), "timestamps_out_of_range");

  // One record per kernel at most.
  DecodedBatch many = Batch(1);
  for (int i = 0; i < 2; ++i) {
    many.trace.collectives.push_back(
        CollectiveKernel{.start_ns = 1000, .end_ns = 1005, .kernel_name = 0});
  }
  r = ValidateBatch(many);
  EXPECT_EQ(Reason(r), "too_many_events");
  EXPECT_THAT(r->detail, HasSubstr("2 collective records for 1 GPU"));
}

TEST(BatchValidator, BatchBytesLimitIsCheckedBeforeDecoding) {
  BatchLimits limits;
  limits.max_batch_bytes = 1000;
  EXPECT_EQ(Reason(CheckBatchBytes(1000, limits)), "accepted");
  std::optional<BatchRejection> r = CheckBatchBytes(1001, limits);
  EXPECT_EQ(Reason(r), "batch_too_large");
  EXPECT_THAT(r->detail, HasSubstr("1001 bytes"));
  EXPECT_EQ(Reason(CheckBatchBytes(int64_t{64} << 20)), "accepted");
  EXPECT_EQ(Reason(CheckBatchBytes((int64_t{64} << 20) + 1)),
            "batch_too_large");
}

TEST(BatchValidator, EventsPerBatch) {
  BatchLimits limits;
  limits.max_events = 4;
  EXPECT_EQ(Reason(ValidateBatch(Batch(4), limits)), "accepted");
  DecodedBatch b = Batch(4);
  b.trace.cpu.push_back(CpuEvent{.start_ns = 1, .end_ns = 2});
  EXPECT_EQ(Reason(ValidateBatch(b, limits)), "too_many_events");
}

TEST(BatchValidator, NameLengthCoversEventNamesJobAndHost) {
  BatchLimits limits;
  limits.max_name_bytes = 8;
  EXPECT_EQ(Reason(ValidateBatch(Batch(1, "12345678"), limits)), "accepted");
  std::optional<BatchRejection> r =
      ValidateBatch(Batch(1, "123456789"), limits);
  EXPECT_EQ(Reason(r), "name_too_long");
  EXPECT_THAT(r->detail, HasSubstr("9 bytes"));
  DecodedBatch job = Batch(1);
  job.header.job = std::string(9, 'j');
  EXPECT_EQ(Reason(ValidateBatch(job, limits)), "name_too_long");
  DecodedBatch host = Batch(1);
  host.header.host = std::string(9, 'h');
  EXPECT_EQ(Reason(ValidateBatch(host, limits)), "name_too_long");
  // The detail quotes only the start of the name, escaped.
  DecodedBatch binary = Batch(1, std::string(5000, '\x01'));
  r = ValidateBatch(binary);
  EXPECT_EQ(Reason(r), "name_too_long");
  EXPECT_LT(r->detail.size(), 300u);
}

TEST(BatchValidator, StringTableEntriesAndBytes) {
  BatchLimits limits;
  limits.max_names = 3;
  DecodedBatch b = Batch(1);
  b.trace.names.push_back("unused-1");
  b.trace.names.push_back("unused-2");
  EXPECT_EQ(Reason(ValidateBatch(b, limits)), "accepted");
  b.trace.names.push_back("unused-3");
  EXPECT_EQ(Reason(ValidateBatch(b, limits)), "string_table_too_large");

  BatchLimits bytes;
  bytes.max_string_table_bytes = 10;
  DecodedBatch c = Batch(1, "12345");  // 5 bytes
  c.trace.names.push_back("abcde");    // 10 in all
  EXPECT_EQ(Reason(ValidateBatch(c, bytes)), "accepted");
  c.trace.names.push_back("x");
  std::optional<BatchRejection> r = ValidateBatch(c, bytes);
  EXPECT_EQ(Reason(r), "string_table_too_large");
  EXPECT_THAT(r->detail, HasSubstr("11 bytes of names"));
}

// Regression: an event from INT64_MIN to INT64_MAX has a duration that
// overflows int64 (was signed overflow, UB, in CheckInterval).
TEST(BatchValidator, DurationOfExtremeTimesDoesNotOverflow) {
  DecodedBatch b = Batch(0);
  b.trace.gpu.push_back(
      GpuActivity{.start_ns = std::numeric_limits<int64_t>::min(),
                  .end_ns = std::numeric_limits<int64_t>::max(),
                  .name = 0});
  EXPECT_EQ(Reason(ValidateBatch(b)), "timestamps_out_of_range");
}

// Regression, found by the event_batch fuzzer (UBSan): the detail of an
// event ending ~9e18 ns before it starts computed start - end in int64.
TEST(BatchValidator, EndFarBeforeStartDoesNotOverflow) {
  DecodedBatch b = Batch(0);
  b.trace.gpu.push_back(GpuActivity{.start_ns = 1'700'000'000'000'000'000,
                                    .end_ns = -7'559'400'833'873'739'676,
                                    .name = 0});
  std::optional<BatchRejection> r = ValidateBatch(b);
  EXPECT_EQ(Reason(r), "end_before_start");
  EXPECT_THAT(r->detail, HasSubstr("ends 9259400833873739676 ns before"));
}

// Regression: a kernel near INT64_MAX passed every check (its
// duration and spread were sane) and crash-looped the processor.
TEST(BatchValidator, TimesOutsideTheAcceptedRange) {
  for (int64_t start : {int64_t{9'223'372'030'000'000'000},
                        -kMaxEventTimeNs - 1, kMaxEventTimeNs}) {
    DecodedBatch b = Batch(0);
    b.trace.gpu.push_back(GpuActivity{
        .start_ns = start, .end_ns = start + (start < 0 ? 1 : 0), .name = 0});
    std::optional<BatchRejection> r = ValidateBatch(b);
    if (start == kMaxEventTimeNs) {
      EXPECT_EQ(Reason(r), "accepted");
    } else {
      EXPECT_EQ(Reason(r), "timestamps_out_of_range") << start;
      EXPECT_THAT(r->detail, HasSubstr("outside the accepted"));
    }
  }
}

// Regression: a job named "bad\xff\xfe-job" broke /metrics
// (promtool), the JSON API and `query jobs`; a newline forged log lines.
TEST(BatchValidator, JobNameMustBePrintableUtf8) {
  for (const std::string job : {"bad\xff\xfe-job", "job\nforged", "a\x1b[0m"}) {
    DecodedBatch b = Batch(1);
    b.header.job = job;
    std::optional<BatchRejection> r = ValidateBatch(b);
    EXPECT_EQ(Reason(r), "bad_job_name");
    EXPECT_THAT(r->detail, Not(HasSubstr("\n")));
  }
  DecodedBatch b = Batch(1);
  b.header.job = "job-\xC3\xA9t\xC3\xA9";  // UTF-8 is fine.
  EXPECT_EQ(Reason(ValidateBatch(b)), "accepted");
}

TEST(BatchValidator, OtherNamesAreEscapedNotRejected) {
  DecodedBatch b = Batch(1, "gemm\n[error] forged");
  b.header.host = "host\xff";
  b.trace.host = b.header.host;
  EXPECT_EQ(Reason(ValidateBatch(b)), "accepted");
  EscapeUnprintableNames(&b);
  EXPECT_EQ(b.trace.names[0], "gemm\\n[error] forged");
  EXPECT_EQ(b.header.host, "host\\xff");
  EXPECT_EQ(b.trace.host, "host\\xff");
}

TEST(BatchValidator, EmptyJob) {
  DecodedBatch b = Batch(1);
  b.header.job.clear();
  EXPECT_EQ(Reason(ValidateBatch(b)), "empty_job");
}

}  // namespace
}  // namespace bubblewatch
