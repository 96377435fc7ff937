#include "schemas/bubble_cause.h"

namespace bubblewatch {

absl::string_view BubbleCauseName(BubbleCause cause) {
  switch (cause) {
    case BubbleCause::kHostSync:
      return "host_sync";
    case BubbleCause::kLaunchOverhead:
      return "launch_overhead";
    case BubbleCause::kAllocator:
      return "allocator";
    case BubbleCause::kMemcpy:
      return "memcpy";
    case BubbleCause::kDataLoading:
      return "data_loading";
    case BubbleCause::kHostCompute:
      return "host_compute";
    case BubbleCause::kGpuDependency:
      return "gpu_dependency";
    case BubbleCause::kUnattributed:
      return "unattributed";
  }
  return "unknown";
}

std::optional<BubbleCause> ParseBubbleCause(absl::string_view name) {
  for (BubbleCause cause : kAllBubbleCauses) {
    if (BubbleCauseName(cause) == name) return cause;
  }
  return std::nullopt;
}

absl::string_view BubbleCauseAdvice(BubbleCause cause) {
  switch (cause) {
    case BubbleCause::kHostSync:
      return "The CPU waited for the GPU to drain (.item(), .cpu(), print of a "
             "tensor, cudaStreamSynchronize, blocking copies). Remove these "
             "syncs from the step, or move them off the critical path (log "
             "every N steps, keep metrics on the GPU, use non_blocking=True).";
    case BubbleCause::kLaunchOverhead:
      return "Launch-bound: the CPU cannot issue kernels as fast as the GPU "
             "runs them (many tiny kernels). Use CUDA Graphs, torch.compile "
             "or kernel fusion, and larger batches.";
    case BubbleCause::kAllocator:
      return "cudaMalloc/cudaFree or empty_cache() in the step loop. Do not "
             "call torch.cuda.empty_cache() in the loop; let the caching "
             "allocator reuse memory "
             "(PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True).";
    case BubbleCause::kMemcpy:
      // Whether the copies are pinned or pageable, and their direction, is
      // known only with the trace: the diagnosis's copy_bound advice says
      // which of these applies (analysis/diagnosis.h).
      return "The GPU idled while data was copied. Overlap copies with "
             "compute (non_blocking=True on a side stream; pageable host "
             "memory must be pinned first), batch small copies into larger "
             "ones, or avoid the copy.";
    case BubbleCause::kDataLoading:
      return "Input-bound: the GPU waited for the DataLoader. Raise "
             "num_workers, set pin_memory=True and prefetch_factor, "
             "persistent_workers=True; move decoding/augmentation off the "
             "main process or onto the GPU.";
    case BubbleCause::kHostCompute:
      return "The CPU was busy with its own work (Python, framework code) "
             "between launches. Profile the host side (py-spy, "
             "torch.profiler with_stack), move work out of the step, or "
             "capture the step with CUDA Graphs / torch.compile.";
    case BubbleCause::kGpuDependency:
      return "Work was already queued but the GPU waited on a dependency "
             "(events, cross-stream waits, collectives, launch latency). "
             "Check stream/event dependencies and overlap communication "
             "with compute.";
    case BubbleCause::kUnattributed:
      return "The trace has no CPU events, so idle time cannot be explained. "
             "Profile with CPU activities enabled (torch.profiler "
             "activities=[CPU, CUDA]; nsys --trace=cuda,nvtx).";
  }
  return "";
}

std::optional<BubbleCause> DominantCause(const Attribution& attribution) {
  std::optional<BubbleCause> best;
  int64_t best_ns = 0;
  for (BubbleCause cause : kAllBubbleCauses) {
    int64_t ns = attribution[static_cast<int>(cause)];
    if (ns > best_ns) {
      best_ns = ns;
      best = cause;
    }
  }
  return best;
}

int64_t AttributionTotal(const Attribution& attribution) {
  int64_t total = 0;
  for (int64_t ns : attribution) total += ns;
  return total;
}

}  // namespace bubblewatch
