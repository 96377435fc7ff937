// The `diagnosis` object of `analyze --json`. Times are microseconds
// (doubles); ratios are fractions.
#include "base/json_writer.h"
#include "cli/diagnosis_report.h"

namespace bubblewatch {
namespace {

void OptionalUs(JsonWriter& w, const std::optional<int64_t>& ns) {
  if (ns) {
    w.Double(JsonUs(*ns));
  } else {
    w.Null();
  }
}

void WriteKernelList(JsonWriter& w, const std::vector<KernelStat>& stats) {
  w.BeginArray();
  for (const KernelStat& s : stats) {
    w.BeginObject();
    w.Key("name").String(s.name);
    w.Key("count").Int(s.count);
    w.Key("total_us").Double(JsonUs(s.total_ns));
    w.Key("mean_us").Double(JsonUs(s.mean_ns));
    w.Key("p90_us").Double(JsonUs(s.p90_ns));
    w.Key("busy_share").Double(s.busy_share);
    w.EndObject();
  }
  w.EndArray();
}

void WriteVerdict(JsonWriter& w, const BoundVerdict& v) {
  w.Key("verdict").String(VerdictName(v.verdict));
  w.Key("reason").String(v.reason);
  w.Key("advice");
  if (v.advice.empty()) {
    w.Null();
  } else {
    w.String(v.advice);
  }
  const VerdictEvidence& e = v.evidence;
  w.Key("evidence").BeginObject();
  w.Key("utilization").Double(e.utilization);
  w.Key("bubble_ratio").Double(e.bubble_ratio);
  w.Key("idle_us").BeginObject();
  w.Key("copy").Double(JsonUs(e.idle.copy_ns));
  w.Key("input").Double(JsonUs(e.idle.input_ns));
  w.Key("sync").Double(JsonUs(e.idle.sync_ns));
  w.Key("launch").Double(JsonUs(e.idle.launch_ns));
  w.Key("gpu_side").Double(JsonUs(e.idle.gpu_side_ns));
  w.Key("unknown").Double(JsonUs(e.idle.unknown_ns));
  w.EndObject();
  w.Key("copies_in_bubbles").BeginObject();
  for (int k = 0; k < kNumCopyKinds; ++k) {
    const CopyKindFigures& c = e.copies[k];
    w.Key(CopyKindName(static_cast<CopyKind>(k))).BeginObject();
    w.Key("us").Double(JsonUs(c.bubble_ns));
    w.Key("count").Int(c.count);
    w.Key("bytes").Int(static_cast<int64_t>(c.bytes));
    w.EndObject();
  }
  w.EndObject();
  w.Key("sync_gaps").Int(e.idle.sync_gaps);
  w.Key("launch_gaps").Int(e.idle.launch_gaps);
  w.Key("launch_lead_p50_us");
  OptionalUs(w, e.lead_p50_ns);
  w.Key("post_sync_lead_p50_us");
  OptionalUs(w, e.post_sync_lead_p50_ns);
  w.Key("post_launch_gap_lead_p50_us");
  OptionalUs(w, e.post_launch_gap_lead_p50_ns);
  w.Key("queue_depth_mean").Double(e.queue_mean);
  w.Key("tiny_kernel_share").Double(e.tiny_kernel_share);
  w.EndObject();
}

// The keys shared by the job and each device.
void WriteFigures(JsonWriter& w, const DiagnosisFigures& f, bool series) {
  WriteVerdict(w, f.verdict);
  const DurationPercentiles& lead = f.launch.lead;
  w.Key("launch_lead_us").BeginObject();
  w.Key("count").Int(lead.count);
  w.Key("p10").Double(JsonUs(lead.p10_ns));
  w.Key("p50").Double(JsonUs(lead.p50_ns));
  w.Key("p90").Double(JsonUs(lead.p90_ns));
  w.Key("negative").Int(f.launch.negative);
  w.Key("graph_kernels").Int(f.launch.graph_kernels);
  w.EndObject();
  w.Key("queue_depth").BeginObject();
  w.Key("max").Int(f.queue.max);
  w.Key("mean").Double(f.queue.mean);
  if (series) {
    w.Key("series_start_us").Double(JsonUs(f.queue.series_start_ns));
    w.Key("bucket_us").Double(JsonUs(f.queue.bucket_ns));
    w.Key("series").BeginArray();
    for (double d : f.queue.series) w.Double(d);
    w.EndArray();
  }
  w.EndObject();
  const KernelBreakdown& k = f.kernels;
  w.Key("kernels").BeginObject();
  w.Key("count").Int(k.kernels);
  w.Key("tiny").Int(k.tiny_kernels);
  w.Key("tiny_share").Double(k.tiny_share());
  w.Key("median_us").Double(JsonUs(k.median_kernel_ns));
  w.EndObject();
  w.Key("top_kernels");
  WriteKernelList(w, k.top_compute);
  const CommunicationStats& c = k.communication;
  w.Key("communication").BeginObject();
  w.Key("kernels").Int(c.kernels);
  w.Key("total_us").Double(JsonUs(c.total_ns));
  w.Key("busy_us").Double(JsonUs(c.busy_ns));
  w.Key("overlap_us").Double(JsonUs(c.overlap_ns));
  w.Key("exposed_us").Double(JsonUs(c.exposed_ns()));
  w.Key("overlap_ratio").Double(c.overlap_ratio());
  w.Key("top_kernels");
  WriteKernelList(w, k.top_communication);
  w.EndObject();
}

}  // namespace

void WriteDiagnosisJson(JsonWriter& w, const Diagnosis& d) {
  w.BeginObject();
  w.Key("steps").Int(d.steps);
  w.Key("job").BeginObject();
  WriteFigures(w, d.job, /*series=*/false);
  w.EndObject();
  w.Key("devices").BeginArray();
  for (const DeviceDiagnosis& dd : d.devices) {
    w.BeginObject();
    w.Key("device").Int(dd.device);
    WriteFigures(w, dd.figures, /*series=*/true);
    w.EndObject();
  }
  w.EndArray();
  w.EndObject();
}

}  // namespace bubblewatch
