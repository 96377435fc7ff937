// JsonWriter builds JSON text into a string, streaming: no document tree.
//
// bubblewatch writes JSON for `--json` reports, the HTTP API and alert
// payloads; simdjson (our parser) has no writer. The writer tracks nesting and
// commas so callers cannot produce malformed output by forgetting one; keys
// and strings are escaped per RFC 8259, non-finite doubles become null.
//
// Example:
//   JsonWriter w;
//   w.BeginObject();
//   w.Key("span_us").Double(130.0);
//   w.Key("causes").BeginArray().String("host_sync").EndArray();
//   w.EndObject();
//   std::string text = std::move(w).Take();
#ifndef BUBBLEWATCH_BASE_JSON_WRITER_H_
#define BUBBLEWATCH_BASE_JSON_WRITER_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/strings/string_view.h"

namespace bubblewatch {

// `ns` in microseconds: every duration in bubblewatch's JSON is a double of
// µs (the `_us` fields), from the exact integer ns it was computed in.
inline double JsonUs(int64_t ns) { return static_cast<double>(ns) / 1e3; }

class JsonWriter {
 public:
  // `indent` > 0 pretty-prints with that many spaces per level.
  explicit JsonWriter(int indent = 0) : indent_(indent) {}

  JsonWriter& BeginObject();
  JsonWriter& EndObject();
  JsonWriter& BeginArray();
  JsonWriter& EndArray();
  // Must be followed by exactly one value (or Begin*).
  JsonWriter& Key(absl::string_view key);
  JsonWriter& String(absl::string_view value);
  JsonWriter& Int(int64_t value);
  JsonWriter& Uint(uint64_t value);
  // Shortest round-trip representation; NaN and infinities become null.
  JsonWriter& Double(double value);
  JsonWriter& Bool(bool value);
  JsonWriter& Null();
  // Appends `json`, which must already be one valid JSON value.
  JsonWriter& Raw(absl::string_view json);

  const std::string& str() const { return out_; }
  std::string Take() && { return std::move(out_); }

 private:
  void BeforeValue();
  void Newline();
  void AppendEscaped(absl::string_view s);

  struct Level {
    bool is_object;
    bool empty = true;
  };
  int indent_;
  std::string out_;
  std::vector<Level> stack_;
  bool after_key_ = false;
};

}  // namespace bubblewatch

#endif  // BUBBLEWATCH_BASE_JSON_WRITER_H_
