#include "schemas/analysis_json.h"

#include <string>

#include "schemas/window_summary.h"

namespace bubblewatch {

void WriteKernelRefJson(JsonWriter& w, const std::optional<KernelRef>& kernel) {
  if (!kernel.has_value()) {
    w.Null();
    return;
  }
  w.BeginObject();
  w.Key("name").String(kernel->name);
  w.Key("start_ns").Int(kernel->start_ns);
  w.Key("end_ns").Int(kernel->end_ns);
  w.Key("stream").Int(kernel->stream);
  w.EndObject();
}

void WriteStragglerJson(JsonWriter& w, const Straggler& s,
                        std::optional<bool> root) {
  auto us = [](int64_t ns) { return static_cast<double>(ns) / 1000.0; };
  w.BeginObject();
  w.Key("rank").Int(s.rank);
  w.Key("wait_caused_us").Double(us(s.wait_caused_ns));
  w.Key("arrived_last").Int(s.arrived_last);
  w.Key("causes_us").BeginObject();
  for (BubbleCause cause : kAllBubbleCauses) {
    w.Key(BubbleCauseName(cause)).Double(us(s.causes[static_cast<int>(cause)]));
  }
  w.Key("compute").Double(us(s.compute_ns));
  w.Key("comm").Double(us(s.comm_ns));
  w.EndObject();
  w.Key("unattributed_us").Double(us(s.unattributed_ns));
  // The root-cause fields (docs/semantics.md#root-cause).
  w.Key("host");
  if (s.host.empty()) {
    w.Null();
  } else {
    w.String(s.host);
  }
  // Known for Inspector logs only: absent otherwise.
  if (s.pid >= 0) w.Key("pid").Int(s.pid);
  w.Key("direct_wait_caused_us").Double(us(s.direct_wait_caused_ns));
  w.Key("via").BeginArray();
  for (const Straggler::Via& v : s.via) {
    w.BeginObject();
    w.Key("rank").Int(v.rank);
    w.Key("wait_us").Double(us(v.wait_ns));
    w.EndObject();
  }
  w.EndArray();
  w.Key("saved_us");
  if (s.saved_ns >= 0) {
    w.Double(us(s.saved_ns));
  } else {
    w.Null();
  }
  if (root.has_value()) {
    w.Key("root").Bool(*root);
    w.Key("cause");
    if (const std::string cause = StragglerCauseName(s); cause.empty()) {
      w.Null();
    } else {
      w.String(cause);
    }
  }
  w.EndObject();
}

void WriteWhatIfJson(JsonWriter& w, int64_t job_ns,
                     int64_t job_ns_without_stragglers) {
  if (job_ns < 0) {
    w.Null();
    return;
  }
  w.BeginObject();
  w.Key("job_us").Double(JsonUs(job_ns));
  w.Key("job_us_without_stragglers").Double(JsonUs(job_ns_without_stragglers));
  w.EndObject();
}

}  // namespace bubblewatch
