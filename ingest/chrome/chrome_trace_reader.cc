#include "ingest/chrome/chrome_trace_reader.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "ingest/chrome/chrome_event_parser.h"
#include "ingest/chrome/duplicate_event_filter.h"
#include "ingest/chrome/json_container_scan.h"
#include "ingest/chrome/json_token.h"
#include "ingest/chrome/ordered_parallel_map.h"
#include "ingest/trace_io/json_support.h"

namespace bubblewatch {
namespace {

namespace od = simdjson::ondemand;

// Bytes of events per block handed to the parsing threads: big enough that
// handing over costs nothing per event, small enough that the blocks in
// flight add little memory. Streaming, it is also the read buffer's size.
constexpr size_t kBlockBytes = 64 << 10;
// Streaming: a read asks for at least this much room in the buffer.
constexpr size_t kMinReadBytes = 16 << 10;

int ExtraParseThreads(int requested) {
  if (requested >= 0) return requested;
  const unsigned cores = std::thread::hardware_concurrency();
  return cores <= 1 ? 0 : static_cast<int>(std::min(cores - 1, 3u));
}

// Where the reader gets its bytes: a padded buffer it borrows whole, or a
// source it reads in chunks into buffers of its own. buf_[0, len_) are the
// bytes at file offsets [base_, base_ + len_); SIMDJSON_PADDING readable bytes
// follow len_. Scanning stands at pos_; what is still needed starts at
// mark_.
//
// The scan (this thread) cuts "traceEvents" into elements and collects them
// in blocks; blocks are parsed on parse_threads + 1 threads
// (ChromeEventParser) and merged here in file order, so the Trace, its skip
// counts and the first error are those of a reading one event at a time.
// Streaming, a block owns the buffer its elements lie in: when the buffer is
// full, the block takes it and the bytes not yet cut move to a fresh one.
class ChromeTraceReader {
 public:
  ChromeTraceReader(const simdjson::padded_string& json,
                    const ReadProgressFn& progress, int parse_threads)
      : progress_(progress),
        names_(&trace_),
        extra_threads_(ExtraParseThreads(parse_threads)),
        buf_(json.data()),
        len_(json.size()),
        readable_(json.size() + simdjson::SIMDJSON_PADDING),
        eof_(true) {
    Init();
  }

  ChromeTraceReader(TraceByteSource& source, absl::string_view head,
                    const ReadProgressFn& progress, int parse_threads)
      : progress_(progress),
        names_(&trace_),
        extra_threads_(ExtraParseThreads(parse_threads)),
        source_(&source) {
    Init();
    Reserve(std::max(kBlockBytes, head.size()));
    std::memcpy(storage_.get(), head.data(), head.size());
    len_ = head.size();
  }

  absl::StatusOr<Trace> Read();

 private:
  void Init() {
    for (int i = 0; i <= extra_threads_; ++i) {
      parsers_.push_back(std::make_unique<ChromeEventParser>());
    }
    pipeline_ = std::make_unique<OrderedParallelMap<ChromeEventBlock>>(
        extra_threads_, [this](ChromeEventBlock& block, int worker) {
          parsers_[worker]->Parse(block);
        });
    block_ = std::make_unique<ChromeEventBlock>();
  }

  absl::Status ReadEvents();
  absl::Status ScanEvents();
  absl::Status ReadTopLevelValue(std::string_view key);
  absl::Status ReadDistributedInfo(od::value& value);
  absl::Status ReadBaseTime(std::string_view token);
  absl::Status ApplyBaseTime();

  // Blocks. Seal hands the block being filled to the parsing threads
  // (streaming: with the buffer, the bytes from mark_ on moving to a fresh
  // one); Submit queues it and merges the oldest blocks while too many are
  // in flight; Finish seals what is left and merges everything. A merge that
  // meets an error keeps it in merge_status_ and merges nothing after it.
  void Seal();
  void Submit(std::unique_ptr<ChromeEventBlock> block);
  absl::Status Finish();
  void MergeOldest();
  absl::Status Merge(ChromeEventBlock& block);
  void Keep(const ParsedChromeEvent& event, NameId name);
  // The JSON's size: exact in memory or plain, estimated while gunzipping
  // (the bytes so far scaled by the compressed part consumed); >= done.
  uint64_t EstimatedTotalBytes(uint64_t done) const;
  // Makes room in the Trace's event vectors for the block's kept events,
  // growing them to what the whole file will hold by the share of it merged
  // so far: a move or two instead of a doubling every so often, each a copy
  // of every event with both copies in memory for a moment. Reserved pages
  // that are never written cost no memory.
  void GrowFor(const ChromeEventBlock& block);
  uint32_t IdKey(const ChromeIdToken& id);
  std::unique_ptr<char[]> TakeStorage(size_t capacity);
  void Recycle(ChromeEventBlock& block);

