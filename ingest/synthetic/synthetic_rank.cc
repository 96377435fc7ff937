#include "ingest/synthetic/synthetic_rank.h"

#include <algorithm>
#include <cstdint>

#include "ingest/synthetic/synthetic_names.h"

namespace bubblewatch {
namespace {

// Pinned host-to-device bandwidth: about 24 GB/s = 24 bytes per ns.
constexpr int64_t kPinnedBytesPerNs = 24;
// NCCL kernels keep this far inside the kernel they overlap, so they neither
// start nor end with it (ties would blur "the kernel that finished last").
constexpr int64_t kInsideMarginNs = 2 * kNsPerUs;
constexpr int64_t kMinKernelNs = 1 * kNsPerUs;

// The class an open range lends to the time inside it
// (docs/semantics.md#step-3-host-side-time).
PlantedHostClass ContextClass(NameId name) {
  switch (name) {
    case kNameAtenItem:
    case kNameAtenLocalScalarDense:
      return PlantedHostClass::kSync;
    case kNameEmptyCache:
      return PlantedHostClass::kAllocator;
    case kNameDataLoaderNext:
      return PlantedHostClass::kDataLoading;
    default:
      return PlantedHostClass::kUncovered;
  }
}

}  // namespace

RankSimulator::RankSimulator(int32_t device, uint64_t thread,
                             CorrelationId correlation_base, int64_t start_ns,
                             double events_per_second, uint64_t seed,
                             Trace* trace, TruthAccumulator* truth,
                             std::vector<PlantedGap>* gaps)
    : device_(device),
      thread_(thread),
      next_correlation_(correlation_base + 1),
      events_per_second_(events_per_second),
      rng_(seed),
      trace_(trace),
      truth_(truth),
      gaps_(gaps),
      now_(start_ns) {}

void RankSimulator::Host(int64_t ns, PlantedHostClass host_class) {
  if (ns <= 0) return;
  for (PlantedHostClass c : open_class_) host_class = std::min(host_class, c);
  if (!blocks_.empty() && blocks_.back().host_class == host_class &&
      blocks_.back().end_ns == now_) {
    blocks_.back().end_ns += ns;
  } else {
    blocks_.push_back({now_, now_ + ns, host_class});
  }
  now_ += ns;
}

CpuEvent& RankSimulator::Emit(NameId name, CpuEventCategory category,
                              int64_t start_ns, int64_t end_ns,
                              CorrelationId correlation) {
  return trace_->cpu.emplace_back(CpuEvent{.start_ns = start_ns,
                                           .end_ns = end_ns,
                                           .correlation = correlation,
                                           .thread = thread_,
                                           .name = name,
                                           .category = category});
}

void RankSimulator::Open(NameId name, CpuEventCategory category) {
  open_.push_back(trace_->cpu.size());
  open_class_.push_back(ContextClass(name));
  Emit(name, category, now_, now_);
}

void RankSimulator::Close() {
  trace_->cpu[open_.back()].end_ns = now_;
  open_.pop_back();
  open_class_.pop_back();
}

CorrelationId RankSimulator::Call(NameId name, int64_t ns,
                                  PlantedHostClass host_class) {
  const CorrelationId correlation = next_correlation_++;
  Emit(name, CpuEventCategory::kCudaRuntime, now_, now_ + ns, correlation);
  Host(ns, host_class);
  return correlation;
}

int64_t RankSimulator::LaunchCallNs() {
  int64_t ns = rng_.Uniform(3 * kNsPerUs, 6 * kNsPerUs);
  // A full launch queue blocks the call until the oldest kernel finishes.
  while (!queued_kernel_ends_.empty() && queued_kernel_ends_.front() <= now_) {
    queued_kernel_ends_.pop_front();
  }
  if (queued_kernel_ends_.size() >= kLaunchQueueDepth) {
    ns = std::max(ns, queued_kernel_ends_.front() - now_ + kNsPerUs);
  }
  return ns;
}

void RankSimulator::PlaceKernel(NameId name, int64_t duration_ns,
                                int32_t stream, CorrelationId correlation,
                                int64_t launch_start_ns) {
  // Queued kernels still leave a microsecond or two between them now and
  // then (scheduling, dependencies): gpu_dependency time when it shows.
  const int64_t jitter =
      rng_.Chance(0.3) ? rng_.Uniform(1 * kNsPerUs, 4 * kNsPerUs) : 0;
  const int64_t start =
      std::max(compute_free_ + jitter, launch_start_ns + LaunchLatencyNs());
  const int64_t end = start + duration_ns;
  if (has_kernel_ && start > last_kernel_end_) {
    pending_gaps_.push_back({last_kernel_end_, start, launch_start_ns});
  }
  truth_->AddBusy(device_, start, end);
  trace_->gpu.push_back(GpuActivity{.start_ns = start,
                                    .end_ns = end,
                                    .correlation = correlation,
                                    .name = name,
                                    .device = device_,
                                    .stream = stream,
                                    .kind = GpuActivityKind::kKernel});
  has_kernel_ = true;
  last_kernel_start_ = start;
  last_kernel_end_ = end;
  compute_free_ = end;
  device_idle_ = std::max(device_idle_, end);
  queued_kernel_ends_.push_back(end);
  PaintGapsBefore(now_);
}

void RankSimulator::PaintGapsBefore(int64_t time_ns) {
  while (!pending_gaps_.empty() && pending_gaps_.front().end_ns <= time_ns) {
    const PendingGap& p = pending_gaps_.front();
    PlantedGap gap = PaintGap(device_, p.start_ns, p.end_ns, p.launch_start_ns,
                              copies_, blocks_);
    truth_->AddGap(gap);
    if (gaps_ != nullptr) gaps_->push_back(std::move(gap));
    pending_gaps_.pop_front();
    Prune();
  }
  Prune();
}

void RankSimulator::Prune() {
  // What ends before the next gap to paint begins can no longer touch one.
  const int64_t horizon =
      pending_gaps_.empty() ? last_kernel_end_ : pending_gaps_.front().start_ns;
  while (!blocks_.empty() && blocks_.front().end_ns <= horizon) {
    blocks_.pop_front();
  }
  while (!copies_.empty() && copies_.front().end_ns <= horizon) {
    copies_.pop_front();
  }
}

void RankSimulator::Finish() { PaintGapsBefore(INT64_MAX); }

void RankSimulator::LaunchKernel(NameId name, int64_t duration_ns,
                                 int32_t stream) {
  const int64_t launch_start = now_;
  const CorrelationId correlation =
      Call(kNameCudaLaunchKernel, LaunchCallNs(), PlantedHostClass::kLaunch);
  PlaceKernel(name, duration_ns, stream, correlation, launch_start);
}

void RankSimulator::LaunchSideKernel(NameId name, int64_t duration_ns,
                                     int32_t stream) {
  const int64_t launch_start = now_;
  const CorrelationId correlation =
      Call(kNameCudaLaunchKernel, LaunchCallNs(), PlantedHostClass::kLaunch);
  const int64_t start = std::max({launch_start + LaunchLatencyNs(), nccl_free_,
                                  last_kernel_start_ + kInsideMarginNs});
  const int64_t room = last_kernel_end_ - kInsideMarginNs - start;
  if (!has_kernel_ || room < 5 * kNsPerUs) {
    // Nothing running to hide behind: it runs in stream order.
    PlaceKernel(name, duration_ns, stream, correlation, launch_start);
    return;
  }
  const int64_t end = start + std::min(duration_ns, room);
  trace_->gpu.push_back(GpuActivity{.start_ns = start,
                                    .end_ns = end,
                                    .correlation = correlation,
                                    .name = name,
                                    .device = device_,
                                    .stream = stream,
                                    .kind = GpuActivityKind::kKernel});
  nccl_free_ = end;
  device_idle_ = std::max(device_idle_, end);
}

void RankSimulator::CopyToDevice(int64_t bytes, bool on_compute_stream) {
  const int64_t launch_start = now_;
  const CorrelationId correlation =
      Call(kNameCudaMemcpyAsync, rng_.Uniform(4 * kNsPerUs, 8 * kNsPerUs),
           PlantedHostClass::kLaunch);
  int64_t& stream_free = on_compute_stream ? compute_free_ : copy_free_;
  const int64_t start = std::max(stream_free, launch_start + LaunchLatencyNs());
  const int64_t end =
      start + std::max<int64_t>(kNsPerUs, bytes / kPinnedBytesPerNs);
  trace_->gpu.push_back(
      GpuActivity{.start_ns = start,
                  .end_ns = end,
                  .correlation = correlation,
                  .bytes = static_cast<uint64_t>(bytes),
                  .name = kNameMemcpyHtoD,
                  .device = device_,
                  .stream = on_compute_stream ? kComputeStream : kCopyStream,
                  .kind = GpuActivityKind::kMemcpy});
  stream_free = end;
  device_idle_ = std::max(device_idle_, end);
  copies_.push_back({start, end});
}

void RankSimulator::Item() {
  Open(kNameAtenItem, CpuEventCategory::kCpuOp);
  Host(rng_.Uniform(1 * kNsPerUs, 3 * kNsPerUs), PlantedHostClass::kUncovered);
  Open(kNameAtenLocalScalarDense, CpuEventCategory::kCpuOp);
  Host(rng_.Uniform(1 * kNsPerUs, 2 * kNsPerUs), PlantedHostClass::kUncovered);
  // A 4-byte copy into pageable memory: the call returns only when the copy,
  // queued behind every kernel, is done.
  const int64_t launch_start = now_;
  const CorrelationId correlation = next_correlation_++;
  const int64_t start =
      std::max(compute_free_, launch_start + LaunchLatencyNs());
  const int64_t end = start + rng_.Uniform(2 * kNsPerUs, 3 * kNsPerUs);
  trace_->gpu.push_back(GpuActivity{.start_ns = start,
                                    .end_ns = end,
                                    .correlation = correlation,
                                    .bytes = 4,
                                    .name = kNameMemcpyDtoH,
                                    .device = device_,
                                    .stream = kComputeStream,
                                    .kind = GpuActivityKind::kMemcpy,
                                    .pageable = true});
  compute_free_ = end;
  device_idle_ = std::max(device_idle_, end);
  copies_.push_back({start, end});
  const int64_t call_end = end + rng_.Uniform(2 * kNsPerUs, 4 * kNsPerUs);
  Emit(kNameCudaMemcpyAsync, CpuEventCategory::kCudaRuntime, launch_start,
       call_end, correlation);
  Host(call_end - now_, PlantedHostClass::kSync);
  Call(kNameCudaStreamSynchronize, rng_.Uniform(2 * kNsPerUs, 4 * kNsPerUs),
       PlantedHostClass::kSync);
  Host(rng_.Uniform(1 * kNsPerUs, 2 * kNsPerUs), PlantedHostClass::kUncovered);
  Close();
  Host(rng_.Uniform(1 * kNsPerUs, 2 * kNsPerUs), PlantedHostClass::kUncovered);
  Close();
}

void RankSimulator::WaitForDevice(NameId name, int64_t extra_ns,
                                  PlantedHostClass host_class) {
  const int64_t end = std::max(now_, device_idle_) + extra_ns;
  Call(name, end - now_, host_class);
}

void RankSimulator::Run(const StepPlan& plan) {
  // The step's nominal length at the requested event rate; kernels share
  // what the incidents leave of it in proportion to their weights.
  const double step_ns = plan.events / events_per_second_ * 1e9;
  const double kernel_ns_per_weight =
      plan.total_weight > 0
          ? std::max(0.0, step_ns * (1.0 - plan.incident_fraction)) /
                plan.total_weight
          : 0.0;
  auto fraction_ns = [&](const StepOp& op) {
    return static_cast<int64_t>(op.step_fraction * step_ns);
  };
  auto kernel_ns = [&](const StepOp& op) {
    if (op.weight <= 0) return std::max(kMinKernelNs, op.ns);
    return std::max(kMinKernelNs,
                    static_cast<int64_t>(op.weight * kernel_ns_per_weight));
  };
  for (const StepOp& op : plan.ops) {
    switch (op.kind) {
      case StepOpKind::kPython:
        Host(op.ns + fraction_ns(op), PlantedHostClass::kUncovered);
        break;
      case StepOpKind::kOpen:
        Open(op.name, op.category);
        break;
      case StepOpKind::kClose:
        Close();
        break;
      case StepOpKind::kKernel:
        LaunchKernel(op.name, kernel_ns(op), op.stream);
        break;
      case StepOpKind::kSideKernel:
        LaunchSideKernel(op.name, kernel_ns(op), op.stream);
        break;
      case StepOpKind::kCopyToDevice:
        CopyToDevice(
            op.bytes > 0 ? op.bytes : fraction_ns(op) * kPinnedBytesPerNs,
            op.on_compute_stream);
        break;
      case StepOpKind::kItem:
        Item();
        break;
      case StepOpKind::kDeviceSync:
        WaitForDevice(op.name, rng_.Uniform(3 * kNsPerUs, 8 * kNsPerUs),
                      PlantedHostClass::kSync);
        break;
      case StepOpKind::kDataLoader: {
        const int64_t ns = op.ns + fraction_ns(op);
        Emit(op.name, CpuEventCategory::kUserAnnotation, now_, now_ + ns);
        Host(ns, PlantedHostClass::kDataLoading);
        break;
      }
      case StepOpKind::kFree:
        // cudaFree synchronizes the device before releasing memory.
        WaitForDevice(op.name, op.ns, PlantedHostClass::kAllocator);
        break;
      case StepOpKind::kMalloc:
        Call(op.name, op.ns, PlantedHostClass::kAllocator);
        break;
    }
  }
}

}  // namespace bubblewatch
