// Encodes WindowSummary (schemas/window_summary.h) as the FlatBuffers table of
// schemas/window_summary.fbs and decodes it back. Every field round-trips.
//
// Decoding runs the FlatBuffers Verifier first, so a corrupt or truncated
// record is an error, never an out-of-bounds read.
#ifndef BUBBLEWATCH_SCHEMAS_WINDOW_SUMMARY_CODEC_H_
#define BUBBLEWATCH_SCHEMAS_WINDOW_SUMMARY_CODEC_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "schemas/window_summary.h"

namespace bubblewatch {

// The schema version this build writes and the only one it reads.
inline constexpr uint16_t kWindowSummarySchemaVersion = 1;

// Returns the FlatBuffers bytes (identifier "BWWS") of `summary`.
std::string EncodeWindowSummary(const WindowSummary& summary);

// Verifies and decodes bytes produced by EncodeWindowSummary.
// Errors (all kDataLoss, the message says which): fails the FlatBuffers
// Verifier or lacks the "BWWS" identifier; schema_version other than
// kWindowSummarySchemaVersion; an attribution vector whose length is not the
// number of causes; an unknown cause or closed_by value.
absl::StatusOr<WindowSummary> DecodeWindowSummary(absl::string_view bytes);

}  // namespace bubblewatch

#endif  // BUBBLEWATCH_SCHEMAS_WINDOW_SUMMARY_CODEC_H_
