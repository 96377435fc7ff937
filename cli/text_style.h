// Small pieces every text report shares, so that a percentage, a bar or a
// bold heading reads the same in `analyze`, `diff` and `query`.
#ifndef BUBBLEWATCH_CLI_TEXT_STYLE_H_
#define BUBBLEWATCH_CLI_TEXT_STYLE_H_

#include <algorithm>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/string_view.h"

namespace bubblewatch {

// "12.3%" for 0.123.
inline std::string Percent(double ratio) {
  return absl::StrFormat("%.1f%%", ratio * 100.0);
}

// A bar of `width` cells, `ratio` of them filled (clamped to [0, 1]).
inline std::string Bar(double ratio, int width) {
  const int filled =
      std::clamp(static_cast<int>(ratio * width + 0.5), 0, width);
  std::string bar;
  for (int i = 0; i < filled; ++i) bar += "\u2588";
  for (int i = filled; i < width; ++i) bar += "\u00b7";
  return bar;
}

// Long names (templated CUDA kernels) shortened in the middle to `max`.
inline std::string Shorten(absl::string_view s, size_t max) {
  if (s.size() <= max) return std::string(s);
  size_t head = (max - 3) * 2 / 3;
  size_t tail = max - 3 - head;
  return absl::StrCat(s.substr(0, head), "...", s.substr(s.size() - tail));
}

// ANSI styles for terminals; plain text when color is off.
class Styler {
 public:
  explicit Styler(bool color) : color_(color) {}
  std::string Bold(absl::string_view s) const { return Wrap("1", s); }
  std::string Dim(absl::string_view s) const { return Wrap("2", s); }
  std::string Red(absl::string_view s) const { return Wrap("31", s); }

 private:
  std::string Wrap(absl::string_view code, absl::string_view s) const {
    if (!color_) return std::string(s);
    return absl::StrCat("\033[", code, "m", s, "\033[0m");
  }
  bool color_;
};

}  // namespace bubblewatch

#endif  // BUBBLEWATCH_CLI_TEXT_STYLE_H_
