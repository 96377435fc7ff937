// BatchedTrace: one producer stream. A Trace in event-time order, cut into
// the EventBatch messages that carry it to Kafka.
//
// Order: GPU and CPU events are each sorted by start time (stable, so ties
// keep the reader's order) and then merged, GPU first on ties; a batch is a
// contiguous run of that merged order, so a consumer sees batches roughly in
// event time and each batch interleaves GPU and CPU events by time.
//
// Collectives: each collective record (Trace::collectives) travels in the
// batch that holds its kernel (the kernel of the same start, end, device,
// stream and name), so a consumer sees a kernel and its collective identity
// together. A record without such a kernel goes with the batch where its
// start falls in the merged order. Records do not count as events.
//
// Identity: every batch carries the stream's producer id and its sequence
// number (0, 1, 2, ...). The producer id is a hash of the job, host, rank,
// world size, every event, collective record and name, and the batching
// options, so resending
// the same file with the same options yields the same (producer id,
// sequence) pairs, which a consumer can use to drop duplicates; any change
// to the content or to how it is cut gives a different id.
//
// Observation: every batch and the end marker carry the stream's
// observation (docs/semantics.md#observations): the identity's when it has
// one, else id = the producer id and interval = [earliest start, latest
// end] of the trace's events and collective records (none for a trace
// without events).
#ifndef BUBBLEWATCH_INGEST_BATCHED_TRACE_H_
#define BUBBLEWATCH_INGEST_BATCHED_TRACE_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "schemas/event_batch_codec.h"
#include "schemas/trace.h"

namespace bubblewatch {

struct BatchingOptions {
  // The most events (GPU + CPU) in one batch. Default: 4096.
  int64_t max_events = 4096;
  // When > 0, a batch also ends before the first event that starts at least
  // this many nanoseconds of event time after the batch's first event. Paced
  // replays use it so that no event waits much longer than the linger time
  // for its batch to fill. 0 (default): batches are cut by count only.
  int64_t max_span_ns = 0;
};

// Where one batch lies in the sorted trace.
struct BatchSlice {
  size_t gpu_begin = 0;
  size_t gpu_end = 0;
  size_t cpu_begin = 0;
  size_t cpu_end = 0;
  // The batch's records of Trace::collectives (not counted as events).
  size_t collectives_begin = 0;
  size_t collectives_end = 0;
  int64_t first_start_ns = 0;  // Start of the batch's earliest event.
  int64_t last_start_ns = 0;   // Start of its latest event.

  int64_t events() const {
    return static_cast<int64_t>((gpu_end - gpu_begin) + (cpu_end - cpu_begin));
  }
};

// The identity a trace says of itself, to send it under: its job, host,
// rank and world size (a synthetic job's ranks say all four).
inline BatchHeader TraceIdentity(const Trace& trace) {
  return BatchHeader{.job = trace.job,
                     .host = trace.host,
                     .rank = trace.rank,
                     .world_size = trace.world_size};
}

class BatchedTrace {
 public:
  // Takes `trace`, sorts its events (and orders its collective records by
  // batch) and plans the batches. `identity` gives
  // job, host, rank and world_size for every batch header; if its
  // producer_id is 0 the content hash described above is used instead.
  // REQUIRES: options.max_events >= 1.
  BatchedTrace(Trace trace, const BatchHeader& identity,
               const BatchingOptions& options);

  BatchedTrace(const BatchedTrace&) = delete;
  BatchedTrace& operator=(const BatchedTrace&) = delete;

  // The header of batch 0 (later batches differ only in `sequence`).
  const BatchHeader& header() const { return header_; }
  const Trace& trace() const { return *trace_; }
  int64_t num_events() const {
    return static_cast<int64_t>(trace_->gpu.size() + trace_->cpu.size());
  }
  size_t num_batches() const { return batches_.size(); }
  // REQUIRES: i < num_batches().
  const BatchSlice& batch(size_t i) const { return batches_[i]; }

  // Encodes batch `i` (sequence number i). The bytes stay valid until the
  // next Encode() on this object. REQUIRES: i < num_batches().
  std::span<const uint8_t> Encode(size_t i);

  // Encodes the stream's end marker: a batch without events, sequence
  // num_batches(), end_of_stream set (docs/semantics.md#job-lifecycle).
  // Valid until the next Encode or EncodeEndMarker.
  std::span<const uint8_t> EncodeEndMarker();

 private:
  // Behind a pointer: the encoder borrows the Trace by address.
  std::unique_ptr<Trace> trace_;
  // Orders trace_->collectives by batch and sets each batch's range.
  void PlaceCollectives();

  BatchHeader header_;
  std::vector<BatchSlice> batches_;
  EventBatchEncoder encoder_;
};

// The content hash used as producer id (see the file comment). Never 0.
// A trace without collective records hashes as it did before they existed.
// REQUIRES: `trace`'s events are in the order they will be sent.
uint64_t StreamProducerId(const Trace& trace, const BatchHeader& identity,
                          const BatchingOptions& options);

}  // namespace bubblewatch

#endif  // BUBBLEWATCH_INGEST_BATCHED_TRACE_H_
