// The --json rendering of an Analysis. Times are microseconds (doubles), as
// the seed's JSON shape and docs/semantics.md#reports specify.
#include "base/json_writer.h"
#include "cli/analysis_report.h"
#include "cli/collectives_report.h"
#include "cli/diagnosis_report.h"

namespace bubblewatch {
namespace {

void WriteAttribution(JsonWriter& w, const Attribution& a) {
  w.BeginObject();
  for (BubbleCause c : kAllBubbleCauses) {
    w.Key(BubbleCauseName(c)).Double(JsonUs(a[static_cast<int>(c)]));
  }
  w.EndObject();
}

void WriteKernel(JsonWriter& w, const std::optional<KernelRef>& k) {
  if (k) {
    w.String(k->name);
  } else {
    w.Null();
  }
}

// The keys of docs/semantics.md#reports for one device, the job, or one window
// part.
void WriteStats(JsonWriter& w, const UtilizationStats& s) {
  w.Key("total_span_us").Double(JsonUs(s.span_ns));
  w.Key("compute_time_us").Double(JsonUs(s.compute_ns));
  w.Key("bubble_time_us").Double(JsonUs(s.bubble_ns));
  w.Key("bubble_ratio").Double(s.bubble_ratio());
  w.Key("utilization").Double(s.utilization());
  w.Key("largest_bubble_us").Double(JsonUs(s.largest_bubble_ns));
  w.Key("culprit_before_bubble");
  WriteKernel(w, s.culprit_before_bubble);
  w.Key("attribution_us");
  WriteAttribution(w, s.attribution);
}

void WriteBubble(JsonWriter& w, const BubbleReport& b) {
  w.BeginObject();
  w.Key("device").Int(b.device);
  w.Key("start_us").Double(JsonUs(b.start_ns));
  w.Key("end_us").Double(JsonUs(b.end_ns));
  w.Key("duration_us").Double(JsonUs(b.duration_ns()));
  w.Key("before");
  WriteKernel(w, b.before);
  w.Key("after");
  WriteKernel(w, b.after);
  w.Key("cause").String(BubbleCauseName(b.cause));
  w.Key("blamed");
  if (b.blamed.empty()) {
    w.Null();
  } else {
    w.String(b.blamed);
  }
  w.Key("attribution_us");
  WriteAttribution(w, b.attribution);
  w.EndObject();
}

void WriteAdvice(JsonWriter& w, const UtilizationStats& s) {
  w.BeginArray();
  // Causes in decreasing share; those under 5% of bubble time are noise.
  std::vector<BubbleCause> causes(kAllBubbleCauses.begin(),
                                  kAllBubbleCauses.end());
  std::stable_sort(causes.begin(), causes.end(),
                   [&](BubbleCause a, BubbleCause b) {
                     return s.attribution[static_cast<int>(a)] >
                            s.attribution[static_cast<int>(b)];
                   });
  for (BubbleCause c : causes) {
    int64_t ns = s.attribution[static_cast<int>(c)];
    if (ns <= 0 || ns * 20 < s.bubble_ns) continue;
    w.BeginObject();
    w.Key("cause").String(BubbleCauseName(c));
    w.Key("share").Double(static_cast<double>(ns) / s.bubble_ns);
    w.Key("advice").String(BubbleCauseAdvice(c));
    w.EndObject();
  }
  w.EndArray();
}

}  // namespace

std::string RenderAnalysisJson(const Analysis& a, const InputSummary& in,
                               bool pretty, const Diagnosis* diagnosis,
                               const CollectiveAnalysis* collectives) {
  JsonWriter w(pretty ? 2 : 0);
  w.BeginObject();
  WriteStats(w, a.job);
  w.Key("devices").BeginArray();
  for (const DeviceAnalysis& d : a.devices) {
    w.BeginObject();
    w.Key("device").Int(d.device);
    WriteStats(w, d.stats);
    w.Key("kernels").Int(d.kernels);
    w.Key("zero_length_kernels").Int(d.zero_length_kernels);
    w.Key("copies").Int(d.copies);
    w.Key("kernels_with_launch").Int(d.kernels_with_launch);
    w.EndObject();
  }
  w.EndArray();
  w.Key("bubbles").BeginArray();
  for (const BubbleReport& b : a.top_bubbles) WriteBubble(w, b);
  w.EndArray();
  w.Key("advice");
  WriteAdvice(w, a.job);
  if (diagnosis != nullptr) {
    w.Key("diagnosis");
    WriteDiagnosisJson(w, *diagnosis);
  }
  if (!a.windows.empty()) {
    w.Key("windows").BeginArray();
    for (const WindowAnalysis& win : a.windows) {
      w.BeginObject();
      w.Key("start_us").Double(JsonUs(win.start_ns));
      w.Key("end_us").Double(JsonUs(win.end_ns));
      WriteStats(w, win.job);
      w.Key("devices").BeginArray();
      for (const DeviceWindow& d : win.devices) {
        w.BeginObject();
        w.Key("device").Int(d.device);
        WriteStats(w, d.stats);
        w.Key("kernels").Int(d.kernels);
        w.EndObject();
      }
      w.EndArray();
      w.Key("bubbles").BeginArray();
      for (const BubbleReport& b : win.top_bubbles) WriteBubble(w, b);
      w.EndArray();
      w.EndObject();
    }
    w.EndArray();
  }
  w.Key("input").BeginObject();
  w.Key("file").String(in.path);
  w.Key("format").String(in.format);
  if (in.rank >= 0) {
    w.Key("rank").Int(in.rank);
  } else {
    w.Key("rank").Null();
  }
  if (in.world_size >= 0) {
    w.Key("world_size").Int(in.world_size);
  } else {
    w.Key("world_size").Null();
  }
  w.Key("kernels").Int(a.kernels);
  w.Key("memcpys").Int(in.memcpys);
  w.Key("memsets").Int(in.memsets);
  w.Key("cpu_events").Int(a.cpu_events);
  w.Key("cuda_api_calls").Int(in.cpu_api_calls);
  w.Key("kernels_with_launch").Int(a.kernels_with_launch);
  w.Key("launch_match_ratio")
      .Double(a.kernels > 0
                  ? static_cast<double>(a.kernels_with_launch) / a.kernels
                  : 0.0);
  w.Key("first_event_us").Double(JsonUs(in.min_time_ns));
  w.Key("last_event_us").Double(JsonUs(in.max_time_ns));
  w.Key("skipped").BeginObject();
  std::vector<std::pair<std::string, int64_t>> skipped(
      in.skipped_by_reason.begin(), in.skipped_by_reason.end());
  std::sort(skipped.begin(), skipped.end());
  for (const auto& [reason, count] : skipped) w.Key(reason).Int(count);
  w.EndObject();
  w.EndObject();
  if (collectives != nullptr) WriteCollectivesJson(w, *collectives);
  w.EndObject();
  std::string out = std::move(w).Take();
  out.push_back('\n');
  return out;
}

}  // namespace bubblewatch
