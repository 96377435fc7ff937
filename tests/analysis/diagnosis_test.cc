// DiagnoseTrace on hand-made timelines (one per verdict, the lead and queue
// figures, kernel statistics, NCCL overlap) and on the real traces in
// tests/testdata/real/.
#include "analysis/diagnosis.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "analysis/bubble_analyzer.h"
#include "analysis/kernel_stats.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "ingest/trace_reader.h"
#include "tests/analysis/trace_builder.h"
#include "tests/testing/units.h"

namespace bubblewatch {
namespace {

using ::bubblewatch::testing::TraceBuilder;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Not;

using testing::kUs;

struct Diagnosed {
  Analysis analysis;
  Diagnosis diagnosis;
};

Diagnosed MustDiagnose(const Trace& trace, DiagnosisOptions options = {}) {
  Diagnosed out;
  absl::StatusOr<Analysis> a = AnalyzeTrace(trace);
  EXPECT_TRUE(a.ok()) << a.status();
  if (!a.ok()) return out;
  out.analysis = *std::move(a);
  absl::StatusOr<Diagnosis> d = DiagnoseTrace(trace, out.analysis, options);
  EXPECT_TRUE(d.ok()) << d.status();
  if (d.ok()) out.diagnosis = *std::move(d);
  return out;
}

// Checks the invariant every diagnosis keeps: idle classes add up to the
// analyzer's bubble time, per device and for the job.
void ExpectIdleAddsUp(const Diagnosed& d) {
  EXPECT_EQ(d.diagnosis.job.verdict.evidence.idle.total_ns(),
            d.analysis.job.bubble_ns);
  ASSERT_EQ(d.diagnosis.devices.size(), d.analysis.devices.size());
  for (size_t i = 0; i < d.analysis.devices.size(); ++i) {
    EXPECT_EQ(d.diagnosis.devices[i].figures.verdict.evidence.idle.total_ns(),
              d.analysis.devices[i].stats.bubble_ns)
        << "device " << d.analysis.devices[i].device;
  }
}

// The seed's "tiny kernel flood": 2 us kernels, one launch call every 10 us,
// each kernel starting 3 us after its call returns. The GPU runs 20% of the
// time and always waits for the next launch.
Trace TinyKernelFlood() {
  TraceBuilder b;
  for (int i = 0; i < 200; ++i) {
    double t = 10.0 * i;
    b.Launch(t, t + 5, 1 + i).Kernel("add_tiny", t + 8, t + 10, 7, 0, 1 + i);
  }
  return b.Build();
}

TEST(Diagnosis, TinyKernelFloodIsCpuBound) {
  Diagnosed d = MustDiagnose(TinyKernelFlood());
  const BoundVerdict& v = d.diagnosis.job.verdict;
  EXPECT_EQ(v.verdict, Verdict::kCpuBound) << v.reason;
  EXPECT_THAT(v.reason, HasSubstr("tiny-kernel flood"));
  EXPECT_THAT(v.advice, HasSubstr("CUDA Graphs"));
  EXPECT_EQ(v.evidence.idle.launch_ns, d.analysis.job.bubble_ns);
  EXPECT_EQ(v.evidence.lead_p50_ns, 8 * kUs);
  EXPECT_EQ(v.evidence.post_launch_gap_lead_p50_ns, 8 * kUs);
  EXPECT_DOUBLE_EQ(v.evidence.tiny_kernel_share, 1.0);
  EXPECT_EQ(d.diagnosis.job.queue.max, 1);
  EXPECT_LT(d.diagnosis.job.queue.mean, 1.0);
  EXPECT_EQ(d.diagnosis.devices[0].figures.verdict.verdict, Verdict::kCpuBound);
  ExpectIdleAddsUp(d);
}

// The CPU launches 100 kernels up front; they then run back to back.
Trace DeepQueue() {
  TraceBuilder b;
  for (int i = 0; i < 100; ++i) {
    b.Launch(2.0 * i, 2.0 * i + 1, 1 + i)
        .Kernel("gemm", 1000 + 100.0 * i, 1100 + 100.0 * i, 7, 0, 1 + i);
  }
  return b.Build();
}

TEST(Diagnosis, DeepQueueBackToBackKernelsIsGpuBound) {
  Diagnosed d = MustDiagnose(DeepQueue());
  const BoundVerdict& v = d.diagnosis.job.verdict;
  EXPECT_EQ(v.verdict, Verdict::kGpuBound) << v.reason;
  EXPECT_THAT(v.reason, HasSubstr("back to back"));
  EXPECT_DOUBLE_EQ(v.evidence.utilization, 1.0);
  // Kernel i starts 1000 + 98 i us after its launch.
  EXPECT_EQ(d.diagnosis.job.launch.lead.p10_ns, (1000 + 98 * 9) * kUs);
  EXPECT_EQ(d.diagnosis.job.launch.lead.p50_ns, (1000 + 98 * 49) * kUs);
  // All 100 are launched before the first starts.
  EXPECT_EQ(d.diagnosis.job.queue.max, 100);
  // Over the span the queue drains linearly from 99 to 0: mean 49.5.
  EXPECT_NEAR(d.diagnosis.job.queue.mean, 49.5, 1e-9);
}

TEST(Diagnosis, BusyGpuWithTheCpuBarelyAheadIsBalanced) {
  // Back-to-back 100 us kernels, each launched 5 us before it starts.
  TraceBuilder b;
  for (int i = 0; i < 50; ++i) {
    double t = 100.0 * i;
    b.Launch(t - 5, t - 4, 1 + i).Kernel("gemm", t, t + 100, 7, 0, 1 + i);
  }
  Diagnosed d = MustDiagnose(b.Build());
  EXPECT_EQ(d.diagnosis.job.verdict.verdict, Verdict::kBalanced)
      << d.diagnosis.job.verdict.reason;
  EXPECT_THAT(d.diagnosis.job.verdict.reason, HasSubstr("only 5.0 us ahead"));
}

// Five steps: the CPU queues 10 kernels at once, then waits in
// cudaStreamSynchronize until the GPU drains, then spends 40 us in an
// optimizer step before the next step. After each sync the queue is empty
// and the next kernel starts 10 us after its launch, while mid-step leads
// are ~100 us.
Trace SyncEveryStep() {
  TraceBuilder b;
  uint64_t corr = 1;
  for (int step = 0; step < 5; ++step) {
    double s = 250.0 * step;
    for (int j = 0; j < 10; ++j) {
      b.Launch(s + j, s + j + 0.5, corr)
          .Kernel("conv", s + 10 + 20 * j, s + 30 + 20 * j, 7, 0, corr);
      ++corr;
    }
    b.Cpu("cudaStreamSynchronize", s + 11, s + 210, 1, 0,
          CpuEventCategory::kCudaRuntime);
    b.Cpu("optimizer.step", s + 210, s + 250, 1, 0, CpuEventCategory::kCpuOp);
  }
  return b.Build();
}

TEST(Diagnosis, HostWorkAfterADrainingSyncIsCpuBoundWithSyncAdvice) {
  // The sync returns as the GPU goes idle, so the attribution gives each gap
  // to the optimizer step (host_compute, 40 us) and the launch
  // (launch_overhead, 10 us): the verdict says so, and names the sync that
  // emptied the queue in its reason and advice.
  Diagnosed d = MustDiagnose(SyncEveryStep());
  const BoundVerdict& v = d.diagnosis.job.verdict;
  EXPECT_EQ(v.verdict, Verdict::kCpuBound) << v.reason;
  EXPECT_THAT(v.reason, HasSubstr("host_compute 80% + launch_overhead 20%"));
  EXPECT_THAT(v.reason, HasSubstr("4 gaps followed a sync"));
  EXPECT_EQ(v.evidence.idle.sync_gaps, 4);
  EXPECT_EQ(v.evidence.idle.sync_ns, 0);
  EXPECT_EQ(v.evidence.idle.launch_ns, 4 * 50 * kUs);
  EXPECT_EQ(v.evidence.post_sync_lead_p50_ns, 10 * kUs);
  // Mid-step leads are 10 + 19 j us for the j-th kernel of a step.
  EXPECT_EQ(v.evidence.lead_p50_ns, 86 * kUs);
  EXPECT_THAT(v.advice, HasSubstr(".item()"));
  ExpectIdleAddsUp(d);
}

// After each step's kernels, the launching thread waits 300 us for the next
// batch from the DataLoader.
Trace DataLoaderStalls() {
  TraceBuilder b;
  uint64_t corr = 1;
  for (int step = 0; step < 4; ++step) {
    double s = 500.0 * step;
    b.Cpu("enumerate(DataLoader)#_MultiProcessingDataLoaderIter.__next__", s,
          s + 300, 1, 0, CpuEventCategory::kUserAnnotation);
    for (int j = 0; j < 5; ++j) {
      b.Launch(s + 300 + j, s + 301 + j, corr)
          .Kernel("conv", s + 310 + 30 * j, s + 340 + 30 * j, 7, 0, corr);
      ++corr;
    }
  }
  return b.Build();
}

TEST(Diagnosis, IdleWhileTheDataLoaderRunsIsInputBound) {
  Diagnosed d = MustDiagnose(DataLoaderStalls());
  const BoundVerdict& v = d.diagnosis.job.verdict;
  EXPECT_EQ(v.verdict, Verdict::kInputBound) << v.reason;
  // Of each 350 us gap, the DataLoader covers 300 us; 40 us before it are
  // host_compute and the last 10 us the launch.
  EXPECT_EQ(v.evidence.idle.input_ns, 3 * 300 * kUs);
  EXPECT_EQ(v.evidence.idle.launch_ns, 3 * 50 * kUs);
  EXPECT_THAT(v.reason, HasSubstr("86% of bubble time"));
  EXPECT_THAT(v.advice, HasSubstr("num_workers"));
  ExpectIdleAddsUp(d);
}

TEST(Diagnosis, KernelsQueuedInTimeButIdleAreGpuSide) {
  // Each kernel was launched long before the GPU went idle: the gaps are
  // GPU-side waits (e.g. on another stream's event).
  TraceBuilder b;
  for (int i = 0; i < 10; ++i) {
    b.Launch(i, i + 0.5, 1 + i)
        .Kernel("wait_then_run", 1000 + 200.0 * i, 1100 + 200.0 * i, 7, 0,
                1 + i);
  }
  Diagnosed d = MustDiagnose(b.Build());
  const BoundVerdict& v = d.diagnosis.job.verdict;
  EXPECT_EQ(v.verdict, Verdict::kGpuBound) << v.reason;
  EXPECT_EQ(v.evidence.idle.gpu_side_ns, d.analysis.job.bubble_ns);
  EXPECT_THAT(v.reason, HasSubstr("queued in time"));
}

// Ten kernels, each followed by a 90 us copy named `copy` (pageable or not)
// that fills the gap to the next.
Diagnosed CopyBetweenKernels(const std::string& copy, bool pageable) {
  TraceBuilder b;
  for (int i = 0; i < 10; ++i) {
    double t = 100.0 * i;
    b.Launch(0, 1, 1 + i).Kernel("k", t, t + 10, 7, 0, 1 + i);
    b.Memcpy(copy, t + 10, t + 100, 0, 0, pageable);
    b.trace().gpu.back().bytes = 4 << 20;
  }
  return MustDiagnose(b.Build());
}

TEST(Diagnosis, PinnedHostToDeviceCopiesAreCopyBound) {
  Diagnosed d = CopyBetweenKernels("Memcpy HtoD (Pinned -> Device)", false);
  const BoundVerdict& v = d.diagnosis.job.verdict;
  EXPECT_EQ(v.verdict, Verdict::kCopyBound) << v.reason;
  EXPECT_EQ(v.evidence.idle.copy_ns, d.analysis.job.bubble_ns);
  EXPECT_THAT(v.reason, HasSubstr("100% of bubble time (utilization 11%) is "
                                  "memcpy 100%: the GPU was copying"));
  EXPECT_THAT(v.reason, HasSubstr("h2d_pinned 100% (9 copies, mean 4.0 MiB)"));
  const CopyKindFigures& pinned =
      v.evidence.copies[static_cast<int>(CopyKind::kHostToDevicePinned)];
  EXPECT_EQ(pinned.count, 9);
  EXPECT_EQ(pinned.bubble_ns, 9 * 90 * kUs);
  // Already pinned: the advice is to overlap, batch or avoid, not to pin.
  EXPECT_THAT(v.advice, HasSubstr("already from pinned memory"));
  EXPECT_THAT(v.advice, HasSubstr("overlap"));
  EXPECT_THAT(v.advice, HasSubstr("batch"));
  EXPECT_THAT(v.advice, HasSubstr("avoid the copy"));
  EXPECT_THAT(v.advice, Not(HasSubstr("pin_memory")));
}

TEST(Diagnosis, CopyAdviceKnowsPageableAndDirection) {
  struct Case {
    const char* name;
    bool pageable;
    CopyKind kind;
    const char* advice;
  };
  for (const Case& c : std::vector<Case>{
           {"Memcpy HtoD (Pageable -> Device)", true,
            CopyKind::kHostToDevicePageable, "pin the source"},
           {"Memcpy DtoH (Device -> Pageable)", true,
            CopyKind::kDeviceToHostPageable, "preallocated pinned buffer"},
           {"Memcpy DtoH (Device -> Pinned)", false,
            CopyKind::kDeviceToHostPinned, "Device-to-host copies into pinned"},
           {"Memcpy DtoD (Device -> Device)", false, CopyKind::kDeviceToDevice,
            "Device-to-device"},
       }) {
    SCOPED_TRACE(c.name);
    Diagnosed d = CopyBetweenKernels(c.name, c.pageable);
    const BoundVerdict& v = d.diagnosis.job.verdict;
    EXPECT_EQ(v.verdict, Verdict::kCopyBound) << v.reason;
    EXPECT_EQ(v.evidence.copies[static_cast<int>(c.kind)].count, 9);
    EXPECT_THAT(v.reason, HasSubstr(CopyKindName(c.kind)));
    EXPECT_THAT(v.advice, HasSubstr(c.advice));
  }
  EXPECT_EQ(ClassifyCopy(GpuActivityKind::kMemset, "Memset (Device)", false),
            CopyKind::kMemset);
  EXPECT_EQ(ClassifyCopy(GpuActivityKind::kMemcpy, "Memcpy PtoP", false),
            CopyKind::kDeviceToDevice);
  EXPECT_EQ(ClassifyCopy(GpuActivityKind::kMemcpy, "copy", false),
            CopyKind::kOther);
}

TEST(Diagnosis, MixedIdleIsBalanced) {
  // An input gap and an equally long GPU-side gap, then a short launch gap:
  // no class holds half of the idle time.
  TraceBuilder b;
  b.Launch(0, 1, 1).Kernel("a", 10, 20, 7, 0, 1);
  b.Cpu("DataLoader.next", 20, 120, 1);
  b.Launch(120, 121, 2).Kernel("b", 125, 135, 7, 0, 2);
  b.Launch(122, 123, 3).Kernel("c", 240, 250, 7, 0, 3);
  b.Launch(260, 261, 4).Kernel("d", 265, 275, 7, 0, 4);
  Diagnosed d = MustDiagnose(b.Build());
  const BoundVerdict& v = d.diagnosis.job.verdict;
  EXPECT_EQ(v.verdict, Verdict::kBalanced) << v.reason;
  // Gap 1: DataLoader 100 us, then b's launch 5 us; gap 2: c was queued
  // (105 us gpu_dependency); gap 3: 10 us host_compute, d's launch 5 us.
  EXPECT_EQ(v.evidence.idle.input_ns, 100 * kUs);
  EXPECT_EQ(v.evidence.idle.gpu_side_ns, 105 * kUs);
  EXPECT_EQ(v.evidence.idle.launch_ns, 20 * kUs);
  EXPECT_THAT(v.reason, HasSubstr("no idle class holds half of the bubble "
                                  "time: gpu_dependency 47%, data_loading "
                                  "44%, launch_overhead 4%, host_compute "
                                  "4%"));
}

TEST(Diagnosis, GapsWithoutCpuEventsAreUnknown) {
  TraceBuilder b;
  b.Kernel("a", 0, 10).Kernel("b", 100, 110);
  Diagnosed d = MustDiagnose(b.Build());
  EXPECT_EQ(d.diagnosis.job.verdict.verdict, Verdict::kUnknown);
  EXPECT_EQ(d.diagnosis.job.verdict.evidence.idle.unknown_ns, 90 * kUs);
  EXPECT_THAT(d.diagnosis.job.verdict.reason, HasSubstr("unattributed 100%"));
  EXPECT_FALSE(d.diagnosis.job.verdict.evidence.lead_p50_ns.has_value());
  EXPECT_EQ(d.diagnosis.job.launch.lead.count, 0);
}

TEST(Diagnosis, SeedSampleIsSyncBound) {
  // conv2d_fwd, then tensor.item() blocks the host for 77 us; no
  // correlation ids, so the sync is looked for on all threads.
  TraceBuilder b;
  b.Kernel("conv2d_fwd", 10, 30)
      .Kernel("batch_norm", 110, 125)
      .Kernel("relu_fwd", 130, 140)
      .Cpu("cudaLaunchKernel_conv2d", 5, 8)
      .Cpu("tensor.item()_sync", 31, 108)
      .Cpu("cudaLaunchKernel_batch_norm", 108.5, 109.5);
  Diagnosed d = MustDiagnose(b.Build());
  const BoundVerdict& v = d.diagnosis.job.verdict;
  EXPECT_EQ(v.verdict, Verdict::kSyncBound) << v.reason;
  // The attribution of docs/semantics.md#seed-example: host_sync 79,
  // launch_overhead 1, host_compute 5.
  EXPECT_EQ(v.evidence.idle.sync_ns, 79 * kUs);
  EXPECT_EQ(v.evidence.idle.launch_ns, 6 * kUs);
  EXPECT_THAT(v.reason, HasSubstr("93% of bubble time (utilization 35%) is "
                                  "host_sync 93%"));
}

TEST(Diagnosis, NoKernelsIsUnknown) {
  TraceBuilder b;
  b.Memcpy("Memcpy HtoD", 0, 10).Cpu("cudaMemcpyAsync", 0, 1);
  Diagnosed d = MustDiagnose(b.Build());
  EXPECT_EQ(d.diagnosis.job.verdict.verdict, Verdict::kUnknown);
  EXPECT_EQ(d.diagnosis.job.verdict.reason, "no non-empty kernels");
  ASSERT_EQ(d.diagnosis.devices.size(), 1u);
  EXPECT_EQ(d.diagnosis.devices[0].figures.verdict.verdict, Verdict::kUnknown);
}

TEST(Diagnosis, LeadPercentilesAreNearestRank) {
  // Ten kernels with leads 1..10 us, plus one starting before its launch
  // (clock skew), which counts as lead 0.
  TraceBuilder b;
  for (int i = 1; i <= 10; ++i) {
    double t = 100.0 * i;
    b.Launch(t - i, t - i + 0.5, i).Kernel("k", t, t + 1, 7, 0, i);
  }
  b.Launch(2005, 2006, 11).Kernel("early", 2000, 2001, 7, 0, 11);
  Diagnosed d = MustDiagnose(b.Build());
  const LaunchLeadStats& l = d.diagnosis.job.launch;
  EXPECT_EQ(l.lead.count, 11);
  EXPECT_EQ(l.negative, 1);
  // Sorted: 0, 1, ..., 10. Ranks ceil(1.1) = 2, ceil(5.5) = 6, ceil(9.9) = 10.
  EXPECT_EQ(l.lead.p10_ns, 1 * kUs);
  EXPECT_EQ(l.lead.p50_ns, 5 * kUs);
  EXPECT_EQ(l.lead.p90_ns, 9 * kUs);
}

TEST(Diagnosis, QueueDepthCountsLaunchedButNotStartedKernels) {
  // Both launched at 0; the first starts at 10, the second at 20. Over the
  // span [10, 30) one kernel is queued for the first 10 us.
  TraceBuilder b;
  b.Launch(0, 1, 1).Launch(0, 1, 2);
  b.Kernel("a", 10, 20, 7, 0, 1).Kernel("b", 20, 30, 7, 0, 2);
  DiagnosisOptions options;
  options.queue_series_buckets = 2;
  Diagnosed d = MustDiagnose(b.Build(), options);
  const QueueDepthStats& q = d.diagnosis.devices[0].figures.queue;
  EXPECT_EQ(q.max, 2);
  EXPECT_DOUBLE_EQ(q.mean, 0.5);
  EXPECT_EQ(q.series_start_ns, 10 * kUs);
  EXPECT_EQ(q.bucket_ns, 10 * kUs);
  EXPECT_THAT(q.series, ElementsAre(1.0, 0.0));
  EXPECT_TRUE(d.diagnosis.job.queue.series.empty());
}

TEST(Diagnosis, CudaGraphKernelsAreCounted) {
  TraceBuilder b;
  b.Cpu("cudaGraphLaunch_v10000", 0, 5, 1, 1, CpuEventCategory::kCudaRuntime);
  b.Kernel("g1", 10, 11, 7, 0, 1).Kernel("g2", 11, 12, 7, 0, 1);
  Diagnosed d = MustDiagnose(b.Build());
  EXPECT_EQ(d.diagnosis.job.launch.graph_kernels, 2);
  EXPECT_EQ(d.diagnosis.job.launch.lead.count, 2);
}

TEST(Diagnosis, TopKernelsHaveCountTotalMeanP90AndBusyShare) {
  TraceBuilder b;
  b.Kernel("gemm", 0, 10).Kernel("gemm", 20, 40).Kernel("gemm", 50, 80);
  b.Kernel("relu", 80, 81).Kernel("relu", 90, 91);
  b.Kernel("empty", 95, 95);  // Zero-length: ignored for time.
  Diagnosed d = MustDiagnose(b.Build());
  const KernelBreakdown& k = d.diagnosis.job.kernels;
  ASSERT_EQ(k.top_compute.size(), 2u);
  const KernelStat& gemm = k.top_compute[0];
  EXPECT_EQ(gemm.name, "gemm");
  EXPECT_EQ(gemm.count, 3);
  EXPECT_EQ(gemm.total_ns, 60 * kUs);
  EXPECT_EQ(gemm.mean_ns, 20 * kUs);
  EXPECT_EQ(gemm.p90_ns, 30 * kUs);
  EXPECT_DOUBLE_EQ(gemm.busy_share, 60.0 / 62.0);
  EXPECT_EQ(k.top_compute[1].name, "relu");
  EXPECT_EQ(k.kernels, 5);
  EXPECT_EQ(k.tiny_kernels, 2);
  EXPECT_EQ(k.median_kernel_ns, 10 * kUs);

  DiagnosisOptions one;
  one.top_kernels = 1;
  Diagnosed top1 = MustDiagnose(b.Build(), one);
  EXPECT_EQ(top1.diagnosis.job.kernels.top_compute.size(), 1u);
}

TEST(Diagnosis, NcclKernelsAreReportedApartWithTheirOverlap) {
  TraceBuilder b;
  b.Kernel("gemm", 0, 100, 7);
  b.Kernel("ncclKernel_AllReduce_RING_LL_Sum_float(ncclDevComm*)", 50, 150, 20);
  b.Kernel("ncclDevKernel_SendRecv", 200, 220, 20);
  Diagnosed d = MustDiagnose(b.Build());
  const KernelBreakdown& k = d.diagnosis.job.kernels;
  ASSERT_EQ(k.top_compute.size(), 1u);
  EXPECT_EQ(k.top_compute[0].name, "gemm");
  ASSERT_EQ(k.top_communication.size(), 2u);
  EXPECT_EQ(k.top_communication[0].total_ns, 100 * kUs);
  EXPECT_EQ(k.communication.kernels, 2);
  EXPECT_EQ(k.communication.busy_ns, 120 * kUs);
  EXPECT_EQ(k.communication.overlap_ns, 50 * kUs);
  EXPECT_EQ(k.communication.exposed_ns(), 70 * kUs);
  EXPECT_DOUBLE_EQ(k.communication.overlap_ratio(), 50.0 / 120.0);
}

TEST(Diagnosis, CommunicationKernelNames) {
  EXPECT_TRUE(IsCommunicationKernel("ncclDevKernel_SendRecv"));
  EXPECT_TRUE(IsCommunicationKernel("void ncclKernel_Broadcast(int)"));
  EXPECT_TRUE(IsCommunicationKernel("NCCL_allreduce"));
  EXPECT_FALSE(IsCommunicationKernel("gemm_nccl_like"));
  EXPECT_FALSE(IsCommunicationKernel("nc"));
}

TEST(Diagnosis, JobCombinesDevices) {
  // Device 0 is a tiny-kernel flood, device 1 a deep queue.
  Trace t = TinyKernelFlood();
  Trace deep = DeepQueue();
  NameInterner names(&t);
  for (GpuActivity a : deep.gpu) {
    a.device = 1;
    a.correlation += 1000;
    a.name = names.Intern(deep.Name(a.name));
    t.gpu.push_back(a);
  }
  for (CpuEvent e : deep.cpu) {
    e.correlation += 1000;
    e.thread = 2;
    e.name = names.Intern(deep.Name(e.name));
    t.cpu.push_back(e);
  }
  Diagnosed d = MustDiagnose(t);
  ASSERT_EQ(d.diagnosis.devices.size(), 2u);
  EXPECT_EQ(d.diagnosis.devices[0].figures.verdict.verdict, Verdict::kCpuBound);
  EXPECT_EQ(d.diagnosis.devices[1].figures.verdict.verdict, Verdict::kGpuBound);
  EXPECT_EQ(d.diagnosis.job.launch.lead.count, 300);
  EXPECT_EQ(d.diagnosis.job.queue.max, 100);
  // Weighted by span: device 0 runs 1,992 us, device 1 10,000 us.
  ASSERT_EQ(d.analysis.devices[0].stats.span_ns, 1992 * kUs);
  ASSERT_EQ(d.analysis.devices[1].stats.span_ns, 10000 * kUs);
  const double expected =
      (d.diagnosis.devices[0].figures.queue.mean * 1992.0 +
       d.diagnosis.devices[1].figures.queue.mean * 10000.0) /
      11992.0;
  EXPECT_NEAR(d.diagnosis.job.queue.mean, expected, 1e-9);
  EXPECT_EQ(d.diagnosis.job.kernels.kernels, 300);
  ExpectIdleAddsUp(d);
}

TEST(Diagnosis, StepsAreDistinctProfilerStepRanges) {
  TraceBuilder b;
  b.Kernel("k", 0, 1);
  b.Cpu("ProfilerStep#7", 0, 10, 1, 0, CpuEventCategory::kUserAnnotation);
  b.Cpu("ProfilerStep#7", 0, 10, 1, 0, CpuEventCategory::kCpuOp);
  b.Cpu("ProfilerStep#8", 10, 20, 1, 0, CpuEventCategory::kUserAnnotation);
  EXPECT_EQ(MustDiagnose(b.Build()).diagnosis.steps, 2);
}

TEST(Diagnosis, AnalysisMissingADeviceIsAnError) {
  TraceBuilder b;
  b.Kernel("k", 0, 1, 7, 0).Kernel("k", 0, 1, 7, 3);
  Trace t = b.Build();
  Analysis a;  // Lists no device.
  absl::StatusOr<Diagnosis> d = DiagnoseTrace(t, a);
  EXPECT_EQ(d.status().code(), absl::StatusCode::kInvalidArgument);
  DiagnosisOptions bad;
  bad.top_kernels = -1;
  EXPECT_EQ(DiagnoseTrace(Trace{}, Analysis{}, bad).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(Diagnosis, VerdictNamesRoundTrip) {
  for (Verdict v : {Verdict::kUnknown, Verdict::kGpuBound, Verdict::kCpuBound,
                    Verdict::kSyncBound, Verdict::kInputBound,
                    Verdict::kBalanced, Verdict::kCopyBound}) {
    EXPECT_EQ(ParseVerdict(VerdictName(v)), v);
  }
  EXPECT_EQ(VerdictName(Verdict::kCpuBound), "cpu_bound");
  EXPECT_FALSE(ParseVerdict("fast").has_value());
}

// --- Real traces -----------------------------------------------------------

Diagnosed DiagnoseReal(const std::string& relative) {
  std::string path = absl::StrCat(BUBBLEWATCH_TESTDATA_DIR, "/real/", relative);
  absl::StatusOr<Trace> trace = ReadTraceFile(path);
  EXPECT_TRUE(trace.ok()) << path << ": " << trace.status();
  if (!trace.ok()) return {};
  Diagnosed d = MustDiagnose(*trace);
  ExpectIdleAddsUp(d);
  return d;
}

// rank0 (16-rank TorchRec trainer): 88% of its kernels are tiny, yet it is
// not launch-bound: the CPU runs ~164 ms ahead (5,375 launches matched by
// correlation, 135 of their kernels from cudaGraphLaunch) and the GPU idles
// with hundreds of kernels queued, waiting on itself (NCCL peers, events).
TEST(DiagnosisRealTraces, Rank0IsGpuSideDespiteTinyKernels) {
  Diagnosed d = DiagnoseReal("hta/rank0.json.gz");
  const DiagnosisFigures& job = d.diagnosis.job;
  EXPECT_EQ(job.verdict.verdict, Verdict::kGpuBound) << job.verdict.reason;
  EXPECT_THAT(job.verdict.reason, HasSubstr("queued in time"));
  EXPECT_EQ(d.diagnosis.steps, 5);
  EXPECT_EQ(job.kernels.kernels, 6080);
  EXPECT_GT(job.kernels.tiny_share(), 0.85);
  EXPECT_EQ(job.launch.lead.count, 5375);
  EXPECT_EQ(job.launch.graph_kernels, 135);
  EXPECT_GT(job.launch.lead.p50_ns, 100'000 * kUs);
  EXPECT_GT(job.queue.max, 500);
  const IdleBreakdown& idle = job.verdict.evidence.idle;
  EXPECT_GT(idle.gpu_side_ns + idle.copy_ns,
            d.analysis.job.bubble_ns * kDominantIdleShare);
  // Top kernels: CUTLASS GEMMs lead compute; NCCL SendRecv is apart.
  ASSERT_FALSE(job.kernels.top_compute.empty());
  EXPECT_THAT(job.kernels.top_compute[0].name, HasSubstr("cutlass"));
  for (const KernelStat& s : job.kernels.top_compute) {
    EXPECT_FALSE(IsCommunicationKernel(s.name)) << s.name;
  }
  ASSERT_EQ(job.kernels.top_communication.size(), 1u);
  EXPECT_THAT(job.kernels.top_communication[0].name,
              HasSubstr("ncclKernel_SendRecv"));
  EXPECT_EQ(job.kernels.communication.kernels, 80);
  // Sorted by total time, with shares of busy time.
  for (size_t i = 1; i < job.kernels.top_compute.size(); ++i) {
    EXPECT_GE(job.kernels.top_compute[i - 1].total_ns,
              job.kernels.top_compute[i].total_ns);
  }
  EXPECT_GT(job.kernels.top_compute[0].busy_share, 0.05);
}

TEST(DiagnosisRealTraces, NcclDataIsCpuBound) {
  // 2-rank DDP ResNet: the GPU waits for the host between kernels (leads of
  // ~12 us, the queue nearly always empty).
  Diagnosed d = DiagnoseReal("hta/nccl_data.json.gz");
  const DiagnosisFigures& job = d.diagnosis.job;
  EXPECT_EQ(job.verdict.verdict, Verdict::kCpuBound) << job.verdict.reason;
  // The verdict's share is the attribution's: host_compute 91% +
  // launch_overhead 6% (the old reason said "97% ... waited for kernel
  // launches" beside an attribution of 91% host_compute).
  EXPECT_THAT(job.verdict.reason,
              HasSubstr("97% of bubble time (utilization 23%) is "
                        "host_compute 91% + launch_overhead 6%"));
  // The top bubbles blame what ran inside them, never the profiler step
  // around them.
  ASSERT_FALSE(d.analysis.top_bubbles.empty());
  for (const BubbleReport& b : d.analysis.top_bubbles) {
    EXPECT_THAT(b.blamed, Not(HasSubstr("ProfilerStep#"))) << b.start_ns;
  }
  EXPECT_EQ(d.analysis.top_bubbles[0].blamed, "aten::unflatten_dense_tensors");
  EXPECT_LT(job.launch.lead.p50_ns, 20 * kUs);
  EXPECT_LT(job.queue.mean, 1.0);
  EXPECT_EQ(job.kernels.communication.kernels, 21);
  EXPECT_GT(job.kernels.communication.overlap_ns, 0);
  EXPECT_EQ(d.diagnosis.steps, 3);
}

TEST(DiagnosisRealTraces, H100IsCopyBoundOnPinnedHostToDeviceCopies) {
  // 2.3% utilization, 99% of bubble time memcpy, every copy in a bubble
  // Pinned -> Device: copy_bound, and the advice must not say "pin".
  Diagnosed d = DiagnoseReal("nsys/h100_2gpu_1s.sqlite");
  const DiagnosisFigures& job = d.diagnosis.job;
  EXPECT_EQ(job.verdict.verdict, Verdict::kCopyBound) << job.verdict.reason;
  EXPECT_THAT(job.verdict.reason, HasSubstr("is memcpy 99%"));
  EXPECT_THAT(job.verdict.reason, HasSubstr("h2d_pinned 98% (444 copies"));
  // Pinned host-to-device copies hold nearly all of the copy time in
  // bubbles; the few pageable ones (4 small copies) hold under 1%.
  const CopyKindBreakdown& copies = job.verdict.evidence.copies;
  int64_t all = 0;
  for (const CopyKindFigures& c : copies) all += c.bubble_ns;
  const auto of = [&copies](CopyKind k) { return copies[static_cast<int>(k)]; };
  EXPECT_LT(static_cast<double>(of(CopyKind::kHostToDevicePageable).bubble_ns +
                                of(CopyKind::kDeviceToHostPageable).bubble_ns),
            0.01 * static_cast<double>(all));
  EXPECT_GT(static_cast<double>(of(CopyKind::kHostToDevicePinned).bubble_ns),
            0.95 * static_cast<double>(all));
  EXPECT_EQ(d.diagnosis.devices.size(), 2u);
  EXPECT_EQ(d.diagnosis.steps, 0);
}

TEST(DiagnosisRealTraces, MfuPairIsLaunchBoundAndTheCpuFellBehind) {
  Diagnosed before = DiagnoseReal("nsys/mfu_2gpu_before.sqlite");
  Diagnosed after = DiagnoseReal("nsys/mfu_2gpu_after.sqlite");
  EXPECT_EQ(before.diagnosis.job.verdict.verdict, Verdict::kCpuBound);
  EXPECT_EQ(after.diagnosis.job.verdict.verdict, Verdict::kCpuBound);
  // After the change the CPU is less far ahead and the queue shallower.
  EXPECT_LT(after.diagnosis.job.launch.lead.p50_ns,
            before.diagnosis.job.launch.lead.p50_ns);
  EXPECT_LT(after.diagnosis.job.queue.mean, before.diagnosis.job.queue.mean);
  // flash_fwd_kernel leads compute in both.
  EXPECT_EQ(before.diagnosis.job.kernels.top_compute[0].name,
            "flash_fwd_kernel");
  EXPECT_EQ(after.diagnosis.job.kernels.top_compute[0].name,
            "flash_fwd_kernel");
}

// The verdict of every real trace in tests/testdata/real/, with the share of
// the attribution that decides it: a wrong verdict fails here, by name, not
// only as a golden report diff.
TEST(DiagnosisRealTraces, EveryRealTraceHasItsVerdictAndShare) {
  struct Case {
    const char* file;
    Verdict verdict;
    // The idle class deciding it and its share of the bubble time (the
    // attribution's causes, grouped); nullptr where utilization decides.
    int64_t IdleBreakdown::*deciding;
    double share;
  };
  for (const Case& c : std::vector<Case>{
           // Utilization 0.1%: the 43 s span is host-side setup;
           // allocator 66% + host_sync 4%.
           {"hta/benchmark_result_2869224_1695835535_trace.json.gz",
            Verdict::kSyncBound, &IdleBreakdown::sync_ns, 0.7030},
           // An MTIA trace: no CUDA kernels at all.
           {"hta/mtia_rank_0.json.gz", Verdict::kUnknown, nullptr, 0},
           // 2-rank DDP ResNet: host_compute 91% + launch_overhead 6%.
           {"hta/nccl_data.json.gz", Verdict::kCpuBound,
            &IdleBreakdown::launch_ns, 0.9672},
           // TorchRec trainer: kernels queued in time wait on NCCL peers.
           {"hta/rank0.json.gz", Verdict::kGpuBound,
            &IdleBreakdown::gpu_side_ns, 0.8029},
           // host_compute 39% + launch_overhead 12% vs gpu_dependency 46%.
           {"hta/sampled_rank-0.json.gz", Verdict::kCpuBound,
            &IdleBreakdown::launch_ns, 0.5135},
           // The same job's rank 1: 48% vs 47%, no class holds half.
           {"hta/sampled_rank-1.json.gz", Verdict::kBalanced,
            &IdleBreakdown::launch_ns, 0.4847},
           // 2.3% utilization, memcpy 99% (pinned host-to-device).
           {"nsys/h100_2gpu_1s.sqlite", Verdict::kCopyBound,
            &IdleBreakdown::copy_ns, 0.9931},
           // 99% busy, but every kernel starts 3 us after its launch.
           {"nsys/healthy_1pct.sqlite", Verdict::kBalanced, nullptr, 0},
           {"nsys/mfu_2gpu_after.sqlite", Verdict::kCpuBound,
            &IdleBreakdown::launch_ns, 0.8660},
           {"nsys/mfu_2gpu_before.sqlite", Verdict::kCpuBound,
            &IdleBreakdown::launch_ns, 0.7670},
       }) {
    SCOPED_TRACE(c.file);
    Diagnosed d = DiagnoseReal(c.file);
    const BoundVerdict& v = d.diagnosis.job.verdict;
    EXPECT_EQ(VerdictName(v.verdict), VerdictName(c.verdict)) << v.reason;
    EXPECT_FALSE(v.reason.empty());
    if (c.deciding != nullptr) {
      const double share = static_cast<double>(v.evidence.idle.*c.deciding) /
                           static_cast<double>(d.analysis.job.bubble_ns);
      EXPECT_NEAR(share, c.share, 0.00005) << v.reason;
      if (v.verdict != Verdict::kBalanced) {
        // The reason states that share, of the attribution.
        EXPECT_THAT(v.reason, HasSubstr(absl::StrCat(std::lround(c.share * 100),
                                                     "% of bubble time")));
      }
    }
    if (d.diagnosis.job.kernels.kernels > 0) {
      EXPECT_GT(d.diagnosis.job.launch.lead.count, 0);
      EXPECT_FALSE(d.diagnosis.job.kernels.top_compute.empty());
    }
  }
}

// The breakdown of an interval is the sum of the breakdowns of its two
// parts, to the nanosecond, on every real trace: each nanosecond has one
// category. The design of
// docs/architecture.md#one-job-across-processors rests on
// this (a rank's time between any two of its collective kernels is a difference
// of two prefixes); if a rule ever made it false, this fails before the two
// stages disagree.
TEST(DiagnosisRealTraces, IntervalBreakdownsAddUp) {
  std::mt19937_64 rng(41);
  for (const char* file :
       {"hta/benchmark_result_2869224_1695835535_trace.json.gz",
        "hta/nccl_data.json.gz", "hta/rank0.json.gz",
        "hta/sampled_rank-0.json.gz", "nsys/h100_2gpu_1s.sqlite",
        "nsys/healthy_1pct.sqlite", "nsys/mfu_2gpu_before.sqlite"}) {
    SCOPED_TRACE(file);
    absl::StatusOr<Trace> trace =
        ReadTraceFile(absl::StrCat(BUBBLEWATCH_TESTDATA_DIR, "/real/", file));
    ASSERT_TRUE(trace.ok()) << trace.status();
    // Cut points: kernel edges (where the collective analysis cuts) and
    // arbitrary times, over each device's kernels and a little beyond.
    absl::flat_hash_map<int32_t, std::vector<int64_t>> edges;
    for (const GpuActivity& g : trace->gpu) {
      if (g.kind != GpuActivityKind::kKernel) continue;
      edges[g.device].push_back(g.start_ns);
      edges[g.device].push_back(g.end_ns);
    }
    ASSERT_FALSE(edges.empty());
    std::vector<DeviceInterval> intervals;
    for (auto& [device, cuts] : edges) {
      std::sort(cuts.begin(), cuts.end());
      const int64_t lo = cuts.front() - 1'000'000, hi = cuts.back() + 1'000'000;
      std::uniform_int_distribution<size_t> pick(0, cuts.size() - 1);
      std::uniform_int_distribution<int64_t> any(lo, hi);
      for (int i = 0; i < 300; ++i) {
        std::array<int64_t, 3> t = {i % 3 == 0 ? any(rng) : cuts[pick(rng)],
                                    i % 5 == 0 ? any(rng) : cuts[pick(rng)],
                                    i % 7 == 0 ? any(rng) : cuts[pick(rng)]};
        std::sort(t.begin(), t.end());
        intervals.push_back({device, t[0], t[1]});
        intervals.push_back({device, t[1], t[2]});
        intervals.push_back({device, t[0], t[2]});
      }
    }
    AnalyzerOptions options;
    options.breakdown_intervals = intervals;
    absl::StatusOr<Analysis> a = AnalyzeTrace(*trace, options);
    ASSERT_TRUE(a.ok()) << a.status();
    ASSERT_EQ(a->breakdowns.size(), intervals.size());
    int mismatches = 0;
    for (size_t i = 0; i < intervals.size(); i += 3) {
      const IntervalBreakdown& x = a->breakdowns[i];
      const IntervalBreakdown& y = a->breakdowns[i + 1];
      const IntervalBreakdown& whole = a->breakdowns[i + 2];
      bool same = x.busy_ns + y.busy_ns == whole.busy_ns &&
                  x.outside_ns + y.outside_ns == whole.outside_ns;
      for (size_t c = 0; c < whole.bubble.size(); ++c) {
        same = same && x.bubble[c] + y.bubble[c] == whole.bubble[c];
      }
      if (!same && ++mismatches <= 3) {
        ADD_FAILURE() << "device " << intervals[i].device << " ["
                      << intervals[i].start_ns << ", " << intervals[i].end_ns
                      << ") + [" << intervals[i + 1].start_ns << ", "
                      << intervals[i + 1].end_ns << ") != the whole";
      }
    }
    EXPECT_EQ(mismatches, 0);
  }
}

}  // namespace
}  // namespace bubblewatch
