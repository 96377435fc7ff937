#include "ingest/chrome/trace_assembler.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "ingest/chrome/json_token.h"
#include "ingest/trace_io/json_support.h"

namespace bubblewatch {

namespace od = simdjson::ondemand;

TraceAssembler::TraceAssembler(
    std::function<uint64_t(uint64_t done)> estimate_total_bytes,
    uint64_t max_events)
    : estimate_total_bytes_(std::move(estimate_total_bytes)),
      max_events_(max_events),
      names_(&trace_) {}

void TraceAssembler::GrowFor(const ChromeEventBlock& block) {
  const ChromeEventSpan& last = block.spans.back();
  const uint64_t done = block.offset + last.begin + last.size;
  const uint64_t total = std::max(done, estimate_total_bytes_(done));
  // An event is at least ~40 bytes of JSON: no file holds more than this,
  // and no read keeps more than one past its limit.
  size_t most = static_cast<size_t>(total / 40);
  if (max_events_ > 0) most = std::min<uint64_t>(most, max_events_ + 1);
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

absl::Status TraceAssembler::Merge(ChromeEventBlock& block) {
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
          Keep(block, event, name);
          if (max_events_ > 0 &&
              trace_.gpu.size() + trace_.cpu.size() > max_events_) {
            return absl::ResourceExhaustedError(
                absl::StrCat("over the limit of ", max_events_, " events"));
          }
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

void TraceAssembler::Keep(const ChromeEventBlock& block,
                          const ParsedChromeEvent& event, NameId name) {
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
    // A job timeline: the rank (pid) above the device, so that ranks on
    // the same device number of different hosts stay apart.
    if (timeline_export_)
      a.device = static_cast<int32_t>((pid << 16) | (a.device & 0xFFFF));
    a.stream = static_cast<int32_t>(event.has_stream ? event.stream : tid);
    a.kind = event.category.gpu_kind;
    a.pageable = event.pageable;
    if (event.collective != ParsedChromeEvent::kNoCollective) {
      KeepCollective(block.collectives[event.collective], a);
    }
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

void TraceAssembler::KeepCollective(const ParsedCollective& parsed,
                                    const GpuActivity& kernel) {
  CollectiveKernel& c = trace_.collectives.emplace_back();
  c.start_ns = kernel.start_ns;
  c.end_ns = kernel.end_ns;
  c.device = kernel.device;
  c.stream = kernel.stream;
  c.kernel_name = kernel.name;
  auto intern = [this](std::string_view text) {
    return text.data() == nullptr ? kNoName : names_.Intern(AbslView(text));
  };
  c.collective = intern(parsed.collective);
  c.process_group = intern(parsed.process_group);
  c.group_ranks = intern(parsed.group_ranks);
  c.dtype = intern(parsed.dtype);
  c.seq = parsed.seq;
  c.in_elements = parsed.in_elements;
  c.out_elements = parsed.out_elements;
  c.group_size = parsed.group_size;
  c.peer = parsed.peer;
  if (parsed.bad == 0) return;
  for (int a = 0; a < ParsedCollective::kNumArgs; ++a) {
    if ((parsed.bad & (1u << a)) == 0) continue;
    const auto arg = static_cast<ParsedCollective::Arg>(a);
    CountSkip({"collective arg '", CollectiveArgKey(arg),
               arg <= ParsedCollective::kDtype
                   ? "' not a string"
                   : "' not a non-negative integer"});
  }
}

uint32_t TraceAssembler::IdKey(const ChromeIdToken& id) {
  if (!id.present) return 0;
  if (id.numeric) return id.value;
  auto it = string_ids_.find(AbslView(id.text));
  if (it != string_ids_.end()) return it->second;
  uint32_t value = std::numeric_limits<uint32_t>::max() -
                   static_cast<uint32_t>(string_ids_.size());
  string_ids_.emplace(std::string(id.text), value);
  return value;
}

bool TraceAssembler::WantsTopLevelValue(std::string_view key) const {
  return key == "distributedInfo" || key == "baseTimeNanoseconds" ||
         key == "host_name" || key == "bubblewatch_job" ||
         key == "bubblewatch_timeline";
}

absl::Status TraceAssembler::TopLevelValue(std::string_view key,
                                           std::string_view text,
                                           uint64_t offset) {
  if (key == "baseTimeNanoseconds") return ReadBaseTime(text);
  if (key == "bubblewatch_timeline") {
    // Decides how every GPU event's device is read: only before them.
    if (!trace_.gpu.empty() || !trace_.cpu.empty()) {
      return absl::InvalidArgumentError(
          "\"bubblewatch_timeline\" comes after events of \"traceEvents\"");
    }
    timeline_export_ = true;
    return absl::OkStatus();
  }
  // Small values: parsed from a padded copy of their own.
  simdjson::padded_string copy(text);
  RETURN_IF_ERROR(top_level_.Iterate(copy.data(), copy.size(),
                                     copy.size() + simdjson::SIMDJSON_PADDING,
                                     offset));
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

void TraceAssembler::NonObjectElement() { CountSkip({"non-object event"}); }

absl::Status TraceAssembler::ReadDistributedInfo(od::value& value) {
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

absl::Status TraceAssembler::ReadBaseTime(std::string_view token) {
  base_time_ns_ = TokenInteger(token);
  if (!base_time_ns_) {
    return absl::InvalidArgumentError(
        absl::StrCat("baseTimeNanoseconds is not an integer: ",
                     AbslView(token.substr(0, 40))));
  }
  return absl::OkStatus();
}

absl::Status TraceAssembler::ApplyBaseTime() {
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
    overflow |= shift(&a.start_ns);
    overflow |= shift(&a.end_ns);
  }
  for (CpuEvent& e : trace_.cpu) {
    overflow |= shift(&e.start_ns);
    overflow |= shift(&e.end_ns);
  }
  for (CollectiveKernel& c : trace_.collectives) {
    overflow |= shift(&c.start_ns);
    overflow |= shift(&c.end_ns);
  }
  if (overflow) {
    return absl::InvalidArgumentError(
        absl::StrCat("ts + baseTimeNanoseconds ", base,
                     " does not fit in 64-bit nanoseconds"));
  }
  return absl::OkStatus();
}

absl::StatusOr<Trace> TraceAssembler::Finish() {
  RETURN_IF_ERROR(ApplyBaseTime());
  return std::move(trace_);
}

void TraceAssembler::CountSkip(std::initializer_list<std::string_view> parts) {
  char buffer[512];
  ++trace_.skipped[AbslView(ComposeSkipReason(parts, buffer))];
}

}  // namespace bubblewatch
