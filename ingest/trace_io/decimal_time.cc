#include "ingest/trace_io/decimal_time.h"

#include <cctype>
#include <limits>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace bubblewatch {
namespace {

absl::Status NotANumber(absl::string_view text) {
  return absl::InvalidArgumentError(
      absl::StrCat("'", text.substr(0, 40), "' is not a decimal number"));
}

absl::Status OutOfRange(absl::string_view text) {
  return absl::InvalidArgumentError(
      absl::StrCat("timestamp ", text.substr(0, 40),
                   " us does not fit in 64-bit nanoseconds"));
}

}  // namespace

absl::StatusOr<int64_t> DecimalMicrosToNanos(absl::string_view text) {
  size_t i = 0;
  bool negative = false;
  if (i < text.size() && (text[i] == '-' || text[i] == '+')) {
    negative = text[i] == '-';
    ++i;
  }
  // Collect significant digits and the position of the decimal point.
  std::string digits;
  int64_t decimal_exponent = 0;  // value = digits * 10^decimal_exponent
  bool any_digit = false;
  for (; i < text.size() && std::isdigit(static_cast<unsigned char>(text[i]));
       ++i) {
    any_digit = true;
    if (!(digits.empty() && text[i] == '0')) digits.push_back(text[i]);
  }
  if (i < text.size() && text[i] == '.') {
    ++i;
    for (; i < text.size() && std::isdigit(static_cast<unsigned char>(text[i]));
         ++i) {
      any_digit = true;
      if (!(digits.empty() && text[i] == '0')) digits.push_back(text[i]);
      --decimal_exponent;
    }
  }
  if (!any_digit) return NotANumber(text);
  if (i < text.size() && (text[i] == 'e' || text[i] == 'E')) {
    ++i;
    bool exp_negative = false;
    if (i < text.size() && (text[i] == '-' || text[i] == '+')) {
      exp_negative = text[i] == '-';
      ++i;
    }
    int64_t exp = 0;
    bool exp_digit = false;
    for (; i < text.size() && std::isdigit(static_cast<unsigned char>(text[i]));
         ++i) {
      exp_digit = true;
      if (exp < 100000) exp = exp * 10 + (text[i] - '0');
    }
    if (!exp_digit) return NotANumber(text);
    decimal_exponent += exp_negative ? -exp : exp;
  }
  if (i != text.size()) return NotANumber(text);
  if (digits.empty()) return int64_t{0};
  // Nanoseconds = digits * 10^(decimal_exponent + 3).
  int64_t shift = decimal_exponent + 3;
  const int64_t kMax = std::numeric_limits<int64_t>::max();
  // Keep the integer part of digits * 10^shift, rounding the first dropped
  // digit half away from zero.
  int64_t keep = static_cast<int64_t>(digits.size()) + shift;
  if (keep > 19) return OutOfRange(text);
  uint64_t value = 0;
  for (int64_t k = 0; k < keep; ++k) {
    uint64_t d = k < static_cast<int64_t>(digits.size()) ? digits[k] - '0' : 0;
    if (value > (static_cast<uint64_t>(kMax) - d) / 10) return OutOfRange(text);
    value = value * 10 + d;
  }
  if (keep >= 0 && keep < static_cast<int64_t>(digits.size()) &&
      digits[keep] >= '5') {
    if (value == static_cast<uint64_t>(kMax)) return OutOfRange(text);
    ++value;
  } else if (keep < 0) {
    value = 0;
  }
  return negative ? -static_cast<int64_t>(value) : static_cast<int64_t>(value);
}

}  // namespace bubblewatch
