// libFuzzer target: an EventBatch message off the wire. DecodeEventBatch runs
// the FlatBuffers Verifier first, so no input may read out of bounds; a batch
// that decodes must pass or fail ValidateBatch cleanly and survive a re-encode
// and decode with the same events and collective records.
#include <cstddef>
#include <cstdint>
#include <span>

#include "processor/batch_validator.h"
#include "schemas/event_batch_codec.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace bubblewatch;
  absl::StatusOr<DecodedBatch> batch = DecodeEventBatch({data, size});
  if (!batch.ok()) return 0;
  (void)ValidateBatch(*batch);
  (void)CheckBatchBytes(size, BatchLimits{});
  EventBatchEncoder encoder(&batch->trace);
  std::span<const uint8_t> again = encoder.Encode(
      batch->header, 0, batch->trace.gpu.size(), 0, batch->trace.cpu.size(), 0,
      batch->trace.collectives.size());
  absl::StatusOr<DecodedBatch> round = DecodeEventBatch(again);
  if (!round.ok() || round->trace.gpu.size() != batch->trace.gpu.size() ||
      round->trace.cpu.size() != batch->trace.cpu.size() ||
      round->trace.collectives.size() != batch->trace.collectives.size() ||
      round->header.job != batch->header.job) {
    __builtin_trap();  // A decoded batch must re-encode to itself.
  }
  return 0;
}
