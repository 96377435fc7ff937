// The shared helpers keep the promises their headers make.
#include <zlib.h>

#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/big_input.h"
#include "tests/testing/command_flags.h"
#include "tests/testing/files.h"
#include "tests/testing/poll.h"
#include "tests/testing/temp_dir.h"

namespace bubblewatch::testing {
namespace {

namespace fs = std::filesystem;

TEST(TempDir, IsFreshAndEmptyAndGoneWithItsContentsAfterItsScope) {
  std::string path;
  {
    TempDir a;
    TempDir b;
    path = a.path();
    EXPECT_NE(a.path(), b.path());
    ASSERT_TRUE(fs::is_directory(a.path()));
    EXPECT_TRUE(fs::is_empty(a.path()));
    EXPECT_EQ(a.Sub("x"), a.path() + "/x");
    fs::create_directories(a.Sub("nested/deeper"));
    WriteFile(a.Sub("nested/deeper/file"), "bytes");
  }
  EXPECT_FALSE(fs::exists(path));
}

TEST(Files, WriteThenReadGivesTheSameBytes) {
  TempDir dir;
  const std::string bytes("line\r\nwith a NUL \0 and\nno final newline", 39);
  WriteFile(dir.Sub("f"), bytes);
  EXPECT_EQ(ReadFile(dir.Sub("f")), bytes);
  // Replaced, not appended to.
  WriteFile(dir.Sub("f"), "short");
  EXPECT_EQ(ReadFile(dir.Sub("f")), "short");
  WriteFile(dir.Sub("f"), "");
  EXPECT_EQ(ReadFile(dir.Sub("f")), "");
}

TEST(Files, AMissingFileReadsAsEmptyWithoutAFailure) {
  TempDir dir;
  EXPECT_EQ(ReadFile(dir.Sub("not-there")), "");
}

TEST(PollUntil, ReturnsAsSoonAsTheConditionHolds) {
  int calls = 0;
  const absl::Time start = absl::Now();
  EXPECT_TRUE(PollUntil([&] { return ++calls == 3; }, absl::Seconds(30),
                        absl::Milliseconds(1)));
  EXPECT_EQ(calls, 3);
  EXPECT_LT(absl::Now() - start, absl::Seconds(10));
}

TEST(PollUntil, GivesUpAfterTheTimeoutHavingAskedOnceMoreAtTheEnd) {
  const absl::Time start = absl::Now();
  absl::Time last_call;
  EXPECT_FALSE(PollUntil(
      [&] {
        last_call = absl::Now();
        return false;
      },
      absl::Milliseconds(100), absl::Milliseconds(30)));
  EXPECT_GE(absl::Now() - start, absl::Milliseconds(100));
  EXPECT_GE(last_call - start, absl::Milliseconds(100));
}

TEST(PollUntil, SeesAConditionThatBecameTrueDuringTheLastInterval) {
  const absl::Time deadline = absl::Now() + absl::Milliseconds(50);
  // Asked at the start (false), then, after one interval longer than the
  // timeout, once more (true by then).
  EXPECT_TRUE(PollUntil([&] { return absl::Now() >= deadline; },
                        absl::Milliseconds(50), absl::Milliseconds(200)));
}

TEST(PollUntil, AZeroTimeoutAsksOnce) {
  int calls = 0;
  EXPECT_TRUE(PollUntil(
      [&] {
        ++calls;
        return true;
      },
      absl::ZeroDuration()));
  EXPECT_EQ(calls, 1);
}

TEST(WriteGzipWithBlanks, InflatesToPrefixBlanksAndSuffix) {
  TempDir dir;
  const std::string path = dir.Sub("b.gz");
  WriteGzipWithBlanks(path, "{", 3 << 20, "}");
  gzFile in = gzopen(path.c_str(), "rb");
  ASSERT_NE(in, nullptr);
  std::string inflated;
  char buffer[1 << 16];
  for (int n; (n = gzread(in, buffer, sizeof(buffer))) > 0;) {
    inflated.append(buffer, n);
  }
  gzclose(in);
  ASSERT_EQ(inflated.size(), (3u << 20) + 2);
  EXPECT_EQ(inflated.front(), '{');
  EXPECT_EQ(inflated.back(), '}');
  EXPECT_EQ(inflated.find_first_not_of(' ', 1), inflated.size() - 1);
  EXPECT_LT(std::filesystem::file_size(path), 64u << 10);
}

TEST(PeakRssGrowth, SeesMemoryTouchedSinceConstruction) {
  PeakRssGrowth rss;
  constexpr size_t kBytes = 64 << 20;
  auto block = std::make_unique<char[]>(kBytes);
  std::memset(block.get(), 1, kBytes);
  EXPECT_GE(rss.bytes(), static_cast<int64_t>(kBytes) / 2);
  EXPECT_EQ(block[kBytes - 1], 1);
}

TEST(SetFlags, ReplacesFlagsItHasAndAppendsTheRest) {
  std::vector<std::string> args = {
      "process",   "--lateness",      "5s", "--windows-topic",
      "t.windows", "--store-no-sync", "-X", "a=1"};
  SetFlags(args, {"--lateness", "2s", "--windows-topic", "", "--store-no-sync",
                  "-X", "a=2", "--http", "127.0.0.1:0", "--json"});
  EXPECT_THAT(args, ::testing::ElementsAre(
                        "process", "--lateness", "2s", "--windows-topic", "",
                        "--store-no-sync", "-X", "a=1", "-X", "a=2", "--http",
                        "127.0.0.1:0", "--json"));
}

}  // namespace
}  // namespace bubblewatch::testing
