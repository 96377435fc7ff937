// ReplayTraces: sends the batches of several producer streams through one
// EventProducer, merged by event time and optionally paced, so that files
// (or a synthetic fleet) can stand in for live jobs.
#ifndef BUBBLEWATCH_INGEST_TRACE_REPLAY_H_
#define BUBBLEWATCH_INGEST_TRACE_REPLAY_H_

#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "ingest/batched_trace.h"
#include "ingest/event_producer.h"

namespace bubblewatch {

struct ReplayOptions {
  // Event-time speed: 1 = real time, 10 = ten times faster; 0 (default) =
  // as fast as the producer accepts batches. A paced batch is sent once the
  // replay clock passes the start of its latest event.
  double speed = 0;
  // Called about every progress_interval of wall time while sending (not
  // while flushing), from the calling thread. Default: none.
  std::function<void(const ProducerStats&, absl::Duration elapsed)> progress;
  absl::Duration progress_interval = absl::Milliseconds(500);
  // After a stream's last batch, send its end marker (BatchedTrace::
  // EncodeEndMarker, docs/semantics.md#job-lifecycle). Default: true.
  bool end_markers = true;
};

// Sends every batch of every stream, key = the stream's job id: streams are
// merged by their batches' first event time (ties: the earlier stream), so
// the topic sees the fleet roughly in event time; each stream's batches keep
// their order; each stream's end marker (with options.end_markers) follows
// the last batch of every stream of its job, so the ranks of a job sent
// together end it together. Does not flush: call producer->Flush() after.
// Errors: the first error of EventProducer::Send.
absl::Status ReplayTraces(const std::vector<BatchedTrace*>& streams,
                          EventProducer* producer,
                          const ReplayOptions& options);

// Where the overload below sends each message: its key (the job), its
// bytes (valid during the call) and its events (0 for an end marker).
using ReplaySend = absl::FunctionRef<absl::Status(
    absl::string_view key, std::span<const uint8_t> message, int64_t events)>;

// The same messages in the same order, unpaced, to `send` instead of a
// producer (a test's in-memory topic): what `produce` sends a broker.
absl::Status ReplayTraces(const std::vector<BatchedTrace*>& streams,
                          ReplaySend send, bool end_markers = true);

}  // namespace bubblewatch

#endif  // BUBBLEWATCH_INGEST_TRACE_REPLAY_H_
