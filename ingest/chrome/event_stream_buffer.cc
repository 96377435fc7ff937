#include "ingest/chrome/event_stream_buffer.h"

#include <algorithm>
#include <cstring>
#include <utility>

#include "base/status_macros.h"

namespace bubblewatch {
namespace {

// Streaming: a read asks for at least this much room in the buffer.
constexpr size_t kMinReadBytes = 16 << 10;

}  // namespace

EventStreamBuffer::EventStreamBuffer(const simdjson::padded_string& json,
                                     const ReadProgressFn& progress)
    : progress_(progress),
      buf_(json.data()),
      len_(json.size()),
      readable_(json.size() + simdjson::SIMDJSON_PADDING),
      eof_(true) {}

EventStreamBuffer::EventStreamBuffer(TraceByteSource& source,
                                     absl::string_view head,
                                     const ReadProgressFn& progress)
    : progress_(progress), source_(&source) {
  Reserve(std::max(kChromeBlockBytes, head.size()));
  std::memcpy(storage_.get(), head.data(), head.size());
  len_ = head.size();
}

std::unique_ptr<char[]> EventStreamBuffer::TakeStorage(size_t capacity) {
  if (capacity == kChromeBlockBytes && !free_storage_.empty()) {
    std::unique_ptr<char[]> storage = std::move(free_storage_.back());
    free_storage_.pop_back();
    return storage;
  }
  auto storage =
      std::make_unique<char[]>(capacity + simdjson::SIMDJSON_PADDING);
  // Every byte defined, padding included: scans and simdjson read past the
  // end of what was read.
  std::memset(storage.get(), ' ', capacity + simdjson::SIMDJSON_PADDING);
  return storage;
}

void EventStreamBuffer::Reserve(size_t capacity) {
  std::unique_ptr<char[]> storage = TakeStorage(capacity);
  if (len_ > 0) std::memcpy(storage.get(), buf_, len_);
  if (storage_ != nullptr && capacity_ == kChromeBlockBytes) {
    free_storage_.push_back(std::move(storage_));
  }
  storage_ = std::move(storage);
  capacity_ = capacity;
  buf_ = storage_.get();
  readable_ = capacity_ + simdjson::SIMDJSON_PADDING;
}

bool EventStreamBuffer::NeedsRoom() const {
  return !eof_ && capacity_ - len_ < kMinReadBytes;
}

absl::StatusOr<bool> EventStreamBuffer::More() {
  if (eof_) return false;
  if (NeedsRoom()) {
    // Nothing handed off: the bytes before mark_ are dropped.
    if (mark_ > 0) {
      std::memmove(storage_.get(), storage_.get() + mark_, len_ - mark_);
      base_ += mark_;
      len_ -= mark_;
      pos_ -= mark_;
      mark_ = 0;
    }
    // One value bigger than the buffer: grow it.
    if (NeedsRoom()) Reserve(capacity_ * 2);
  }
  ASSIGN_OR_RETURN(size_t n,
                   source_->Read(storage_.get() + len_, capacity_ - len_));
  if (n == 0) {
    eof_ = true;
    return false;
  }
  len_ += n;
  return true;
}

HandedOffBytes EventStreamBuffer::HandOff() {
  HandedOffBytes out;
  out.offset = base_;
  out.data = buf_;
  out.readable = readable_;
  if (source_ == nullptr) return out;  // The caller's buffer: shared.
  // The bytes still needed move to a fresh buffer, one byte in: the byte
  // before the next block's first element is then its own, for the bracket
  // that makes its elements one JSON array (ChromeEventParser). mark_ >= 1
  // here (the handed-off elements lie before it), so that byte stands for a
  // real one of the file and offsets stay right.
  const size_t rest = len_ - mark_;
  const size_t capacity = std::max(kChromeBlockBytes, rest + 1 + kMinReadBytes);
  std::unique_ptr<char[]> next = TakeStorage(capacity);
  next[0] = ' ';
  std::memcpy(next.get() + 1, buf_ + mark_, rest);
  out.storage = std::move(storage_);
  out.capacity = capacity_;
  storage_ = std::move(next);
  capacity_ = capacity;
  buf_ = storage_.get();
  readable_ = capacity_ + simdjson::SIMDJSON_PADDING;
  base_ += mark_ - 1;
  len_ = rest + 1;
  pos_ -= mark_ - 1;
  mark_ = 1;
  return out;
}

void EventStreamBuffer::Recycle(std::unique_ptr<char[]>& storage,
                                size_t capacity) {
  if (storage != nullptr && capacity == kChromeBlockBytes &&
      free_storage_.size() < 4) {
    free_storage_.push_back(std::move(storage));
  }
}

uint64_t EventStreamBuffer::EstimatedTotalBytes(uint64_t done) const {
  uint64_t total = done;
  if (source_ == nullptr) {
    total = len_;
  } else if (!source_->compressed()) {
    total = source_->file_size();
  } else if (source_->file_bytes_consumed() > 0) {
    // Uncompressed size unknown until the end: scale by the compressed part.
    total = static_cast<uint64_t>(
        static_cast<double>(source_->bytes_produced()) *
        static_cast<double>(source_->file_size()) /
        static_cast<double>(source_->file_bytes_consumed()));
  }
  return std::max(done, total);
}

void EventStreamBuffer::ReportProgress(bool last) {
  if (!progress_) return;
  uint64_t done = Offset(pos_);
  if (last) {
    progress_(done, done);
    return;
  }
  if (done < next_progress_) return;
  next_progress_ = done + kChromeProgressStepBytes;
  progress_(done, EstimatedTotalBytes(done));
}

}  // namespace bubblewatch
