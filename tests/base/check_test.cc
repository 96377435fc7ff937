#include "base/check.h"

#include "base/option_problems.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace bubblewatch {
namespace {

using ::testing::HasSubstr;

TEST(CheckDeathTest, AFailedCheckNamesTheConditionAndWhereAndAborts) {
  int x = 3;
  BW_CHECK(x == 3);  // Holds: nothing happens.
  EXPECT_DEATH(BW_CHECK(x > 5), "check_test.cc:[0-9]+: check failed: x > 5");
}

TEST(CheckDeathTest, DebugChecksRunOnlyWithoutNdebug) {
  int evaluated = 0;
  auto count = [&] {
    ++evaluated;
    return true;
  };
  BW_DCHECK(count());
#ifdef NDEBUG
  EXPECT_EQ(evaluated, 0);  // Compiled out: not even evaluated.
  BW_DCHECK(evaluated == 42);
#else
  EXPECT_EQ(evaluated, 1);
  EXPECT_DEATH(BW_DCHECK(evaluated == 42), "check failed: evaluated == 42");
#endif
}

TEST(OptionProblems, ListsEveryProblemInOrderWithNestedNames) {
  OptionProblems p("FooOptions");
  EXPECT_TRUE(p.ToStatus().ok());
  p.Check(true, "fine", "is never listed");
  p.Check(false, "size", "must be >= 1, not 0");
  OptionProblems nested = p.Field("inner");
  nested.Check(false, "rate", "must be > 0");
  nested.Field("deeper").Check(false, "x", "is required");
  p.Check(false, "name", "is required");
  absl::Status s = p.ToStatus();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(),
            "invalid FooOptions: size must be >= 1, not 0; inner.rate must "
            "be > 0; inner.deeper.x is required; name is required");
  EXPECT_EQ(nested.problems().size(), 4u);  // One shared list.
}

}  // namespace
}  // namespace bubblewatch
