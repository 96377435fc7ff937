#include "analysis/bubble_analyzer.h"

#include <algorithm>
#include <random>
#include <vector>

#include "absl/strings/str_cat.h"
#include "analysis/window_accumulator.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/analysis/trace_builder.h"
#include "tests/testing/units.h"

namespace bubblewatch {
namespace {

using ::bubblewatch::testing::TraceBuilder;
using ::testing::HasSubstr;

int64_t Cause(const UtilizationStats& s, BubbleCause c) {
  return s.attribution[static_cast<int>(c)];
}

using testing::kUs;

TraceBuilder SeedSample() {
  TraceBuilder b;
  b.Kernel("conv2d_fwd", 10, 30)
      .Kernel("batch_norm", 110, 125)
      .Kernel("relu_fwd", 130, 140)
      .Cpu("cudaLaunchKernel_conv2d", 5, 8)
      .Cpu("tensor.item()_sync", 31, 108)
      .Cpu("cudaLaunchKernel_batch_norm", 108.5, 109.5);
  return b;
}

Analysis MustAnalyze(const Trace& trace, AnalyzerOptions options = {}) {
  absl::StatusOr<Analysis> a = AnalyzeTrace(trace, options);
  EXPECT_TRUE(a.ok()) << a.status();
  return a.ok() ? *std::move(a) : Analysis{};
}

TEST(BubbleAnalyzer, SeedSampleGivesTheSeedsNumbersAndAttribution) {
  Analysis a = MustAnalyze(SeedSample().Build());
  EXPECT_EQ(a.job.span_ns, 130 * kUs);
  EXPECT_EQ(a.job.compute_ns, 45 * kUs);
  EXPECT_EQ(a.job.bubble_ns, 85 * kUs);
  EXPECT_EQ(a.job.largest_bubble_ns, 80 * kUs);
  ASSERT_TRUE(a.job.culprit_before_bubble.has_value());
  EXPECT_EQ(a.job.culprit_before_bubble->name, "conv2d_fwd");
  EXPECT_NEAR(a.job.bubble_ratio(), 85.0 / 130.0, 1e-12);
  EXPECT_EQ(Cause(a.job, BubbleCause::kHostSync), 79 * kUs);
  EXPECT_EQ(Cause(a.job, BubbleCause::kLaunchOverhead), 1 * kUs);
  EXPECT_EQ(Cause(a.job, BubbleCause::kHostCompute), 5 * kUs);
  EXPECT_EQ(AttributionTotal(a.job.attribution), a.job.bubble_ns);
  ASSERT_EQ(a.top_bubbles.size(), 2u);
  EXPECT_EQ(a.top_bubbles[0].duration_ns(), 80 * kUs);
  EXPECT_EQ(a.top_bubbles[0].cause, BubbleCause::kHostSync);
  EXPECT_EQ(a.top_bubbles[0].blamed, "tensor.item()_sync");
  EXPECT_EQ(a.top_bubbles[0].before->name, "conv2d_fwd");
  EXPECT_EQ(a.top_bubbles[0].after->name, "batch_norm");
}

// A 190 us gap [10, 200) whose next kernel is launched at 150 us: 140 us of
// host_compute, 50 us of launch_overhead. Around the whole gap: a profiler
// step, a record_function range, a Python frame and an operator; inside
// it, `inside` (if not empty) with a nested child.
Analysis HostComputeGap(const std::string& inside) {
  TraceBuilder b;
  b.Kernel("a", 0, 10, 7, 0, 1).Kernel("b", 200, 210, 7, 0, 2);
  b.Launch(-5, -4, 1).Launch(150, 160, 2);
  b.Cpu("ProfilerStep#4", -20, 400, 1, 0, CpuEventCategory::kUserAnnotation);
  b.Cpu("## forward ##", -15, 300, 1, 0, CpuEventCategory::kUserAnnotation);
  b.Cpu("train.py(42): step", -12, 290, 1, 0,
        CpuEventCategory::kPythonFunction);
  b.Cpu("DistributedDataParallel.forward", -10, 250, 1, 0,
        CpuEventCategory::kCpuOp);
  if (!inside.empty()) {
    b.Cpu(inside, 20, 140, 1, 0, CpuEventCategory::kCpuOp);
    b.Cpu("aten::as_strided", 30, 40, 1, 0, CpuEventCategory::kCpuOp);
  }
  // Another thread's long op overlaps more, but is not the launching thread.
  b.Cpu("aten::other_thread", 10, 200, 2, 0, CpuEventCategory::kCpuOp);
  return MustAnalyze(b.Build());
}

TEST(BubbleAnalyzer, HostComputeBlamesTheOpInsideTheGapNotTheStep) {
  Analysis a = HostComputeGap("aten::unflatten_dense_tensors");
  ASSERT_EQ(a.top_bubbles.size(), 1u);
  EXPECT_EQ(a.top_bubbles[0].cause, BubbleCause::kHostCompute);
  EXPECT_EQ(Cause(a.job, BubbleCause::kHostCompute), 140 * kUs);
  EXPECT_EQ(a.top_bubbles[0].blamed, "aten::unflatten_dense_tensors");
}

TEST(BubbleAnalyzer, HostComputeBlamesAnAnnotationOnlyWithoutAnOperator) {
  // An NVTX op range inside the gap (an Nsight trace's operators): blamed
  // when no framework operator ran there, not over one.
  for (bool with_op : {false, true}) {
    TraceBuilder b;
    b.Kernel("a", 0, 10, 7, 0, 1).Kernel("b", 200, 210, 7, 0, 2);
    b.Launch(-5, -4, 1).Launch(150, 160, 2);
    b.Cpu("ProfilerStep#4", 5, 140, 1, 0, CpuEventCategory::kUserAnnotation);
    b.Cpu("aten::layer_norm, seq = 7", 20, 140, 1, 0,
          CpuEventCategory::kUserAnnotation);
    if (with_op) b.Cpu("aten::add_", 30, 40, 1, 0, CpuEventCategory::kCpuOp);
    Analysis a = MustAnalyze(b.Build());
    ASSERT_EQ(a.top_bubbles.size(), 1u);
    EXPECT_EQ(a.top_bubbles[0].blamed,
              with_op ? "aten::add_" : "aten::layer_norm, seq = 7");
  }
}

TEST(BubbleAnalyzer, RangesAroundTheWholeGapAreNeverBlamed) {
  // Only ranges enclosing the gap (and the other thread's op): nothing to
  // blame, rather than the profiler step.
  Analysis a = HostComputeGap("");
  ASSERT_EQ(a.top_bubbles.size(), 1u);
  EXPECT_EQ(a.top_bubbles[0].cause, BubbleCause::kHostCompute);
  EXPECT_EQ(a.top_bubbles[0].blamed, "");
}

TEST(BubbleAnalyzer, LaunchBeforeGapIsGpuDependency) {
  TraceBuilder b;
  b.Kernel("a", 0, 10, 7, 0, 1).Kernel("b", 20, 30, 7, 0, 2);
  b.Launch(-5, -4, 1).Launch(5, 6, 2);
  Analysis a = MustAnalyze(b.Build());
  EXPECT_EQ(Cause(a.job, BubbleCause::kGpuDependency), 10 * kUs);
  EXPECT_EQ(a.top_bubbles[0].blamed, "cudaLaunchKernel");
  EXPECT_EQ(a.kernels_with_launch, 2);
}

TEST(BubbleAnalyzer, LaunchDuringGapSplitsIntoLaunchOverheadAndHostTime) {
  TraceBuilder b;
  b.Kernel("a", 0, 10).Kernel("b", 20, 30, 7, 0, 2);
  b.Launch(15, 16, 2);
  Analysis a = MustAnalyze(b.Build());
  EXPECT_EQ(Cause(a.job, BubbleCause::kLaunchOverhead), 5 * kUs);
  EXPECT_EQ(Cause(a.job, BubbleCause::kHostCompute), 5 * kUs);
}

TEST(BubbleAnalyzer, AllocatorCallsBeforeTheLaunchAreAllocator) {
  TraceBuilder b;
  b.Kernel("a", 0, 10).Kernel("b", 30, 40, 7, 0, 2);
  b.Cpu("cudaFree", 10, 25, 1, 0, CpuEventCategory::kCudaRuntime);
  b.Launch(25, 26, 2);
  Analysis a = MustAnalyze(b.Build());
  EXPECT_EQ(Cause(a.job, BubbleCause::kAllocator), 15 * kUs);
  EXPECT_EQ(Cause(a.job, BubbleCause::kLaunchOverhead), 5 * kUs);
  EXPECT_EQ(a.top_bubbles[0].cause, BubbleCause::kAllocator);
  EXPECT_EQ(a.top_bubbles[0].blamed, "cudaFree");
}

TEST(BubbleAnalyzer, DataLoaderRangesAreDataLoading) {
  TraceBuilder b;
  b.Kernel("a", 0, 10).Kernel("b", 50, 60, 7, 0, 2);
  b.Cpu("enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__", 10, 45,
        1, 0, CpuEventCategory::kUserAnnotation);
  b.Launch(45, 46, 2);
  Analysis a = MustAnalyze(b.Build());
  EXPECT_EQ(Cause(a.job, BubbleCause::kDataLoading), 35 * kUs);
  EXPECT_EQ(Cause(a.job, BubbleCause::kLaunchOverhead), 5 * kUs);
}

TEST(BubbleAnalyzer, CopiesOnTheDeviceAreMemcpyAndTheRestIsSplit) {
  TraceBuilder b;
  b.Kernel("a", 0, 10).Kernel("b", 20, 30, 7, 0, 2);
  b.Memcpy("Memcpy HtoD (Pinned -> Device)", 12, 18);
  b.Launch(19, 19.5, 2);
  Analysis a = MustAnalyze(b.Build());
  EXPECT_EQ(Cause(a.job, BubbleCause::kMemcpy), 6 * kUs);
  EXPECT_EQ(Cause(a.job, BubbleCause::kLaunchOverhead), 1 * kUs);
  EXPECT_EQ(Cause(a.job, BubbleCause::kHostCompute), 3 * kUs);
  EXPECT_EQ(a.top_bubbles[0].cause, BubbleCause::kMemcpy);
  EXPECT_EQ(a.top_bubbles[0].blamed, "Memcpy HtoD (Pinned -> Device)");
}

TEST(BubbleAnalyzer, PageableCopyMakesItsCallBlockingHostSync) {
  TraceBuilder b;
  b.Kernel("a", 0, 10).Kernel("b", 45, 50, 7, 0, 6);
  b.Memcpy("Memcpy DtoH (Device -> Pageable)", 30, 40, 0, 5, true);
  b.Cpu("cudaMemcpyAsync", 10, 41, 1, 5, CpuEventCategory::kCudaRuntime);
  b.Launch(42, 43, 6);
  Analysis a = MustAnalyze(b.Build());
  EXPECT_EQ(Cause(a.job, BubbleCause::kMemcpy), 10 * kUs);
  EXPECT_EQ(Cause(a.job, BubbleCause::kHostSync), 22 * kUs);
  EXPECT_EQ(Cause(a.job, BubbleCause::kLaunchOverhead), 3 * kUs);
  EXPECT_EQ(a.top_bubbles[0].cause, BubbleCause::kHostSync);
  EXPECT_EQ(a.top_bubbles[0].blamed, "cudaMemcpyAsync");
}

TEST(BubbleAnalyzer, PinnedAsyncCopyCallIsOnlyLaunchOverhead) {
  TraceBuilder b;
  b.Kernel("a", 0, 10).Kernel("b", 45, 50, 7, 0, 6);
  b.Memcpy("Memcpy HtoD (Pinned -> Device)", 30, 40, 0, 5, false);
  b.Cpu("cudaMemcpyAsync", 10, 41, 1, 5, CpuEventCategory::kCudaRuntime);
  b.Launch(42, 43, 6);
  Analysis a = MustAnalyze(b.Build());
  EXPECT_EQ(Cause(a.job, BubbleCause::kHostSync), 0);
  EXPECT_EQ(Cause(a.job, BubbleCause::kLaunchOverhead), 21 * kUs + 3 * kUs);
  EXPECT_EQ(Cause(a.job, BubbleCause::kHostCompute), 1 * kUs);
}

TEST(BubbleAnalyzer, NoCpuEventsAtAllIsUnattributed) {
  TraceBuilder b;
  b.Kernel("a", 0, 10).Kernel("b", 20, 30);
  Analysis a = MustAnalyze(b.Build());
  EXPECT_EQ(Cause(a.job, BubbleCause::kUnattributed), 10 * kUs);
  EXPECT_EQ(a.top_bubbles[0].cause, BubbleCause::kUnattributed);
}

TEST(BubbleAnalyzer, NestedCpuEventsTakeTheHighestClass) {
  TraceBuilder b;
  b.Kernel("a", 0, 10).Kernel("b", 50, 60, 7, 0, 2);
  b.Cpu("aten::item", 10, 40, 1, 0, CpuEventCategory::kCpuOp);
  b.Cpu("cudaStreamSynchronize_v3020", 12, 38, 1, 0,
        CpuEventCategory::kCudaRuntime);
  b.Cpu("cudaMalloc", 20, 45, 1, 0, CpuEventCategory::kCudaRuntime);
  b.Launch(46, 47, 2);
  Analysis a = MustAnalyze(b.Build());
  // [10,40) sync; [40,45) allocator; [45,46) uncovered with a sync in the
  // host window -> host_sync; [46,50) launch overhead.
  EXPECT_EQ(Cause(a.job, BubbleCause::kHostSync), 31 * kUs);
  EXPECT_EQ(Cause(a.job, BubbleCause::kAllocator), 5 * kUs);
  EXPECT_EQ(Cause(a.job, BubbleCause::kLaunchOverhead), 4 * kUs);
}

TEST(BubbleAnalyzer, CorrelatedLaunchOnlyLooksAtItsOwnThread) {
  TraceBuilder b;
  b.Kernel("a", 0, 10).Kernel("b", 30, 40, 7, 0, 2);
  b.Cpu("cudaDeviceSynchronize", 10, 25, /*tid=*/2);
  b.Launch(25, 26, 2, /*tid=*/1);
  Analysis a = MustAnalyze(b.Build());
  EXPECT_EQ(Cause(a.job, BubbleCause::kHostSync), 0);
  EXPECT_EQ(Cause(a.job, BubbleCause::kHostCompute), 15 * kUs);
  EXPECT_EQ(Cause(a.job, BubbleCause::kLaunchOverhead), 5 * kUs);
}

TEST(BubbleAnalyzer, UncorrelatedGapUsesAllThreads) {
  TraceBuilder b;
  b.Kernel("a", 0, 10).Kernel("b", 30, 40);
  b.Cpu("cudaDeviceSynchronize", 10, 25, /*tid=*/2);
  Analysis a = MustAnalyze(b.Build());
  EXPECT_EQ(Cause(a.job, BubbleCause::kHostSync), 20 * kUs);
}

TEST(BubbleAnalyzer, CulpritIsKernelThatFinishedLastNotStartedLast) {
  TraceBuilder b;
  b.Kernel("long_gemm", 0, 50, /*stream=*/1)
      .Kernel("short_late", 10, 40, /*stream=*/2)
      .Kernel("next", 60, 70, /*stream=*/1);
  Analysis a = MustAnalyze(b.Build());
  ASSERT_TRUE(a.job.culprit_before_bubble.has_value());
  EXPECT_EQ(a.job.culprit_before_bubble->name, "long_gemm");
  EXPECT_EQ(a.job.compute_ns, 60 * kUs);
  EXPECT_EQ(a.job.bubble_ns, 10 * kUs);
}

TEST(BubbleAnalyzer, CulpritTieGoesToTheKernelThatStartedLast) {
  TraceBuilder b;
  b.Kernel("early", 0, 50, 1).Kernel("late", 20, 50, 2).Kernel("n", 60, 70, 1);
  Analysis a = MustAnalyze(b.Build());
  EXPECT_EQ(a.job.culprit_before_bubble->name, "late");
}

TEST(BubbleAnalyzer, LargestBubbleTieGoesToTheEarliest) {
  TraceBuilder b;
  b.Kernel("a", 0, 10).Kernel("b", 20, 30).Kernel("c", 40, 50);
  Analysis a = MustAnalyze(b.Build());
  EXPECT_EQ(a.job.largest_bubble_ns, 10 * kUs);
  EXPECT_EQ(a.job.largest_bubble_start_ns, 10 * kUs);
  EXPECT_EQ(a.job.culprit_before_bubble->name, "a");
}

TEST(BubbleAnalyzer, UnsortedInputGivesTheSameResult) {
  Trace sorted = SeedSample().Build();
  Trace shuffled = sorted;
  std::mt19937 rng(42);
  for (int round = 0; round < 10; ++round) {
    std::shuffle(shuffled.gpu.begin(), shuffled.gpu.end(), rng);
    std::shuffle(shuffled.cpu.begin(), shuffled.cpu.end(), rng);
    Analysis a = MustAnalyze(sorted);
    Analysis b = MustAnalyze(shuffled);
    EXPECT_EQ(a.job.span_ns, b.job.span_ns);
    EXPECT_EQ(a.job.bubble_ns, b.job.bubble_ns);
    EXPECT_EQ(a.job.attribution, b.job.attribution);
    EXPECT_EQ(a.job.culprit_before_bubble->name,
              b.job.culprit_before_bubble->name);
  }
}

TEST(BubbleAnalyzer, SeveralDevicesSumGpuTimeAndTakeTheLargestBubble) {
  TraceBuilder b = SeedSample();
  b.Kernel("d1_a", 0, 100, 7, 1).Kernel("d1_b", 300, 310, 7, 1);
  Analysis a = MustAnalyze(b.Build());
  ASSERT_EQ(a.devices.size(), 2u);
  EXPECT_EQ(a.devices[0].device, 0);
  EXPECT_EQ(a.devices[1].device, 1);
  EXPECT_EQ(a.devices[1].stats.span_ns, 310 * kUs);
  EXPECT_EQ(a.job.span_ns, 130 * kUs + 310 * kUs);
  EXPECT_EQ(a.job.compute_ns, 45 * kUs + 110 * kUs);
  EXPECT_EQ(a.job.bubble_ns, 85 * kUs + 200 * kUs);
  EXPECT_EQ(a.job.largest_bubble_ns, 200 * kUs);
  EXPECT_EQ(a.job.culprit_before_bubble->name, "d1_a");
  EXPECT_EQ(a.top_bubbles[0].device, 1);
}

TEST(BubbleAnalyzer, ZeroLengthKernelsAreCountedButIgnoredForTime) {
  TraceBuilder b;
  b.Kernel("a", 0, 10).Kernel("empty", 15, 15).Kernel("b", 20, 30);
  Analysis a = MustAnalyze(b.Build());
  EXPECT_EQ(a.kernels, 3);
  EXPECT_EQ(a.devices[0].zero_length_kernels, 1);
  EXPECT_EQ(a.job.bubble_ns, 10 * kUs);
}

TEST(BubbleAnalyzer, EndBeforeStartIsAnError) {
  TraceBuilder b;
  b.Kernel("a", 0, 10).Kernel("backwards", 30, 20);
  absl::StatusOr<Analysis> a = AnalyzeTrace(b.Build());
  ASSERT_FALSE(a.ok());
  EXPECT_EQ(a.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(a.status().message(), HasSubstr("backwards"));
}

// A trace of raw-nanosecond kernels on device 0.
Trace KernelsAtNs(std::initializer_list<std::pair<int64_t, int64_t>> spans) {
  Trace t;
  t.names.push_back("k");
  for (auto [start, end] : spans) {
    t.gpu.push_back(GpuActivity{.start_ns = start, .end_ns = end, .name = 0});
  }
  return t;
}

// Regression: one 1 s kernel at 9,223,372,030 s made `w +
// window_ns` overflow in the window loop, which then allocated windows until
// std::bad_alloc. Such a time is refused; so is a +-292-year kernel.
TEST(BubbleAnalyzer, TimesOutsideTheAcceptedRangeAreAnError) {
  constexpr int64_t kNearMax = 9'223'372'030'000'000'000;
  AnalyzerOptions options;
  options.window_ns = 10'000'000'000;
  for (const Trace& t :
       {KernelsAtNs({{kNearMax, kNearMax + 1'000'000'000}}),
        KernelsAtNs({{-9'223'372'036'854'775'000, 9'223'372'036'854'775'000}}),
        KernelsAtNs({{0, 1}, {INT64_MAX - 1, INT64_MAX}})}) {
    absl::StatusOr<Analysis> a = AnalyzeTrace(t, options);
    ASSERT_FALSE(a.ok());
    EXPECT_EQ(a.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(a.status().message(), HasSubstr("outside the accepted times"));
  }
}

// The edges of the accepted range work, windows included: no overflow at
// the last window (UBSan checks the arithmetic in the sanitizer run).
TEST(BubbleAnalyzer, TimesAtTheEdgesOfTheAcceptedRangeAreAnalyzed) {
  AnalyzerOptions options;
  options.window_ns = kMaxWindowNs;
  Analysis a = MustAnalyze(
      KernelsAtNs({{kMaxEventTimeNs - 10, kMaxEventTimeNs}}), options);
  EXPECT_EQ(a.job.compute_ns, 10);
  ASSERT_EQ(a.windows.size(), 1u);
  EXPECT_GT(a.windows[0].end_ns, a.windows[0].start_ns);
  options.window_ns = 10'000'000'000;
  a = MustAnalyze(KernelsAtNs({{-kMaxEventTimeNs, -kMaxEventTimeNs + 5},
                               {-kMaxEventTimeNs + 20, -kMaxEventTimeNs + 30}}),
                  options);
  EXPECT_EQ(a.job.span_ns, 30);
  EXPECT_EQ(a.windows.size(), 1u);
}

// Offline, as the processor caps open windows online: a trace whose kernels
// span more windows than max_windows is refused before any is allocated.
TEST(BubbleAnalyzer, WindowsPerAnalysisAreCapped) {
  const Trace t = KernelsAtNs(
      {{0, 1'000}, {4'000'000'000'000'000'000, 4'000'000'000'000'001'000}});
  AnalyzerOptions options;
  options.window_ns = 10'000'000'000;
  absl::StatusOr<Analysis> a = AnalyzeTrace(t, options);
  ASSERT_FALSE(a.ok());
  EXPECT_THAT(a.status().message(), HasSubstr("span 400000001 windows of 10s"));
  // Without windows the same trace is fine: one long bubble.
  options.window_ns = 0;
  EXPECT_EQ(MustAnalyze(t, options).job.bubble_ns,
            4'000'000'000'000'000'000 - 1'000);
  // At the cap exactly, it is analyzed.
  options.window_ns = 1'000;
  options.max_windows = 1;
  EXPECT_EQ(MustAnalyze(KernelsAtNs({{0, 1'000}}), options).windows.size(), 1u);
  options.max_windows = 1;
  EXPECT_FALSE(AnalyzeTrace(KernelsAtNs({{0, 1'001}}), options).ok());
}

TEST(BubbleAnalyzer, InvalidOptionsAreReportedAllAtOnce) {
  AnalyzerOptions options;
  EXPECT_TRUE(options.Validate().ok());
  options.top_bubbles = -1;
  options.window_ns = -10;
  options.max_windows = -2;
  absl::StatusOr<Analysis> a = AnalyzeTrace(KernelsAtNs({{0, 10}}), options);
  EXPECT_EQ(a.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(a.status().message(),
            absl::StrCat("invalid AnalyzerOptions: top_bubbles must be >= 0, "
                         "not -1; window_ns must be within 0 and ",
                         kMaxWindowNs,
                         " ns, not -10; max_windows must be >= 0 (0: no cap), "
                         "not -2"));
}

TEST(BubbleAnalyzer, WindowLongerThanTheLimitIsAnError) {
  AnalyzerOptions options;
  options.window_ns = kMaxWindowNs + 1;
  EXPECT_FALSE(AnalyzeTrace(KernelsAtNs({{0, 10}}), options).ok());
}

TEST(BubbleAnalyzer, EmptyTraceHasZeroEverything) {
  Analysis a = MustAnalyze(Trace{});
  EXPECT_EQ(a.job.span_ns, 0);
  EXPECT_EQ(a.job.bubble_ratio(), 0.0);
  EXPECT_FALSE(a.job.culprit_before_bubble.has_value());
  EXPECT_TRUE(a.top_bubbles.empty());
}

TEST(BubbleAnalyzer, NextKernelIsTheOneLaunchedFirstAmongTies) {
  // Two kernels start at the gap's end; one was queued before the gap.
  TraceBuilder b;
  b.Kernel("a", 0, 10)
      .Kernel("queued_late", 20, 30, 1, 0, 2)
      .Kernel("queued_early", 20, 25, 2, 0, 3);
  b.Launch(15, 16, 2).Launch(5, 6, 3);
  Analysis a = MustAnalyze(b.Build());
  EXPECT_EQ(Cause(a.job, BubbleCause::kGpuDependency), 10 * kUs);
  EXPECT_EQ(a.top_bubbles[0].after->name, "queued_early");
}

// Brute force on a 1 µs grid: busy time and bubble time of device 0.
void CheckAgainstGrid(const Trace& trace, const Analysis& a) {
  for (const DeviceAnalysis& d : a.devices) {
    std::vector<bool> busy(3000, false);
    int64_t first = INT64_MAX, last = INT64_MIN;
    for (const GpuActivity& g : trace.gpu) {
      if (g.device != d.device || g.kind != GpuActivityKind::kKernel ||
          g.end_ns == g.start_ns)
        continue;
      first = std::min(first, g.start_ns);
      last = std::max(last, g.end_ns);
      for (int64_t t = g.start_ns / kUs; t < g.end_ns / kUs; ++t)
        busy[t] = true;
    }
    int64_t compute = std::count(busy.begin(), busy.end(), true) * kUs;
    EXPECT_EQ(d.stats.compute_ns, compute);
    EXPECT_EQ(d.stats.span_ns, first <= last ? last - first : 0);
  }
}

TEST(BubbleAnalyzer, RandomTimelinesKeepTheSumInvariantAndWindowsAddUp) {
  std::mt19937 rng(7);
  for (int round = 0; round < 200; ++round) {
    TraceBuilder b;
    std::uniform_int_distribution<int> t(0, 2500), len(1, 60), dev(0, 2),
        stream(1, 3), tid(1, 3), kind(0, 9);
    uint64_t corr = 1;
    int kernels = 5 + round % 40;
    for (int i = 0; i < kernels; ++i) {
      int s = t(rng);
      b.Kernel("k" + std::to_string(i % 5), s, s + len(rng), stream(rng),
               dev(rng), corr);
      int ls = s - len(rng);
      if (kind(rng) < 8) b.Launch(ls, ls + 1, corr, tid(rng));
      ++corr;
    }
    for (int i = 0; i < 10; ++i) {
      int s = t(rng);
      int k = kind(rng);
      const char* names[] = {
          "cudaStreamSynchronize", "aten::item",  "cudaMalloc",
          "DataLoader.next",       "aten::add",   "cudaEventRecord",
          "python_step",           "empty_cache", "cudaMemcpyAsync",
          "ProfilerStep#3"};
      b.Cpu(names[k], s, s + len(rng) * 3, tid(rng), 0,
            CpuEventCategory::kCpuOp);
      if (k == 8) b.Memcpy("Memcpy DtoH", s + 2, s + 20, dev(rng), 0, true);
    }
    Trace trace = b.Build();
    AnalyzerOptions options;
    options.window_ns = 100 * kUs;
    Analysis a = MustAnalyze(trace, options);
    EXPECT_EQ(AttributionTotal(a.job.attribution), a.job.bubble_ns);
    EXPECT_EQ(a.job.span_ns, a.job.compute_ns + a.job.bubble_ns);
    for (const DeviceAnalysis& d : a.devices) {
      EXPECT_EQ(AttributionTotal(d.stats.attribution), d.stats.bubble_ns);
      EXPECT_GE(d.stats.utilization(), 0.0);
      EXPECT_LE(d.stats.utilization(), 1.0);
    }
    CheckAgainstGrid(trace, a);
    // Windows add up to the whole trace.
    UtilizationStats sum;
    for (const WindowAnalysis& w : a.windows) {
      AddDeviceStats(w.job, sum);
      EXPECT_EQ(AttributionTotal(w.job.attribution), w.job.bubble_ns);
      EXPECT_LE(w.job.span_ns,
                100 * kUs * static_cast<int64_t>(w.devices.size()));
    }
    EXPECT_EQ(sum.compute_ns, a.job.compute_ns);
    EXPECT_EQ(sum.bubble_ns, a.job.bubble_ns);
    EXPECT_EQ(sum.span_ns, a.job.span_ns);
    EXPECT_EQ(sum.attribution, a.job.attribution);
    if (a.job.largest_bubble_ns > 0) {
      EXPECT_LE(sum.largest_bubble_ns, a.job.largest_bubble_ns);
    }
  }
}

TEST(BubbleAnalyzer, GapCoveringAWholeWindowMakesAZeroPercentWindow) {
  TraceBuilder b;
  b.Kernel("a", 0, 10).Kernel("b", 350, 360);
  b.Cpu("cudaDeviceSynchronize", 10, 340);
  AnalyzerOptions options;
  options.window_ns = 100 * kUs;
  Analysis a = MustAnalyze(b.Build(), options);
  ASSERT_EQ(a.windows.size(), 4u);
  EXPECT_EQ(a.windows[1].start_ns, 100 * kUs);
  EXPECT_EQ(a.windows[1].job.compute_ns, 0);
  EXPECT_EQ(a.windows[1].job.bubble_ns, 100 * kUs);
  EXPECT_EQ(a.windows[1].job.utilization(), 0.0);
  EXPECT_EQ(Cause(a.windows[1].job, BubbleCause::kHostSync), 100 * kUs);
  // The culprit of a gap part is the kernel before the gap, from window 0.
  EXPECT_EQ(a.windows[2].job.culprit_before_bubble->name, "a");
}

TEST(BubbleAnalyzer, OpenUntilAddsATrailingGapWithoutANextKernel) {
  TraceBuilder b;
  b.Kernel("a", 0, 10, 7, 0, 1).Kernel("b", 20, 30, 7, 0, 2);
  b.Launch(-5, -4, 1).Launch(15, 16, 2);
  b.Cpu("cudaStreamSynchronize", 30, 45, /*tid=*/1);
  AnalyzerOptions options;
  options.open_until_ns = 50 * kUs;
  Analysis a = MustAnalyze(b.Build(), options);
  EXPECT_EQ(a.job.span_ns, 50 * kUs);
  EXPECT_EQ(a.job.compute_ns, 20 * kUs);
  EXPECT_EQ(a.job.bubble_ns, 30 * kUs);
  // [30,45) sync; [45,50) uncovered with a sync overlapping -> host_sync.
  EXPECT_EQ(Cause(a.job, BubbleCause::kHostSync), 20 * kUs);
  EXPECT_EQ(a.top_bubbles[0].start_ns, 30 * kUs);
  EXPECT_FALSE(a.top_bubbles[0].after.has_value());
  EXPECT_EQ(a.top_bubbles[0].before->name, "b");
  EXPECT_EQ(AttributionTotal(a.job.attribution), a.job.bubble_ns);
}

TEST(BubbleAnalyzer, OpenUntilBeforeTheLastKernelChangesNothing) {
  AnalyzerOptions options;
  options.open_until_ns = 100 * kUs;
  Analysis a = MustAnalyze(SeedSample().Build(), options);
  EXPECT_EQ(a.job.span_ns, 130 * kUs);
  EXPECT_EQ(a.job.bubble_ns, 85 * kUs);
}

// docs/semantics.md#observations, the worked example (in µs): observations
// [0, 2000) and [5000, 7000), kernels a [0, 1500) and b [5500, 7000), b
// launched at 5200 on the thread that synchronized over [1500, 1900). The
// gap [1500, 5500) has the observed pieces [1500, 2000) and [5000, 5500);
// the 3000 µs between them are no bubble.
Trace ObservedGapExample() {
  TraceBuilder b;
  b.Kernel("a", 0, 1500).Kernel("b", 5500, 7000, 7, 0, 2);
  b.Launch(5200, 5210, 2);
  b.Cpu("cudaDeviceSynchronize", 1500, 1900);
  return b.Build();
}

TEST(BubbleAnalyzer, UnobservedTimeInsideAGapIsNoBubble) {
  const IntervalSet observed =
      IntervalSet::FromIntervals({{0, 2000 * kUs}, {5000 * kUs, 7000 * kUs}});
  AnalyzerOptions options;
  options.window_ns = 10'000 * kUs;
  options.observed = &observed;
  Analysis a = MustAnalyze(ObservedGapExample(), options);
  EXPECT_EQ(a.job.compute_ns, 3000 * kUs);
  EXPECT_EQ(a.job.bubble_ns, 1000 * kUs);
  EXPECT_EQ(a.job.span_ns, 4000 * kUs);
  // Host-side time [1500, 5200) observed: 500 + 200 µs; the sync covers 400
  // and overlaps it, so the 300 uncovered are host_sync too. The launch's
  // [5200, 5500) is launch_overhead.
  EXPECT_EQ(Cause(a.job, BubbleCause::kHostSync), 700 * kUs);
  EXPECT_EQ(Cause(a.job, BubbleCause::kLaunchOverhead), 300 * kUs);
  EXPECT_EQ(AttributionTotal(a.job.attribution), a.job.bubble_ns);
  // Each piece is a bubble; equal lengths: the earlier is the largest, and
  // its culprit is the kernel before the whole gap.
  EXPECT_EQ(a.job.largest_bubble_ns, 500 * kUs);
  EXPECT_EQ(a.job.largest_bubble_start_ns, 1500 * kUs);
  EXPECT_EQ(a.job.culprit_before_bubble->name, "a");
  ASSERT_EQ(a.top_bubbles.size(), 2u);
  EXPECT_EQ(a.top_bubbles[0].start_ns, 1500 * kUs);
  EXPECT_EQ(a.top_bubbles[0].end_ns, 2000 * kUs);
  EXPECT_EQ(a.top_bubbles[0].cause, BubbleCause::kHostSync);
  EXPECT_EQ(a.top_bubbles[1].start_ns, 5000 * kUs);
  EXPECT_EQ(a.top_bubbles[1].end_ns, 5500 * kUs);
  EXPECT_EQ(
      a.top_bubbles[1].attribution[static_cast<int>(BubbleCause::kHostSync)],
      200 * kUs);
  EXPECT_EQ(a.top_bubbles[1].cause, BubbleCause::kLaunchOverhead);
  EXPECT_EQ(a.top_bubbles[1].before->name, "a");
  EXPECT_EQ(a.top_bubbles[1].after->name, "b");
  ASSERT_EQ(a.windows.size(), 1u);
  EXPECT_EQ(a.windows[0].job.span_ns, 4000 * kUs);
  EXPECT_EQ(a.windows[0].job.bubble_ns, 1000 * kUs);
  EXPECT_EQ(a.windows[0].job.attribution, a.job.attribution);

  // Windows wholly inside the unobserved time do not exist.
  options.window_ns = 1000 * kUs;
  a = MustAnalyze(ObservedGapExample(), options);
  std::vector<int64_t> starts;
  for (const WindowAnalysis& w : a.windows) starts.push_back(w.start_ns / kUs);
  EXPECT_EQ(starts, (std::vector<int64_t>{0, 1000, 5000, 6000}));

  // Without observations, the whole gap is one bubble, as before.
  a = MustAnalyze(ObservedGapExample());
  EXPECT_EQ(a.job.bubble_ns, 4000 * kUs);
  EXPECT_EQ(a.job.span_ns, 7000 * kUs);
}

// A gap straddling an observation's end: only its part before the end is a
// bubble, attributed with the whole gap's context (here its next kernel's
// launch before the gap: gpu_dependency).
TEST(BubbleAnalyzer, AGapAcrossAnObservationsEndCountsItsObservedPart) {
  TraceBuilder b;
  b.Kernel("a", 0, 100, 7, 0, 1).Kernel("b", 400, 500, 7, 0, 2);
  b.Launch(-10, -9, 1).Launch(50, 51, 2);
  const Trace trace = b.Build();
  const IntervalSet observed =
      IntervalSet::FromIntervals({{0, 130 * kUs}, {400 * kUs, 500 * kUs}});
  AnalyzerOptions options;
  options.observed = &observed;
  options.window_ns = 100 * kUs;
  Analysis a = MustAnalyze(trace, options);
  EXPECT_EQ(a.job.bubble_ns, 30 * kUs);
  EXPECT_EQ(a.job.span_ns, 230 * kUs);
  EXPECT_EQ(Cause(a.job, BubbleCause::kGpuDependency), 30 * kUs);
  ASSERT_EQ(a.top_bubbles.size(), 1u);
  EXPECT_EQ(a.top_bubbles[0].start_ns, 100 * kUs);
  EXPECT_EQ(a.top_bubbles[0].end_ns, 130 * kUs);
  EXPECT_EQ(a.top_bubbles[0].after->name, "b");
  std::vector<int64_t> starts;
  for (const WindowAnalysis& w : a.windows) starts.push_back(w.start_ns / kUs);
  EXPECT_EQ(starts, (std::vector<int64_t>{0, 100, 400}));
  EXPECT_EQ(a.windows[1].job.bubble_ns, 30 * kUs);
  EXPECT_EQ(a.windows[1].job.span_ns, 30 * kUs);
  // A breakdown interval across the gap: its unobserved part is outside.
  const DeviceInterval interval{
      .device = 0, .start_ns = 50 * kUs, .end_ns = 450 * kUs};
  options.breakdown_intervals = absl::MakeConstSpan(&interval, 1);
  a = MustAnalyze(trace, options);
  ASSERT_EQ(a.breakdowns.size(), 1u);
  EXPECT_EQ(a.breakdowns[0].busy_ns, 100 * kUs);
  EXPECT_EQ(AttributionTotal(a.breakdowns[0].bubble), 30 * kUs);
  EXPECT_EQ(a.breakdowns[0].outside_ns, 270 * kUs);
}

void ExpectSameStats(const UtilizationStats& got,
                     const UtilizationStats& want) {
  EXPECT_EQ(got.span_ns, want.span_ns);
  EXPECT_EQ(got.compute_ns, want.compute_ns);
  EXPECT_EQ(got.bubble_ns, want.bubble_ns);
  EXPECT_EQ(got.largest_bubble_ns, want.largest_bubble_ns);
  EXPECT_EQ(got.largest_bubble_start_ns, want.largest_bubble_start_ns);
  EXPECT_EQ(got.culprit_before_bubble.has_value(),
            want.culprit_before_bubble.has_value());
  if (got.culprit_before_bubble && want.culprit_before_bubble) {
    EXPECT_EQ(got.culprit_before_bubble->name,
              want.culprit_before_bubble->name);
  }
  EXPECT_EQ(got.attribution, want.attribution);
}

// Random timelines whose observed time is a random set of whole windows,
// with every kernel inside one observed run of windows: each window inside
// the observed time is exactly the window of the analysis without
// observations (the context of a gap is its whole gap's either way), the
// others do not exist, the whole adds up, and a 1 µs grid agrees: a bubble
// is idle, observed time between the device's first and last kernel.
TEST(BubbleAnalyzer, RandomObservedTimeCutsGapsAndKeepsWindowsExact) {
  constexpr int64_t kWindowUs = 100;
  constexpr int kWindows = 30;
  std::mt19937 rng(22);
  for (int round = 0; round < 100; ++round) {
    SCOPED_TRACE(absl::StrCat("round ", round));
    std::bernoulli_distribution observed_window(0.6);
    std::vector<bool> is_observed(kWindows);
    std::vector<Interval> runs;  // Observed runs of windows, in µs.
    for (int w = 0; w < kWindows; ++w) {
      is_observed[w] = observed_window(rng);
      if (!is_observed[w]) continue;
      if (w > 0 && is_observed[w - 1]) {
        runs.back().end = (w + 1) * kWindowUs;
      } else {
        runs.push_back({w * kWindowUs, (w + 1) * kWindowUs});
      }
    }
    if (runs.empty()) continue;
    std::vector<Interval> observed_ns;
    for (const Interval& r : runs) {
      observed_ns.push_back({r.start * kUs, r.end * kUs});
    }
    const IntervalSet observed = IntervalSet::FromIntervals(observed_ns);
    TraceBuilder b;
    std::uniform_int_distribution<size_t> pick_run(0, runs.size() - 1);
    std::uniform_int_distribution<int> len(1, 40), dev(0, 1), tid(1, 2),
        kind(0, 9);
    uint64_t corr = 1;
    for (int i = 0; i < 10 + round % 30; ++i) {
      const Interval& r = runs[pick_run(rng)];
      const int64_t s =
          std::uniform_int_distribution<int64_t>(r.start, r.end - 1)(rng);
      const int64_t e = std::min<int64_t>(r.end, s + len(rng));
      b.Kernel("k" + std::to_string(i % 4), s, e, 7, dev(rng), corr);
      if (kind(rng) < 7) b.Launch(s - len(rng), s - 1, corr, tid(rng));
      ++corr;
    }
    for (int i = 0; i < 8; ++i) {
      const char* names[] = {"cudaStreamSynchronize", "cudaMalloc",
                             "DataLoader.next", "aten::add", "cudaEventRecord"};
      const int64_t s =
          std::uniform_int_distribution<int64_t>(0, kWindows * kWindowUs)(rng);
      b.Cpu(names[kind(rng) % 5], s, s + 3 * len(rng), tid(rng), 0,
            CpuEventCategory::kCpuOp);
    }
    const Trace trace = b.Build();
    AnalyzerOptions options;
    options.window_ns = kWindowUs * kUs;
    options.top_bubbles_per_window = 2;
    const Analysis whole = MustAnalyze(trace, options);
    options.observed = &observed;
    const Analysis cut = MustAnalyze(trace, options);

    EXPECT_EQ(AttributionTotal(cut.job.attribution), cut.job.bubble_ns);
    EXPECT_EQ(cut.job.span_ns, cut.job.compute_ns + cut.job.bubble_ns);
    EXPECT_EQ(cut.job.compute_ns, whole.job.compute_ns);
    for (const DeviceAnalysis& d : cut.devices) {
      EXPECT_EQ(AttributionTotal(d.stats.attribution), d.stats.bubble_ns);
      EXPECT_EQ(d.stats.span_ns, d.stats.compute_ns + d.stats.bubble_ns);
    }
    UtilizationStats sum;
    size_t matched = 0;
    for (const WindowAnalysis& w : cut.windows) {
      AddDeviceStats(w.job, sum);
      const int64_t index = w.start_ns / (kWindowUs * kUs);
      EXPECT_TRUE(is_observed[index]) << "window " << index;
      const auto it = std::find_if(
          whole.windows.begin(), whole.windows.end(),
          [&](const WindowAnalysis& x) { return x.start_ns == w.start_ns; });
      ASSERT_NE(it, whole.windows.end());
      ++matched;
      SCOPED_TRACE(absl::StrCat("window ", index));
      ExpectSameStats(w.job, it->job);
      ASSERT_EQ(w.devices.size(), it->devices.size());
      for (size_t i = 0; i < w.devices.size(); ++i) {
        ExpectSameStats(w.devices[i].stats, it->devices[i].stats);
        EXPECT_EQ(w.devices[i].kernels, it->devices[i].kernels);
      }
      ASSERT_EQ(w.top_bubbles.size(), it->top_bubbles.size());
      for (size_t i = 0; i < w.top_bubbles.size(); ++i) {
        EXPECT_EQ(w.top_bubbles[i].start_ns, it->top_bubbles[i].start_ns);
        EXPECT_EQ(w.top_bubbles[i].end_ns, it->top_bubbles[i].end_ns);
        EXPECT_EQ(w.top_bubbles[i].attribution, it->top_bubbles[i].attribution);
        EXPECT_EQ(w.top_bubbles[i].blamed, it->top_bubbles[i].blamed);
      }
    }
    // Every window of the analysis without observations that lies in
    // observed time is there.
    size_t want_matched = 0;
    for (const WindowAnalysis& w : whole.windows) {
      want_matched += is_observed[w.start_ns / (kWindowUs * kUs)] ? 1 : 0;
    }
    EXPECT_EQ(matched, want_matched);
    EXPECT_EQ(sum.compute_ns, cut.job.compute_ns);
    EXPECT_EQ(sum.bubble_ns, cut.job.bubble_ns);
    EXPECT_EQ(sum.span_ns, cut.job.span_ns);
    EXPECT_EQ(sum.attribution, cut.job.attribution);
    EXPECT_LE(sum.largest_bubble_ns, cut.job.largest_bubble_ns);
    // The grid.
    for (const DeviceAnalysis& d : cut.devices) {
      std::vector<bool> busy(kWindows * kWindowUs, false);
      int64_t first = INT64_MAX, last = INT64_MIN;
      for (const GpuActivity& g : trace.gpu) {
        if (g.device != d.device || g.end_ns == g.start_ns) continue;
        first = std::min(first, g.start_ns / kUs);
        last = std::max(last, g.end_ns / kUs);
        for (int64_t t = g.start_ns / kUs; t < g.end_ns / kUs; ++t) {
          busy[t] = true;
        }
      }
      int64_t bubble = 0;
      for (int64_t t = first; t < last; ++t) {
        bubble += !busy[t] && is_observed[t / kWindowUs] ? 1 : 0;
      }
      EXPECT_EQ(d.stats.bubble_ns, bubble * kUs) << "device " << d.device;
    }
  }
}

}  // namespace
}  // namespace bubblewatch
