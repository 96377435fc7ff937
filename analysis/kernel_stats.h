// Where a GPU's time goes: the kernels with the most total time (the seed's
// "top 3 hot kernels" to take to Nsight Compute), NCCL communication kernels
// apart from compute, and how much of the communication ran while compute
// kernels did (overlap hides it; the rest is exposed).
#ifndef BUBBLEWATCH_ANALYSIS_KERNEL_STATS_H_
#define BUBBLEWATCH_ANALYSIS_KERNEL_STATS_H_

#include <cstdint>
#include <vector>

#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "analysis/device_timeline.h"
#include "analysis/diagnosis.h"
#include "schemas/trace.h"

namespace bubblewatch {

// True for NCCL kernels: the name, after an optional "void ", starts with
// "nccl" in any case (ncclKernel_AllReduce_..., ncclDevKernel_SendRecv).
bool IsCommunicationKernel(absl::string_view name);

// The breakdown of the non-empty kernels of one or more devices; each
// element of `devices` holds one device's kernels (KernelSlot::index into
// Trace::gpu). Kernels are grouped by name across devices; communication
// overlap is measured per device and summed. `busy_ns` is the busy time
// shares are relative to (the device's, or the sum over devices); `top`
// bounds each list.
KernelBreakdown BreakDownKernels(
    const Trace& trace,
    absl::Span<const std::vector<KernelSlot>* const> devices, int64_t busy_ns,
    int top);

}  // namespace bubblewatch

#endif  // BUBBLEWATCH_ANALYSIS_KERNEL_STATS_H_