  // The buffer.
  void Reserve(size_t capacity);
  // Appends the next chunk, first making room when the buffer is nearly
  // full (the bytes from mark_ on move to the front, of this buffer or of a
  // fresh one when Seal gives this one away); false at the end of the input.
  absl::StatusOr<bool> More();
  // Moves pos_ to the next non-space byte; false at the end of the input.
  absl::StatusOr<bool> SkipSpace();
  // Like SkipSpace, but the end of the input is an error: truncated.
  absl::Status SkipSpaceExpectMore(std::string_view inside);
  // Moves pos_ past the JSON value starting at pos_ (a container or string by
  // its brackets and quotes, escapes honoured; a scalar up to the next
  // delimiter). With `keep`, its text is buf_[mark_, pos_) afterwards.
  absl::Status ScanValue(bool keep);
  uint64_t Offset(size_t i) const { return base_ + i; }
  absl::Status SyntaxAt(uint64_t offset, std::string_view what) const {
    return ChromeSyntaxAt(offset, what);
  }
  absl::Status Truncated(std::string_view inside) const {
    return absl::InvalidArgumentError(absl::StrCat(
        "bad JSON at offset ", Offset(len_), ": the input ends inside ",
        AbslView(inside), " (the input ends early: truncated?)"));
  }

  // Counts a skipped event under the reason made of `parts`, each cut to 64
  // bytes; allocates only the first time a reason is seen.
  void CountSkip(std::initializer_list<std::string_view> parts);
  void ReportProgress(bool last);

  const ReadProgressFn& progress_;
  uint64_t next_progress_ = kChromeProgressStepBytes;
  // For top-level values; events have their parsers in parsers_.
  ChromeJsonDocument top_level_;
  Trace trace_;
  NameInterner names_;
  DuplicateEventFilter duplicates_;
  // Ids for pid/tid strings that are not numbers.
  absl::flat_hash_map<std::string, uint32_t> string_ids_;
  std::optional<int64_t> base_time_ns_;
  int64_t max_start_ns_ = std::numeric_limits<int64_t>::min();
  bool has_events_ = false;

