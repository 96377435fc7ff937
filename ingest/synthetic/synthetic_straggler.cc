#include "ingest/synthetic/synthetic_straggler.h"

#include <algorithm>
#include <random>

#include "absl/strings/str_cat.h"
#include "ingest/synthetic/synthetic_names.h"
#include "ingest/synthetic/synthetic_step.h"

namespace bubblewatch {
namespace {

constexpr uint64_t kThread = 1;

// Builds one rank's trace in true time; skew is applied at the end.
class RankBuilder {
 public:
  RankBuilder(int rank, int device, int world, const std::string& job,
              const std::string& host)
      : names_(&trace_), device_(device) {
    trace_.rank = rank;
    trace_.world_size = world;
    trace_.job = job;
    trace_.host = host;
    trace_.source_format = "synthetic";
    std::vector<int> ranks(world);
    for (int r = 0; r < world; ++r) ranks[r] = r;
    group_ranks_ = names_.Intern(ProcessGroupRanksText(ranks));
    group_ = names_.Intern("0");
    allreduce_ = names_.Intern("allreduce");
    dtype_ = names_.Intern("Float");
    nccl_name_ = names_.Intern(
        "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevComm*, unsigned long, "
        "ncclWork*)");
    gemm_ = names_.Intern("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n");
    launch_ = names_.Intern("cudaLaunchKernel");
    loader_ = names_.Intern(
        "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__");
    sync_ = names_.Intern("cudaStreamSynchronize");
  }

  void Cpu(NameId name, int64_t start, int64_t end, CpuEventCategory category,
           CorrelationId corr = kNoCorrelation) {
    CpuEvent e;
    e.start_ns = start;
    e.end_ns = end;
    e.correlation = corr;
    e.thread = kThread;
    e.name = name;
    e.category = category;
    trace_.cpu.push_back(e);
  }

  // A cudaLaunchKernel at `at` and its kernel, starting no earlier than
  // `earliest`; returns the kernel's start.
  int64_t Kernel(NameId name, int64_t at, int64_t earliest, int64_t length,
                 int32_t stream) {
    const CorrelationId corr = ++correlation_;
    Cpu(launch_, at, at + 4 * kNsPerUs, CpuEventCategory::kCudaRuntime, corr);
    GpuActivity a;
    a.start_ns = std::max(earliest, at + 7 * kNsPerUs);
    a.end_ns = a.start_ns + length;
    a.correlation = corr;
    a.name = name;
    a.device = device_;
    a.stream = stream;
    trace_.gpu.push_back(a);
    return a.start_ns;
  }

  void Collective(int64_t start, int64_t end, int64_t seq, int world) {
    GpuActivity& a = trace_.gpu.back();  // Launched by Kernel() just before.
    a.start_ns = start;
    a.end_ns = end;
    CollectiveKernel c;
    c.start_ns = start;
    c.end_ns = end;
    c.device = device_;
    c.stream = kNcclStream;
    c.kernel_name = nccl_name_;
    c.collective = allreduce_;
    c.process_group = group_;
    c.group_ranks = group_ranks_;
    c.dtype = dtype_;
    c.seq = seq;
    c.in_elements = 1 << 20;
    c.out_elements = 1 << 20;
    c.group_size = world;
    trace_.collectives.push_back(c);
  }

  void Shift(int64_t skew) {
    for (GpuActivity& a : trace_.gpu) {
      a.start_ns += skew;
      a.end_ns += skew;
    }
    for (CpuEvent& e : trace_.cpu) {
      e.start_ns += skew;
      e.end_ns += skew;
    }
    for (CollectiveKernel& c : trace_.collectives) {
      c.start_ns += skew;
      c.end_ns += skew;
    }
  }

  Trace Take() && { return std::move(trace_); }

  NameId gemm() const { return gemm_; }
  NameId nccl() const { return nccl_name_; }
  NameId loader() const { return loader_; }
  NameId sync() const { return sync_; }

