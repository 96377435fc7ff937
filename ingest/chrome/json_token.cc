#include "ingest/chrome/json_token.h"

#include <limits>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "ingest/trace_io/decimal_time.h"
#include "ingest/trace_io/json_support.h"

namespace bubblewatch {
namespace {

// "-"? digits with up to three decimals, exactly; false for anything else
// (more decimals, exponents, values near the int64 limit).
bool FastMicrosToNanos(std::string_view text, int64_t* ns) {
  constexpr uint64_t kMaxWhole =
      (static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) - 999) / 1000;
  const char* p = text.data();
  const char* end = p + text.size();
  bool negative = p < end && *p == '-';
  if (negative) ++p;
  const char* whole_begin = p;
  uint64_t whole = 0;
  while (p < end && static_cast<unsigned>(*p - '0') <= 9 &&
         p - whole_begin < 17) {
    whole = whole * 10 + static_cast<uint64_t>(*p - '0');
    ++p;
  }
  if (p == whole_begin || whole > kMaxWhole) return false;
  uint64_t fraction = 0;
  int fraction_digits = 0;
  if (p < end && *p == '.') {
    ++p;
    while (p < end && static_cast<unsigned>(*p - '0') <= 9 &&
           fraction_digits < 4) {
      fraction = fraction * 10 + static_cast<uint64_t>(*p - '0');
      ++fraction_digits;
      ++p;
    }
    if (fraction_digits == 0 || fraction_digits > 3) return false;
  }
  if (p != end) return false;
  static constexpr uint64_t kScale[] = {1000, 100, 10, 1};
  uint64_t value = whole * 1000 + fraction * kScale[fraction_digits];
  *ns = negative ? -static_cast<int64_t>(value) : static_cast<int64_t>(value);
  return true;
}

// "-"? and at most 18 digits, which cannot overflow; nullopt otherwise.
std::optional<int64_t> PlainInteger(std::string_view text) {
  if (text.empty() || text.size() > 18) return std::nullopt;
  size_t i = text[0] == '-' ? 1 : 0;
  if (i == text.size()) return std::nullopt;
  int64_t value = 0;
  for (; i < text.size(); ++i) {
    unsigned digit = static_cast<unsigned>(text[i] - '0');
    if (digit > 9) return std::nullopt;
    value = value * 10 + digit;
  }
  return text[0] == '-' ? -value : value;
}

}  // namespace

std::optional<int64_t> TokenInteger(std::string_view token) {
  std::string_view text = StringTokenContent(token).value_or(token);
  if (std::optional<int64_t> plain = PlainInteger(text)) return plain;
  int64_t number = 0;
  if (absl::SimpleAtoi(AbslView(text), &number)) return number;
  return std::nullopt;
}

absl::StatusOr<int64_t> TokenMicrosToNanos(std::string_view token) {
  std::string_view text = token;
  if (std::optional<std::string_view> content = StringTokenContent(token)) {
    absl::string_view stripped = absl::StripAsciiWhitespace(AbslView(*content));
    text = std::string_view(stripped.data(), stripped.size());
  }
  int64_t ns = 0;
  if (FastMicrosToNanos(text, &ns)) return ns;
  return DecimalMicrosToNanos(AbslView(text));
}

}  // namespace bubblewatch
