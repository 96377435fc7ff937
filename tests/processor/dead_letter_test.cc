// MakeDeadLetter: a dead letter always fits (payload, key, headers and the
// detail are bounded), says what it cut, keeps the original headers and
// where the message came from, and its own headers win over forged ones.
#include "processor/dead_letter.h"

#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace bubblewatch {
namespace {

using ::testing::Contains;
using ::testing::Pair;

// The last value of header `name`, as a reader taking the last one sees it.
std::string Last(const DeadLetter& d, const std::string& name) {
  std::string value = "<absent>";
  for (const auto& [n, v] : d.headers) {
    if (n == name) value = v;
  }
  return value;
}

size_t RecordBytes(const DeadLetter& d) {
  size_t n = d.key.size() + d.payload.size();
  for (const auto& [name, value] : d.headers) n += name.size() + value.size();
  return n;
}

TEST(DeadLetter, SmallMessageIsKeptWholeWithItsSourceAndHeaders) {
  RejectedMessage m{.topic = "bubblewatch.events",
                    .partition = 3,
                    .offset = 42,
                    .key = "job-a",
                    .payload = "not a batch",
                    .headers = {{"trace-id", "abc"}, {"trace-id", "def"}}};
  DeadLetter d = MakeDeadLetter(m, "undecodable", "not a FlatBuffer");
  EXPECT_EQ(d.key, "job-a");
  EXPECT_EQ(d.payload, "not a batch");
  EXPECT_EQ(d.truncated, "");
  EXPECT_EQ(Last(d, "bubblewatch.error"), "undecodable: not a FlatBuffer");
  EXPECT_EQ(Last(d, "bubblewatch.reason"), "undecodable");
  EXPECT_EQ(Last(d, "bubblewatch.source.topic"), "bubblewatch.events");
  EXPECT_EQ(Last(d, "bubblewatch.source.partition"), "3");
  EXPECT_EQ(Last(d, "bubblewatch.source.offset"), "42");
  EXPECT_EQ(Last(d, "bubblewatch.source.bytes"), "11");
  EXPECT_EQ(Last(d, "bubblewatch.truncated"), "");
  // Regression: dead letters lost the original headers.
  ASSERT_GE(d.headers.size(), 2u);
  EXPECT_EQ(d.headers[0],
            std::make_pair(std::string("trace-id"), std::string("abc")));
  EXPECT_EQ(d.headers[1],
            std::make_pair(std::string("trace-id"), std::string("def")));
}

// Regression: a 20 MB rejected batch was copied whole into its
// dead letter, the broker refused it ("Message size too large"), and the
// processor stopped on every restart.
TEST(DeadLetter, HugeMessageIsCutToFitAndSaysSo) {
  const std::string payload(20 << 20, 'x');
  const std::string key(1 << 20, 'k');
  RejectedMessage m{.topic = "t", .key = key, .payload = payload};
  for (int i = 0; i < 100; ++i) {
    m.headers.emplace_back("h" + std::to_string(i), std::string(4 << 10, 'v'));
  }
  DeadLetter d =
      MakeDeadLetter(m, "batch_too_large", std::string(1 << 20, 'd'));
  EXPECT_LT(RecordBytes(d), 400u << 10);
  EXPECT_EQ(d.payload, payload.substr(0, 256 << 10));
  EXPECT_EQ(d.key.size(), 4u << 10);
  EXPECT_EQ(d.truncated, "detail,key,payload,headers");
  EXPECT_EQ(Last(d, "bubblewatch.truncated"), d.truncated);
  EXPECT_EQ(Last(d, "bubblewatch.source.bytes"),
            std::to_string(payload.size()));
  // Whole headers, in order, while they fit the 64 KiB budget.
  EXPECT_THAT(d.headers, Contains(Pair("h0", std::string(4 << 10, 'v'))));
  EXPECT_EQ(Last(d, "h14"), std::string(4 << 10, 'v'));
  EXPECT_EQ(Last(d, "h15"), "<absent>");
}

TEST(DeadLetter, MinimalFormKeepsOnlyWhatDescribesTheMessage) {
  RejectedMessage m{.topic = "t",
                    .partition = 1,
                    .offset = 7,
                    .key = "job",
                    .payload = "payload",
                    .headers = {{"a", "b"}}};
  DeadLetter d = MakeDeadLetter(m, "undecodable", "x", /*minimal=*/true);
  EXPECT_EQ(d.key, "");
  EXPECT_EQ(d.payload, "");
  EXPECT_EQ(d.truncated, "key,payload,headers");
  EXPECT_EQ(Last(d, "a"), "<absent>");
  EXPECT_EQ(Last(d, "bubblewatch.source.offset"), "7");
  EXPECT_EQ(Last(d, "bubblewatch.error"), "undecodable: x");
}

TEST(DeadLetter, ForgedHeadersOfTheSameNameDoNotWin) {
  RejectedMessage m{.topic = "t",
                    .payload = "p",
                    .headers = {{"bubblewatch.error", "ok: nothing wrong"},
                                {"bubblewatch.truncated", ""}}};
  DeadLetter d = MakeDeadLetter(m, "undecodable", "bad", false,
                                DeadLetterLimits{.max_payload_bytes = 0});
  EXPECT_EQ(Last(d, "bubblewatch.error"), "undecodable: bad");
  EXPECT_EQ(Last(d, "bubblewatch.truncated"), "payload");
}

}  // namespace
}  // namespace bubblewatch
