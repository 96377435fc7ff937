#include "ingest/chrome/chrome_event_parser.h"

#include <cstring>
#include <limits>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "ingest/chrome/json_token.h"
#include "ingest/trace_io/json_support.h"
#include "schemas/trace.h"

#define XXH_INLINE_ALL
#include <xxhash.h>

namespace bubblewatch {

namespace od = simdjson::ondemand;

std::string_view CollectiveArgKey(ParsedCollective::Arg arg) {
  static constexpr std::string_view kKeys[] = {
      "Collective name", "Process Group Name", "Process Group Ranks",
      "dtype",           "Group size",         "Seq",
      "In msg nelems",   "Out msg nelems",     "Dst Rank"};
  return arg < ParsedCollective::kNumArgs ? kKeys[arg] : "";
}

absl::Status ChromeEventError(size_t index, std::string_view what) {
  return absl::InvalidArgumentError(
      absl::StrCat("traceEvents[", index, "]: ", AbslView(what)));
}

absl::Status ChromeSyntaxAt(uint64_t offset, std::string_view what) {
  return absl::InvalidArgumentError(
      absl::StrCat("bad JSON at offset ", offset, ": ", AbslView(what)));
}

// What one element says, as token text pointing into the JSON (absent
// fields have a null data()); args are read while iterating since they
// cannot be revisited.
struct ChromeEventParser::Fields {
  std::string_view ph, cat, name, ts, dur, pid, tid;
  bool name_is_string = false;
  bool name_unescaped = false;  // name is in the parser's string buffer.
  std::optional<int64_t> device, stream;
  bool device_bad = false, stream_bad = false;
  uint64_t correlation = 0;
  uint64_t bytes = 0;
  // Collective args' token text, by ParsedCollective::Arg, and "seq" (the
  // spelling before "Seq"); read into a ParsedCollective only for a
  // collective kernel. A string arg with escapes is unescaped into the
  // parser's buffer at once (its bit set in coll_unescaped): the value
  // cannot be revisited.
  std::string_view coll[ParsedCollective::kNumArgs];
  std::string_view seq_lower;
  uint16_t coll_unescaped = 0;
  uint16_t coll_bad = 0;  // Strings simdjson could not unescape.
};

namespace {

ChromeIdToken IdToken(std::string_view token) {
  ChromeIdToken id;
  if (token.data() == nullptr) return id;
  id.present = true;
  if (std::optional<int64_t> number = TokenInteger(token)) {
    id.numeric = true;
    id.value = static_cast<uint32_t>(*number);
  } else {
    id.text = StringTokenContent(token).value_or(token);
  }
  return id;
}

absl::StatusOr<int64_t> Micros(std::string_view token, std::string_view field,
                               size_t index) {
  absl::StatusOr<int64_t> ns = TokenMicrosToNanos(token);
  if (!ns.ok()) {
    return ChromeEventError(index, absl::StrCat("\"", AbslView(field),
                                                "\": ", ns.status().message()));
  }
  return *ns;
}

// Which of the keys the reader wants `key` is, by its raw bytes (up to the
// closing quote, escapes as written: what raw_json_string's == compares),
// without a memcmp per candidate: elements have ten keys and more, and
// every one is looked at.
enum class EventKey { kOther, kPh, kCat, kName, kPid, kTid, kTs, kDur, kArgs };
EventKey KeyOf(const char* k) {
  switch (k[0]) {
    case 'p':
      if (k[1] == 'h' && k[2] == '"') return EventKey::kPh;
      if (k[1] == 'i' && k[2] == 'd' && k[3] == '"') return EventKey::kPid;
      break;
    case 'c':
      if (k[1] == 'a' && k[2] == 't' && k[3] == '"') return EventKey::kCat;
      break;
    case 'n':
      if (k[1] == 'a' && k[2] == 'm' && k[3] == 'e' && k[4] == '"') {
        return EventKey::kName;
      }
      break;
    case 't':
      if (k[1] == 's' && k[2] == '"') return EventKey::kTs;
      if (k[1] == 'i' && k[2] == 'd' && k[3] == '"') return EventKey::kTid;
      break;
    case 'd':
      if (k[1] == 'u' && k[2] == 'r' && k[3] == '"') return EventKey::kDur;
      break;
    case 'a':
      if (k[1] == 'r' && k[2] == 'g' && k[3] == 's' && k[4] == '"') {
        return EventKey::kArgs;
      }
      break;
  }
  return EventKey::kOther;
}

enum class ArgKey {
  kOther,
  kDevice,
  kStream,
  kCorrelation,
  kBytes,
  kSeqLower,
  // kCollective + ParsedCollective::Arg.
  kCollective,
};
constexpr int kCollectiveArgKey = static_cast<int>(ArgKey::kCollective);
ArgKey CollectiveKey(ParsedCollective::Arg arg) {
  return static_cast<ArgKey>(kCollectiveArgKey + arg);
}
// Which arg `k` is. Kernel args have a dozen keys and more, every one looked
// at: the first byte picks at most two candidates.
ArgKey ArgKeyOf(const char* k) {
  auto is = [k](std::string_view want) {
    for (size_t i = 0; i < want.size(); ++i) {
      if (k[i] != want[i]) return false;
    }
    return k[want.size()] == '"';
  };
  switch (k[0]) {
    case 'd':
      if (is("device")) return ArgKey::kDevice;
      if (is("dtype")) return CollectiveKey(ParsedCollective::kDtype);
      break;
    case 's':
      if (is("stream")) return ArgKey::kStream;
      if (is("seq")) return ArgKey::kSeqLower;
      break;
    case 'c':
      if (is("correlation")) return ArgKey::kCorrelation;
      break;
    case 'b':
      if (is("bytes")) return ArgKey::kBytes;
      break;
    case 'C':
      if (is("Collective name")) {
        return CollectiveKey(ParsedCollective::kCollectiveName);
      }
      break;
    case 'P':
      if (is("Process Group Name")) {
        return CollectiveKey(ParsedCollective::kProcessGroupName);
      }
      if (is("Process Group Ranks")) {
        return CollectiveKey(ParsedCollective::kProcessGroupRanks);
      }
      break;
    case 'G':
      if (is("Group size")) return CollectiveKey(ParsedCollective::kGroupSize);
      break;
    case 'S':
      if (is("Seq")) return CollectiveKey(ParsedCollective::kSeq);
      // A recv's peer; a send's is "Dst Rank". One kernel is one of them.
      if (is("Src Rank")) return CollectiveKey(ParsedCollective::kPeer);
      break;
    case 'D':
      if (is("Dst Rank")) return CollectiveKey(ParsedCollective::kPeer);
      break;
    case 'I':
      if (is("In msg nelems")) {
        return CollectiveKey(ParsedCollective::kInMsgNelems);
      }
      break;
    case 'O':
      if (is("Out msg nelems")) {
        return CollectiveKey(ParsedCollective::kOutMsgNelems);
      }
      break;
  }
  return ArgKey::kOther;
}

// A collective's string arg from its token: absent (null view) when absent
// or JSON null; false when of another type.
bool CollectiveString(std::string_view token, std::string_view& out) {
  if (token.data() == nullptr || token == "null") return true;
  std::optional<std::string_view> content = StringTokenContent(token);
  if (!content) return false;
  out = *content;
  return true;
}

// A collective's count arg from its token: a JSON integer in [0, most];
// absent (-1) when absent or JSON null; false otherwise.
template <typename Int>
bool CollectiveCount(std::string_view token, int64_t most, Int& out) {
  if (token.data() == nullptr || token == "null") return true;
  if (token.front() == '"') return false;  // A string, even of digits.
  std::optional<int64_t> value = TokenInteger(token);
  if (!value || *value < 0 || *value > most) return false;
  out = static_cast<Int>(*value);
  return true;
}

}  // namespace

std::string_view ComposeSkipReason(
    std::initializer_list<std::string_view> parts, char (&buffer)[512]) {
  size_t size = 0;
  for (std::string_view part : parts) {
    part = part.substr(0, 64);
    if (part.empty()) continue;  // Maybe a null view: no memcpy from it.
    std::memcpy(buffer + size, part.data(), part.size());
    size += part.size();
  }
  return std::string_view(buffer, size);
}

void SkipTally::Count(std::initializer_list<std::string_view> parts) {
  char buffer[512];
  const std::string_view reason = ComposeSkipReason(parts, buffer);
  // Newest first: skips come in runs of one reason.
  for (auto it = counts_.rbegin(); it != counts_.rend(); ++it) {
    if (it->first == reason) {
      ++it->second;
      return;
    }
  }
  counts_.emplace_back(std::string(reason), 1);
}

void ChromeEventParser::Parse(ChromeEventBlock& block) {
  block.events.assign(block.spans.size(), ParsedChromeEvent{});
  if (!ParseWhole(block)) {
    // Something simdjson rejects: element by element, which says exactly
    // where (and which elements before it are fine).
    block.events.assign(block.spans.size(), ParsedChromeEvent{});
    block.collectives.clear();
    block.strings.clear();
    block.errors.clear();
    block.skips.Clear();
    for (size_t i = 0; i < block.spans.size(); ++i) {
      ParseOne(block, block.spans[i], block.events[i]);
    }
  }
  first_of_name_.clear();
  for (size_t i = 0; i < block.events.size(); ++i) {
    ParsedChromeEvent& event = block.events[i];
    if (event.outcome == ParsedChromeEvent::Outcome::kKeep) {
      event.same_name_as =
          first_of_name_.try_emplace(event.name, static_cast<uint32_t>(i))
              .first->second;
      ++(event.category.gpu ? block.kept_gpu : block.kept_cpu);
    }
  }
}

bool ChromeEventParser::ParseWhole(ChromeEventBlock& block) {
  if (block.spans.size() < 2) return false;  // Nothing to gain.
  const size_t first = block.spans.front().begin;
  const size_t size =
      block.spans.back().begin + block.spans.back().size - first;
  // The block's text from its first element to its last, in brackets: one
  // JSON array (what lies between elements is what the scan accepted between
  // elements of "traceEvents": commas, white space, non-object elements).
  // A block that owns its bytes gets the brackets in place, on the bytes
  // around its elements (separators the scan is done with); a borrowed
  // buffer is copied.
  if (block.storage != nullptr && first >= 1) {
    char* text = block.storage.get() + first - 1;
    // Put back after: simdjson may look past a malformed element's end, so
    // an element parsed alone (the fallback) must see the file's bytes.
    const char before = text[0];
    const char after = text[size + 1];
    text[0] = '[';
    text[size + 1] = ']';
    const bool whole =
        ParseArray(block, text, size, block.readable - (first - 1));
    text[0] = before;
    text[size + 1] = after;
    return whole;
  }
  const size_t needed = size + 2 + simdjson::SIMDJSON_PADDING;
  if (scratch_capacity_ < needed) {
    scratch_ = std::make_unique<char[]>(needed);
    scratch_capacity_ = needed;
  }
  char* text = scratch_.get();
  text[0] = '[';
  std::memcpy(text + 1, block.data + first, size);
  text[size + 1] = ']';
  std::memset(text + size + 2, ' ', simdjson::SIMDJSON_PADDING);
  return ParseArray(block, text, size, needed);
}

bool ChromeEventParser::ParseArray(ChromeEventBlock& block, const char* text,
                                   size_t size, size_t readable) {
  const size_t first = block.spans.front().begin;
  if (!json_.Iterate(text, size + 2, readable, block.offset + first - 1).ok()) {
    return false;
  }
  od::array elements;
  if (json_.doc().get_array().get(elements) != simdjson::SUCCESS) {
    return false;
  }
  size_t k = 0;
  for (auto element_result : elements) {
    od::value element;
    if (std::move(element_result).get(element) != simdjson::SUCCESS) {
      return false;
    }
    od::json_type type;
    if (element.type().get(type) != simdjson::SUCCESS) return false;
    if (type != od::json_type::object) continue;  // Counted by the scan.
    if (k == block.spans.size()) return false;
    const ChromeEventSpan& span = block.spans[k];
    // The element must be the span the scan cut, or the two disagree on the
    // text (only possible for input simdjson rejects somewhere).
    if (element.raw_json_token().data() != text + 1 + (span.begin - first)) {
      return false;
    }
    od::object object;
    if (element.get_object().get(object) != simdjson::SUCCESS) return false;
    Fields f;
    if (!ReadFields(object, span, f).ok()) return false;
    // Token text points into the copy: the same bytes of the block.
    const char* const copy = text + 1;
    const char* const original = block.data + first;
    auto rebase = [&](std::string_view& token) {
      if (token.data() != nullptr) {
        token =
            std::string_view(original + (token.data() - copy), token.size());
      }
    };
    for (std::string_view* token :
         {&f.ph, &f.cat, &f.ts, &f.dur, &f.pid, &f.tid}) {
      rebase(*token);
    }
    if (!f.name_unescaped) rebase(f.name);
    for (int a = 0; a < ParsedCollective::kNumArgs; ++a) {
      if ((f.coll_unescaped & (1u << a)) == 0) rebase(f.coll[a]);
    }
    rebase(f.seq_lower);
    Finish(block, span, f, block.events[k]);
    ++k;
  }
  return k == block.spans.size();
}

void ChromeEventParser::ParseOne(ChromeEventBlock& block,
                                 const ChromeEventSpan& span,
                                 ParsedChromeEvent& out) {
  Fields f;
  absl::Status status =
      json_.Iterate(block.data + span.begin, span.size,
                    block.readable - span.begin, block.offset + span.begin);
  if (status.ok()) {
    od::object object;
    if (auto err = json_.doc().get_object().get(object)) {
      status = json_.Syntax(err);
    } else {
      status = ReadFields(object, span, f);
    }
  }
  if (!status.ok()) {
    out.outcome = ParsedChromeEvent::Outcome::kError;
    out.error = &block.errors.emplace_back(std::move(status));
    return;
  }
  Finish(block, span, f, out);
}

void ChromeEventParser::Finish(ChromeEventBlock& block,
                               const ChromeEventSpan& span, const Fields& f,
                               ParsedChromeEvent& out) {
  std::string_view ph = StringTokenContent(f.ph).value_or(f.ph);
  out.outcome = ParsedChromeEvent::Outcome::kSkip;
  if (f.cat.data() == nullptr) {
    if (ph == "X") {
      block.skips.Count({"complete event without category"});
    } else {
      block.skips.Count({"phase '", ph, "'"});
    }
    return;
  }
  std::string_view cat = StringTokenContent(f.cat).value_or(f.cat);
  std::optional<KinetoCategory> category = ClassifyKinetoCategory(cat);
  if (!category) {
    block.skips.Count({"category '", cat, "'"});
    return;
  }
  if (ph != "X") {
    block.skips.Count({"phase '", ph, "' in category '", cat, "'"});
    return;
  }
  absl::Status status = ToEvent(f, *category, span.index, out);
  if (!status.ok()) {
    out.outcome = ParsedChromeEvent::Outcome::kError;
    out.error = &block.errors.emplace_back(std::move(status));
    return;
  }
  // The element's whole text identifies it for the duplicate filter.
  XXH128_hash_t h = XXH3_128bits(block.data + span.begin, span.size);
  out.hash_low = h.low64;
  out.hash_high = h.high64;
  if (out.category.gpu && out.category.gpu_kind == GpuActivityKind::kKernel &&
      IsCollectiveKernelName(AbslView(out.name))) {
    ReadCollective(block, f, out);
  }
  if (f.name_unescaped) {
    // Unescaped by simdjson into its own buffer, which the next document
    // reuses: the block keeps a copy.
    out.name = block.strings.emplace_back(out.name);
  }
}

void ChromeEventParser::ReadCollective(ChromeEventBlock& block, const Fields& f,
                                       ParsedChromeEvent& out) {
  ParsedCollective& c = block.collectives.emplace_back();
  out.collective = static_cast<uint32_t>(block.collectives.size() - 1);
  c.bad = f.coll_bad;
  auto bad = [&c](ParsedCollective::Arg arg) {
    c.bad |= static_cast<uint16_t>(1u << arg);
  };
  std::string_view* strings[] = {&c.collective, &c.process_group,
                                 &c.group_ranks, &c.dtype};
  for (int a = 0; a <= ParsedCollective::kDtype; ++a) {
    const auto arg = static_cast<ParsedCollective::Arg>(a);
    if ((f.coll_unescaped & (1u << a)) != 0) {
      // In the parser's buffer, which the next document reuses.
      *strings[a] = block.strings.emplace_back(f.coll[a]);
    } else if (!CollectiveString(f.coll[a], *strings[a])) {
      bad(arg);
    }
  }
  constexpr int64_t kMost = std::numeric_limits<int64_t>::max();
  if (!CollectiveCount(f.coll[ParsedCollective::kGroupSize],
                       std::numeric_limits<int32_t>::max(), c.group_size)) {
    bad(ParsedCollective::kGroupSize);
  }
  // "Seq" (PyTorch >= 2.12), else the older "seq".
  const bool has_seq = f.coll[ParsedCollective::kSeq].data() != nullptr;
  if (!CollectiveCount(has_seq ? f.coll[ParsedCollective::kSeq] : f.seq_lower,
                       kMost, c.seq)) {
    bad(ParsedCollective::kSeq);
  }
  if (!CollectiveCount(f.coll[ParsedCollective::kInMsgNelems], kMost,
                       c.in_elements)) {
    bad(ParsedCollective::kInMsgNelems);
  }
  if (!CollectiveCount(f.coll[ParsedCollective::kOutMsgNelems], kMost,
                       c.out_elements)) {
    bad(ParsedCollective::kOutMsgNelems);
  }
  if (!CollectiveCount(f.coll[ParsedCollective::kPeer],
                       std::numeric_limits<int32_t>::max(), c.peer)) {
    bad(ParsedCollective::kPeer);
  }
}

absl::Status ChromeJsonDocument::Iterate(const char* begin, size_t size,
                                         size_t readable, uint64_t offset) {
  begin_ = begin;
  size_ = size;
  offset_ = offset;
  if (auto err = parser_.iterate(begin, size, readable).get(doc_)) {
    return ChromeSyntaxAt(offset, simdjson::error_message(err));
  }
  return absl::OkStatus();
}

absl::Status ChromeJsonDocument::Syntax(simdjson::error_code error) {
  uint64_t offset = offset_ + size_;
  const char* location = nullptr;
  if (doc_.current_location().get(location) == simdjson::SUCCESS &&
      location != nullptr && location >= begin_) {
    offset = offset_ + static_cast<uint64_t>(location - begin_);
  }
  return ChromeSyntaxAt(offset, simdjson::error_message(error));
}

absl::Status ChromeEventParser::ReadFields(od::object& object,
                                           const ChromeEventSpan& span,
                                           Fields& f) {
  for (auto field_result : object) {
    od::field field;
    if (auto err = std::move(field_result).get(field)) return json_.Syntax(err);
    od::value& value = field.value();
    switch (KeyOf(field.key().raw())) {
      case EventKey::kPh:
        f.ph = TokenText(value);
        break;
      case EventKey::kCat:
        f.cat = TokenText(value);
        break;
      case EventKey::kName: {
        f.name = TokenText(value);
        std::optional<std::string_view> content = StringTokenContent(f.name);
        f.name_is_string = content.has_value();
        if (content) {
          f.name = *content;
          if (f.name.find('\\') != std::string_view::npos) {
            if (value.get_string().get(f.name) != simdjson::SUCCESS) {
              return ChromeEventError(span.index,
                                      "\"name\" is not a valid string");
            }
            f.name_unescaped = true;
          }
        }
        break;
      }
      case EventKey::kPid:
        f.pid = TokenText(value);
        break;
      case EventKey::kTid:
        f.tid = TokenText(value);
        break;
      case EventKey::kTs:
        f.ts = TokenText(value);
        break;
      case EventKey::kDur:
        f.dur = TokenText(value);
        break;
      case EventKey::kArgs:
        RETURN_IF_ERROR(ReadArgs(value, f));
        break;
      case EventKey::kOther:
        break;
    }
  }
  return absl::OkStatus();
}

absl::Status ChromeEventParser::ReadArgs(od::value& value, Fields& f) {
  od::object args;
  if (auto err = value.get_object().get(args)) {
    if (err == simdjson::INCORRECT_TYPE) return absl::OkStatus();
    return json_.Syntax(err);
  }
  for (auto field_result : args) {
    od::field field;
    if (auto err = std::move(field_result).get(field)) return json_.Syntax(err);
    od::value& arg = field.value();
    int64_t i = 0;
    uint64_t u = 0;
    const ArgKey key = ArgKeyOf(field.key().raw());
    switch (key) {
      case ArgKey::kDevice:
        f.device_bad = arg.get_int64().get(i) != simdjson::SUCCESS;
        if (!f.device_bad) f.device = i;
        break;
      case ArgKey::kStream:
        f.stream_bad = arg.get_int64().get(i) != simdjson::SUCCESS;
        if (!f.stream_bad) f.stream = i;
        break;
      case ArgKey::kCorrelation:
        // Not an unsigned integer: unknown, like an absent one.
        if (arg.get_uint64().get(u) == simdjson::SUCCESS) f.correlation = u;
        break;
      case ArgKey::kBytes:
        if (arg.get_uint64().get(u) == simdjson::SUCCESS) f.bytes = u;
        break;
      case ArgKey::kSeqLower:
        f.seq_lower = TokenText(arg);
        break;
      case ArgKey::kOther:
        break;
      default: {
        const int a = static_cast<int>(key) - kCollectiveArgKey;
        std::string_view token = TokenText(arg);
        // A string with escapes: unescaped now, while the value is at hand
        // (rare; Kineto writes plain names).
        if (a <= ParsedCollective::kDtype && token.size() >= 2 &&
            token.front() == '"' &&
            token.find('\\') != std::string_view::npos) {
          if (arg.get_string().get(token) == simdjson::SUCCESS) {
            f.coll_unescaped |= static_cast<uint16_t>(1u << a);
          } else {
            f.coll_bad |= static_cast<uint16_t>(1u << a);
            token = {};
          }
        }
        f.coll[a] = token;
        break;
      }
    }
  }
  return absl::OkStatus();
}

absl::Status ChromeEventParser::ToEvent(const Fields& f,
                                        const KinetoCategory& category,
                                        size_t index, ParsedChromeEvent& out) {
  if (!f.name_is_string) {
    return ChromeEventError(index, f.name.data() == nullptr
                                       ? "complete event without \"name\""
                                       : "\"name\" must be a string");
  }
  if (f.ts.data() == nullptr) {
    return ChromeEventError(index, "complete event without \"ts\"");
  }
  if (f.dur.data() == nullptr) {
    return ChromeEventError(index, "complete event without \"dur\"");
  }
  ASSIGN_OR_RETURN(int64_t start_ns, Micros(f.ts, "ts", index));
  ASSIGN_OR_RETURN(int64_t dur_ns, Micros(f.dur, "dur", index));
  if (dur_ns < 0) {
    return ChromeEventError(
        index, absl::StrCat("negative dur ", AbslView(f.dur.substr(0, 40)),
                            " us on '", AbslView(f.name.substr(0, 80)), "'"));
  }
  int64_t end_ns = 0;
  if (__builtin_add_overflow(start_ns, dur_ns, &end_ns)) {
    return ChromeEventError(
        index, absl::StrCat("ts ", AbslView(f.ts.substr(0, 40)), " + dur ",
                            AbslView(f.dur.substr(0, 40)),
                            " us does not fit in 64-bit nanoseconds"));
  }
  if (category.gpu) {
    if (f.device_bad) {
      return ChromeEventError(index, "args.device must be an integer");
    }
    if (f.stream_bad) {
      return ChromeEventError(index, "args.stream must be an integer");
    }
  }
  out.outcome = ParsedChromeEvent::Outcome::kKeep;
  out.category = category;
  out.start_ns = start_ns;
  out.end_ns = end_ns;
  out.correlation = f.correlation;
  out.bytes = f.bytes;
  out.name = f.name;
  out.has_device = f.device.has_value();
  out.device = f.device.value_or(0);
  out.has_stream = f.stream.has_value();
  out.stream = f.stream.value_or(0);
  out.pid = IdToken(f.pid);
  out.tid = IdToken(f.tid);
  out.pageable = category.gpu &&
                 category.gpu_kind == GpuActivityKind::kMemcpy &&
                 f.name.find("Pageable") != std::string_view::npos;
  return absl::OkStatus();
}

}  // namespace bubblewatch