 private:
  Trace trace_;
  NameInterner names_;
  int32_t device_;
  CorrelationId correlation_ = 0;
  NameId group_ranks_, group_, allreduce_, dtype_, nccl_name_, gemm_, launch_,
      loader_, sync_;
};

}  // namespace

absl::string_view StragglerCauseName(StragglerCause cause) {
  switch (cause) {
    case StragglerCause::kDataLoading:
      return "data_loading";
    case StragglerCause::kHostSync:
      return "host_sync";
    case StragglerCause::kCompute:
      return "compute";
  }
  return "compute";
}

std::optional<StragglerCause> ParseStragglerCause(absl::string_view name) {
  for (StragglerCause c :
       {StragglerCause::kDataLoading, StragglerCause::kHostSync,
        StragglerCause::kCompute}) {
    if (name == StragglerCauseName(c)) return c;
  }
  return std::nullopt;
}

StragglerJob MakeStragglerJob(const StragglerJobOptions& o) {
  const int n = std::max(1, o.ranks);
  const int per_host = std::max(1, o.ranks_per_host);
  const int kernels = std::max(2, o.kernels_per_step);
  std::mt19937_64 rng(o.seed);
  // Jitter in [-range, range] ns.
  auto jitter = [&](int64_t range) {
    if (range <= 0) return int64_t{0};
    return static_cast<int64_t>(rng() % static_cast<uint64_t>(2 * range + 1)) -
           range;
  };
  std::vector<RankBuilder> builders;
  builders.reserve(n);
  for (int r = 0; r < n; ++r) {
    builders.emplace_back(r, r % per_host, n, o.job,
                          absl::StrCat("host-", r / per_host));
  }
  StragglerJob job;
  job.truth.late_rank = o.late_rank;
  job.truth.cause = o.cause;
  int64_t step_start = o.start_time_ns;
  std::vector<int64_t> arrive(n);
  for (int step = 0; step < o.steps; ++step) {
    for (int r = 0; r < n; ++r) {
      RankBuilder& b = builders[r];
      const bool late = r == o.late_rank && step >= o.late_from_step &&
                        step < o.late_until_step;
      int64_t loader = o.loader_ns + jitter(20 * kNsPerUs);
      if (late && o.cause == StragglerCause::kDataLoading) {
        loader += o.delay_ns;
      }
      const int64_t loader_start = step_start + 5 * kNsPerUs;
      const int64_t loader_end = loader_start + loader;
      b.Cpu(b.loader(), loader_start, loader_end,
            CpuEventCategory::kUserAnnotation);
      int64_t host = loader_end + 2 * kNsPerUs;  // The launching thread's time.
      int64_t gpu_free = step_start;             // The compute stream's.
      for (int k = 0; k < kernels; ++k) {
        int64_t length = o.kernel_ns + jitter(o.kernel_ns / 50);
        if (late && o.cause == StragglerCause::kCompute) {
          length += o.delay_ns / kernels + (k == 0 ? o.delay_ns % kernels : 0);
        }
        const int64_t start =
            b.Kernel(b.gemm(), host, gpu_free, length, kComputeStream);
        gpu_free = start + length;
        host += 6 * kNsPerUs;
        if (late && o.cause == StragglerCause::kHostSync &&
            k == kernels / 2 - 1) {
          // .item(): the host waits for the queue to drain, then is held
          // `delay` longer before it can launch again.
          const int64_t until = gpu_free + o.delay_ns;
          b.Cpu(b.sync(), host, until, CpuEventCategory::kCudaRuntime);
          host = until + 2 * kNsPerUs;
        }
      }
      // The all-reduce: launched after the compute, starts when it is done.
      arrive[r] = b.Kernel(b.nccl(), host, gpu_free + kNsPerUs, 1, kNcclStream);
    }
    const int64_t arrival = *std::max_element(arrive.begin(), arrive.end());
    const int64_t end = arrival + o.transfer_ns;
    const bool late_step = step >= o.late_from_step && step < o.late_until_step;
    if (late_step) {
      // The ends below jitter by up to 5 us.
      if (job.truth.late_end_ns == 0) job.truth.late_start_ns = step_start;
      job.truth.late_end_ns = end + 5 * kNsPerUs;
    }
    job.truth.end_ns = end + 5 * kNsPerUs;
    for (int r = 0; r < n; ++r) {
      builders[r].Collective(arrive[r], end + jitter(5 * kNsPerUs), step, n);
      if (late_step && r != o.late_rank && o.late_rank >= 0 &&
          o.late_rank < n && arrive[o.late_rank] == arrival) {
        const int64_t wait = arrival - arrive[r];
        job.truth.planted_wait_all_steps_ns += wait;
        if (step > 0) job.truth.planted_wait_ns += wait;
      }
    }
    step_start = end + 10 * kNsPerUs;
  }
  const int hosts = (n + per_host - 1) / per_host;
  for (int h = 0; h < hosts; ++h) {
    job.truth.host_skew_ns.push_back(
        o.host_skew_ns.empty() ? 0 : o.host_skew_ns[h % o.host_skew_ns.size()]);
  }
  for (int r = 0; r < n; ++r) {
    builders[r].Shift(job.truth.host_skew_ns[r / per_host]);
    job.ranks.push_back(std::move(builders[r]).Take());
  }
  return job;
}

}  // namespace bubblewatch
