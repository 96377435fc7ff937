// SharedString: an immutable string whose copies share one buffer, so that
// copying it costs a reference count and never an allocation.
//
// For a value repeated in many records of one result: a rank's host name
// appears in each window of a multi-rank job's period (a 64-rank job's hour
// holds 23,040 of them), and a std::string per copy made the allocator a
// fifth of a query's CPU and most of its tail. Decoders that see
// the same text again copy the SharedString they made before instead of
// making a new one (schemas/window_summary_codec.h, DecodeCollectives).
//
// Thread-safety: as std::shared_ptr<const std::string>: distinct copies may
// be used and destroyed on different threads; the text never changes.
#ifndef BUBBLEWATCH_BASE_SHARED_STRING_H_
#define BUBBLEWATCH_BASE_SHARED_STRING_H_

#include <memory>
#include <ostream>
#include <string>

#include "absl/strings/string_view.h"

namespace bubblewatch {

class SharedString {
 public:
  SharedString() = default;
  // Implicit, like std::string's: a SharedString stands where a string did.
  SharedString(absl::string_view text)  // NOLINT(runtime/explicit)
      : rep_(text.empty() ? nullptr
                          : std::make_shared<const std::string>(text)) {}
  SharedString(const std::string& text)  // NOLINT(runtime/explicit)
      : SharedString(absl::string_view(text)) {}
  SharedString(const char* text)  // NOLINT(runtime/explicit)
      : SharedString(absl::string_view(text)) {}

  const std::string& str() const { return rep_ ? *rep_ : Empty(); }
  operator absl::string_view() const { return str(); }  // NOLINT
  bool empty() const { return rep_ == nullptr; }
  size_t size() const { return str().size(); }

  // Equal text; copies of one SharedString compare without reading it.
  friend bool operator==(const SharedString& a, const SharedString& b) {
    return a.rep_ == b.rep_ || a.str() == b.str();
  }
  friend bool operator!=(const SharedString& a, const SharedString& b) {
    return !(a == b);
  }
  friend bool operator==(const SharedString& a, const std::string& b) {
    return a.str() == b;
  }
  friend bool operator==(const std::string& a, const SharedString& b) {
    return a == b.str();
  }
  friend bool operator==(const SharedString& a, const char* b) {
    return a.str() == b;
  }
  friend bool operator==(const char* a, const SharedString& b) {
    return b.str() == a;
  }
  friend bool operator!=(const SharedString& a, const std::string& b) {
    return !(a == b);
  }
  friend bool operator!=(const SharedString& a, const char* b) {
    return !(a == b);
  }
  friend std::ostream& operator<<(std::ostream& out, const SharedString& s) {
    return out << s.str();
  }

 private:
  static const std::string& Empty() {
    static const std::string* const kEmpty = new std::string();
    return *kEmpty;
  }

  std::shared_ptr<const std::string> rep_;  // nullptr: empty.
};

}  // namespace bubblewatch

#endif  // BUBBLEWATCH_BASE_SHARED_STRING_H_
