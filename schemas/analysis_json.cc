#include "schemas/analysis_json.h"

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

}  // namespace bubblewatch
