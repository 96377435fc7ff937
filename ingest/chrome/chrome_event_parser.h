// The part of reading a Chrome trace that needs no state of the whole file:
// one "traceEvents" element's text in, what it is out (a GPU activity or CPU
// event with its times converted and checked, a skip with its reason, or an
// error, and a collective kernel's args). TraceEventCutter cuts the array
// into blocks of elements, BlockPipeline parses blocks with this on several
// threads, and TraceAssembler merges the results in file order (duplicates,
// name ids, string pid/tid ids, skip counts, the first error). Which events
// are kept and the error messages are those of chrome_trace_reader.h.
#ifndef BUBBLEWATCH_INGEST_CHROME_CHROME_EVENT_PARSER_H_
#define BUBBLEWATCH_INGEST_CHROME_CHROME_EVENT_PARSER_H_

#include <cstddef>
#include <cstdint>
#include <deque>
#include <initializer_list>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "ingest/chrome/kineto_category.h"
#include "simdjson.h"

namespace bubblewatch {

// A pid or tid as written: a number (or a string holding one) is its value;
// any other string is kept as text, for the reader to give it an id.
struct ChromeIdToken {
  bool present = false;
  bool numeric = false;
  uint32_t value = 0;     // numeric: the number, cut to 32 bits.
  std::string_view text;  // Not numeric: the string's content.
};

// Skipped elements of a block by reason (the reader's Trace::skipped
// reasons), counted where they are parsed: a block has one to three
// reasons, so a short list beats a map.
class SkipTally {
 public:
  // Counts one skip under the reason made of `parts`, each cut to 64 bytes.
  void Count(std::initializer_list<std::string_view> parts);
  const std::vector<std::pair<std::string, int64_t>>& counts() const {
    return counts_;
  }
  void Clear() { counts_.clear(); }

 private:
  std::vector<std::pair<std::string, int64_t>> counts_;
};

// The reason made of `parts`, each cut to 64 bytes, in `buffer`.
std::string_view ComposeSkipReason(
    std::initializer_list<std::string_view> parts, char (&buffer)[512]);

// What a collective (NCCL/RCCL) kernel's args say, as parsed
// (CollectiveKernel's fields, docs/semantics.md#collectives). Views point
// into the block's bytes or strings; a null view or -1 is absent. `bad`:
// bits (1 << CollectiveArg) of args present with the wrong type, left absent.
struct ParsedCollective {
  // The args read, in the order of their skip reasons' names.
  enum Arg : uint8_t {
    kCollectiveName,
    kProcessGroupName,
    kProcessGroupRanks,
    kDtype,
    kGroupSize,
    kSeq,
    kInMsgNelems,
    kOutMsgNelems,
    kPeer,  // "Dst Rank" (send) or "Src Rank" (recv).
    kNumArgs,
  };
  std::string_view collective;
  std::string_view process_group;
  std::string_view group_ranks;
  std::string_view dtype;
  int64_t seq = -1;
  int64_t in_elements = -1;
  int64_t out_elements = -1;
  int32_t group_size = -1;
  int32_t peer = -1;
  uint16_t bad = 0;
};

// The arg's key as written in Kineto's args ("Seq" for kSeq).
std::string_view CollectiveArgKey(ParsedCollective::Arg arg);

// One element as parsed. Views point into the block's bytes or strings.
struct ParsedChromeEvent {
  static constexpr uint32_t kNoCollective = 0xFFFFFFFFu;
  // kSkip: counted in the block's skips.
  enum class Outcome : uint8_t { kKeep, kSkip, kError };
  Outcome outcome = Outcome::kSkip;
  KinetoCategory category;
  bool pageable = false;
  bool has_device = false;
  bool has_stream = false;
  int64_t device = 0;
  int64_t stream = 0;
  int64_t start_ns = 0;
  int64_t end_ns = 0;
  uint64_t correlation = 0;
  uint64_t bytes = 0;
  // kKeep: XXH3-128 of the element's text, for the duplicate filter.
  uint64_t hash_low = 0;
  uint64_t hash_high = 0;
  std::string_view name;  // kKeep: the name, unescaped.
  // kKeep: the block's first kept event with this name (this one's index if
  // it is the first), so a merge looks each name up once per block.
  uint32_t same_name_as = 0;
  ChromeIdToken pid;
  ChromeIdToken tid;
  const absl::Status* error = nullptr;  // kError: the read's error.
  // kKeep, a kernel whose name IsCollectiveKernelName: its index in the
  // block's `collectives`; else kNoCollective.
  uint32_t collective = kNoCollective;
};

// Where an element lies in its block: data + begin, `size` bytes, the
// element's index in "traceEvents".
struct ChromeEventSpan {
  size_t begin = 0;
  size_t size = 0;
  size_t index = 0;
};

// A run of consecutive "traceEvents" elements and, once parsed, what each
// is. The bytes are the reader's: owned here (`storage`, when streaming) or
// borrowed from the caller's buffer; `readable` bytes are readable from
// `data` (simdjson's padding included).
struct ChromeEventBlock {
  std::unique_ptr<char[]> storage;
  size_t capacity = 0;  // storage holds capacity + SIMDJSON_PADDING bytes.
  const char* data = nullptr;
  size_t readable = 0;
  uint64_t offset = 0;  // File offset of data[0] (uncompressed bytes).
  size_t span_bytes = 0;
  std::vector<ChromeEventSpan> spans;
  std::vector<ParsedChromeEvent> events;  // One per span, once parsed.
  size_t kept_gpu = 0;                    // Events kKeep, by kind.
  size_t kept_cpu = 0;
  std::vector<ParsedCollective> collectives;  // Of collective kernels.
  std::deque<std::string> strings;  // Unescaped names and collective args.
  std::deque<absl::Status> errors;
  SkipTally skips;  // Of its skipped elements (read only if none failed).
};

// A simdjson On-Demand document over one piece of the file (an element, or
// a top-level value) whose syntax errors name their file offset.
class ChromeJsonDocument {
 public:
  // Starts the document on [begin, begin + size), with `readable` bytes
  // readable from begin (simdjson's padding); `offset` is begin's offset in
  // the file.
  absl::Status Iterate(const char* begin, size_t size, size_t readable,
                       uint64_t offset);
  // "bad JSON at offset K: ..." for `error` met in the document, K where
  // simdjson stopped (its end if simdjson cannot say).
  absl::Status Syntax(simdjson::error_code error);
  simdjson::ondemand::document& doc() { return doc_; }

