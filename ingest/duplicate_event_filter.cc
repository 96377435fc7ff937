#include "ingest/duplicate_event_filter.h"

#include "absl/hash/hash.h"

namespace bubblewatch {

bool DuplicateEventFilter::IsRepeat(absl::string_view text,
                                    const GpuActivity& a) {
  return Insert(
      text, absl::HashOf(a.start_ns, a.end_ns, a.correlation, a.bytes, a.name,
                         a.device, a.stream, static_cast<int>(a.kind)));
}

bool DuplicateEventFilter::IsRepeat(absl::string_view text, const CpuEvent& e) {
  return Insert(
      text, absl::HashOf(e.start_ns, e.end_ns, e.correlation, e.thread, e.name,
                         static_cast<int>(e.category)));
}

}  // namespace bubblewatch
