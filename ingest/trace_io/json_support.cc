#include "ingest/trace_io/json_support.h"

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "ingest/trace_io/decimal_time.h"

namespace bubblewatch {

absl::Status JsonSyntaxError(simdjson::ondemand::document& doc,
                             const simdjson::padded_string& json,
                             simdjson::error_code error) {
  size_t offset = json.size();
  const char* location = nullptr;
  if (doc.current_location().get(location) == simdjson::SUCCESS &&
      location != nullptr) {
    offset = static_cast<size_t>(location - json.data());
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "bad JSON at offset ", offset, ": ", simdjson::error_message(error)));
}

absl::StatusOr<int64_t> ReadMicrosAsNanos(simdjson::ondemand::value value,
                                          absl::string_view what) {
  simdjson::ondemand::json_type type;
  if (value.type().get(type) != simdjson::SUCCESS) {
    // simdjson types a value by its first byte; NaN and Infinity have none.
    type = simdjson::ondemand::json_type::null;
  }
  absl::string_view text;
  if (type == simdjson::ondemand::json_type::number) {
    text = absl::StripTrailingAsciiWhitespace(AbslView(value.raw_json_token()));
  } else if (type == simdjson::ondemand::json_type::string) {
    std::string_view s;
    if (value.get_string().get(s) != simdjson::SUCCESS) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, ": unreadable string"));
    }
    text = absl::StripAsciiWhitespace(AbslView(s));
  } else {
    absl::string_view raw =
        absl::StripTrailingAsciiWhitespace(AbslView(value.raw_json_token()));
    return absl::InvalidArgumentError(
        absl::StrCat(what, " is not a finite number: ", raw.substr(0, 40)));
  }
  auto ns = DecimalMicrosToNanos(text);
  if (!ns.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": ", ns.status().message()));
  }
  return *ns;
}

}  // namespace bubblewatch
