// FitWindow (processor/window_fit.h): a window larger than the windows
// topic takes is trimmed by the documented rule (names cut, then the lists
// keep their best entries), what was left out is counted in the window, and
// a window that fits is byte-identical to its plain encoding.
#include "processor/window_fit.h"

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "schemas/window_summary_codec.h"

namespace bubblewatch {
namespace {

constexpr int64_t kSec = 1'000'000'000;
constexpr int64_t kMegabyte = 1'000'000;  // The producer's message.max.bytes.
constexpr int64_t k64KiB = 64 * 1024;

// A distinct `bytes`-long name: distinct names are not shared in the
// encoding, the worst case.
std::string LongName(absl::string_view what, int i, size_t bytes) {
  std::string name = absl::StrCat(what, "_", i, "_");
  name.resize(bytes, 'x');
  return name;
}

KernelRef Kernel(std::string name) {
  return KernelRef{
      .name = std::move(name), .start_ns = 1, .end_ns = 2, .stream = 7};
}

// The hostile job of the reproduction: `devices` devices, every kernel
// name `name_bytes` long; device d has d ms of bubble time, so the devices
// with the most bubble time are the highest ids. With `ranks`, as many ranks
// on hosts with names as long.
WindowSummary BigWindow(int devices, size_t name_bytes, int ranks = 0) {
  WindowSummary w;
  w.job = "bigwin";
  w.window.start_ns = 100 * kSec;
  w.window.end_ns = 110 * kSec;
  w.window.job.span_ns = 10 * kSec;
  w.window.job.culprit_before_bubble =
      Kernel(LongName("job_culprit", 0, name_bytes));
  for (int d = 0; d < devices; ++d) {
    DeviceWindow dev{.device = d, .kernels = 10 + d};
    dev.stats.span_ns = 10 * kSec;
    dev.stats.bubble_ns = d * 1'000'000;
    dev.stats.compute_ns = dev.stats.span_ns - dev.stats.bubble_ns;
    dev.stats.attribution[0] = dev.stats.bubble_ns;
    dev.stats.culprit_before_bubble = Kernel(LongName("kernel", d, name_bytes));
    w.window.devices.push_back(dev);
  }
  for (int b = 0; b < 3; ++b) {
    BubbleReport bubble{
        .device = b, .start_ns = 101 * kSec, .end_ns = 102 * kSec};
    bubble.before = Kernel(LongName("before", b, name_bytes));
    bubble.after = Kernel(LongName("after", b, name_bytes));
    bubble.blamed = LongName("blamed", b, name_bytes);
    w.window.top_bubbles.push_back(bubble);
  }
  w.gpu_events = 123456;
  if (ranks > 0) {
    WindowCollectives& c = w.collectives.emplace();
    c.kernels = 999;
    for (int r = 0; r < ranks; ++r) {
      c.ranks.push_back(RankWindow{.rank = r,
                                   .host = LongName("host", r, name_bytes),
                                   .device = 0,
                                   .span_ns = kSec,
                                   .wait_caused_ns = (r % 10) * 1000});
      c.stragglers.push_back(
          StragglerWindow{.rank = r, .wait_caused_ns = ranks - r});
    }
  }
  return w;
}

TEST(FitWindow, WindowThatFitsIsByteIdentical) {
  WindowSummary w = BigWindow(8, 40, 4);
  const WindowSummary before = w;
  const std::string plain = EncodeWindowSummary(w);
  absl::StatusOr<std::string> fitted = FitWindow(w, plain.size());
  ASSERT_TRUE(fitted.ok()) << fitted.status();
  EXPECT_EQ(*fitted, plain);
  std::string diff;
  EXPECT_TRUE(SameWindow(w, before, &diff)) << diff;
  EXPECT_FALSE(w.trimmed.has_value());
}

TEST(FitWindow, FiveHundredDevicesWithLongNamesFitUnderAMegabyteWhole) {
  WindowSummary w = BigWindow(500, 4000);
  const size_t original = EncodeWindowSummary(w).size();
  ASSERT_GT(original, 2'000'000u);
  const size_t budget = WindowValueBudget(kMegabyte, 20);
  absl::StatusOr<std::string> fitted = FitWindow(w, budget);
  ASSERT_TRUE(fitted.ok()) << fitted.status();
  EXPECT_LE(fitted->size(), budget);
  // Cutting names was enough: every device is still there.
  EXPECT_EQ(w.window.devices.size(), 500u);
  EXPECT_EQ(w.window.top_bubbles.size(), 3u);
  ASSERT_TRUE(w.trimmed.has_value());
  EXPECT_EQ(w.trimmed->devices, 0);
  // 500 device culprits, the job's, 3 bubbles' before, after and blamed.
  EXPECT_EQ(w.trimmed->names_cut, 500 + 1 + 3 * 3);
  EXPECT_EQ(w.trimmed->original_bytes, static_cast<int64_t>(original));
  EXPECT_EQ(w.trimmed->limit_bytes, static_cast<int64_t>(budget));
  EXPECT_EQ(w.window.devices[7].stats.culprit_before_bubble->name.size(),
            kFitNameBytes);
  // What is published is what is stored: the bytes decode to the window.
  absl::StatusOr<WindowSummary> decoded = DecodeWindowSummary(*fitted);
  ASSERT_TRUE(decoded.ok()) << decoded.status();
  std::string diff;
  EXPECT_TRUE(SameWindow(*decoded, w, &diff)) << diff;
}

TEST(FitWindow, UnderSixtyFourKibKeepsTheDevicesWithMostBubbleTime) {
  WindowSummary w = BigWindow(500, 4000, 300);
  const WindowSummary original = w;
  const size_t budget = WindowValueBudget(k64KiB, 20);
  absl::StatusOr<std::string> fitted = FitWindow(w, budget);
  ASSERT_TRUE(fitted.ok()) << fitted.status();
  EXPECT_LE(fitted->size(), budget);
  ASSERT_TRUE(w.trimmed.has_value());
  const WindowTrim& trim = *w.trimmed;
  const auto kept = static_cast<int64_t>(w.window.devices.size());
  EXPECT_GT(kept, 10);
  EXPECT_GT(trim.devices, 0);
  EXPECT_EQ(kept + trim.devices, 500);
  // The kept devices are those with the most bubble time, by id.
  for (int64_t i = 0; i < kept; ++i) {
    EXPECT_EQ(w.window.devices[i].device, 500 - kept + i);
  }
  ASSERT_TRUE(w.collectives.has_value());
  EXPECT_EQ(static_cast<int64_t>(w.collectives->ranks.size()) + trim.ranks,
            300);
  EXPECT_EQ(
      static_cast<int64_t>(w.collectives->stragglers.size()) + trim.stragglers,
      300);
  EXPECT_GT(trim.ranks, 0);
  // Ranks: the most waited for (wait_caused_ns = (rank % 10) * 1000; ties:
  // the lower rank) kept, in rank order.
  std::vector<int32_t> want;
  for (int32_t r = 0; r < 300; ++r) want.push_back(r);
  std::stable_sort(want.begin(), want.end(),
                   [](int32_t a, int32_t b) { return a % 10 > b % 10; });
  want.resize(w.collectives->ranks.size());
  std::sort(want.begin(), want.end());
  std::vector<int32_t> got;
  for (const RankWindow& r : w.collectives->ranks) got.push_back(r.rank);
  EXPECT_EQ(got, want);
  // Stragglers stay a prefix of the list (by wait caused).
  EXPECT_EQ(w.collectives->stragglers.front().rank, 0);
  // The job's own figures are whole.
  EXPECT_EQ(w.window.job.span_ns, original.window.job.span_ns);
  EXPECT_EQ(w.gpu_events, original.gpu_events);
  EXPECT_EQ(w.collectives->kernels, 999);

  // The note travels in the encoding, for query and serve --brokers.
  absl::StatusOr<WindowSummaryView> view = WindowSummaryView::Open(*fitted);
  ASSERT_TRUE(view.ok()) << view.status();
  ASSERT_TRUE(view->trimmed().has_value());
  EXPECT_EQ(*view->trimmed(), trim);
}

// The root blame grows as ranks²: 1,024 stragglers, each with a long host
// and every other rank in its via (docs/semantics.md#root-cause), and
// every rank on a drifting clock. The window still fits a megabyte, the
// kept via lists are the first of each (by wait), and what was cut is
// counted.
TEST(FitWindow, RootBlameOfAThousandRanksFitsUnderAMegabyte) {
  constexpr int kRanks = 1024;
  WindowSummary w = BigWindow(8, 64, kRanks);
  w.collectives->job_ns = 10 * kSec;
  w.collectives->job_ns_without_stragglers = 9 * kSec;
  for (RankWindow& r : w.collectives->ranks) {
    r.clock_drift_ns_per_s = 0.5 * r.rank;
    r.clock_instances = 100;
    r.clock_connected = true;
    r.clock_corrected = r.rank > 0;
  }
  int64_t via_entries = 0;
  for (StragglerWindow& s : w.collectives->stragglers) {
    s.host = LongName("root_host", s.rank, 300);
    s.saved_ns = s.wait_caused_ns / 2;
    for (int r = 0; r < kRanks; ++r) {
      if (r == s.rank) continue;
      s.via.push_back(Straggler::Via{.rank = r, .wait_ns = kRanks - r});
      ++via_entries;
    }
  }
  const size_t budget = WindowValueBudget(kMegabyte, 20);
  ASSERT_GT(EncodeWindowSummary(w).size(), budget);
  absl::StatusOr<std::string> fitted = FitWindow(w, budget);
  ASSERT_TRUE(fitted.ok()) << fitted.status();
  EXPECT_LE(fitted->size(), budget);
  ASSERT_TRUE(w.trimmed.has_value());
  const WindowCollectives& c = *w.collectives;
  int64_t kept_via = 0;
  for (const StragglerWindow& s : c.stragglers) {
    EXPECT_LE(s.host.size(), kFitNameBytes);
    kept_via += static_cast<int64_t>(s.via.size());
    // The first of the original list (by wait, descending).
    if (!s.via.empty()) {
      EXPECT_EQ(s.via.front().rank, s.rank == 0 ? 1 : 0);
    }
  }
  // Via entries of the stragglers left out are not counted again.
  EXPECT_GT(w.trimmed->via, 0);
  EXPECT_LT(kept_via + w.trimmed->via, via_entries);
  // What is stored reads back as fitted: clocks, via and what-if.
  absl::StatusOr<WindowSummary> back = DecodeWindowSummary(*fitted);
  ASSERT_TRUE(back.ok()) << back.status();
  std::string diff;
  EXPECT_TRUE(SameWindow(*back, w, &diff)) << diff;
  EXPECT_EQ(back->collectives->job_ns, 10 * kSec);
}

// The ranks' timelines go first, all of them and counted, before any name
// is cut or any list shortened; a window they fit in keeps them.
TEST(FitWindow, TimelinesAreTheFirstThingTrimmed) {
  constexpr int kRanks = 64;
  WindowSummary w = BigWindow(8, 64, kRanks);
  for (int r = 0; r < kRanks; ++r) {
    RankTimeline& t = w.collectives->timelines.emplace_back();
    t.start_us = r;
    for (int k = 0; k < kExactTimelineSegments; ++k) {
      t.segments.push_back(
          {.state = static_cast<uint8_t>(k % kTimelineStates), .us = 1000});
    }
  }
  WindowSummary without = w;
  without.collectives->timelines.clear();
  const size_t with_bytes = EncodeWindowSummary(w).size();
  const size_t without_bytes = EncodeWindowSummary(without).size();
  // 64 ranks x 64 segments: 5 bytes a segment, 14 a rank, and at most 96
  // bytes of framing (docs/state.md#rank-timelines).
  EXPECT_GE(with_bytes - without_bytes, size_t{kRanks} * (64 * 5 + 14));
  EXPECT_LE(with_bytes - without_bytes, size_t{kRanks} * (64 * 5 + 14) + 96);

  // Room for them: kept, byte for byte.
  WindowSummary roomy = w;
  absl::StatusOr<std::string> kept = FitWindow(roomy, with_bytes);
  ASSERT_TRUE(kept.ok()) << kept.status();
  EXPECT_EQ(*kept, EncodeWindowSummary(w));
  EXPECT_FALSE(roomy.trimmed.has_value());

  // Room for all but them: they go, and nothing else.
  WindowSummary tight = w;
  absl::StatusOr<std::string> fitted = FitWindow(tight, without_bytes + 80);
  ASSERT_TRUE(fitted.ok()) << fitted.status();
  ASSERT_TRUE(tight.trimmed.has_value());
  EXPECT_EQ(tight.trimmed->timelines, kRanks);
  EXPECT_EQ(tight.trimmed->names_cut, 0);
  EXPECT_EQ(tight.trimmed->ranks, 0);
  EXPECT_TRUE(tight.collectives->timelines.empty());
  EXPECT_EQ(tight.collectives->ranks.size(), size_t{kRanks});
  absl::StatusOr<WindowSummary> back = DecodeWindowSummary(*fitted);
  ASSERT_TRUE(back.ok()) << back.status();
  std::string diff;
  EXPECT_TRUE(SameWindow(*back, tight, &diff)) << diff;
  EXPECT_EQ(back->trimmed->timelines, kRanks);

  // Much less room: ranks go too, and the timelines are counted once.
  WindowSummary small = w;
  ASSERT_TRUE(FitWindow(small, 8 * 1024).ok());
  EXPECT_EQ(small.trimmed->timelines, kRanks);
  EXPECT_GT(small.trimmed->ranks, 0);
}

TEST(FitWindow, FittingATrimmedWindowAgainAddsUp) {
  WindowSummary w = BigWindow(500, 4000);
  const int64_t original_bytes =
      static_cast<int64_t>(EncodeWindowSummary(w).size());
  ASSERT_TRUE(FitWindow(w, WindowValueBudget(k64KiB, 20)).ok());
  const WindowTrim first = *w.trimmed;
  // A late-event update republishes it under a smaller limit.
  w.late_events = 5;
  absl::StatusOr<std::string> again = FitWindow(w, 16 * 1024);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_LE(again->size(), 16u * 1024);
  EXPECT_EQ(w.trimmed->original_bytes, original_bytes);
  EXPECT_EQ(w.trimmed->names_cut, first.names_cut);  // Cut once.
  EXPECT_GT(w.trimmed->devices, first.devices);
  EXPECT_EQ(static_cast<int64_t>(w.window.devices.size()) + w.trimmed->devices,
            500);
  EXPECT_EQ(w.late_events, 5);
}

TEST(FitWindow, NamesAreCutAtACharacterBoundary) {
  WindowSummary w = BigWindow(1, 0);
  std::string name;
  for (int i = 0; i < 1000; ++i) name += "\xC3\xA9";  // U+00E9, 2 bytes.
  name = "x" + name;  // Odd offset: byte 256 is inside a character.
  w.window.devices[0].stats.culprit_before_bubble->name = name;
  ASSERT_TRUE(FitWindow(w, 1000).ok());
  const std::string& cut =
      w.window.devices[0].stats.culprit_before_bubble->name;
  EXPECT_EQ(cut.size(), kFitNameBytes - 1);
  EXPECT_EQ(cut, name.substr(0, kFitNameBytes - 1));
}

TEST(FitWindow, ALimitNothingFitsIsAnError) {
  WindowSummary w = BigWindow(10, 100);
  absl::StatusOr<std::string> fitted = FitWindow(w, 50);
  EXPECT_EQ(fitted.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(WindowValueBudget(200, 20), 0u);
  EXPECT_LT(WindowValueBudget(k64KiB, 20), static_cast<size_t>(k64KiB));
}

}  // namespace
}  // namespace bubblewatch
