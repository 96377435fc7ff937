#include "schemas/window_summary_codec.h"

#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "flatbuffers/flatbuffers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "schemas/window_summary_generated.h"
#include "tests/storage/storage_test_util.h"

namespace bubblewatch {
namespace {

using ::bubblewatch::testing_util::SampleWindow;
using ::testing::HasSubstr;

TEST(WindowSummaryCodec, RoundTripsEveryField) {
  const WindowSummary in = SampleWindow("job-a", -1'700'000'000'000'000'000, 3);
  absl::StatusOr<WindowSummary> out =
      DecodeWindowSummary(EncodeWindowSummary(in));
  ASSERT_TRUE(out.ok()) << out.status();
  std::string diff;
  EXPECT_TRUE(SameWindow(in, *out, &diff)) << diff;

  // Spot checks, in case SameWindow itself missed a field.
  EXPECT_EQ(out->job, "job-a");
  EXPECT_EQ(out->window.start_ns, in.window.start_ns);
  EXPECT_EQ(out->window.end_ns, in.window.end_ns);
  EXPECT_EQ(out->window.job.attribution, in.window.job.attribution);
  ASSERT_TRUE(out->window.job.culprit_before_bubble.has_value());
  EXPECT_EQ(out->window.job.culprit_before_bubble->name, "conv2d_fwd_3");
  EXPECT_EQ(out->window.job.culprit_before_bubble->stream, 7);
  EXPECT_EQ(out->window.job.largest_bubble_start_ns,
            in.window.job.largest_bubble_start_ns);
  ASSERT_EQ(out->window.devices.size(), 2u);
  EXPECT_EQ(out->window.devices[1].device, 1);
  EXPECT_EQ(out->window.devices[1].kernels, 1001);
  EXPECT_EQ(out->window.devices[1].stats.compute_ns,
            in.window.devices[1].stats.compute_ns);
  ASSERT_EQ(out->window.top_bubbles.size(), 2u);
  const BubbleReport& b = out->window.top_bubbles[0];
  EXPECT_EQ(b.blamed, "cudaStreamSynchronize");
  EXPECT_EQ(b.cause, BubbleCause::kHostSync);
  ASSERT_TRUE(b.after.has_value());
  EXPECT_EQ(b.after->name, "relu_fwd");
  EXPECT_EQ(b.after->stream, 8);
  EXPECT_FALSE(out->window.top_bubbles[1].before.has_value());
  EXPECT_FALSE(out->window.top_bubbles[1].after.has_value());
  EXPECT_EQ(out->window.top_bubbles[1].cause, BubbleCause::kUnattributed);
  EXPECT_EQ(out->gpu_events, 2003);
  EXPECT_EQ(out->cpu_events, 3003);
  EXPECT_EQ(out->late_events, 7);
  EXPECT_EQ(out->closed_by, WindowSummary::ClosedBy::kIdleTimeout);
  EXPECT_EQ(out->host_skew_ns, in.host_skew_ns);
}

// host_skew_ns came later: a window written before it (a table without the
// field, as the older writer built it) still decodes, with skew 0.
TEST(WindowSummaryCodec, WindowsWrittenBeforeHostSkewDecodeWithZero) {
  flatbuffers::FlatBufferBuilder b;
  auto job = b.CreateString("old-job");
  fb::WindowSummaryBuilder w(b);
  w.add_job(job);
  w.add_start_ns(10);
  w.add_end_ns(20);
  w.add_late_events(2);
  fb::FinishWindowSummaryBuffer(b, w.Finish());
  absl::StatusOr<WindowSummary> out = DecodeWindowSummary(absl::string_view(
      reinterpret_cast<const char*>(b.GetBufferPointer()), b.GetSize()));
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(out->job, "old-job");
  EXPECT_EQ(out->late_events, 2);
  EXPECT_EQ(out->host_skew_ns, 0);
}

// The collective analysis of a multi-rank window round-trips; a window
// without one stores no trace of the field (its bytes are those written
// before the field existed: FlatBuffers leaves absent fields out).
TEST(WindowSummaryCodec, RoundTripsTheCollectives) {
  WindowSummary in = SampleWindow("job-a", 1'700'000'000'000'000'000, 3);
  const std::string without = EncodeWindowSummary(in);
  WindowCollectives& c = in.collectives.emplace();
  c.key = 1;
  c.kernels = 40;
  c.matched = 19;
  c.unmatched = 1;
  c.unsynchronized = 2;
  c.used = 17;
  c.unattributed = 3;
  c.seq_backwards = 4;
  c.seq_jumps = 7;
  c.ranks.push_back(RankWindow{.rank = 0,
                               .host = "node-a",
                               .device = 0,
                               .span_ns = 1000,
                               .compute_ns = 900,
                               .comm_ns = 300,
                               .comm_exposed_ns = 200,
                               .comm_wait_ns = 150,
                               .wait_caused_ns = 0,
                               .arrived_last = 2,
                               .clock_offset_ns = 0});
  c.ranks.push_back(RankWindow{.rank = 1,
                               .host = "node-b",
                               .device = 0,
                               .span_ns = 1001,
                               .compute_ns = 950,
                               .comm_ns = 200,
                               .comm_exposed_ns = 120,
                               .comm_wait_ns = 5,
                               .wait_caused_ns = 150,
                               .arrived_last = 15,
                               .clock_offset_ns = -3'000'000});
  StragglerWindow& s = c.stragglers.emplace_back();
  s.rank = 1;
  s.wait_caused_ns = 150;
  s.arrived_last = 15;
  s.compute_ns = 10;
  s.comm_ns = 5;
  s.causes[static_cast<int>(BubbleCause::kDataLoading)] = 130;
  s.unattributed_ns = 5;
  in.late_collectives = 6;
  const std::string with = EncodeWindowSummary(in);
  absl::StatusOr<WindowSummary> out = DecodeWindowSummary(with);
  ASSERT_TRUE(out.ok()) << out.status();
  std::string diff;
  EXPECT_TRUE(SameWindow(in, *out, &diff)) << diff;
  ASSERT_TRUE(out->collectives.has_value());
  EXPECT_EQ(out->collectives->ranks[1].clock_offset_ns, -3'000'000);
  EXPECT_EQ(out->collectives->stragglers[0]
                .causes[static_cast<int>(BubbleCause::kDataLoading)],
            130);
  EXPECT_EQ(out->late_collectives, 6);
  EXPECT_EQ(out->collectives->seq_jumps, 7);
  // Without a jump the field is left out: the window's bytes are those
  // written before seq_jumps existed.
  in.collectives->seq_jumps = 0;
  const std::string no_jumps = EncodeWindowSummary(in);
  const fb::WindowCollectives* stored =
      fb::GetWindowSummary(no_jumps.data())->collectives();
  ASSERT_NE(stored, nullptr);
  EXPECT_FALSE(reinterpret_cast<const flatbuffers::Table*>(stored)->CheckField(
      fb::WindowCollectives::VT_SEQ_JUMPS));
  EXPECT_TRUE(reinterpret_cast<const flatbuffers::Table*>(
                  fb::GetWindowSummary(with.data())->collectives())
                  ->CheckField(fb::WindowCollectives::VT_SEQ_JUMPS));
  EXPECT_DOUBLE_EQ(out->collectives->ranks[0].busy_useful_utilization(),
                   (900.0 - 150.0) / 1000.0);

  // Taken out again, the bytes are those of the window without it.
  in.collectives.reset();
  in.late_collectives = 0;
  EXPECT_EQ(EncodeWindowSummary(in), without);
  const auto* table = reinterpret_cast<const flatbuffers::Table*>(
      fb::GetWindowSummary(without.data()));
  EXPECT_FALSE(table->CheckField(fb::WindowSummary::VT_COLLECTIVES));
  EXPECT_FALSE(table->CheckField(fb::WindowSummary::VT_LATE_COLLECTIVES));

  // The view reads it too.
  std::vector<uint64_t> aligned((with.size() + 7) / 8);
  std::memcpy(aligned.data(), with.data(), with.size());
  absl::StatusOr<WindowSummaryView> view =
      WindowSummaryView::Open(absl::string_view(
          reinterpret_cast<const char*>(aligned.data()), with.size()));
  ASSERT_TRUE(view.ok()) << view.status();
  EXPECT_EQ(view->late_collectives(), 6);
  absl::StatusOr<std::optional<WindowCollectives>> read =
      view->DecodeCollectives();
  ASSERT_TRUE(read.ok()) << read.status();
  ASSERT_TRUE(read->has_value());
  EXPECT_EQ((*read)->ranks.size(), 2u);
  EXPECT_EQ((*read)->stragglers[0].rank, 1);

  // Decoded like an earlier window, a rank whose host is the earlier one's
  // shares its text; one whose host differs gets its own.
  WindowCollectives like = **read;
  like.ranks[1].host = "node-moved";
  absl::StatusOr<std::optional<WindowCollectives>> again =
      view->DecodeCollectives(&like);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(&(*again)->ranks[0].host.str(), &like.ranks[0].host.str());
  EXPECT_EQ((*again)->ranks[1].host, "node-b");
  EXPECT_NE(&(*again)->ranks[1].host.str(), &like.ranks[1].host.str());
}

// The ranks' and stragglers' pids (EventBatch.pid) round-trip, one rank's
// unknown among known ones; a window without any keeps the bytes it had
// before the fields, and those bytes read every pid as unknown; a pid
// vector of another length than the ranks is data loss.
TEST(WindowSummaryCodec, PidsRoundTripAndAreAbsentWhenUnknown) {
  WindowSummary in = SampleWindow("j", 0, 1);
  WindowCollectives& c = in.collectives.emplace();
  for (int32_t r = 0; r < 3; ++r) {
    c.ranks.push_back(RankWindow{.rank = r, .host = "node", .span_ns = 10});
  }
  StragglerWindow& s = c.stragglers.emplace_back();
  s.rank = 2;
  s.host = "node";
  s.wait_caused_ns = 7;
  const std::string without = EncodeWindowSummary(in);
  const fb::WindowCollectives* plain =
      fb::GetWindowSummary(without.data())->collectives();
  EXPECT_EQ(plain->rank_pids(), nullptr);
  EXPECT_FALSE(
      reinterpret_cast<const flatbuffers::Table*>(plain->stragglers()->Get(0))
          ->CheckField(fb::StragglerWindow::VT_PID));
  absl::StatusOr<WindowSummary> old = DecodeWindowSummary(without);
  ASSERT_TRUE(old.ok()) << old.status();
  for (const RankWindow& r : old->collectives->ranks) EXPECT_EQ(r.pid, -1);
  EXPECT_EQ(old->collectives->stragglers[0].pid, -1);

  c.ranks[0].pid = 4100;
  c.ranks[2].pid = 4134;
  s.pid = 4134;
  const std::string with = EncodeWindowSummary(in);
  EXPECT_NE(with, without);
  absl::StatusOr<WindowSummary> out = DecodeWindowSummary(with);
  ASSERT_TRUE(out.ok()) << out.status();
  std::string diff;
  EXPECT_TRUE(SameWindow(in, *out, &diff)) << diff;
  EXPECT_EQ(out->collectives->ranks[0].pid, 4100);
  EXPECT_EQ(out->collectives->ranks[1].pid, -1);
  EXPECT_EQ(out->collectives->ranks[2].pid, 4134);
  EXPECT_EQ(out->collectives->stragglers[0].pid, 4134);
  WindowSummary other = *out;
  other.collectives->ranks[2].pid = 4135;
  EXPECT_FALSE(SameWindow(in, other, &diff));
  EXPECT_THAT(diff, HasSubstr("pid"));

  // Two pids for three ranks.
  flatbuffers::FlatBufferBuilder b;
  std::vector<fb::RankRow> rows;
  for (int32_t r = 0; r < 3; ++r) {
    rows.emplace_back(r, 0, -1, 1, 1, 0, 0, 0, 0, 0, 0);
  }
  auto rows_vec = b.CreateVectorOfStructs(rows);
  auto pids_vec = b.CreateVector(std::vector<int64_t>{1, 2});
  fb::WindowCollectivesBuilder cb(b);
  cb.add_rank_rows(rows_vec);
  cb.add_rank_pids(pids_vec);
  auto bad_collectives = cb.Finish();
  auto job = b.CreateString("j");
  fb::WindowSummaryBuilder w(b);
  w.add_job(job);
  w.add_collectives(bad_collectives);
  fb::FinishWindowSummaryBuffer(b, w.Finish());
  absl::StatusOr<WindowSummary> refused = DecodeWindowSummary(absl::string_view(
      reinterpret_cast<const char*>(b.GetBufferPointer()), b.GetSize()));
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(refused.status().message(), HasSubstr("2 rank pids for 3"));
}

// The ranks' timelines (docs/state.md#rank-timelines) round-trip; a window
// without them keeps the bytes it had before the field; the view decodes
// them only when asked; a count that does not add up is data loss.
TEST(WindowSummaryCodec, RankTimelinesRoundTripAndAreAbsentWithout) {
  WindowSummary in = SampleWindow("job-t", 1'700'000'000'000'000'000, 2);
  WindowCollectives& c = in.collectives.emplace();
  c.kernels = 4;
  c.ranks.push_back(RankWindow{.rank = 0, .host = "a", .span_ns = 9'000});
  c.ranks.push_back(RankWindow{.rank = 1, .host = "b", .span_ns = 7'000});
  const std::string without = EncodeWindowSummary(in);
  c.timelines.push_back(
      RankTimeline{.start_us = -3,
                   .merged_us = 2,
                   .segments = {{.state = 0, .us = 4}, {.state = 1, .us = 5}}});
  c.timelines.push_back(
      RankTimeline{.start_us = 12,
                   .merged_us = 0,
                   .bin_us = 312'500,
                   .segments = {{.state = 2, .us = 1},
                                {.state = 3 + 4, .us = 4'000'000'000u},
                                {.state = 0, .us = 2}}});
  const std::string with = EncodeWindowSummary(in);
  absl::StatusOr<WindowSummary> out = DecodeWindowSummary(with);
  ASSERT_TRUE(out.ok()) << out.status();
  std::string diff;
  EXPECT_TRUE(SameWindow(in, *out, &diff)) << diff;
  ASSERT_EQ(out->collectives->timelines.size(), 2u);
  EXPECT_EQ(out->collectives->timelines[1].segments[1].us, 4'000'000'000u);
  // 5 segments: 5 bytes each, 14 bytes per rank, and at most 96 bytes of
  // framing per window (docs/state.md#rank-timelines).
  EXPECT_LE(with.size() - without.size(), 5u * 5 + 2 * 14 + 96);

  // A changed segment is a difference SameWindow names.
  WindowSummary other = *out;
  other.collectives->timelines[0].segments[1].us = 6;
  EXPECT_FALSE(SameWindow(in, other, &diff));
  EXPECT_EQ(diff, "collectives.timelines[0].segments[1].us: 5 vs 6");

  // The view: without timelines unless asked.
  std::vector<uint64_t> aligned((with.size() + 7) / 8);
  std::memcpy(aligned.data(), with.data(), with.size());
  absl::StatusOr<WindowSummaryView> view =
      WindowSummaryView::Open(absl::string_view(
          reinterpret_cast<const char*>(aligned.data()), with.size()));
  ASSERT_TRUE(view.ok()) << view.status();
  absl::StatusOr<std::optional<WindowCollectives>> plain =
      view->DecodeCollectives();
  ASSERT_TRUE(plain.ok() && plain->has_value());
  EXPECT_TRUE((*plain)->timelines.empty());
  absl::StatusOr<std::optional<WindowCollectives>> full =
      view->DecodeCollectives(nullptr, /*with_timelines=*/true);
  ASSERT_TRUE(full.ok() && full->has_value());
  EXPECT_EQ((*full)->timelines, c.timelines);

  // Taken out again, the bytes are those of the window without them.
  in.collectives->timelines.clear();
  EXPECT_EQ(EncodeWindowSummary(in), without);

  // One timeline for two ranks: refused.
  in.collectives->timelines.push_back(RankTimeline{.segments = {{0, 1}}});
  absl::StatusOr<WindowSummary> bad =
      DecodeWindowSummary(EncodeWindowSummary(in));
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kDataLoss) << bad.status();
}

// The observed time (docs/semantics.md#observations) round-trips, through
// the view too; a window without it keeps the bytes it had before the field.
TEST(WindowSummaryCodec, ObservedTimeRoundTripsAndIsAbsentWhenUnknown) {
  WindowSummary in = SampleWindow("job-a", 1'700'000'000'000'000'000, 3);
  const std::string without = EncodeWindowSummary(in);
  const auto* table = reinterpret_cast<const flatbuffers::Table*>(
      fb::GetWindowSummary(without.data()));
  EXPECT_FALSE(table->CheckField(fb::WindowSummary::VT_OBSERVED_NS));
  absl::StatusOr<WindowSummary> plain = DecodeWindowSummary(without);
  ASSERT_TRUE(plain.ok()) << plain.status();
  EXPECT_FALSE(plain->observed_ns.has_value());
  for (int64_t observed : {int64_t{0}, int64_t{2'850'020'000}}) {
    in.observed_ns = observed;
    const std::string with = EncodeWindowSummary(in);
    EXPECT_NE(with, without);
    absl::StatusOr<WindowSummary> out = DecodeWindowSummary(with);
    ASSERT_TRUE(out.ok()) << out.status();
    EXPECT_EQ(out->observed_ns, std::optional<int64_t>(observed));
    std::string diff;
    EXPECT_TRUE(SameWindow(in, *out, &diff)) << diff;
    EXPECT_FALSE(SameWindow(*plain, *out)) << "observed time is compared";
    std::vector<uint64_t> aligned((with.size() + 7) / 8);
    std::memcpy(aligned.data(), with.data(), with.size());
    absl::StatusOr<WindowSummaryView> view =
        WindowSummaryView::Open(absl::string_view(
            reinterpret_cast<const char*>(aligned.data()), with.size()));
    ASSERT_TRUE(view.ok()) << view.status();
    EXPECT_EQ(view->observed_ns(), std::optional<int64_t>(observed));
  }
}

// RocksDB hands values over at any address; found by ops/test --sanitize
// (UBSan: misaligned FlatBuffers reads in every store test). Decoding must
// work, without misaligned reads, from every shift.
TEST(WindowSummaryCodec, DecodesFromAnyAddress) {
  const WindowSummary in = SampleWindow("job-a", 1'700'000'000'000'000'000, 3);
  const std::string bytes = EncodeWindowSummary(in);
  std::string storage(bytes.size() + 8, '\0');
  for (size_t shift = 0; shift < 8; ++shift) {
    storage.replace(shift, bytes.size(), bytes);
    absl::StatusOr<WindowSummary> out = DecodeWindowSummary(
        absl::string_view(storage.data() + shift, bytes.size()));
    ASSERT_TRUE(out.ok()) << "shift " << shift << ": " << out.status();
    std::string diff;
    EXPECT_TRUE(SameWindow(in, *out, &diff)) << "shift " << shift << diff;
  }
}

TEST(WindowSummaryCodec, JobLevelLeavesOutOnlyThePerDeviceStats) {
  const WindowSummary in = SampleWindow("job-a", 1'700'000'000'000'000'000, 3);
  ASSERT_FALSE(in.window.devices.empty());
  const std::string bytes = EncodeWindowSummary(in);
  std::vector<uint64_t> scratch;
  std::string storage(bytes.size() + 8, '\0');
  for (size_t shift = 0; shift < 8; ++shift) {  // Through the reused scratch.
    storage.replace(shift, bytes.size(), bytes);
    absl::StatusOr<WindowSummary> out = DecodeWindowSummary(
        absl::string_view(storage.data() + shift, bytes.size()),
        WindowDetail::kJobLevel, &scratch);
    ASSERT_TRUE(out.ok()) << out.status();
    WindowSummary want = in;
    for (DeviceWindow& d : want.window.devices) d.stats = UtilizationStats{};
    std::string diff;
    EXPECT_TRUE(SameWindow(want, *out, &diff)) << "shift " << shift << diff;
  }
}

TEST(WindowSummaryView, ReadsWhatDecodeReads) {
  const WindowSummary in = SampleWindow("job-a", 1'700'000'000'000'000'000, 3);
  const std::string bytes = EncodeWindowSummary(in);
  std::vector<uint64_t> aligned((bytes.size() + 7) / 8);
  std::memcpy(aligned.data(), bytes.data(), bytes.size());
  absl::StatusOr<WindowSummaryView> view =
      WindowSummaryView::Open(absl::string_view(
          reinterpret_cast<const char*>(aligned.data()), bytes.size()));
  ASSERT_TRUE(view.ok()) << view.status();
  EXPECT_EQ(view->start_ns(), in.window.start_ns);
  EXPECT_EQ(view->end_ns(), in.window.end_ns);
  EXPECT_EQ(view->gpu_events(), in.gpu_events);
  EXPECT_EQ(view->cpu_events(), in.cpu_events);
  EXPECT_EQ(view->late_events(), in.late_events);
  EXPECT_EQ(view->closed_by(), in.closed_by);
  EXPECT_EQ(view->device_count(),
            static_cast<int32_t>(in.window.devices.size()));
  // Job-level stats and bubbles through a whole window, so SameWindow
  // compares every field of them.
  WindowSummary got = in;
  absl::StatusOr<UtilizationStats> stats = view->DecodeJobStats();
  ASSERT_TRUE(stats.ok()) << stats.status();
  got.window.job = *stats;
  ASSERT_EQ(view->top_bubble_count(),
            static_cast<int32_t>(in.window.top_bubbles.size()));
  ASSERT_FALSE(in.window.top_bubbles.empty());
  got.window.top_bubbles.clear();
  for (int32_t i = 0; i < view->top_bubble_count(); ++i) {
    const BubbleReport extent = view->TopBubbleExtent(i);
    EXPECT_EQ(extent.device, in.window.top_bubbles[i].device);
    EXPECT_EQ(extent.start_ns, in.window.top_bubbles[i].start_ns);
    EXPECT_EQ(extent.end_ns, in.window.top_bubbles[i].end_ns);
    absl::StatusOr<BubbleReport> b = view->DecodeTopBubble(i);
    ASSERT_TRUE(b.ok()) << b.status();
    got.window.top_bubbles.push_back(*b);
  }
  std::string diff;
  EXPECT_TRUE(SameWindow(in, got, &diff)) << diff;

  EXPECT_EQ(
      WindowSummaryView::Open("garbage that is no window").status().code(),
      absl::StatusCode::kDataLoss);
}

TEST(WindowSummaryCodec, RoundTripsDefaultsAndEmptyKernelName) {
  WindowSummary in;
  in.job = "j";
  in.window.job.culprit_before_bubble = KernelRef{};  // Present, all zero.
  absl::StatusOr<WindowSummary> out =
      DecodeWindowSummary(EncodeWindowSummary(in));
  ASSERT_TRUE(out.ok()) << out.status();
  std::string diff;
  EXPECT_TRUE(SameWindow(in, *out, &diff)) << diff;
  EXPECT_TRUE(out->window.job.culprit_before_bubble.has_value());
  EXPECT_EQ(out->closed_by, WindowSummary::ClosedBy::kWatermark);
}

TEST(WindowSummaryCodec, RejectsGarbageAndTruncationAsDataLoss) {
  const std::string bytes = EncodeWindowSummary(SampleWindow("job", 0));
  // (The last bytes may be alignment padding, which no verifier can miss.)
  for (size_t n : {size_t{0}, size_t{3}, bytes.size() / 4, bytes.size() / 2}) {
    absl::StatusOr<WindowSummary> out =
        DecodeWindowSummary(absl::string_view(bytes.data(), n));
    ASSERT_FALSE(out.ok()) << n;
    EXPECT_EQ(out.status().code(), absl::StatusCode::kDataLoss);
    EXPECT_THAT(out.status().message(), HasSubstr("verifier"));
  }
  const std::string garbage(100, '\x7f');
  EXPECT_EQ(DecodeWindowSummary(garbage).status().code(),
            absl::StatusCode::kDataLoss);
}

// Windows written before rank_rows keep their ranks as RankWindow tables:
// still read, hosts and all. Since, each host name is stored once per
// window, and a row naming a host the window lacks is refused.
TEST(WindowSummaryCodec, ReadsRanksOfBothFormsAndStoresEachHostOnce) {
  flatbuffers::FlatBufferBuilder b;
  std::vector<flatbuffers::Offset<fb::RankWindow>> tables;
  for (int32_t r = 0; r < 3; ++r) {
    auto host = b.CreateSharedString(r < 2 ? "node-a" : "node-b");
    tables.push_back(fb::CreateRankWindow(b, r, host, r, 1000, 900 - r, 300,
                                          200, 150, 7 * r, r, -r));
  }
  auto ranks = b.CreateVector(tables);
  auto collectives =
      fb::CreateWindowCollectives(b, 0, 30, 10, 0, 0, 10, 0, 0, ranks);
  auto job = b.CreateString("j");
  fb::WindowSummaryBuilder w(b);
  w.add_job(job);
  w.add_collectives(collectives);
  fb::FinishWindowSummaryBuffer(b, w.Finish());
  absl::StatusOr<WindowSummary> old = DecodeWindowSummary(absl::string_view(
      reinterpret_cast<const char*>(b.GetBufferPointer()), b.GetSize()));
  ASSERT_TRUE(old.ok()) << old.status();
  ASSERT_TRUE(old->collectives.has_value());
  ASSERT_EQ(old->collectives->ranks.size(), 3u);
  EXPECT_EQ(old->collectives->ranks[1].host, "node-a");
  EXPECT_EQ(old->collectives->ranks[2].host, "node-b");
  EXPECT_EQ(old->collectives->ranks[2].wait_caused_ns, 14);
  EXPECT_EQ(old->collectives->ranks[2].clock_offset_ns, -2);

  // Re-encoded: rows, two host names for three ranks, nothing lost.
  old->collectives->ranks.push_back(RankWindow{.rank = 3});  // No host.
  const std::string now = EncodeWindowSummary(*old);
  const fb::WindowCollectives* stored =
      fb::GetWindowSummary(now.data())->collectives();
  EXPECT_EQ(stored->ranks(), nullptr);
  ASSERT_NE(stored->rank_rows(), nullptr);
  EXPECT_EQ(stored->rank_rows()->size(), 4u);
  ASSERT_NE(stored->rank_hosts(), nullptr);
  EXPECT_EQ(stored->rank_hosts()->size(), 2u);
  EXPECT_EQ(stored->rank_rows()->Get(3)->host(), -1);
  absl::StatusOr<WindowSummary> back = DecodeWindowSummary(now);
  ASSERT_TRUE(back.ok()) << back.status();
  std::string diff;
  EXPECT_TRUE(SameWindow(*old, *back, &diff)) << diff;
  EXPECT_TRUE(back->collectives->ranks[3].host.empty());

  // A row whose host index is past the window's host names.
  b.Clear();
  const fb::RankRow bad(0, 0, /*host=*/1, 1, 1, 0, 0, 0, 0, 0, 0);
  auto rows = b.CreateVectorOfStructs(&bad, 1);
  std::vector<flatbuffers::Offset<flatbuffers::String>> names = {
      b.CreateString("only")};
  auto hosts = b.CreateVector(names);
  fb::WindowCollectivesBuilder cb(b);
  cb.add_rank_rows(rows);
  cb.add_rank_hosts(hosts);
  auto bad_collectives = cb.Finish();
  job = b.CreateString("j");
  fb::WindowSummaryBuilder v(b);
  v.add_job(job);
  v.add_collectives(bad_collectives);
  fb::FinishWindowSummaryBuffer(b, v.Finish());
  absl::StatusOr<WindowSummary> refused = DecodeWindowSummary(absl::string_view(
      reinterpret_cast<const char*>(b.GetBufferPointer()), b.GetSize()));
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(refused.status().message(), HasSubstr("names host 1 of 1"));
}

TEST(WindowSummaryCodec, RejectsWrongAttributionLengthAndVersion) {
  flatbuffers::FlatBufferBuilder b;
  const int64_t three[] = {1, 2, 3};
  auto attribution = b.CreateVector(three, 3);
  auto stats = fb::CreateUtilizationStats(b, 1, 1, 0, 0, 0, 0, attribution);
  auto job = b.CreateString("j");
  fb::WindowSummaryBuilder w(b);
  w.add_job(job);
  w.add_job_stats(stats);
  fb::FinishWindowSummaryBuffer(b, w.Finish());
  absl::StatusOr<WindowSummary> out = DecodeWindowSummary(absl::string_view(
      reinterpret_cast<const char*>(b.GetBufferPointer()), b.GetSize()));
  ASSERT_FALSE(out.ok());
  EXPECT_EQ(out.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(out.status().message(), HasSubstr("attribution has 3 entries"));

  b.Clear();
  job = b.CreateString("j");
  fb::WindowSummaryBuilder v(b);
  v.add_job(job);
  v.add_schema_version(99);
  fb::FinishWindowSummaryBuffer(b, v.Finish());
  out = DecodeWindowSummary(absl::string_view(
      reinterpret_cast<const char*>(b.GetBufferPointer()), b.GetSize()));
  ASSERT_FALSE(out.ok());
  EXPECT_THAT(out.status().message(), HasSubstr("schema_version 99"));
}

// Every reason a window can close survives the codec, decoded whole and
// read in place, and has its own name.
TEST(WindowSummaryCodec, RoundTripsEveryClosedBy) {
  std::vector<std::string> names;
  for (WindowSummary::ClosedBy closed_by : kAllClosedBy) {
    WindowSummary in = SampleWindow("job", 0);
    in.closed_by = closed_by;
    const std::string bytes = EncodeWindowSummary(in);
    absl::StatusOr<WindowSummary> out = DecodeWindowSummary(bytes);
    ASSERT_TRUE(out.ok()) << out.status();
    EXPECT_EQ(out->closed_by, closed_by);
    std::string diff;
    EXPECT_TRUE(SameWindow(in, *out, &diff)) << diff;
    std::vector<uint64_t> aligned((bytes.size() + 7) / 8);
    std::memcpy(aligned.data(), bytes.data(), bytes.size());
    absl::StatusOr<WindowSummaryView> view =
        WindowSummaryView::Open(absl::string_view(
            reinterpret_cast<const char*>(aligned.data()), bytes.size()));
    ASSERT_TRUE(view.ok()) << view.status();
    EXPECT_EQ(view->closed_by(), closed_by);
    const absl::string_view name = ClosedByName(closed_by);
    EXPECT_EQ(ParseClosedBy(name), closed_by) << name;
    names.emplace_back(name);
  }
  EXPECT_THAT(names,
              ::testing::ElementsAre("watermark", "idle_timeout", "end_marker",
                                     "observation_end", "buffer_full"));
  EXPECT_EQ(ParseClosedBy("unknown"), std::nullopt);
  EXPECT_EQ(ParseClosedBy("Idle_Timeout"), std::nullopt);
  EXPECT_EQ(ParseClosedBy(""), std::nullopt);
}

// The stored values are the schema's: what an older build stored reads the
// same (values are only ever appended).
TEST(WindowSummaryCodec, ClosedByValuesAreTheSchemas) {
  EXPECT_EQ(static_cast<int>(WindowSummary::ClosedBy::kWatermark), 0);
  EXPECT_EQ(static_cast<int>(WindowSummary::ClosedBy::kIdleTimeout), 1);
  EXPECT_EQ(static_cast<int>(WindowSummary::ClosedBy::kEndMarker), 2);
  EXPECT_EQ(static_cast<int>(WindowSummary::ClosedBy::kObservationEnd), 3);
  EXPECT_EQ(static_cast<int>(WindowSummary::ClosedBy::kBufferFull), 4);
  EXPECT_EQ(static_cast<int>(fb::ClosedBy::MAX), 4);
}

// A value appended after this build (as end_marker was for the builds
// before it) is refused, not read as another reason: by the decoder and by
// the in-place view alike.
TEST(WindowSummaryCodec, RefusesAClosedByItDoesNotKnow) {
  for (int value : {5, 200, 255}) {
    flatbuffers::FlatBufferBuilder b;
    auto job = b.CreateString("j");
    fb::WindowSummaryBuilder w(b);
    w.add_job(job);
    w.add_closed_by(static_cast<fb::ClosedBy>(value));
    fb::FinishWindowSummaryBuffer(b, w.Finish());
    const absl::string_view bytes(
        reinterpret_cast<const char*>(b.GetBufferPointer()), b.GetSize());
    absl::StatusOr<WindowSummary> out = DecodeWindowSummary(bytes);
    ASSERT_FALSE(out.ok()) << value;
    EXPECT_EQ(out.status().code(), absl::StatusCode::kDataLoss);
    EXPECT_THAT(out.status().message(),
                HasSubstr(absl::StrCat("unknown closed_by ", value)));
    std::vector<uint64_t> aligned((bytes.size() + 7) / 8);
    std::memcpy(aligned.data(), bytes.data(), bytes.size());
    absl::StatusOr<WindowSummaryView> view =
        WindowSummaryView::Open(absl::string_view(
            reinterpret_cast<const char*>(aligned.data()), bytes.size()));
    ASSERT_FALSE(view.ok()) << value;
    EXPECT_THAT(view.status().message(),
                HasSubstr(absl::StrCat("unknown closed_by ", value)));
  }
}

TEST(SameWindow, NamesTheFirstDifference) {
  const WindowSummary a = SampleWindow("job", 0);
  WindowSummary b = a;
  std::string diff;
  EXPECT_TRUE(SameWindow(a, b, &diff));
  b.window.devices[1]
      .stats.attribution[static_cast<int>(BubbleCause::kHostSync)] += 1;
  EXPECT_FALSE(SameWindow(a, b, &diff));
  EXPECT_EQ(diff,
            "window.devices[1].stats.attribution[host_sync]: 1000011 vs "
            "1000012");
  b = a;
  b.window.top_bubbles[0].after.reset();
  EXPECT_FALSE(SameWindow(a, b, &diff));
  EXPECT_EQ(diff, "window.top_bubbles[0].after: set vs none");
  b = a;
  b.closed_by = WindowSummary::ClosedBy::kWatermark;
  EXPECT_FALSE(SameWindow(a, b, nullptr));
  b.closed_by = WindowSummary::ClosedBy::kEndMarker;
  EXPECT_FALSE(SameWindow(a, b, &diff));
  EXPECT_EQ(diff, "closed_by: \"idle_timeout\" vs \"end_marker\"");
}

}  // namespace
}  // namespace bubblewatch
