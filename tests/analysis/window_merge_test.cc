// Stage 2's merge of hosts' window parts (analysis/window_merge.h): the top
// bubbles of the parts' tops in the analyzer's order, the job's figures,
// the observations' union, refusals, the parts' encoding, and the ranks'
// timelines, byte for byte the single stage's whichever form stage 1 sent. That
// merged windows equal the single-stage windows of a streamed TP×DP×PP job is
// tests/processor/job_windower_collectives_test.cc's
// HostPartsMergeIntoTheSingleStageWindow.
#include "analysis/window_merge.h"

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "analysis/collective_windows.h"
#include "analysis/rank_timeline.h"
#include "gtest/gtest.h"
#include "ingest/synthetic/synthetic_straggler.h"
#include "tests/analysis/trace_builder.h"

namespace bubblewatch {
namespace {

using ::bubblewatch::testing::TraceBuilder;

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
  // Version 1: the same bytes up to the last flag. Without a newest start,
  // late counts and timelines, version 2 adds five bytes after it (kind 0,
  // no newest start, late offset -1, no late count, no timeline).
  window.newest_start_ns.reset();
  std::string v1 = EncodeHostWindowPart(window);
  ASSERT_EQ(v1.substr(v1.size() - 5), std::string("\x00\x00\x01\x00\x00", 5));
  v1.resize(v1.size() - 5);
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

// The single stage's collectives of a window of `traces` (one per rank,
// each naming its rank and host) from `start_ns`, and stage 2's, merged
// from each host's part as stage 1 makes it (processor/job_windower.cc
// MakePart), through the wire. `forms` counts the forms stage 1 sent.
struct BothStages {
  WindowCollectives single;
  WindowSummary merged;
  std::vector<HostWindowPart> parts;
  std::map<TimelinePart::Form, int> forms;
};

BothStages RunBothStages(const std::vector<Trace>& traces, int64_t start_ns) {
  BothStages out;
  std::vector<std::string> labels;
  std::map<std::string, std::vector<size_t>> of_host;
  for (size_t i = 0; i < traces.size(); ++i) {
    labels.push_back(absl::StrCat(traces[i].host, "/", traces[i].rank));
    of_host[traces[i].host].push_back(i);
  }
  absl::StatusOr<std::optional<WindowCollectives>> single =
      AnalyzeWindowCollectives(traces, labels, WindowCollectiveOptions(),
                               start_ns);
  EXPECT_TRUE(single.ok()) << single.status();
  if (!single.ok() || !single->has_value()) return out;
  out.single = **single;
  for (const auto& [host, mine] : of_host) {
    HostWindowPart part;
    part.job = "job";
    part.host = host;
    part.window.start_ns = start_ns;
    part.window.end_ns = start_ns + 1'000'000'000'000;
    std::vector<Trace> own;
    std::vector<std::string> own_labels;
    for (size_t i : mine) {
      own.push_back(traces[i]);
      own_labels.push_back(labels[i]);
    }
    for (const RankInput& r : RanksOfTraces(own, own_labels)) {
      AnalyzerOptions analyzer;
      analyzer.top_bubbles = 0;
      const absl::Status s = DigestRanksInto({r}, analyzer, part);
      EXPECT_TRUE(s.ok()) << s;
      if (!s.ok()) return out;
    }
    EXPECT_EQ(part.timelines.size(), part.digests.size());
    for (const TimelinePart& t : part.timelines) ++out.forms[t.form];
    const std::string bytes = EncodeHostWindowPart(part);
    absl::StatusOr<HostWindowPart> back = DecodeHostWindowPart(bytes);
    EXPECT_TRUE(back.ok()) << back.status();
    if (!back.ok()) return out;
    EXPECT_EQ(EncodeHostWindowPart(*back), bytes);
    out.parts.push_back(*std::move(back));
  }
  absl::StatusOr<WindowSummary> merged = MergeHostWindowParts(out.parts, 0);
  EXPECT_TRUE(merged.ok()) << merged.status();
  if (merged.ok()) out.merged = *std::move(merged);
  return out;
}

// Every truncation of a part's bytes, and a byte appended, is refused.
void ExpectTruncationsRefused(const HostWindowPart& part) {
  const std::string bytes = EncodeHostWindowPart(part);
  for (size_t n = 0; n < bytes.size(); ++n) {
    EXPECT_FALSE(DecodeHostWindowPart(bytes.substr(0, n)).ok()) << n;
  }
  EXPECT_FALSE(DecodeHostWindowPart(bytes + "x").ok());
}

// Every rank's merged timeline is the single stage's, and so is the rest.
void ExpectSameTimelines(const BothStages& both) {
  ASSERT_TRUE(both.merged.collectives.has_value());
  const WindowCollectives& got = *both.merged.collectives;
  ASSERT_EQ(got.timelines.size(), both.single.timelines.size());
  ASSERT_EQ(got.ranks.size(), both.single.ranks.size());
  for (size_t i = 0; i < got.timelines.size(); ++i) {
    SCOPED_TRACE(absl::StrCat("rank ", got.ranks[i].rank));
    const RankTimeline& a = got.timelines[i];
    const RankTimeline& b = both.single.timelines[i];
    EXPECT_EQ(a.start_us, b.start_us);
    EXPECT_EQ(a.merged_us, b.merged_us);
    EXPECT_EQ(a.bin_us, b.bin_us);
    EXPECT_EQ(a.segments.size(), b.segments.size());
    EXPECT_TRUE(a == b);
  }
  WindowSummary expected;
  expected.job = both.merged.job;
  expected.window = both.merged.window;
  expected.collectives = both.single;
  std::string diff;
  EXPECT_TRUE(SameWindow(both.merged, expected, &diff)) << diff;
}

// Without the wait split (no waits: all collective time transfer) some
// rank's timeline differs: the comparison above can fail.
void ExpectTheWaitsMatter(const BothStages& both) {
  std::vector<std::pair<const RankDigest*, const TimelinePart*>> all;
  for (const HostWindowPart& p : both.parts) {
    for (size_t i = 0; i < p.digests.size(); ++i) {
      all.push_back({&p.digests[i], &p.timelines[i]});
    }
  }
  int differ = 0;
  for (size_t i = 0; i < both.single.ranks.size(); ++i) {
    for (const auto& [d, t] : all) {
      if (d->rank != both.single.ranks[i].rank) continue;
      differ +=
          MergedTimeline(*t, *d, IntervalSet(), both.merged.window.start_ns,
                         both.single.ranks[i].clock_offset_ns) !=
          both.single.timelines[i];
    }
  }
  EXPECT_GT(differ, 0);
}

struct StragglerCase {
  std::string name;
  int steps;
  int kernels_per_step;
};

class MergedTimelines : public ::testing::TestWithParam<StragglerCase> {};

// A straggler job of 8 ranks on 4 hosts whose clocks are milliseconds
// apart (about 6 runs a step): few steps (exact parts, exact timelines),
// more (exact parts, binned timelines), many (binned parts).
TEST_P(MergedTimelines, AreTheSingleStagesWhicheverFormTheyTravelIn) {
  StragglerJobOptions options;
  options.ranks = 8;
  options.ranks_per_host = 2;
  options.steps = GetParam().steps;
  options.kernels_per_step = GetParam().kernels_per_step;
  options.late_rank = 5;
  options.host_skew_ns = {0, 5'000'000, -5'000'000, 1'234'567};
  StragglerJob job = MakeStragglerJob(options);
  const BothStages both = RunBothStages(job.ranks, options.start_time_ns);
  ExpectSameTimelines(both);
  ExpectTheWaitsMatter(both);
  int binned_stored = 0;
  for (const RankTimeline& t : both.single.timelines) {
    binned_stored += t.bin_us > 0;
  }
  const std::string& name = GetParam().name;
  if (name == "few") {
    EXPECT_EQ(both.forms.at(TimelinePart::kExact), 8);
    EXPECT_EQ(binned_stored, 0);
  } else if (name == "more") {
    EXPECT_EQ(both.forms.at(TimelinePart::kExact), 8);
    EXPECT_EQ(binned_stored, 8);
  } else {
    EXPECT_EQ(both.forms.at(TimelinePart::kBinned), 8);
    EXPECT_EQ(binned_stored, 8);
  }
  ExpectTruncationsRefused(both.parts[0]);
}

INSTANTIATE_TEST_SUITE_P(
    Kernels, MergedTimelines,
    ::testing::Values(StragglerCase{"few", 3, 3}, StragglerCase{"more", 12, 8},
                      StragglerCase{"many", 80, 12}),
    [](const ::testing::TestParamInfo<StragglerCase>& info) {
      return info.param.name;
    });

// Around kExactPartRuns runs a rank's part turns binned: every count on
// both sides gives the single stage's timelines.
TEST(MergedTimelines, AreTheSingleStagesAroundTheExactPartsBound) {
  std::map<TimelinePart::Form, int> forms;
  // About 6 runs a step: 40 steps are 237 runs, 46 are 273.
  for (int steps = 40; steps <= 46; ++steps) {
    SCOPED_TRACE(absl::StrCat(steps, " steps"));
    StragglerJobOptions options;
    options.ranks = 4;
    options.ranks_per_host = 2;
    options.steps = steps;
    options.kernels_per_step = 8;
    options.late_rank = 1;
    options.host_skew_ns = {0, 3'000'000};
    StragglerJob job = MakeStragglerJob(options);
    const BothStages both = RunBothStages(job.ranks, options.start_time_ns);
    ExpectSameTimelines(both);
    for (const auto& [form, n] : both.forms) forms[form] += n;
  }
  EXPECT_GT(forms[TimelinePart::kExact], 0);
  EXPECT_GT(forms[TimelinePart::kBinned], 0);
}

// Many runs, but so short that they may merge into few once split: stage 1
// cannot know, so it sends them exact, and the timeline is the single
// stage's (here exact, from thousands of runs).
TEST(MergedTimelines, ManyShortRunsTravelExact) {
  std::vector<Trace> traces;
  for (int rank = 0; rank < 2; ++rank) {
    TraceBuilder b;
    for (int step = 0; step < 4; ++step) {
      const double t = step * 1000.0;
      // 300 kernels of 0.4 us, 0.3 us apart, then the all-reduce.
      for (int k = 0; k < 300; ++k) {
        b.Kernel("tiny", t + k * 0.7, t + k * 0.7 + 0.4);
      }
      b.Collective("AllReduce_Sum_f32", t + 250 + 100 * rank, t + 500, "pg",
                   step);
    }
    traces.push_back(b.Build());
    traces.back().rank = rank;
    traces.back().host = absl::StrCat("host-", rank);
  }
  const BothStages both = RunBothStages(traces, 0);
  EXPECT_EQ(both.forms.at(TimelinePart::kExact), 2);
  ASSERT_EQ(both.parts.size(), 2u);
  EXPECT_GT(both.parts[0].timelines[0].runs.size(),
            static_cast<size_t>(kExactPartRuns));
  ExpectTruncationsRefused(both.parts[0]);
  ExpectSameTimelines(both);
  ExpectTheWaitsMatter(both);
}

// A part of the first version (no timeline parts) still decodes: the
// merged window then has no timelines, as before.
TEST(WindowMerge, APartWithoutTimelinesLeavesTheWindowWithout) {
  StragglerJobOptions options;
  options.ranks = 4;
  options.ranks_per_host = 2;
  options.steps = 3;
  StragglerJob job = MakeStragglerJob(options);
  BothStages both = RunBothStages(job.ranks, options.start_time_ns);
  ASSERT_EQ(both.parts.size(), 2u);
  both.parts[1].timelines.clear();
  both.parts[1].newest_start_ns.reset();
  std::string bytes = EncodeHostWindowPart(both.parts[1]);
  // Version 1 ended with the last flag: what version 2 adds goes (kind 0,
  // no newest start, late offset -1, no late count, no timeline).
  ASSERT_EQ(bytes.substr(bytes.size() - 5),
            std::string("\x00\x00\x01\x00\x00", 5));
  bytes.resize(bytes.size() - 5);
  bytes[0] = 1;
  absl::StatusOr<HostWindowPart> old = DecodeHostWindowPart(bytes);
  ASSERT_TRUE(old.ok()) << old.status();
  EXPECT_TRUE(old->timelines.empty());
  both.parts[1] = *std::move(old);
  absl::StatusOr<WindowSummary> merged = MergeHostWindowParts(both.parts, 0);
  ASSERT_TRUE(merged.ok()) << merged.status();
  ASSERT_TRUE(merged->collectives.has_value());
  EXPECT_TRUE(merged->collectives->timelines.empty());
  EXPECT_EQ(merged->collectives->ranks.size(), 4u);
}

}  // namespace
}  // namespace bubblewatch
