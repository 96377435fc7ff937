// FitWindow: makes a finalized window fit the windows topic, so that a window
// is never refused by the broker (and so never missing from `serve
// --brokers`) nor fatal to the processor, however many devices, ranks and
// long names a job has. The rule (docs/semantics.md#windows-that-do-not-fit):
//
//   1. a window whose encoding fits is left as it is, byte for byte;
//   2. else the ranks' timelines go, all of them (WindowTrim::timelines);
//   3. if still too large, every name longer than kFitNameBytes (kernel
//      names, the event a bubble is blamed on, rank hosts; not the job) is
//      cut to that many bytes, at a UTF-8 character boundary (stragglers'
//      hosts too);
//   4. if still too large, each list keeps at most K entries, K the largest
//      that fits: the devices with the most bubble time (ties: lower id), the
//      longest top bubbles, the ranks others waited for most (wait caused,
//      then comm wait; ties: lower rank), the first stragglers and the
//      first ranks of each kept straggler's via (by wait); kept entries
//      stay in their list's order.
//
// What was left out is counted in WindowSummary::trimmed, which the encoded
// window carries; the job's own figures (job stats, event counts, collective
// counts) are never cut. The commit pipeline fits each window before it is
// published and stored, so the store and the topic hold the same window.
// A window trimmed before (e.g. re-published with a later late-event count)
// is fitted again and its counts add up.
#ifndef BUBBLEWATCH_PROCESSOR_WINDOW_FIT_H_
#define BUBBLEWATCH_PROCESSOR_WINDOW_FIT_H_

#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "schemas/window_summary.h"

namespace bubblewatch {

// Names longer than this are cut when a window does not fit: long enough to
// tell C++ template kernels apart, short enough that 500 devices with
// distinct names stay far below Kafka's default 1 MB.
inline constexpr size_t kFitNameBytes = 256;

// Returns the encoding (EncodeWindowSummary) of `window`, trimming `window`
// in place first when its encoding is larger than `max_bytes` (the rule
// above). A window that fits is not changed.
// Errors: kResourceExhausted when even the window with names cut and every
// list empty is larger than `max_bytes` (a limit of a few hundred bytes, or
// a job name of thousands); the message names the window and both sizes.
absl::StatusOr<std::string> FitWindow(WindowSummary& window, size_t max_bytes);

// The most bytes a window's value may have on a topic whose messages may
// have `limit_bytes` (the smaller of the topic's max.message.bytes and the
// producer's message.max.bytes) under key `key_bytes` long: the limit less
// the record batch's framing and what compression may add to incompressible
// bytes (LZ4: 1/255 + 16 bytes). 0 when nothing fits.
size_t WindowValueBudget(int64_t limit_bytes, size_t key_bytes);

}  // namespace bubblewatch

#endif  // BUBBLEWATCH_PROCESSOR_WINDOW_FIT_H_
