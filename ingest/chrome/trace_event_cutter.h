// The Chrome reader's tokenizer: walks the top-level object of a Chrome
// trace without parsing it as one document, cuts "traceEvents" into its
// elements with a string-aware scanner (json_container_scan.h: AVX2, 64
// bytes a step), collects them in blocks of about kChromeBlockBytes and
// submits the blocks to a BlockPipeline; hands the other top-level values
// to a TopLevelSink.
//
// Promises:
//   - Blocks are submitted in file order; each span is one object element,
//     its index in "traceEvents" and its exact bytes. Streaming, a block
//     owns the buffer its elements lie in (EventStreamBuffer::HandOff).
//   - Elements that are not objects are counted (NonObjectElement), not cut.
//   - Errors name their place: "bad JSON at offset K: ..." (K counts
//     uncompressed bytes from the start of the file), a truncated input, no
//     "traceEvents" array, anything but white space after the top level.
//     Errors of elements before the place the scan stopped win (the
//     pipeline's merge error is returned first).
//   - Only the top-level values the sink wants are kept whole; the others
//     are skipped without holding their bytes.
#ifndef BUBBLEWATCH_INGEST_CHROME_TRACE_EVENT_CUTTER_H_
#define BUBBLEWATCH_INGEST_CHROME_TRACE_EVENT_CUTTER_H_

#include <cstdint>
#include <memory>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "ingest/chrome/block_pipeline.h"
#include "ingest/chrome/chrome_event_parser.h"
#include "ingest/chrome/event_stream_buffer.h"

namespace bubblewatch {

// Where the cutter puts what is not an event block.
class TopLevelSink {
 public:
  virtual ~TopLevelSink() = default;
  // Whether the value of top-level key `key` (not "traceEvents") is wanted.
  virtual bool WantsTopLevelValue(std::string_view key) const = 0;
  // A wanted value: its JSON text (valid during the call), which lies at
  // file offset `offset`. An error ends the read.
  virtual absl::Status TopLevelValue(std::string_view key,
                                     std::string_view text,
                                     uint64_t offset) = 0;
  // A "traceEvents" element that is not an object (counted, not parsed).
  virtual void NonObjectElement() = 0;
};

class TraceEventCutter {
 public:
  // Borrows all three, which must outlive the cutter.
  TraceEventCutter(EventStreamBuffer& buffer, BlockPipeline& pipeline,
                   TopLevelSink& sink);

  // Walks the whole input: every block submitted and merged (the pipeline
  // finished), every wanted top-level value handed to the sink.
  absl::Status Cut();

 private:
  absl::Status ReadTopLevelValue(std::string_view key);
  absl::Status ReadEvents();
  absl::Status ScanEvents();
  // Hands the block being filled, with its bytes, to the pipeline.
  void Seal();
  // The buffer's More, after sealing the block being filled when the buffer
  // is full, so its bytes travel with it instead of being copied.
  absl::StatusOr<bool> More();
  // Moves pos to the next non-space byte; false at the end of the input.
  absl::StatusOr<bool> SkipSpace();
  // Like SkipSpace, but the end of the input is an error: truncated.
  absl::Status SkipSpaceExpectMore(std::string_view inside);
  // Moves pos past the JSON value starting at pos (a container or string by
  // its brackets and quotes, escapes honoured; a scalar up to the next
  // delimiter). With `keep`, its text is data()[mark, pos) afterwards.
  absl::Status ScanValue(bool keep);
  absl::Status Truncated(std::string_view inside) const;

  EventStreamBuffer& buffer_;
  BlockPipeline& pipeline_;
  TopLevelSink& sink_;
  std::unique_ptr<ChromeEventBlock> block_;  // Being filled.
  bool has_events_ = false;
};

}  // namespace bubblewatch

#endif  // BUBBLEWATCH_INGEST_CHROME_TRACE_EVENT_CUTTER_H_