  const int extra_threads_;
  // One parser per parsing thread; declared before the pipeline, whose
  // threads use them, so that it is destroyed (joined) first.
  std::vector<std::unique_ptr<ChromeEventParser>> parsers_;
  std::unique_ptr<OrderedParallelMap<ChromeEventBlock>> pipeline_;
  std::unique_ptr<ChromeEventBlock> block_;  // Being filled by the scan.
  absl::Status merge_status_;
  std::vector<NameId> name_ids_;  // Merge: each event's name id.
  std::vector<std::unique_ptr<char[]>> free_storage_;  // Of kBlockBytes.

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
};

std::unique_ptr<char[]> ChromeTraceReader::TakeStorage(size_t capacity) {
  if (capacity == kBlockBytes && !free_storage_.empty()) {
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

void ChromeTraceReader::Reserve(size_t capacity) {
  std::unique_ptr<char[]> storage = TakeStorage(capacity);
  if (len_ > 0) std::memcpy(storage.get(), buf_, len_);
  if (storage_ != nullptr && capacity_ == kBlockBytes) {
    free_storage_.push_back(std::move(storage_));
  }
  storage_ = std::move(storage);
  capacity_ = capacity;
  buf_ = storage_.get();
  readable_ = capacity_ + simdjson::SIMDJSON_PADDING;
}

absl::StatusOr<bool> ChromeTraceReader::More() {
  if (eof_) return false;
  if (capacity_ - len_ < kMinReadBytes) {
    // Full: the elements cut so far go with their bytes, or, with none in
    // this buffer, the bytes before mark_ are dropped.
    if (!block_->spans.empty()) {
      Seal();
    } else if (mark_ > 0) {
      std::memmove(storage_.get(), storage_.get() + mark_, len_ - mark_);
      base_ += mark_;
      len_ -= mark_;
      pos_ -= mark_;
      mark_ = 0;
    }
    // One element bigger than the buffer: grow it.
    if (capacity_ - len_ < kMinReadBytes) Reserve(capacity_ * 2);
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

void ChromeTraceReader::Seal() {
  std::unique_ptr<ChromeEventBlock> block = std::move(block_);
  block_ = std::make_unique<ChromeEventBlock>();
  block->offset = base_;
  if (source_ == nullptr) {
    // The caller's buffer outlives the read: blocks borrow it.
    block->data = buf_;
    block->readable = readable_;
  } else {
    // The bytes still needed move to a fresh buffer, one byte in: the byte
    // before the next block's first element is then its own, for the
    // bracket that makes its elements one JSON array (ChromeEventParser).
    // mark_ >= 1 here (the block's elements lie before it), so that byte
    // stands for a real one of the file and offsets stay right.
    const size_t rest = len_ - mark_;
    const size_t capacity = std::max(kBlockBytes, rest + 1 + kMinReadBytes);
    std::unique_ptr<char[]> next = TakeStorage(capacity);
    next[0] = ' ';
    std::memcpy(next.get() + 1, buf_ + mark_, rest);
    block->storage = std::move(storage_);
    block->capacity = capacity_;
    block->data = buf_;
    block->readable = readable_;
    storage_ = std::move(next);
    capacity_ = capacity;
    buf_ = storage_.get();
    readable_ = capacity_ + simdjson::SIMDJSON_PADDING;
    base_ += mark_ - 1;
    len_ = rest + 1;
    pos_ -= mark_ - 1;
    mark_ = 1;
  }
  Submit(std::move(block));
}

void ChromeTraceReader::Submit(std::unique_ptr<ChromeEventBlock> block) {
  pipeline_->Push(std::move(block));
  // Bounded memory: at most two blocks more than there are threads.
  while (pipeline_->size() > static_cast<size_t>(extra_threads_) + 2) {
    MergeOldest();
  }
}

void ChromeTraceReader::MergeOldest() {
  std::unique_ptr<ChromeEventBlock> block = pipeline_->PopOldest();
  if (block == nullptr) return;
  if (merge_status_.ok()) merge_status_ = Merge(*block);
  Recycle(*block);
}

absl::Status ChromeTraceReader::Finish() {
  if (!block_->spans.empty()) {
    mark_ = pos_;
    Seal();
  }
  while (pipeline_->size() > 0) MergeOldest();
  return merge_status_;
}

void ChromeTraceReader::Recycle(ChromeEventBlock& block) {
  if (block.storage != nullptr && block.capacity == kBlockBytes &&
      free_storage_.size() < 4) {
    free_storage_.push_back(std::move(block.storage));
  }
}

uint64_t ChromeTraceReader::EstimatedTotalBytes(uint64_t done) const {
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

void ChromeTraceReader::GrowFor(const ChromeEventBlock& block) {
  const ChromeEventSpan& last = block.spans.back();
  const uint64_t done = block.offset + last.begin + last.size;
  const uint64_t total = EstimatedTotalBytes(done);
  // An event is at least ~40 bytes of JSON: no file holds more than this.
  const size_t most = static_cast<size_t>(total / 40);
  auto grow = [&](auto& events, size_t more) {
    const size_t need = events.size() + more;
    if (need <= events.capacity()) return;
    const double projected = static_cast<double>(need) *
                             static_cast<double>(total) /
                             static_cast<double>(done) * 1.25;
    events.reserve(
        std::max(events.capacity() * 2,
                 std::min(most, static_cast<size_t>(projected)) + more));
  };
  grow(trace_.gpu, block.kept_gpu);
  grow(trace_.cpu, block.kept_cpu);
  // The duplicate filter holds every kept event: room for as many.
  duplicates_.Reserve(trace_.gpu.capacity() + trace_.cpu.capacity());
}

absl::Status ChromeTraceReader::Merge(ChromeEventBlock& block) {
  if (!block.spans.empty()) GrowFor(block);
  name_ids_.resize(block.events.size());
  for (size_t i = 0; i < block.events.size(); ++i) {
    const ParsedChromeEvent& event = block.events[i];
    switch (event.outcome) {
      case ParsedChromeEvent::Outcome::kError:
        return *event.error;
      case ParsedChromeEvent::Outcome::kSkip:
        break;  // Counted in block.skips.
      case ParsedChromeEvent::Outcome::kKeep: {
        // Ids in the order names are first kept, as one event at a time
        // would give them: a repeat's name is its first copy's, known.
        const NameId name = event.same_name_as == i
                                ? names_.Intern(AbslView(event.name))
                                : name_ids_[event.same_name_as];
        name_ids_[i] = name;
        // A repeat reads as the same event as its first copy, which was
        // kept (or failed the read): skip it.
        if (duplicates_.IsRepeat(event.hash_low, event.hash_high)) {
          CountSkip({"duplicate event"});
        } else {
          Keep(event, name);
        }
        break;
      }
    }
  }
  for (const auto& [reason, count] : block.skips.counts()) {
    trace_.skipped[reason] += count;
  }
  return absl::OkStatus();
}

void ChromeTraceReader::Keep(const ParsedChromeEvent& event, NameId name) {
  max_start_ns_ = std::max(max_start_ns_, event.start_ns);
  // pid before tid: string ids are numbered in the order first seen.
  const uint32_t pid = IdKey(event.pid);
  const uint32_t tid = IdKey(event.tid);
  if (event.category.gpu) {
    GpuActivity& a = trace_.gpu.emplace_back();
    a.start_ns = event.start_ns;
    a.end_ns = event.end_ns;
    a.correlation = event.correlation;
    a.bytes = event.bytes;
    a.name = name;
    a.device = static_cast<int32_t>(event.has_device ? event.device : pid);
    a.stream = static_cast<int32_t>(event.has_stream ? event.stream : tid);
    a.kind = event.category.gpu_kind;
    a.pageable = event.pageable;
  } else {
    CpuEvent& e = trace_.cpu.emplace_back();
    e.start_ns = event.start_ns;
    e.end_ns = event.end_ns;
    e.correlation = event.correlation;
    e.thread = (static_cast<uint64_t>(pid) << 32) | tid;
    e.name = name;
    e.category = event.category.cpu_category;
  }
}

uint32_t ChromeTraceReader::IdKey(const ChromeIdToken& id) {
  if (!id.present) return 0;
  if (id.numeric) return id.value;
  auto it = string_ids_.find(AbslView(id.text));
  if (it != string_ids_.end()) return it->second;
  uint32_t value = std::numeric_limits<uint32_t>::max() -
                   static_cast<uint32_t>(string_ids_.size());
  string_ids_.emplace(std::string(id.text), value);
  return value;
}

absl::StatusOr<bool> ChromeTraceReader::SkipSpace() {
  while (true) {
    while (pos_ < len_ && (buf_[pos_] == ' ' || buf_[pos_] == '\n' ||
                           buf_[pos_] == '\r' || buf_[pos_] == '\t')) {
      ++pos_;
    }
    if (pos_ < len_) return true;
    mark_ = pos_;
    ASSIGN_OR_RETURN(bool more, More());
    if (!more) return false;
  }
}

absl::Status ChromeTraceReader::SkipSpaceExpectMore(std::string_view inside) {
  ASSIGN_OR_RETURN(bool more, SkipSpace());
  if (!more) return Truncated(inside);
  return absl::OkStatus();
}

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

absl::Status ChromeTraceReader::ScanValue(bool keep) {
  mark_ = pos_;
  const char first = buf_[pos_];
  const bool scalar = first != '{' && first != '[' && first != '"';
  JsonScanState state;
  while (true) {
    const char* p = buf_ + pos_;
    const char* const end = buf_ + len_;
    if (scalar) {
      while (p < end && *p != ',' && *p != ']' && *p != '}' && *p != ' ' &&
             *p != '\n' && *p != '\r' && *p != '\t') {
        ++p;
      }
      if (p < end) {
        pos_ = static_cast<size_t>(p - buf_);
        return absl::OkStatus();
      }
    } else {
      const char* after = first == '"' ? ScanStringStretch(p, end, state)
                                       : ScanJsonContainer(p, end, state);
      if (after != nullptr) {
        pos_ = static_cast<size_t>(after - buf_);
        return absl::OkStatus();
      }
      p = end;
    }
    pos_ = static_cast<size_t>(p - buf_);
    if (!keep) mark_ = pos_;
    ASSIGN_OR_RETURN(bool more, More());
    if (!more) {
      if (scalar) return absl::OkStatus();  // The caller finds what is missing.
      return Truncated(state.in_string ? "a string" : "an object or array");
    }
  }
}

absl::StatusOr<Trace> ChromeTraceReader::Read() {
  ASSIGN_OR_RETURN(bool any, SkipSpace());
  if (!any) {
    return absl::InvalidArgumentError("bad JSON: the input is empty");
  }
  if (buf_[pos_] != '{') {
    return absl::InvalidArgumentError(
        "the top level must be an object with \"traceEvents\"");
  }
  ++pos_;
  RETURN_IF_ERROR(SkipSpaceExpectMore("the top-level object"));
  bool first = true;
  while (true) {
    if (first && buf_[pos_] == '}') break;
    first = false;
    if (buf_[pos_] != '"') {
      return SyntaxAt(Offset(pos_), "expected a key in the top-level object");
    }
    RETURN_IF_ERROR(ScanValue(/*keep=*/true));
    std::string key(buf_ + mark_ + 1, pos_ - mark_ - 2);
    RETURN_IF_ERROR(SkipSpaceExpectMore("the top-level object"));
    if (buf_[pos_] != ':') {
      return SyntaxAt(Offset(pos_), "expected ':' after a key");
    }
    ++pos_;
    RETURN_IF_ERROR(SkipSpaceExpectMore("the top-level object"));
    RETURN_IF_ERROR(ReadTopLevelValue(key));
    RETURN_IF_ERROR(SkipSpaceExpectMore("the top-level object"));
    if (buf_[pos_] == '}') break;
    if (buf_[pos_] != ',') {
      return SyntaxAt(Offset(pos_),
                      "expected ',' or '}' after a top-level value");
    }
    ++pos_;
    RETURN_IF_ERROR(SkipSpaceExpectMore("the top-level object"));
  }
  ++pos_;
  // Anything but white space after the top-level object is an error.
  ASSIGN_OR_RETURN(bool trailing, SkipSpace());
  if (trailing) {
    return SyntaxAt(Offset(pos_),
                    simdjson::error_message(simdjson::TRAILING_CONTENT));
  }
  if (!has_events_) {
    return absl::InvalidArgumentError(
        "not a Chrome trace: no \"traceEvents\" array");
  }
  RETURN_IF_ERROR(ApplyBaseTime());
  ReportProgress(/*last=*/true);
  return std::move(trace_);
}

absl::Status ChromeTraceReader::ReadTopLevelValue(std::string_view key) {
  if (key == "traceEvents") {
    if (buf_[pos_] != '[') {
      return absl::InvalidArgumentError("\"traceEvents\" must be an array");
    }
    return ReadEvents();
  }
  bool wanted = key == "distributedInfo" || key == "baseTimeNanoseconds" ||
                key == "host_name" || key == "bubblewatch_job";
  RETURN_IF_ERROR(ScanValue(/*keep=*/wanted));
  if (!wanted) return absl::OkStatus();
  std::string_view text(buf_ + mark_, pos_ - mark_);
  if (key == "baseTimeNanoseconds") return ReadBaseTime(text);
  // Small values: parsed from a padded copy of their own.
  simdjson::padded_string copy(text);
  RETURN_IF_ERROR(top_level_.Iterate(copy.data(), copy.size(),
                                     copy.size() + simdjson::SIMDJSON_PADDING,
                                     Offset(mark_)));
  if (key == "distributedInfo") {
    if (text.front() != '{')
      return absl::OkStatus();  // Not an object: no info.
    od::value value;
    if (auto err = top_level_.doc().get_value().get(value))
      return top_level_.Syntax(err);
    return ReadDistributedInfo(value);
  }
  std::string_view text_value;
  if (top_level_.doc().get_string().get(text_value) == simdjson::SUCCESS) {
    // "bubblewatch_job" is written by bubblewatch_torch (torch.profiler's
    // add_metadata), so the watcher can tell the job without the file name.
    (key == "host_name" ? trace_.host : trace_.job) = std::string(text_value);
  }
  return absl::OkStatus();
}

absl::Status ChromeTraceReader::ReadEvents() {
  absl::Status scan = ScanEvents();
  // Elements before the place the scan stopped come first: their errors
  // win over the scan's.
  absl::Status merged = Finish();
  if (!merged.ok()) return merged;
  return scan;
}

absl::Status ChromeTraceReader::ScanEvents() {
  ++pos_;  // The '['.
  has_events_ = true;
  RETURN_IF_ERROR(SkipSpaceExpectMore("\"traceEvents\""));
  if (buf_[pos_] == ']') {
    ++pos_;
    return absl::OkStatus();
  }
  for (size_t index = 0;; ++index) {
    if ((index & 1023) == 0) ReportProgress(/*last=*/false);
    char c = buf_[pos_];
    if (c == '{') {
      RETURN_IF_ERROR(ScanValue(/*keep=*/true));
      block_->spans.push_back(ChromeEventSpan{mark_, pos_ - mark_, index});
      block_->span_bytes += pos_ - mark_;
      // The caller's buffer is cut into blocks by size; a streaming buffer
      // is sealed when full (More).
      if (source_ == nullptr && block_->span_bytes >= kBlockBytes) {
        mark_ = pos_;
        Seal();
        RETURN_IF_ERROR(merge_status_);
      }
    } else if (c == ',' || c == ']' || c == '}' || c == ':') {
      return SyntaxAt(Offset(pos_), "expected a value in \"traceEvents\"");
    } else {
      RETURN_IF_ERROR(ScanValue(/*keep=*/false));
      CountSkip({"non-object event"});
    }
    RETURN_IF_ERROR(SkipSpaceExpectMore("\"traceEvents\""));
    RETURN_IF_ERROR(merge_status_);
    if (buf_[pos_] == ']') {
      ++pos_;
      return absl::OkStatus();
    }
    if (buf_[pos_] != ',') {
      return SyntaxAt(
          Offset(pos_),
          absl::StrCat("expected ',' or ']' after traceEvents[", index, "]"));
    }
    ++pos_;
    RETURN_IF_ERROR(SkipSpaceExpectMore("\"traceEvents\""));
  }
}

absl::Status ChromeTraceReader::ReadDistributedInfo(od::value& value) {
  od::object info;
  if (auto err = value.get_object().get(info)) {
    if (err == simdjson::INCORRECT_TYPE) return absl::OkStatus();
    return top_level_.Syntax(err);
  }
  for (auto field_result : info) {
    od::field field;
    if (auto err = std::move(field_result).get(field))
      return top_level_.Syntax(err);
    od::raw_json_string key = field.key();
    int64_t number = 0;
    if (key == "rank") {
      if (field.value().get_int64().get(number) == simdjson::SUCCESS) {
        trace_.rank = static_cast<int32_t>(number);
      }
    } else if (key == "world_size") {
      if (field.value().get_int64().get(number) == simdjson::SUCCESS) {
        trace_.world_size = static_cast<int32_t>(number);
      }
    }
  }
  return absl::OkStatus();
}

absl::Status ChromeTraceReader::ReadBaseTime(std::string_view token) {
  base_time_ns_ = TokenInteger(token);
  if (!base_time_ns_) {
    return absl::InvalidArgumentError(
        absl::StrCat("baseTimeNanoseconds is not an integer: ",
                     AbslView(token.substr(0, 40))));
  }
  return absl::OkStatus();
}

absl::Status ChromeTraceReader::ApplyBaseTime() {
  if (!base_time_ns_ || *base_time_ns_ == 0) return absl::OkStatus();
  int64_t base = *base_time_ns_;
  // Epoch-absolute ts already start at or after the base: leave them.
  if (trace_.gpu.empty() && trace_.cpu.empty()) return absl::OkStatus();
  if (max_start_ns_ >= base) return absl::OkStatus();
  auto shift = [base](int64_t* t) {
    return __builtin_add_overflow(*t, base, t);
  };
  bool overflow = false;
  for (GpuActivity& a : trace_.gpu) {
    overflow |= shift(&a.start_ns) | shift(&a.end_ns);
  }
  for (CpuEvent& e : trace_.cpu) {
    overflow |= shift(&e.start_ns) | shift(&e.end_ns);
  }
  if (overflow) {
    return absl::InvalidArgumentError(
        absl::StrCat("ts + baseTimeNanoseconds ", base,
                     " does not fit in 64-bit nanoseconds"));
  }
  return absl::OkStatus();
}

void ChromeTraceReader::CountSkip(
    std::initializer_list<std::string_view> parts) {
  char buffer[512];
  ++trace_.skipped[AbslView(ComposeSkipReason(parts, buffer))];
}

void ChromeTraceReader::ReportProgress(bool last) {
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

}  // namespace

absl::StatusOr<Trace> ReadChromeTrace(const simdjson::padded_string& json,
                                      const ReadProgressFn& progress,
                                      int parse_threads) {
  ChromeTraceReader reader(json, progress, parse_threads);
  return reader.Read();
}

absl::StatusOr<Trace> ReadChromeTrace(TraceByteSource& source,
                                      absl::string_view head,
                                      const ReadProgressFn& progress,
                                      int parse_threads) {
  ChromeTraceReader reader(source, head, progress, parse_threads);
  return reader.Read();
}

}  // namespace bubblewatch
