// Text that came from outside (job, host, kernel and file names from
// producers and trace files) on its way into logs, text reports, JSON and
// /metrics. A name may hold any bytes: a newline would forge a log line, an
// escape sequence would drive the reader's terminal, and bytes that are not
// UTF-8 make a JSON document or a Prometheus scrape invalid as a whole.
// These functions say whether text is safe as it is and make it safe when
// it is not; safe text passes through unchanged.
#ifndef BUBBLEWATCH_BASE_TEXT_ESCAPE_H_
#define BUBBLEWATCH_BASE_TEXT_ESCAPE_H_

#include <cstddef>
#include <string>

#include "absl/strings/string_view.h"

namespace bubblewatch {

// The length (1 to 4) of the well-formed UTF-8 sequence `text` starts with,
// or 0 if it does not start with one (a stray continuation byte, a
// truncated, overlong or surrogate sequence, or a code point past U+10FFFF).
// Returns 0 for empty text.
size_t Utf8SequenceLength(absl::string_view text);

// True if `text` is well-formed UTF-8 without control characters (C0, DEL
// and C1).
bool IsPrintableUtf8(absl::string_view text);

// `text` with every control character and every byte that is not part of
// well-formed UTF-8 written as an escape: \n, \r, \t, or \xHH. The result is
// printable UTF-8 and fits on one line. Printable UTF-8 is returned as is
// (backslashes included, so ordinary names never change).
std::string EscapeForLog(absl::string_view text);

}  // namespace bubblewatch

#endif  // BUBBLEWATCH_BASE_TEXT_ESCAPE_H_
