// Exact conversion of decimal microsecond text ("4458676983543.183") to
// integer nanoseconds.
//
// Kineto writes microseconds with three decimals on epoch-sized values; a
// double has ~16 significant digits and loses the last nanoseconds there, so
// readers convert the number's text, not a parsed double.
#ifndef BUBBLEWATCH_INGEST_TRACE_IO_DECIMAL_TIME_H_
#define BUBBLEWATCH_INGEST_TRACE_IO_DECIMAL_TIME_H_

#include <cstdint>
#include <string_view>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace bubblewatch {

// Parses a JSON-number-shaped decimal count of microseconds (optional '-',
// digits, optional fraction, optional exponent) into nanoseconds. Digits
// beyond the nanosecond are rounded half away from zero.
// Errors: kInvalidArgument for text that is not a number or a value that does
// not fit in int64 nanoseconds (about ±292 years).
absl::StatusOr<int64_t> DecimalMicrosToNanos(absl::string_view text);

}  // namespace bubblewatch

#endif  // BUBBLEWATCH_INGEST_TRACE_IO_DECIMAL_TIME_H_
