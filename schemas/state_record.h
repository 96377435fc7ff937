// StateRecord: the envelope of every persisted state blob (schemas/state.fbs,
// docs/state.md). These helpers are what each state's codec (job state and
// partition snapshot in processor/, watch state in ingest/watch/) builds on:
// they stamp and check the format version and the body type, and tell a
// record of this schema from the formats written before it.
#ifndef BUBBLEWATCH_SCHEMAS_STATE_RECORD_H_
#define BUBBLEWATCH_SCHEMAS_STATE_RECORD_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "flatbuffers/flatbuffers.h"
#include "schemas/state_generated.h"

namespace bubblewatch {

// The format_version this build writes. Raised only for a change an older
// reader must refuse (state.fbs, "Versioning"); adding a field is not one.
inline constexpr uint16_t kStateFormatVersion = 1;

// True if `bytes` carry the StateRecord identifier "BWST" (at bytes 4-7).
// None of the formats written before the schema can: they are text starting
// "v1 ", "v2 ", "L1 " or "bubblewatch-watch-state", or length-prefixed
// binary whose bytes 4-7 are the high bytes of a small 64-bit length.
bool IsStateRecord(absl::string_view bytes);

// Finishes `builder` as a StateRecord of this version with `body` and
// returns its bytes.
std::string FinishStateRecord(flatbuffers::FlatBufferBuilder& builder,
                              fb::StateBody type,
                              flatbuffers::Offset<void> body);

// Verifies `bytes` as a StateRecord whose body is `type`, written by a
// version this build reads. kDataLoss naming `what` otherwise (malformed,
// another body, or a newer format_version). The record points into `bytes`.
absl::StatusOr<const fb::StateRecord*> ReadStateRecord(absl::string_view bytes,
                                                       fb::StateBody type,
                                                       absl::string_view what);

}  // namespace bubblewatch

#endif  // BUBBLEWATCH_SCHEMAS_STATE_RECORD_H_
