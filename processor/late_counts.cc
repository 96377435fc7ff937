#include "processor/late_counts.h"

#include <vector>

#include "absl/time/time.h"
#include "base/status_macros.h"

namespace bubblewatch {

absl::StatusOr<int64_t> AddLateCountsToBatch(const PendingLateCounts& pending,
                                             WindowStore& store,
                                             StoreBatch& batch) {
  int64_t without_window = 0;
  for (const auto& [key, count] : pending) {
    const auto& [job, start] = key;
    WindowSummary* target = nullptr;
    for (WindowSummary& w : batch.windows) {
      if (w.job == job && w.window.start_ns == start) target = &w;
    }
    if (target == nullptr) {
      ASSIGN_OR_RETURN(std::vector<WindowSummary> stored,
                       store.Scan(job, absl::FromUnixNanos(start),
                                  absl::FromUnixNanos(start + 1)));
      if (stored.empty()) {
        without_window += count.events + count.collectives;
        continue;
      }
      batch.windows.push_back(std::move(stored.front()));
      target = &batch.windows.back();
    }
    target->late_events += count.events;
    target->late_collectives += count.collectives;
  }
  return without_window;
}

}  // namespace bubblewatch
