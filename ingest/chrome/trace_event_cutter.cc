#include "ingest/chrome/trace_event_cutter.h"

#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "ingest/chrome/json_container_scan.h"
#include "ingest/trace_io/json_support.h"

namespace bubblewatch {
namespace {

// Scans [p, end) for the closing quote of the string whose opening quote
// the scan started at (`in_string` false there); returns the byte after it,
// or nullptr when the stretch ended first. Strings are scanned only at the
// top level (keys, metadata values), so byte by byte is fast enough.
const char* ScanStringStretch(const char* p, const char* const end,
                              JsonScanState& s) {
  for (; p < end; ++p) {
    if (s.escape_pending) {
      s.escape_pending = false;
    } else if (*p == '\\') {
      s.escape_pending = true;
    } else if (*p == '"') {
      s.in_string = !s.in_string;
      if (!s.in_string) return p + 1;
    }
  }
  return nullptr;
}

}  // namespace

TraceEventCutter::TraceEventCutter(EventStreamBuffer& buffer,
                                   BlockPipeline& pipeline, TopLevelSink& sink)
    : buffer_(buffer),
      pipeline_(pipeline),
      sink_(sink),
      block_(std::make_unique<ChromeEventBlock>()) {}

absl::Status TraceEventCutter::Truncated(std::string_view inside) const {
  return absl::InvalidArgumentError(
      absl::StrCat("bad JSON at offset ", buffer_.Offset(buffer_.size()),
                   ": the input ends inside ", AbslView(inside),
                   " (the input ends early: truncated?)"));
}

void TraceEventCutter::Seal() {
  std::unique_ptr<ChromeEventBlock> block = std::move(block_);
  block_ = std::make_unique<ChromeEventBlock>();
  HandedOffBytes bytes = buffer_.HandOff();
  block->storage = std::move(bytes.storage);
  block->capacity = bytes.capacity;
  block->data = bytes.data;
  block->readable = bytes.readable;
  block->offset = bytes.offset;
  pipeline_.Submit(std::move(block));
}

absl::StatusOr<bool> TraceEventCutter::More() {
  // Full: the elements cut so far go with their bytes, or, with none in
  // this buffer, the buffer drops the bytes before mark.
  if (buffer_.NeedsRoom() && !block_->spans.empty()) Seal();
  return buffer_.More();
}

absl::StatusOr<bool> TraceEventCutter::SkipSpace() {
  while (true) {
    const char* const buf = buffer_.data();
    const size_t len = buffer_.size();
    size_t pos = buffer_.pos();
    while (pos < len && (buf[pos] == ' ' || buf[pos] == '\n' ||
                         buf[pos] == '\r' || buf[pos] == '\t')) {
      ++pos;
    }
    buffer_.set_pos(pos);
    if (pos < len) return true;
    buffer_.set_mark(pos);
    ASSIGN_OR_RETURN(bool more, More());
    if (!more) return false;
  }
}

absl::Status TraceEventCutter::SkipSpaceExpectMore(std::string_view inside) {
  ASSIGN_OR_RETURN(bool more, SkipSpace());
  if (!more) return Truncated(inside);
  return absl::OkStatus();
}

absl::Status TraceEventCutter::ScanValue(bool keep) {
  buffer_.set_mark(buffer_.pos());
  const char first = buffer_.data()[buffer_.pos()];
  const bool scalar = first != '{' && first != '[' && first != '"';
  JsonScanState state;
  while (true) {
    const char* const buf = buffer_.data();
    const char* p = buf + buffer_.pos();
    const char* const end = buf + buffer_.size();
    if (scalar) {
      while (p < end && *p != ',' && *p != ']' && *p != '}' && *p != ' ' &&
             *p != '\n' && *p != '\r' && *p != '\t') {
        ++p;
      }
      if (p < end) {
        buffer_.set_pos(static_cast<size_t>(p - buf));
        return absl::OkStatus();
      }
    } else {
      const char* after = first == '"' ? ScanStringStretch(p, end, state)
                                       : ScanJsonContainer(p, end, state);
      if (after != nullptr) {
        buffer_.set_pos(static_cast<size_t>(after - buf));
        return absl::OkStatus();
      }
      p = end;
    }
    buffer_.set_pos(static_cast<size_t>(p - buf));
    if (!keep) buffer_.set_mark(buffer_.pos());
    ASSIGN_OR_RETURN(bool more, More());
    if (!more) {
      if (scalar) return absl::OkStatus();  // The caller finds what is missing.
      return Truncated(state.in_string ? "a string" : "an object or array");
    }
  }
}

absl::Status TraceEventCutter::Cut() {
  ASSIGN_OR_RETURN(bool any, SkipSpace());
  if (!any) {
    return absl::InvalidArgumentError("bad JSON: the input is empty");
  }
  auto at = [this] { return buffer_.data()[buffer_.pos()]; };
  auto advance = [this] { buffer_.set_pos(buffer_.pos() + 1); };
  auto syntax = [this](std::string_view what) {
    return ChromeSyntaxAt(buffer_.Offset(buffer_.pos()), what);
  };
  if (at() != '{') {
    return absl::InvalidArgumentError(
        "the top level must be an object with \"traceEvents\"");
  }
  advance();
  RETURN_IF_ERROR(SkipSpaceExpectMore("the top-level object"));
  bool first = true;
  while (true) {
    if (first && at() == '}') break;
    first = false;
    if (at() != '"') return syntax("expected a key in the top-level object");
    RETURN_IF_ERROR(ScanValue(/*keep=*/true));
    std::string key(buffer_.data() + buffer_.mark() + 1,
                    buffer_.pos() - buffer_.mark() - 2);
    RETURN_IF_ERROR(SkipSpaceExpectMore("the top-level object"));
    if (at() != ':') return syntax("expected ':' after a key");
    advance();
    RETURN_IF_ERROR(SkipSpaceExpectMore("the top-level object"));
    RETURN_IF_ERROR(ReadTopLevelValue(key));
    RETURN_IF_ERROR(SkipSpaceExpectMore("the top-level object"));
    if (at() == '}') break;
    if (at() != ',')
      return syntax("expected ',' or '}' after a top-level value");
    advance();
    RETURN_IF_ERROR(SkipSpaceExpectMore("the top-level object"));
  }
  advance();
  // Anything but white space after the top-level object is an error.
  ASSIGN_OR_RETURN(bool trailing, SkipSpace());
  if (trailing)
    return syntax(simdjson::error_message(simdjson::TRAILING_CONTENT));
  if (!has_events_) {
    return absl::InvalidArgumentError(
        "not a Chrome trace: no \"traceEvents\" array");
  }
  return absl::OkStatus();
}

absl::Status TraceEventCutter::ReadTopLevelValue(std::string_view key) {
  if (key == "traceEvents") {
    if (buffer_.data()[buffer_.pos()] != '[') {
      return absl::InvalidArgumentError("\"traceEvents\" must be an array");
    }
    return ReadEvents();
  }
  const bool wanted = sink_.WantsTopLevelValue(key);
  RETURN_IF_ERROR(ScanValue(/*keep=*/wanted));
  if (!wanted) return absl::OkStatus();
  return sink_.TopLevelValue(key,
                             std::string_view(buffer_.data() + buffer_.mark(),
                                              buffer_.pos() - buffer_.mark()),
                             buffer_.Offset(buffer_.mark()));
}

absl::Status TraceEventCutter::ReadEvents() {
  absl::Status scan = ScanEvents();
  // Elements before the place the scan stopped come first: their errors
  // win over the scan's.
  if (!block_->spans.empty()) {
    buffer_.set_mark(buffer_.pos());
    Seal();
  }
  absl::Status merged = pipeline_.Finish();
  if (!merged.ok()) return merged;
  return scan;
}

absl::Status TraceEventCutter::ScanEvents() {
  buffer_.set_pos(buffer_.pos() + 1);  // The '['.
  has_events_ = true;
  RETURN_IF_ERROR(SkipSpaceExpectMore("\"traceEvents\""));
  if (buffer_.data()[buffer_.pos()] == ']') {
    buffer_.set_pos(buffer_.pos() + 1);
    return absl::OkStatus();
  }
  const bool streaming = buffer_.streaming();
  for (size_t index = 0;; ++index) {
    if ((index & 1023) == 0) buffer_.ReportProgress(/*last=*/false);
    const char c = buffer_.data()[buffer_.pos()];
    if (c == '{') {
      RETURN_IF_ERROR(ScanValue(/*keep=*/true));
      const size_t begin = buffer_.mark();
      const size_t size = buffer_.pos() - begin;
      block_->spans.push_back(ChromeEventSpan{begin, size, index});
      block_->span_bytes += size;
      // The caller's buffer is cut into blocks by size; a streaming buffer
      // is sealed when full (More).
      if (!streaming && block_->span_bytes >= kChromeBlockBytes) {
        buffer_.set_mark(buffer_.pos());
        Seal();
        RETURN_IF_ERROR(pipeline_.status());
      }
    } else if (c == ',' || c == ']' || c == '}' || c == ':') {
      return ChromeSyntaxAt(buffer_.Offset(buffer_.pos()),
                            "expected a value in \"traceEvents\"");
    } else {
      RETURN_IF_ERROR(ScanValue(/*keep=*/false));
      sink_.NonObjectElement();
    }
    RETURN_IF_ERROR(SkipSpaceExpectMore("\"traceEvents\""));
    RETURN_IF_ERROR(pipeline_.status());
    const char next = buffer_.data()[buffer_.pos()];
    if (next == ']') {
      buffer_.set_pos(buffer_.pos() + 1);
      return absl::OkStatus();
    }
    if (next != ',') {
      return ChromeSyntaxAt(
          buffer_.Offset(buffer_.pos()),
          absl::StrCat("expected ',' or ']' after traceEvents[", index, "]"));
    }
    buffer_.set_pos(buffer_.pos() + 1);
    RETURN_IF_ERROR(SkipSpaceExpectMore("\"traceEvents\""));
  }
}

}  // namespace bubblewatch
