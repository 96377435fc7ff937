// ReplayTraces: sends the batches of several producer streams through one
// EventProducer, merged by event time and optionally paced, so that files
// (or a synthetic fleet) can stand in for live jobs.
#ifndef BUBBLEWATCH_INGEST_TRACE_REPLAY_H_
#define BUBBLEWATCH_INGEST_TRACE_REPLAY_H_

#include <cstdint>
#include <functional>
#include <span>
#include <string>
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
  // Split big jobs across processors
  // (docs/architecture.md#one-job-across-processors): a batch whose header
  // declares a world size of at least this many ranks is keyed
  // BatchKey(header, split_ranks) = `JOB@HOST` (`JOB@rank-R` when it names
  // no host) instead of `JOB`. 0 (default): never. A split job needs the
  // processors' stage 2 to become windows.
  int split_ranks = 0;
};

// The message key of a batch with `header`: `JOB@HOST` when split_ranks >
// 0 and header.world_size >= split_ranks, with HOST the header's host, or
// `rank-R` when the host is empty (R the header's rank; a batch naming
// neither host nor rank keeps `JOB`); else `JOB`. Every batch of one host
// (or rank) of a job gets one key, so they land in one partition in order.
std::string BatchKey(const BatchHeader& header, int split_ranks);

// Sends every batch of every stream, key = BatchKey of the stream's header
// (the job id unless options.split_ranks splits it): streams are
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
                          ReplaySend send, bool end_markers = true,
                          int split_ranks = 0);

}  // namespace bubblewatch

#endif  // BUBBLEWATCH_INGEST_TRACE_REPLAY_H_
