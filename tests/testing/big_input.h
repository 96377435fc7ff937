// Inputs far bigger than a reader may hold, and the measure of what it held:
// the fixtures of the "input that is merely big" attacks,
// shared by the reader and watcher tests.
#ifndef BUBBLEWATCH_TESTS_TESTING_BIG_INPUT_H_
#define BUBBLEWATCH_TESTS_TESTING_BIG_INPUT_H_

#include <cstdint>
#include <string>

#include "absl/strings/string_view.h"

namespace bubblewatch::testing {

inline constexpr uint64_t kGiB = uint64_t{1} << 30;

// Writes `prefix`, `blanks` spaces and `suffix` to `path` as one gzip stream.
// Deflated piece by piece, so that the test itself never holds the inflated
// content it asks the program not to hold; Z_RLE keeps a GiB to a second or
// two and about 1 MB on disk (deflate's limit is about 1:1000). A failure to
// write is a test failure (ADD_FAILURE).
void WriteGzipWithBlanks(const std::string& path, absl::string_view prefix,
                         uint64_t blanks, absl::string_view suffix);

// Writes a gzipped Kineto trace of `kernels` distinct kernels (1 us each,
// 2 us apart, device 0, stream 7) to `path`: a bomb of valid events, the
// whole file a few bytes per kernel. Deflated piece by piece like
// WriteGzipWithBlanks.
void WriteGzipKernels(const std::string& path, int64_t kernels);

// How far the process's peak RSS rose above its RSS at construction. The
// peak is reset first (Linux >= 4.0), so that an earlier test's peak does
// not hide this one's; where that fails, growth of the old peak is measured,
// which can only understate.
class PeakRssGrowth {
 public:
  PeakRssGrowth();
  int64_t bytes() const;

 private:
  bool reset_ = false;
  int64_t base_ = 0;
};

}  // namespace bubblewatch::testing

#endif  // BUBBLEWATCH_TESTS_TESTING_BIG_INPUT_H_
