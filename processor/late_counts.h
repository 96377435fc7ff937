// Late counts waiting for a commit (docs/semantics.md#late-events): the
// late events and late collective records of windows already stored, which
// both stages' commits add to the stored windows, rewriting them in the
// commit's store batch (and publishing them again).
#ifndef BUBBLEWATCH_PROCESSOR_LATE_COUNTS_H_
#define BUBBLEWATCH_PROCESSOR_LATE_COUNTS_H_

#include <cstdint>
#include <map>
#include <string>
#include <utility>

#include "absl/status/statusor.h"
#include "schemas/time_types.h"
#include "storage/window_store.h"

namespace bubblewatch {

struct LateCounts {
  int64_t events = 0;
  int64_t collectives = 0;
  bool operator==(const LateCounts&) const = default;
};

// (job, window start) -> the counts not yet written. Ordered, so that a
// commit rewrites its windows in the same order whatever process runs it.
using PendingLateCounts =
    std::map<std::pair<std::string, WindowStartNs>, LateCounts>;

// Adds `pending` to `batch`'s windows: to the batch's own copy of a window
// when it holds one, else to the stored window, read from `store` and
// appended to the batch. Returns the events and records of windows that no
// store holds (retention removed them, or none was stored), which only the
// caller's counters keep. Errors: the store's reads.
absl::StatusOr<int64_t> AddLateCountsToBatch(const PendingLateCounts& pending,
                                             WindowStore& store,
                                             StoreBatch& batch);

}  // namespace bubblewatch

#endif  // BUBBLEWATCH_PROCESSOR_LATE_COUNTS_H_
