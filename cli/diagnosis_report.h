// Renders a Diagnosis (analysis/diagnosis.h): the `diagnosis` object of
// `analyze --json` and the "Diagnosis" section of the text report.
#ifndef BUBBLEWATCH_CLI_DIAGNOSIS_REPORT_H_
#define BUBBLEWATCH_CLI_DIAGNOSIS_REPORT_H_

#include <string>

#include "absl/strings/string_view.h"
#include "analysis/diagnosis.h"
#include "base/json_writer.h"

namespace bubblewatch {

// Writes `diagnosis` as one JSON object value (times in microseconds, as in
// the rest of the report). docs/diff.md documents the keys.
void WriteDiagnosisJson(JsonWriter& w, const Diagnosis& diagnosis);

// The text section, starting with a blank line and a "Diagnosis" heading.
// `color` adds ANSI bold for terminals.
std::string RenderDiagnosisText(const Diagnosis& diagnosis, bool color);

// Long (templated) kernel names shortened in the middle to `max` chars.
std::string ShortenName(absl::string_view name, size_t max);

}  // namespace bubblewatch

#endif  // BUBBLEWATCH_CLI_DIAGNOSIS_REPORT_H_
