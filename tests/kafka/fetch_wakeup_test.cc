#include "kafka/fetch_wakeup.h"

#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "kafka/kafka_config.h"

namespace bubblewatch {
namespace {

constexpr absl::Duration kOneMs = absl::Milliseconds(1);
const absl::Time kStart = absl::FromUnixSeconds(1'700'000'000);

TEST(FetchWakeup, OnlyLibrariesWithoutTheFetchQueueBackoffNeedIt) {
  EXPECT_TRUE(FetchWakeup::Needed(0x020002ff));  // Debian bookworm's 2.0.2.
  EXPECT_FALSE(FetchWakeup::Needed(kRdKafkaVersionWithFetchQueueBackoff));
  EXPECT_FALSE(FetchWakeup::Needed(0x020a00ff));
}

TEST(FetchWakeup, SeeksAfterTheWaitOfSilenceAndNotBefore) {
  FetchWakeup w(100 * kOneMs, 1000 * kOneMs);
  w.OnMessage(kStart);
  EXPECT_FALSE(w.Due(kStart + 99 * kOneMs));
  EXPECT_TRUE(w.Due(kStart + 100 * kOneMs));
  EXPECT_EQ(w.seeks(), 1);
  // Silence goes on: the next seek waits twice as long, up to the maximum.
  EXPECT_FALSE(w.Due(kStart + 299 * kOneMs));
  EXPECT_TRUE(w.Due(kStart + 300 * kOneMs));
  EXPECT_TRUE(w.Due(kStart + 700 * kOneMs));
  EXPECT_TRUE(w.Due(kStart + 1500 * kOneMs));
  EXPECT_EQ(w.wait(), 1000 * kOneMs);
  EXPECT_FALSE(w.Due(kStart + 2499 * kOneMs));
  EXPECT_TRUE(w.Due(kStart + 2500 * kOneMs));
}

TEST(FetchWakeup, MessagesRestartTheWaitAtWhatTheLastSeekTaught) {
  FetchWakeup w(100 * kOneMs, 1000 * kOneMs);
  w.OnMessage(kStart);
  ASSERT_TRUE(w.Due(kStart + 100 * kOneMs));
  // A near broker: the seek brings a message in 5 ms, the wait stays 100.
  w.OnMessage(kStart + 105 * kOneMs);
  EXPECT_EQ(w.wait(), 100 * kOneMs);
  EXPECT_FALSE(w.Due(kStart + 204 * kOneMs));
  ASSERT_TRUE(w.Due(kStart + 205 * kOneMs));
  // A far one: 150 ms to the first message, so a fetch in flight is given
  // 600 ms before the next seek would abandon it.
  w.OnMessage(kStart + 355 * kOneMs);
  EXPECT_EQ(w.wait(), 600 * kOneMs);
  w.OnMessage(kStart + 400 * kOneMs);  // Messages without a seek teach nothing.
  EXPECT_EQ(w.wait(), 600 * kOneMs);
  EXPECT_FALSE(w.Due(kStart + 999 * kOneMs));
  EXPECT_TRUE(w.Due(kStart + 1000 * kOneMs));
  // Never past the maximum, however slow.
  w.OnMessage(kStart + 1900 * kOneMs);
  EXPECT_EQ(w.wait(), 1000 * kOneMs);
}

TEST(FetchWakeup, SkipsOnlyWhatASoughtPartitionSendsAgain) {
  FetchWakeup w;
  // Nothing sought: a lower offset is not this class's to skip.
  EXPECT_FALSE(w.Refetched("events", 0, 5, 10));
  // A librdkafka that needs no wakeup never seeks, whatever the lag.
  FetchWakeup modern(100 * kOneMs, 1000 * kOneMs,
                     kRdKafkaVersionWithFetchQueueBackoff);
  const FetchWakeup::Position lagging{
      .topic = "events", .partition = 0, .next_offset = 10};
  modern.OnMessage(kStart);
  modern.WakeIfStalled(nullptr, {&lagging, 1}, kStart + 10 * kOneMs * 1000);
  EXPECT_EQ(modern.seeks(), 0);
  EXPECT_EQ(w.refetched(), 0);
}

}  // namespace
}  // namespace bubblewatch
