// The compact binary forms of what stage 1 sends stage 2 of a split job
// (analysis/rank_digest.h, analysis/window_merge.h) are written and read
// with these: unsigned LEB128 varints, zigzag signed values, deltas that
// wrap around (any two int64 values travel and come back), and
// length-prefixed strings. A reader that meets truncated or malformed
// bytes turns !ok() and reads zeros from then on, so a decoder checks
// ok() once at the end.
#ifndef BUBBLEWATCH_ANALYSIS_VARINT_CODEC_H_
#define BUBBLEWATCH_ANALYSIS_VARINT_CODEC_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>

#include "absl/strings/string_view.h"

namespace bubblewatch {

class VarintWriter {
 public:
  void Unsigned(uint64_t v) {
    while (v >= 0x80) {
      out_.push_back(static_cast<char>((v & 0x7F) | 0x80));
      v >>= 7;
    }
    out_.push_back(static_cast<char>(v));
  }
  void Signed(int64_t v) {
    const uint64_t u = static_cast<uint64_t>(v);
    Unsigned((u << 1) ^ (v < 0 ? ~uint64_t{0} : 0));
  }
  void Delta(int64_t v, int64_t base) {
    Signed(static_cast<int64_t>(static_cast<uint64_t>(v) -
                                static_cast<uint64_t>(base)));
  }
  void String(absl::string_view s) {
    Unsigned(s.size());
    out_.append(s.data(), s.size());
  }
  void Byte(uint8_t b) { out_.push_back(static_cast<char>(b)); }
  std::string Take() { return std::move(out_); }

 private:
  std::string out_;
};

class VarintReader {
 public:
  explicit VarintReader(absl::string_view in) : in_(in) {}
  bool ok() const { return ok_; }
  bool done() const { return pos_ == in_.size(); }
  uint64_t Unsigned() {
    uint64_t v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      if (pos_ >= in_.size()) return Fail();
      const uint8_t b = static_cast<uint8_t>(in_[pos_++]);
      v |= static_cast<uint64_t>(b & 0x7F) << shift;
      if ((b & 0x80) == 0) return v;
    }
    return Fail();
  }
  int64_t Signed() {
    const uint64_t u = Unsigned();
    return static_cast<int64_t>((u >> 1) ^ (~(u & 1) + 1));
  }
  int64_t Delta(int64_t base) {
    return static_cast<int64_t>(static_cast<uint64_t>(base) +
                                static_cast<uint64_t>(Signed()));
  }
  int32_t Int32() {
    const int64_t v = Signed();
    if (v < INT32_MIN || v > INT32_MAX) return static_cast<int32_t>(Fail());
    return static_cast<int32_t>(v);
  }
  // A count of items each at least one byte long: no more than remain.
  size_t Count() {
    const uint64_t n = Unsigned();
    if (n > in_.size() - pos_) return static_cast<size_t>(Fail());
    return static_cast<size_t>(n);
  }
  std::string String() {
    const size_t n = Count();
    if (!ok_) return "";
    std::string s(in_.substr(pos_, n));
    pos_ += n;
    return s;
  }
  uint8_t Byte() {
    if (pos_ >= in_.size()) return static_cast<uint8_t>(Fail());
    return static_cast<uint8_t>(in_[pos_++]);
  }
  // Marks the input bad (a decoder's own check failed); returns 0.
  uint64_t Fail() {
    ok_ = false;
    pos_ = in_.size();
    return 0;
  }

 private:
  absl::string_view in_;
  size_t pos_ = 0;
  bool ok_ = true;
};

}  // namespace bubblewatch

#endif  // BUBBLEWATCH_ANALYSIS_VARINT_CODEC_H_
