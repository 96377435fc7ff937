// How far the CPU runs ahead of one GPU: the launch lead time of each kernel
// (its start minus the start of its launch call) and the queue depth over
// time (kernels whose launch call has started but which have not started).
// A GPU-bound job shows long leads and a deep queue; a launch-bound one
// shows leads of a few microseconds and a queue that keeps running dry.
#ifndef BUBBLEWATCH_ANALYSIS_LAUNCH_LEAD_H_
#define BUBBLEWATCH_ANALYSIS_LAUNCH_LEAD_H_

#include <cstdint>
#include <vector>

#include "analysis/device_timeline.h"
#include "analysis/diagnosis.h"
#include "analysis/launch_index.h"
#include "schemas/trace.h"

namespace bubblewatch {

// The launch figures of one device, plus what the job's figures are made of.
struct DeviceLaunchFigures {
  LaunchLeadStats lead;
  QueueDepthStats queue;
  std::vector<int64_t> leads_ns;  // Sorted; negative leads as 0.
  // Queue depth integrated over the span (kernel-nanoseconds), and the span.
  double queue_integral = 0.0;
  int64_t span_ns = 0;
};

// Computes the figures of the device whose non-empty kernels are `kernels`
// (Trace::gpu indices in KernelSlot::index), over its span
// [span_start_ns, span_end_ns). The queue series has `buckets` buckets
// (none when the span is empty or buckets <= 0).
DeviceLaunchFigures ComputeDeviceLaunchFigures(
    const Trace& trace, const LaunchIndex& launches,
    const std::vector<KernelSlot>& kernels, int64_t span_start_ns,
    int64_t span_end_ns, int buckets);

// The job's figures: leads over all devices' kernels, the deepest queue, and
// the mean depth weighted by span (GPU-time, like the job's utilization).
// No series: devices' spans differ.
void CombineLaunchFigures(const std::vector<DeviceLaunchFigures>& devices,
                          LaunchLeadStats* lead, QueueDepthStats* queue);

// True if `name` launches a CUDA graph (cudaGraphLaunch, cuGraphLaunch, with
// or without an API version suffix).
bool IsGraphLaunch(absl::string_view name);

}  // namespace bubblewatch

#endif  // BUBBLEWATCH_ANALYSIS_LAUNCH_LEAD_H_
