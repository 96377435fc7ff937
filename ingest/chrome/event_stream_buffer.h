// The bytes of a Chrome trace as the reader walks them: a window over the
// JSON that either borrows the caller's whole padded buffer or reads a
// TraceByteSource in chunks into buffers of its own, and hands the bytes
// already cut into events over to their block, so that peak memory is a few
// buffers, not the file.
//
// Promises:
//   - data()[0, size()) are the bytes at file offsets [Offset(0),
//     Offset(size())), and SIMDJSON_PADDING readable bytes (spaces when the
//     buffer is its own) follow size(): scanners and simdjson may read past
//     the end of what was read.
//   - The bytes from mark() on stay in the buffer (possibly moved: positions
//     are relative to data(), which may change at More or HandOff); bytes
//     before mark() may be dropped when more are read.
//   - Offsets (Offset, progress, block offsets) count uncompressed JSON
//     bytes from the start of the file, whatever was dropped or moved.
// Not thread-safe: the reading thread alone uses it.
#ifndef BUBBLEWATCH_INGEST_CHROME_EVENT_STREAM_BUFFER_H_
#define BUBBLEWATCH_INGEST_CHROME_EVENT_STREAM_BUFFER_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "ingest/trace_io/trace_file.h"
#include "simdjson.h"

namespace bubblewatch {

// Called now and then while reading with how many bytes of the JSON have been
// read so far and how many there are in all; the last call has done == total.
// Streaming a gzip file, `total` is an estimate until that last call (the
// bytes done scaled by the file's size over the compressed bytes consumed).
using ReadProgressFn =
    std::function<void(uint64_t done_bytes, uint64_t total_bytes)>;

// How often ReadChromeTrace calls its progress function, in bytes read.
inline constexpr uint64_t kChromeProgressStepBytes = 4 << 20;

// Bytes of events per block handed to the parsing threads: big enough that
// handing over costs nothing per event, small enough that the blocks in
// flight add little memory. Streaming, it is also the read buffer's size.
inline constexpr size_t kChromeBlockBytes = 64 << 10;

// Bytes handed over by EventStreamBuffer::HandOff: `data` holds the bytes
// from file offset `offset` on, `readable` bytes readable from it (padding
// included). `storage`, when set, owns them (streaming); otherwise they are
// the caller's buffer, which outlives the read.
struct HandedOffBytes {
  std::unique_ptr<char[]> storage;
  size_t capacity = 0;  // storage holds capacity + SIMDJSON_PADDING bytes.
  const char* data = nullptr;
  size_t readable = 0;
  uint64_t offset = 0;
};

class EventStreamBuffer {
 public:
  // Borrows `json`, which must outlive the buffer and every HandOff.
  EventStreamBuffer(const simdjson::padded_string& json,
                    const ReadProgressFn& progress);
  // Reads `source`, which starts with `head` (bytes already taken from it).
  EventStreamBuffer(TraceByteSource& source, absl::string_view head,
                    const ReadProgressFn& progress);

  EventStreamBuffer(const EventStreamBuffer&) = delete;
  EventStreamBuffer& operator=(const EventStreamBuffer&) = delete;

  // True when reading a source into buffers of its own.
  bool streaming() const { return source_ != nullptr; }

  const char* data() const { return buf_; }
  size_t size() const { return len_; }
  // Where scanning stands, and where what is still needed starts.
  size_t pos() const { return pos_; }
  void set_pos(size_t pos) { pos_ = pos; }
  size_t mark() const { return mark_; }
  void set_mark(size_t mark) { mark_ = mark; }
  // The file offset of data()[i].
  uint64_t Offset(size_t i) const { return base_ + i; }

  // True when a read would find too little room: the owner may HandOff the
  // bytes before mark() first, so that they travel instead of being copied.
  bool NeedsRoom() const;
  // Appends the next chunk, first making room when needed (the bytes before
  // mark() dropped, the rest moved to the front; the buffer doubled when
  // one value fills it); false at the end of the input. The caller's buffer
  // is all there is: false at once.
  absl::StatusOr<bool> More();

  // Hands over the bytes before mark() (and, streaming, the whole buffer
  // they lie in): the bytes from mark() on move to a fresh buffer, one byte
  // in, so that the byte before them is the buffer's own (a block writes a
  // bracket there). REQUIRES: streaming() implies mark() >= 1. Borrowing,
  // nothing moves: the caller's buffer is shared.
  HandedOffBytes HandOff();
  // Takes back a buffer HandOff gave away, to reuse it.
  void Recycle(std::unique_ptr<char[]>& storage, size_t capacity);

  // The JSON's size: exact in memory or plain, estimated while gunzipping
  // (the bytes so far scaled by the compressed part consumed); >= done.
  uint64_t EstimatedTotalBytes(uint64_t done) const;
  // Calls the progress function (if any) when another
  // kChromeProgressStepBytes have been scanned since the last call, or, with
  // `last`, with done == total.
  void ReportProgress(bool last);

 private:
  std::unique_ptr<char[]> TakeStorage(size_t capacity);
  void Reserve(size_t capacity);

  const ReadProgressFn& progress_;
  uint64_t next_progress_ = kChromeProgressStepBytes;
  TraceByteSource* source_ = nullptr;
  std::unique_ptr<char[]> storage_;
  size_t capacity_ = 0;  // storage_ holds capacity_ + SIMDJSON_PADDING.
  const char* buf_ = nullptr;
  size_t len_ = 0;
  size_t readable_ = 0;  // Bytes readable from buf_, padding included.
  size_t pos_ = 0;
  size_t mark_ = 0;
  uint64_t base_ = 0;
  bool eof_ = false;
  std::vector<std::unique_ptr<char[]>> free_storage_;  // Of kChromeBlockBytes.
};

}  // namespace bubblewatch

#endif  // BUBBLEWATCH_INGEST_CHROME_EVENT_STREAM_BUFFER_H_