 private:
  simdjson::ondemand::parser parser_;
  simdjson::ondemand::document doc_;
  const char* begin_ = nullptr;
  size_t size_ = 0;
  uint64_t offset_ = 0;
};

// Parses blocks; one per thread (it holds a simdjson parser).
class ChromeEventParser {
 public:
  // Fills block.events, one per span.
  void Parse(ChromeEventBlock& block);

 private:
  struct Fields;
  // The block's elements as one JSON array: one simdjson document instead
  // of one per element. False when simdjson rejects anything in it (or
  // disagrees with the scan's cut): then nothing of it is kept.
  bool ParseWhole(ChromeEventBlock& block);
  // ParseWhole on `text`: '[' + the `size` bytes of the elements + ']'.
  bool ParseArray(ChromeEventBlock& block, const char* text, size_t size,
                  size_t readable);
  // One element as a document of its own, errors with their offsets.
  void ParseOne(ChromeEventBlock& block, const ChromeEventSpan& span,
                ParsedChromeEvent& out);
  // What the fields make of the element: kept, skipped or an error.
  void Finish(ChromeEventBlock& block, const ChromeEventSpan& span,
              const Fields& f, ParsedChromeEvent& out);
  absl::Status ReadFields(simdjson::ondemand::object& object,
                          const ChromeEventSpan& span, Fields& f);
  absl::Status ReadArgs(simdjson::ondemand::value& value, Fields& f);
  absl::Status ToEvent(const Fields& f, const KinetoCategory& category,
                       size_t index, ParsedChromeEvent& out);
  // A collective kernel's args into a new entry of block.collectives.
  void ReadCollective(ChromeEventBlock& block, const Fields& f,
                      ParsedChromeEvent& out);

  ChromeJsonDocument json_;
  absl::flat_hash_map<std::string_view, uint32_t> first_of_name_;
  std::unique_ptr<char[]> scratch_;  // ParseWhole's bracketed copy.
  size_t scratch_capacity_ = 0;
};

// An element's index as the reader's messages write it: "traceEvents[K]: ".
absl::Status ChromeEventError(size_t index, std::string_view what);

// "bad JSON at offset K: WHAT".
absl::Status ChromeSyntaxAt(uint64_t offset, std::string_view what);

}  // namespace bubblewatch

#endif  // BUBBLEWATCH_INGEST_CHROME_CHROME_EVENT_PARSER_H_
