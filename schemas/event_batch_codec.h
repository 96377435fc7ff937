// Encodes slices of a Trace into EventBatch FlatBuffers (schemas/
// event_batch.fbs) and decodes them back.
//
// Decoding always runs the FlatBuffers Verifier first, so a hostile or
// truncated message is an error, never an out-of-bounds read.
#ifndef BUBBLEWATCH_SCHEMAS_EVENT_BATCH_CODEC_H_
#define BUBBLEWATCH_SCHEMAS_EVENT_BATCH_CODEC_H_

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "flatbuffers/flatbuffer_builder.h"
#include "schemas/trace.h"

namespace bubblewatch {

// The schema version this build writes and the only one it reads.
inline constexpr uint16_t kEventBatchSchemaVersion = 1;

// The observation a batch belongs to (docs/semantics.md#observations): one
// trace a producer sent and the event time it covers, [start_ns, end_ns].
struct ObservationInfo {
  uint64_t id = 0;
  int64_t start_ns = 0;
  int64_t end_ns = 0;
  friend bool operator==(const ObservationInfo&,
                         const ObservationInfo&) = default;
};

// Who sent a batch and where it sits in that sender's stream.
struct BatchHeader {
  std::string job;
  std::string host;
  int32_t rank = -1;
  int32_t world_size = -1;
  // The producing process's OS pid, when the source names it; -1: unknown.
  int64_t pid = -1;
  uint64_t producer_id = 0;
  uint64_t sequence = 0;
  // The end marker: the producer's last batch for the job
  // (docs/semantics.md#job-lifecycle).
  bool end_of_stream = false;
  // The batch's observation; nullopt for a batch without one (its
  // producer's legacy observation, taken as unbounded).
  std::optional<ObservationInfo> observation;
};

// A decoded EventBatch: its header and its events as a Trace (whose job,
// host, rank, world_size and pid mirror the header).
struct DecodedBatch {
  BatchHeader header;
  Trace trace;
};

// Builds EventBatch messages from slices of one Trace. Reusing one encoder
// for many batches keeps its buffers warm (no per-event allocation).
// The encoder borrows `trace`, which must outlive it.
class EventBatchEncoder {
 public:
  explicit EventBatchEncoder(const Trace* trace);

  // Encodes gpu[gpu_begin, gpu_end), cpu[cpu_begin, cpu_end) and
  // collectives[collectives_begin, collectives_end) with only the names they
  // use. Which collective records belong with which kernels is the caller's
  // choice (BatchedTrace sends each with its kernel). Without collective
  // records the bytes are exactly those of the encoder before collectives
  // were added to the wire (tests/testdata/eventbatch/). The returned bytes
  // stay valid until the next call.
  // REQUIRES: the ranges are within the trace's vectors.
  std::span<const uint8_t> Encode(const BatchHeader& header, size_t gpu_begin,
                                  size_t gpu_end, size_t cpu_begin,
                                  size_t cpu_end, size_t collectives_begin = 0,
                                  size_t collectives_end = 0);

 private:
  uint32_t Remap(NameId id);
  // Remap for optional names: kNoName stays kNoName.
  uint32_t RemapOptional(NameId id) {
    return id == kNoName ? kNoName : Remap(id);
  }

  const Trace* trace_;
  flatbuffers::FlatBufferBuilder builder_;
  // remap_[id] is the batch-local index of name `id` when stamp_[id] equals
  // the current batch's stamp: a generation counter instead of clearing.
  std::vector<uint32_t> remap_;
  std::vector<uint32_t> stamp_;
  uint32_t current_stamp_ = 0;
  std::vector<NameId> batch_names_;
};

// Verifies and decodes one EventBatch message. The batch's collective
// records, if any, become DecodedBatch::trace.collectives (in batch order);
// a batch without them (any batch written before they existed) decodes with
// none.
// Errors (all kInvalidArgument, the message says which):
//   fails the FlatBuffers Verifier or lacks the "BWEB" identifier;
//   schema_version other than kEventBatchSchemaVersion;
//   an event's or collective record's name index outside the batch's string
//   table (a collective's optional names may be 0xFFFFFFFF, absent).
absl::StatusOr<DecodedBatch> DecodeEventBatch(std::span<const uint8_t> bytes);

}  // namespace bubblewatch

#endif  // BUBBLEWATCH_SCHEMAS_EVENT_BATCH_CODEC_H_
