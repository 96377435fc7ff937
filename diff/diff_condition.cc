#include "diff/diff_condition.h"

#include <cctype>
#include <cmath>
#include <limits>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/strip.h"
#include "base/human_duration.h"

namespace bubblewatch {
namespace {

using Form = FailCondition::Form;

absl::Status Bad(absl::string_view text, absl::string_view why) {
  return absl::InvalidArgumentError(
      absl::StrCat("bad condition '", text, "': ", why));
}

absl::string_view OpText(Comparison op) {
  switch (op) {
    case Comparison::kGreater:
      return ">";
    case Comparison::kGreaterOrEqual:
      return ">=";
    case Comparison::kLess:
      return "<";
    case Comparison::kLessOrEqual:
      return "<=";
  }
  return "?";
}

bool Holds(double observed, Comparison op, double threshold) {
  switch (op) {
    case Comparison::kGreater:
      return observed > threshold;
    case Comparison::kGreaterOrEqual:
      return observed >= threshold;
    case Comparison::kLess:
      return observed < threshold;
    case Comparison::kLessOrEqual:
      return observed <= threshold;
  }
  return false;
}

// Digits with at most one decimal point: no exponents, inf or nan, so a
// typo cannot parse as something unexpected.
bool IsPlainNumber(absl::string_view s) {
  int digits = 0, points = 0;
  for (char c : s) {
    if (std::isdigit(static_cast<unsigned char>(c))) {
      ++digits;
    } else if (c == '.') {
      ++points;
    } else {
      return false;
    }
  }
  return digits > 0 && points <= 1;
}

struct TimeUnit {
  absl::string_view suffix;
  double ns;
};
// Longer suffixes first: "ms" must not be read as "s".
constexpr TimeUnit kTimeUnits[] = {
    {"ns", 1.0}, {"us", 1e3}, {"ms", 1e6}, {"s", 1e9}};

// BEFORE's or AFTER's figure as text: "81.7%", "1.200 ms/step".
std::string FormatValue(const FailCondition& c, double v) {
  return absl::StrCat(FormatMetric(c.metric.kind, v, false),
                      NormalizationSuffix(c.per));
}

// What is compared with the threshold, and the threshold, as text: a value
// like FormatValue for the kAfter form; else a change: "+7.7 pts", "7.7 pts"
// (drop/rise), "+12.0%" (relative), "+1.000 ms/s".
std::string FormatCompared(const FailCondition& c, double v) {
  if (c.form == Form::kAfter) return FormatValue(c, v);
  const bool sign = c.form == Form::kChange;
  // Literal formats only: absl checks them at compile time, and clang
  // refuses a format chosen at run time.
  if (c.relative) {
    return sign ? absl::StrFormat("%+.1f%%", v * 100)
                : absl::StrFormat("%.1f%%", v * 100);
  }
  if (c.metric.kind == MetricKind::kRatio) {
    return sign ? absl::StrFormat("%+.1f pts", v * 100)
                : absl::StrFormat("%.1f pts", v * 100);
  }
  return absl::StrCat(FormatMetric(c.metric.kind, v, sign),
                      NormalizationSuffix(c.per));
}

}  // namespace

std::string FormatMetric(MetricKind kind, double value, bool sign) {
  if (kind == MetricKind::kRatio) {
    if (sign) return absl::StrFormat("%+.1f pts", value * 100);
    return absl::StrFormat("%.1f%%", value * 100);
  }
  if (!std::isfinite(value)) return value > 0 ? "+inf" : "-inf";
  // StrCat rather than inserting "+" in place: gcc 12 warns (-Wrestrict, a
  // false positive) on std::string::insert at the front.
  return absl::StrCat(sign && value >= 0 ? "+" : "",
                      HumanDuration(static_cast<int64_t>(std::llround(value))));
}

absl::StatusOr<FailCondition> ParseFailCondition(absl::string_view text) {
  FailCondition c;
  c.text = std::string(absl::StripAsciiWhitespace(text));
  absl::string_view t = c.text;
  // The value never holds '<' or '>', so the last one is the operator even
  // when a kernel: substring holds template brackets.
  size_t pos = t.find_last_of("<>");
  if (pos == absl::string_view::npos) {
    return Bad(t,
               "no comparison operator (want >, >=, < or <=), e.g. "
               "'utilization_drop>2%'");
  }
  size_t value_at = pos + 1;
  const bool or_equal = value_at < t.size() && t[value_at] == '=';
  if (or_equal) ++value_at;
  c.op = t[pos] == '>'
             ? (or_equal ? Comparison::kGreaterOrEqual : Comparison::kGreater)
             : (or_equal ? Comparison::kLessOrEqual : Comparison::kLess);
  absl::string_view metric_text = absl::StripAsciiWhitespace(t.substr(0, pos));
  absl::string_view value = absl::StripAsciiWhitespace(t.substr(value_at));
  if (metric_text.empty()) return Bad(t, "no metric before the operator");
  if (value.empty()) return Bad(t, "no value after the operator");

  if (absl::ConsumeSuffix(&metric_text, "_drop")) {
    c.form = Form::kDrop;
  } else if (absl::ConsumeSuffix(&metric_text, "_rise")) {
    c.form = Form::kRise;
  }
  absl::StatusOr<Metric> metric = ParseMetric(metric_text);
  if (!metric.ok()) return Bad(t, metric.status().message());
  c.metric = *std::move(metric);
  const std::string label = c.metric.Label();

  if (absl::ConsumeSuffix(&value, "/step")) {
    c.per = Normalization::kPerStep;
  } else if (absl::ConsumeSuffix(&value, "/s")) {
    c.per = Normalization::kPerSecond;
  }
  if (c.per != Normalization::kNone && !c.metric.total) {
    return Bad(t, absl::StrCat("/step and /s apply to totals (span, compute, "
                               "bubble, cause:, comm_exposed, kernel:), not ",
                               label));
  }
  bool percent = false;
  double unit_ns = 0.0;
  if (absl::ConsumeSuffix(&value, "%")) {
    percent = true;
  } else {
    for (const TimeUnit& u : kTimeUnits) {
      if (absl::ConsumeSuffix(&value, u.suffix)) {
        unit_ns = u.ns;
        break;
      }
    }
  }
  double sign = 1.0;
  bool is_signed = false;
  if (absl::ConsumePrefix(&value, "+")) {
    is_signed = true;
  } else if (absl::ConsumePrefix(&value, "-")) {
    is_signed = true;
    sign = -1.0;
  }
  double number = 0.0;
  if (!IsPlainNumber(value) || !absl::SimpleAtod(value, &number)) {
    return Bad(t, absl::StrCat("'", value,
                               "' is not a number (want e.g. 2%, +5ms, 0.05)"));
  }
  if (is_signed) {
    if (c.form != Form::kAfter) {
      return Bad(t,
                 "_drop and _rise take an unsigned value (e.g. "
                 "utilization_drop>2%)");
    }
    c.form = Form::kChange;
  }

  if (c.metric.kind == MetricKind::kRatio) {
    if (unit_ns != 0.0) {
      return Bad(t, absl::StrCat(label,
                                 " is a ratio: give a fraction (0.02) or "
                                 "percentage points (2%), not a time"));
    }
    c.threshold = sign * number * (percent ? 0.01 : 1.0);
    return c;
  }
  if (percent) {
    if (c.form == Form::kAfter) {
      return Bad(t, absl::StrCat("% on a time compares the relative change: "
                                 "write ",
                                 label, ">+", value, "% or ", label, "_rise>",
                                 value, "%"));
    }
    if (c.per != Normalization::kNone) {
      return Bad(t, "a relative change (%) needs no /step or /s");
    }
    c.relative = true;
    c.threshold = sign * number / 100.0;
    return c;
  }
  if (unit_ns == 0.0) {
    return Bad(t, absl::StrCat(label,
                               " is a time: give a unit (ns, us, ms, s), or % "
                               "for a relative change"));
  }
  c.threshold = sign * number * unit_ns;
  return c;
}

absl::StatusOr<ConditionOutcome> EvaluateFailCondition(const FailCondition& c,
                                                       const DiffSide& before,
                                                       const DiffSide& after) {
  absl::StatusOr<double> b = MetricValue(c.metric, c.per, before);
  if (!b.ok()) return b.status();
  absl::StatusOr<double> a = MetricValue(c.metric, c.per, after);
  if (!a.ok()) return a.status();
  ConditionOutcome out;
  out.before = *b;
  out.after = *a;
  std::string observed_word;
  if (c.form == Form::kAfter) {
    out.observed = *a;
    observed_word = "after";
  } else {
    double delta = c.form == Form::kDrop ? *b - *a : *a - *b;
    if (c.relative) {
      // A change from nothing is infinitely large, in its direction.
      out.observed =
          *b != 0.0 ? delta / std::fabs(*b)
          : delta == 0.0
              ? 0.0
              : std::copysign(std::numeric_limits<double>::infinity(), delta);
    } else {
      out.observed = delta;
    }
    observed_word = c.form == Form::kDrop   ? "drop"
                    : c.form == Form::kRise ? "rise"
                                            : "change";
  }
  out.failed = Holds(out.observed, c.op, c.threshold);
  out.summary =
      absl::StrCat(c.metric.Label(), " ", FormatValue(c, out.before), " -> ",
                   FormatValue(c, out.after), ": ", observed_word, " ",
                   FormatCompared(c, out.observed), out.failed ? " " : ", not ",
                   OpText(c.op), " ", FormatCompared(c, c.threshold));
  return out;
}

}  // namespace bubblewatch
