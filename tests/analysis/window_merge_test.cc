// Stage 2's merge of hosts' window parts (analysis/window_merge.h): the top
// bubbles of the parts' tops in the analyzer's order, the job's figures,
// the observations' union, refusals, and the parts' encoding. That merged
// windows equal the single-stage windows of a streamed TP×DP×PP job is
// tests/processor/job_windower_collectives_test.cc's
// HostPartsMergeIntoTheSingleStageWindow.
#include "analysis/window_merge.h"

#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace bubblewatch {
namespace {

BubbleReport Bubble(int32_t device, int64_t start, int64_t length) {
  BubbleReport b;
  b.device = device;
  b.start_ns = start;
  b.end_ns = start + length;
  b.blamed = absl::StrCat("d", device, "@", start);
  return b;
}

DeviceWindow Device(int32_t device, int64_t compute, int64_t bubble,
                    int64_t largest, int64_t largest_start) {
  DeviceWindow d;
  d.device = device;
  d.kernels = 3;
  d.stats.compute_ns = compute;
  d.stats.bubble_ns = bubble;
  d.stats.span_ns = compute + bubble;
  d.stats.attribution[0] = bubble;
  d.stats.largest_bubble_ns = largest;
  d.stats.largest_bubble_start_ns = largest_start;
  return d;
}

HostWindowPart Part(const std::string& host, std::vector<DeviceWindow> devices,
                    std::vector<BubbleReport> top) {
  HostWindowPart p;
  p.job = "job";
  p.host = host;
  p.window.start_ns = 1'000;
  p.window.end_ns = 2'000;
  p.window.devices = std::move(devices);
  p.window.top_bubbles = std::move(top);
  p.gpu_events = 10;
  p.cpu_events = 4;
  return p;
}

TEST(WindowMerge, TopBubblesAreTheTopOfThePartsTopsInTheAnalyzersOrder) {
  // Ties: the earlier, then the lower device.
  std::vector<HostWindowPart> parts = {
      Part("b", {Device(3, 100, 50, 40, 1'200), Device(2, 10, 80, 40, 1'100)},
           {Bubble(3, 1'200, 40), Bubble(2, 1'100, 40), Bubble(3, 1'500, 5)}),
      Part("a", {Device(0, 300, 20, 40, 1'100)},
           {Bubble(0, 1'100, 40), Bubble(0, 1'300, 7), Bubble(0, 1'400, 6)})};
  absl::StatusOr<WindowSummary> w = MergeHostWindowParts(parts, 4);
  ASSERT_TRUE(w.ok()) << w.status();
  ASSERT_EQ(w->window.top_bubbles.size(), 4u);
  EXPECT_EQ(w->window.top_bubbles[0].blamed, "d0@1100");
  EXPECT_EQ(w->window.top_bubbles[1].blamed, "d2@1100");
  EXPECT_EQ(w->window.top_bubbles[2].blamed, "d3@1200");
  EXPECT_EQ(w->window.top_bubbles[3].blamed, "d0@1300");
  // Devices by id; the job's figures summed; the largest bubble the
  // earliest of the longest, on the lowest device.
  ASSERT_EQ(w->window.devices.size(), 3u);
  EXPECT_EQ(w->window.devices[0].device, 0);
  EXPECT_EQ(w->window.devices[2].device, 3);
  EXPECT_EQ(w->window.job.compute_ns, 410);
  EXPECT_EQ(w->window.job.bubble_ns, 150);
  EXPECT_EQ(w->window.job.span_ns, 560);
  EXPECT_EQ(w->window.job.largest_bubble_start_ns, 1'100);
  EXPECT_EQ(w->gpu_events, 20);
  EXPECT_EQ(w->cpu_events, 8);
  // No observation known: no observed time; fewer than two ranks with
  // collectives: no collective analysis.
  EXPECT_FALSE(w->observed_ns.has_value());
  EXPECT_FALSE(w->collectives.has_value());
}

TEST(WindowMerge, ObservedTimeIsTheUnionsNotTheSum) {
  std::vector<HostWindowPart> parts = {Part("a", {Device(0, 1, 1, 0, 0)}, {}),
                                       Part("b", {Device(1, 1, 1, 0, 0)}, {})};
  parts[0].observed = IntervalSet::FromIntervals({{900, 1'600}});
  parts[1].observed = IntervalSet::FromIntervals({{1'500, 1'700}});
  absl::StatusOr<WindowSummary> w = MergeHostWindowParts(parts, 3);
  ASSERT_TRUE(w.ok()) << w.status();
  EXPECT_EQ(w->observed_ns, 700);  // [1000, 1700).
  // A part that knows no observation: the job's window has none either.
  parts[1].observed.reset();
  w = MergeHostWindowParts(parts, 3);
  ASSERT_TRUE(w.ok()) << w.status();
  EXPECT_FALSE(w->observed_ns.has_value());
}

TEST(WindowMerge, PartsThatCannotBeOneWindowAreRefused) {
  EXPECT_FALSE(MergeHostWindowParts({}, 3).ok());
  std::vector<HostWindowPart> parts = {Part("a", {Device(0, 1, 1, 0, 0)}, {}),
                                       Part("b", {Device(0, 1, 1, 0, 0)}, {})};
  absl::StatusOr<WindowSummary> w = MergeHostWindowParts(parts, 3);
  ASSERT_FALSE(w.ok());
  EXPECT_NE(w.status().message().find("device 0 is in two parts"),
            std::string::npos)
      << w.status();
  parts[1].window.devices[0].device = 1;
  parts[1].window.start_ns = 2'000;
  parts[1].window.end_ns = 3'000;
  EXPECT_FALSE(MergeHostWindowParts(parts, 3).ok());
  parts[1].window.start_ns = 1'000;
  parts[1].window.end_ns = 2'000;
  parts[1].host = "a";
  EXPECT_FALSE(MergeHostWindowParts(parts, 3).ok());
  parts[1].host = "b";
  parts[1].job = "other";
  EXPECT_FALSE(MergeHostWindowParts(parts, 3).ok());
  parts[1].job = "job";
  EXPECT_TRUE(MergeHostWindowParts(parts, 3).ok());
}

TEST(WindowMerge, APartTravelsAndBadBytesAreRefused) {
  HostWindowPart part =
      Part("host-3", {Device(6, 100, 50, 40, 1'200)}, {Bubble(6, 1'200, 40)});
  part.observed = IntervalSet::FromIntervals({{-50, 10}, {900, 1'600}});
  RankDigest digest;
  digest.rank = 6;
  digest.host = "host-3";
  digest.job = "job";
  part.digests = {digest, digest};
  part.digests[1].rank = 7;
  part.world_size = 16;
  part.ranks = {0, 6, 7, 2'000'000'000};
  part.last = true;
  const std::string bytes = EncodeHostWindowPart(part);
  absl::StatusOr<HostWindowPart> back = DecodeHostWindowPart(bytes);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->job, "job");
  EXPECT_EQ(back->host, "host-3");
  EXPECT_EQ(back->gpu_events, 10);
  EXPECT_EQ(back->cpu_events, 4);
  ASSERT_TRUE(back->observed.has_value());
  EXPECT_EQ(back->observed->TotalLength(), 760);
  ASSERT_EQ(back->digests.size(), 2u);
  EXPECT_EQ(back->digests[1].rank, 7);
  EXPECT_EQ(back->world_size, 16);
  EXPECT_EQ(back->ranks, part.ranks);
  EXPECT_TRUE(back->last);
  ASSERT_EQ(back->window.top_bubbles.size(), 1u);
  EXPECT_EQ(back->window.top_bubbles[0].blamed, "d6@1200");
  EXPECT_EQ(EncodeHostWindowPart(*back), bytes);

  // Every truncation, and bytes appended, are refused, never read past.
  for (size_t n = 0; n < bytes.size(); ++n) {
    EXPECT_FALSE(DecodeHostWindowPart(bytes.substr(0, n)).ok()) << n;
  }
  EXPECT_FALSE(DecodeHostWindowPart(bytes + "x").ok());
  // Ranks out of order (a step of 0) or past int32 are refused.
  HostWindowPart unordered = part;
  unordered.ranks = {6, 6};
  EXPECT_FALSE(DecodeHostWindowPart(EncodeHostWindowPart(unordered)).ok());
  unordered.ranks = {2'147'483'647};
  EXPECT_TRUE(DecodeHostWindowPart(EncodeHostWindowPart(unordered)).ok());
  std::string other_version = bytes;
  other_version[0] = 9;
  absl::StatusOr<HostWindowPart> refused = DecodeHostWindowPart(other_version);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("unknown version 9"),
            std::string::npos);
}

// The split's host skew (docs/semantics.md#split-jobs): the spread of the
// newest event starts the window's parts carry; a part without one (a
// host with nothing buffered) takes no part in it.
TEST(WindowMerge, HostSkewIsTheSpreadOfThePartsNewestStarts) {
  std::vector<HostWindowPart> parts = {
      Part("a", {Device(0, 100, 50, 40, 1'200)}, {}),
      Part("b", {Device(1, 100, 50, 40, 1'200)}, {}),
      Part("c", {Device(2, 100, 50, 40, 1'200)}, {})};
  parts[0].newest_start_ns = 5'000'000;
  parts[1].newest_start_ns = 8'000'000;
  absl::StatusOr<WindowSummary> merged = MergeHostWindowParts(parts, 3);
  ASSERT_TRUE(merged.ok()) << merged.status();
  EXPECT_EQ(merged->host_skew_ns, 3'000'000);
  parts[2].newest_start_ns = 4'000'000;
  merged = MergeHostWindowParts(parts, 3);
  ASSERT_TRUE(merged.ok()) << merged.status();
  EXPECT_EQ(merged->host_skew_ns, 4'000'000);
  // One host alone has no skew.
  merged = MergeHostWindowParts(absl::MakeConstSpan(parts).subspan(0, 1), 3);
  ASSERT_TRUE(merged.ok()) << merged.status();
  EXPECT_EQ(merged->host_skew_ns, 0);
  // An end or late part is no window's part.
  parts[2].kind = HostWindowPart::Kind::kEnd;
  EXPECT_FALSE(MergeHostWindowParts(parts, 3).ok());
}

// The kinds of part, the newest start and the late counts travel; a
// version 1 part (before them) still decodes, as a window part without a
// newest start.
TEST(WindowMerge, EndAndLatePartsTravelAndVersion1PartsDecode) {
  HostWindowPart late;
  late.job = "job";
  late.host = "host-1";
  late.kind = HostWindowPart::Kind::kLate;
  late.window.start_ns = -2'000;
  late.window.end_ns = -1'000;
  late.late_offset = 1'234;
  late.late = {{.window_start_ns = -2'000, .events = 3, .collectives = 0},
               {.window_start_ns = 5'000, .events = 0, .collectives = 2}};
  std::string bytes = EncodeHostWindowPart(late);
  absl::StatusOr<HostWindowPart> back = DecodeHostWindowPart(bytes);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->kind, HostWindowPart::Kind::kLate);
  EXPECT_EQ(back->late_offset, 1'234);
  EXPECT_EQ(back->late, late.late);
  EXPECT_FALSE(back->newest_start_ns.has_value());
  EXPECT_EQ(EncodeHostWindowPart(*back), bytes);
  for (size_t n = 0; n < bytes.size(); ++n) {
    EXPECT_FALSE(DecodeHostWindowPart(bytes.substr(0, n)).ok()) << n;
  }
  // Window starts not ascending are refused.
  HostWindowPart unordered = late;
  std::swap(unordered.late[0], unordered.late[1]);
  EXPECT_FALSE(DecodeHostWindowPart(EncodeHostWindowPart(unordered)).ok());

  HostWindowPart end = late;
  end.kind = HostWindowPart::Kind::kEnd;
  end.late_offset = -1;
  end.late.clear();
  end.last = true;
  back = DecodeHostWindowPart(EncodeHostWindowPart(end));
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->kind, HostWindowPart::Kind::kEnd);
  EXPECT_TRUE(back->last);

  HostWindowPart window =
      Part("host-3", {Device(6, 100, 50, 40, 1'200)}, {Bubble(6, 1'200, 40)});
  window.newest_start_ns = -7;
  back = DecodeHostWindowPart(EncodeHostWindowPart(window));
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->newest_start_ns, -7);
  // Version 1: the same bytes up to the last flag. Without a newest start
  // and late counts, version 2 adds four bytes after it (kind 0, no newest
  // start, late offset -1, no late count).
  window.newest_start_ns.reset();
  std::string v1 = EncodeHostWindowPart(window);
  ASSERT_EQ(v1.substr(v1.size() - 4), std::string("\x00\x00\x01\x00", 4));
  v1.resize(v1.size() - 4);
  v1[0] = 1;
  back = DecodeHostWindowPart(v1);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->kind, HostWindowPart::Kind::kWindow);
  EXPECT_FALSE(back->newest_start_ns.has_value());
  EXPECT_EQ(back->late_offset, -1);
  EXPECT_EQ(back->window.devices.size(), 1u);
  EXPECT_EQ(back->gpu_events, 10);
  // A version 1 part with version 2's fields is refused (trailing bytes).
  std::string v1_long = EncodeHostWindowPart(window);
  v1_long[0] = 1;
  EXPECT_FALSE(DecodeHostWindowPart(v1_long).ok());
}

}  // namespace
}  // namespace bubblewatch
