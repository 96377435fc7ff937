#include "base/text_escape.h"

#include <cstdint>

namespace bubblewatch {
namespace {

bool IsContinuation(unsigned char c) { return (c & 0xC0) == 0x80; }

// C0 controls, DEL and the C1 controls (U+0080..U+009F,
// "\xC2\x80".."\xC2\x9F").
bool IsControl(absl::string_view sequence) {
  const auto c = static_cast<unsigned char>(sequence[0]);
  if (sequence.size() == 1) return c < 0x20 || c == 0x7F;
  return sequence.size() == 2 && c == 0xC2 &&
         static_cast<unsigned char>(sequence[1]) < 0xA0;
}

}  // namespace

size_t Utf8SequenceLength(absl::string_view text) {
  if (text.empty()) return 0;
  const auto c0 = static_cast<unsigned char>(text[0]);
  if (c0 < 0x80) return 1;
  size_t n;
  uint32_t code;
  if (c0 >= 0xC2 && c0 <= 0xDF) {
    n = 2;
    code = c0 & 0x1F;
  } else if (c0 >= 0xE0 && c0 <= 0xEF) {
    n = 3;
    code = c0 & 0x0F;
  } else if (c0 >= 0xF0 && c0 <= 0xF4) {
    n = 4;
    code = c0 & 0x07;
  } else {
    return 0;  // Continuation byte, overlong lead (C0, C1) or past F4.
  }
  if (text.size() < n) return 0;
  for (size_t i = 1; i < n; ++i) {
    const auto c = static_cast<unsigned char>(text[i]);
    if (!IsContinuation(c)) return 0;
    code = (code << 6) | (c & 0x3F);
  }
  if (n == 3 && (code < 0x800 || (code >= 0xD800 && code <= 0xDFFF))) return 0;
  if (n == 4 && (code < 0x10000 || code > 0x10FFFF)) return 0;
  return n;
}

bool IsPrintableUtf8(absl::string_view text) {
  while (!text.empty()) {
    const size_t n = Utf8SequenceLength(text);
    if (n == 0 || IsControl(text.substr(0, n))) return false;
    text.remove_prefix(n);
  }
  return true;
}

std::string EscapeForLog(absl::string_view text) {
  if (IsPrintableUtf8(text)) return std::string(text);
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  out.reserve(text.size() + 16);
  auto hex = [&](unsigned char c) {
    out += "\\x";
    out += kHex[c >> 4];
    out += kHex[c & 0xF];
  };
  while (!text.empty()) {
    const size_t n = Utf8SequenceLength(text);
    const auto c = static_cast<unsigned char>(text[0]);
    if (n == 0) {
      hex(c);
      text.remove_prefix(1);
      continue;
    }
    absl::string_view sequence = text.substr(0, n);
    text.remove_prefix(n);
    if (!IsControl(sequence)) {
      out.append(sequence.data(), sequence.size());
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\t') {
      out += "\\t";
    } else {
      for (char b : sequence) hex(static_cast<unsigned char>(b));
    }
  }
  return out;
}

}  // namespace bubblewatch
