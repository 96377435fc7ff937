// ValidateBatch: hostile times (whose differences overflow int64) are
// rejected, not undefined behaviour.
#include "processor/batch_validator.h"

#include <cstdint>
#include <limits>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace bubblewatch {
namespace {

using ::testing::HasSubstr;

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

// Regression: an event from INT64_MIN to INT64_MAX has a duration that
// overflows int64 (was signed overflow, UB, in CheckInterval).
TEST(BatchValidator, DurationOfExtremeTimesDoesNotOverflow) {
  DecodedBatch b = Batch(0);
  b.trace.gpu.push_back(
      GpuActivity{.start_ns = std::numeric_limits<int64_t>::min(),
                  .end_ns = std::numeric_limits<int64_t>::max(),
                  .name = 0});
  EXPECT_EQ(Reason(ValidateBatch(b)), "duration_over_limit");
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

}  // namespace
}  // namespace bubblewatch
