#include "analysis/launch_lead.h"

#include <algorithm>
#include <utility>

#include "absl/strings/match.h"
#include "analysis/cpu_event_classifier.h"
#include "analysis/duration_percentiles.h"

namespace bubblewatch {
namespace {

// A change of the queue depth at `time_ns`.
struct DepthStep {
  int64_t time_ns;
  int delta;
};

// Adds depth * length of [a, b) ∩ span to the total and to the buckets.
class DepthIntegrator {
 public:
  DepthIntegrator(int64_t span_start, int64_t span_end, int buckets)
      : start_(span_start), end_(span_end) {
    int64_t span = span_end - span_start;
    if (span > 0 && buckets > 0) {
      bucket_ns_ = (span + buckets - 1) / buckets;
      // Fewer buckets than asked when the span has fewer nanoseconds.
      int used = static_cast<int>((span + bucket_ns_ - 1) / bucket_ns_);
      sums_.assign(used, 0.0);
    }
  }

  void Add(int64_t a, int64_t b, int64_t depth) {
    a = std::max(a, start_);
    b = std::min(b, end_);
    if (a >= b || depth == 0) return;
    total_ += static_cast<double>(depth) * static_cast<double>(b - a);
    if (sums_.empty()) return;
    // A piece usually lies in one bucket; walk the few it crosses.
    size_t i = static_cast<size_t>((a - start_) / bucket_ns_);
    while (a < b && i < sums_.size()) {
      int64_t bucket_end = start_ + static_cast<int64_t>(i + 1) * bucket_ns_;
      int64_t piece_end = std::min(b, bucket_end);
      sums_[i] +=
          static_cast<double>(depth) * static_cast<double>(piece_end - a);
      a = piece_end;
      ++i;
    }
  }

  double total() const { return total_; }

  void FillSeries(QueueDepthStats* queue) const {
    queue->series_start_ns = start_;
    queue->bucket_ns = bucket_ns_;
    queue->series.clear();
    for (size_t i = 0; i < sums_.size(); ++i) {
      int64_t lo = start_ + static_cast<int64_t>(i) * bucket_ns_;
      int64_t hi = std::min(end_, lo + bucket_ns_);
      queue->series.push_back(sums_[i] / static_cast<double>(hi - lo));
    }
  }

 private:
  int64_t start_;
  int64_t end_;
  int64_t bucket_ns_ = 0;
  double total_ = 0.0;
  std::vector<double> sums_;
};

}  // namespace

bool IsGraphLaunch(absl::string_view name) {
  name = StripApiVersionSuffix(name);
  return name == "cudaGraphLaunch" || name == "cuGraphLaunch";
}

DeviceLaunchFigures ComputeDeviceLaunchFigures(
    const Trace& trace, const LaunchIndex& launches,
    const std::vector<KernelSlot>& kernels, int64_t span_start_ns,
    int64_t span_end_ns, int buckets) {
  DeviceLaunchFigures out;
  out.span_ns = std::max<int64_t>(0, span_end_ns - span_start_ns);
  std::vector<DepthStep> steps;
  steps.reserve(2 * kernels.size());
  out.leads_ns.reserve(kernels.size());
  for (const KernelSlot& k : kernels) {
    uint32_t l = launches.Find(trace.gpu[k.index].correlation);
    if (l == LaunchIndex::kNone) continue;
    const CpuEvent& launch = trace.cpu[l];
    if (IsGraphLaunch(trace.Name(launch.name))) ++out.lead.graph_kernels;
    int64_t lead = k.start_ns - launch.start_ns;
    if (lead < 0) {
      ++out.lead.negative;
      out.leads_ns.push_back(0);
      continue;  // Never queued: no contribution to the depth.
    }
    out.leads_ns.push_back(lead);
    steps.push_back({launch.start_ns, +1});
    steps.push_back({k.start_ns, -1});
  }
  out.lead.lead = SummarizeDurations(out.leads_ns);

  // Starts before launches at equal times: a kernel that starts the instant
  // another is launched must not count as two queued at once.
  std::sort(steps.begin(), steps.end(),
            [](const DepthStep& a, const DepthStep& b) {
              return a.time_ns != b.time_ns ? a.time_ns < b.time_ns
                                            : a.delta < b.delta;
            });
  DepthIntegrator integrator(span_start_ns, span_end_ns, buckets);
  int64_t depth = 0;
  for (size_t i = 0; i < steps.size(); ++i) {
    depth += steps[i].delta;
    out.queue.max = std::max(out.queue.max, depth);
    if (i + 1 < steps.size()) {
      integrator.Add(steps[i].time_ns, steps[i + 1].time_ns, depth);
    }
  }
  out.queue_integral = integrator.total();
  out.queue.mean = out.span_ns > 0
                       ? out.queue_integral / static_cast<double>(out.span_ns)
                       : 0.0;
  // Without a single known launch the queue is unknown, not empty.
  if (!out.leads_ns.empty()) integrator.FillSeries(&out.queue);
  return out;
}

void CombineLaunchFigures(const std::vector<DeviceLaunchFigures>& devices,
                          LaunchLeadStats* lead, QueueDepthStats* queue) {
  std::vector<int64_t> all;
  double integral = 0.0;
  int64_t span = 0;
  *lead = LaunchLeadStats{};
  *queue = QueueDepthStats{};
  for (const DeviceLaunchFigures& d : devices) {
    all.insert(all.end(), d.leads_ns.begin(), d.leads_ns.end());
    lead->negative += d.lead.negative;
    lead->graph_kernels += d.lead.graph_kernels;
    queue->max = std::max(queue->max, d.queue.max);
    integral += d.queue_integral;
    span += d.span_ns;
  }
  lead->lead = SummarizeDurations(all);
  queue->mean = span > 0 ? integral / static_cast<double>(span) : 0.0;
}

}  // namespace bubblewatch
