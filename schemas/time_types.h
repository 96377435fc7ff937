// Names for the int64 quantities the processor and the store pass around,
// so that every interface says which one it holds (docs/architecture.md,
// "Times, offsets and none"):
//
//   EventNs        a time on a job's event clock (ns; the profilers' clock,
//                  which may lie before the epoch or far from wall time);
//   WindowStartNs  an EventNs that is a window's aligned start (WindowStartOf),
//                  the key of windows and of per-window counts;
//   WallNs         the processor's wall clock, Unix ns;
//   KafkaOffset    an offset of the input partition (a position: the next
//                  offset to read, a resume offset, a committed position);
//   ProducerId     EventBatch.producer_id; 0: none given;
//   ProducerSeq    EventBatch.sequence, per producer id.
//
// Aliases, not distinct types. The values are summed, compared, min'd and
// max'd with each other and with durations everywhere, and cross into the
// analyzer (plain int64 ns), FlatBuffers accessors and the store's
// fixed-width records; a distinct type would need arithmetic operators and
// an explicit conversion at each of those hundreds of sites, and would change
// the signatures that other stages (analysis/, serve/, alerts/) share. The
// names carry the meaning at every interface; review, not the compiler,
// keeps them apart.
//
// "None" is std::optional, never a sentinel value: INT64_MIN is a valid
// event time (docs/semantics.md#units-and-events) and a comparison with a
// sentinel silently orders "none" before everything (so does comparing an
// optional with a value: `opt < x` compiles and holds for none; test for
// none first, or use the helpers below). Stored and wire
// formats that already write INT64_MIN for none keep their bytes: they name
// it kNoneOnWire and convert with FromWire / ToWire at the (de)serialization
// boundary only.
#ifndef BUBBLEWATCH_SCHEMAS_TIME_TYPES_H_
#define BUBBLEWATCH_SCHEMAS_TIME_TYPES_H_

#include <cstdint>
#include <limits>
#include <optional>
#include <string>

#include "absl/strings/str_cat.h"

namespace bubblewatch {

using EventNs = int64_t;
using WindowStartNs = int64_t;
using WallNs = int64_t;
using KafkaOffset = int64_t;
using ProducerId = uint64_t;
using ProducerSeq = uint64_t;

// What the stored formats that predate the optional rule write for "none"
// (schemas/state.fbs defaults such as awaiting_ranks_since_ns, the store's
// JobRecord): part of their bytes, used only where they are read or written.
inline constexpr int64_t kNoneOnWire = std::numeric_limits<int64_t>::min();

// A stored value read back: kNoneOnWire is none.
inline std::optional<int64_t> FromWire(int64_t stored) {
  if (stored == kNoneOnWire) return std::nullopt;
  return stored;
}
// The value to store: none is kNoneOnWire.
inline int64_t ToWire(std::optional<int64_t> value) {
  return value.value_or(kNoneOnWire);
}

// The later of `a` and `b`; none only when both are.
inline std::optional<int64_t> LaterOf(std::optional<int64_t> a,
                                      std::optional<int64_t> b) {
  if (!a) return b;
  if (!b) return a;
  return *a < *b ? b : a;
}
// Raises `to` to `value` (sets it when none).
inline void RaiseTo(std::optional<int64_t>& to, int64_t value) {
  if (!to || *to < value) to = value;
}
// Lowers `to` to `value` (sets it when none).
inline void LowerTo(std::optional<int64_t>& to, int64_t value) {
  if (!to || *to > value) to = value;
}

// `t - d` (d >= 0), none when that falls below the int64 range: a cutoff
// that far back excludes nothing.
inline std::optional<int64_t> EarlierBy(int64_t t, int64_t d) {
  int64_t out = 0;
  if (__builtin_sub_overflow(t, d, &out)) return std::nullopt;
  return out;
}

// For logs: the number, or "none".
inline std::string NsText(std::optional<int64_t> ns) {
  return ns ? absl::StrCat(*ns) : std::string("none");
}

}  // namespace bubblewatch

#endif  // BUBBLEWATCH_SCHEMAS_TIME_TYPES_H_
