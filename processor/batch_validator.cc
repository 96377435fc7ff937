#include "processor/batch_validator.h"

#include <algorithm>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "base/text_escape.h"

namespace bubblewatch {
namespace {

std::optional<BatchRejection> CheckInterval(const Trace& t,
                                            absl::string_view what,
                                            size_t index, NameId name,
                                            int64_t start, int64_t end,
                                            const BatchLimits& limits) {
  // Differences in unsigned arithmetic: those of hostile times may not fit
  // in int64.
  if (end < start) {
    return BatchRejection{
        "end_before_start",
        absl::StrCat(what, " #", index, " '", EscapeForLog(t.names[name]),
                     "' ends ",
                     static_cast<uint64_t>(start) - static_cast<uint64_t>(end),
                     " ns before it starts")};
  }
  for (int64_t time : {start, end}) {
    if (!IsAcceptedEventTime(time)) {
      return BatchRejection{
          "timestamps_out_of_range",
          absl::StrCat(what, " #", index, " '",
                       EscapeForLog(t.names[name].substr(0, 80)), "' has time ",
                       time, " ns, outside the accepted +-", kMaxEventTimeNs,
                       " ns of the clock's epoch")};
    }
  }
  const uint64_t duration =
      static_cast<uint64_t>(end) - static_cast<uint64_t>(start);
  if (duration > static_cast<uint64_t>(limits.max_event_duration_ns)) {
    return BatchRejection{
        "duration_over_limit",
        absl::StrCat(what, " #", index, " '", EscapeForLog(t.names[name]),
                     "' lasts ", duration / 1'000'000'000, " s")};
  }
  return std::nullopt;
}

// "name_too_long" for `value` over the limit; the detail shows its start.
std::optional<BatchRejection> CheckName(absl::string_view what,
                                        absl::string_view value,
                                        const BatchLimits& limits) {
  if (static_cast<int64_t>(value.size()) <= limits.max_name_bytes) {
    return std::nullopt;
  }
  return BatchRejection{
      "name_too_long",
      absl::StrCat(what, " '", absl::CHexEscape(value.substr(0, 40)),
                   "...' is ", value.size(), " bytes, more than the ",
                   limits.max_name_bytes, " allowed")};
}

}  // namespace

void EscapeUnprintableNames(DecodedBatch* batch) {
  EscapeUnprintableNames(&batch->trace);
  if (!IsPrintableUtf8(batch->header.host)) {
    batch->header.host = EscapeForLog(batch->header.host);
  }
}

std::optional<BatchRejection> CheckBatchBytes(size_t bytes,
                                              const BatchLimits& limits) {
  if (bytes <= static_cast<uint64_t>(limits.max_batch_bytes)) {
    return std::nullopt;
  }
  return BatchRejection{"batch_too_large",
                        absl::StrCat(bytes, " bytes, more than the ",
                                     limits.max_batch_bytes, " allowed")};
}

std::optional<BatchRejection> ValidateBatch(const DecodedBatch& batch,
                                            const BatchLimits& limits) {
  if (batch.header.job.empty()) {
    return BatchRejection{"empty_job", "the batch names no job"};
  }
  if (auto r = CheckName("job", batch.header.job, limits)) return r;
  if (!IsPrintableUtf8(batch.header.job)) {
    return BatchRejection{
        "bad_job_name",
        absl::StrCat("job '", EscapeForLog(batch.header.job.substr(0, 80)),
                     "' is not printable UTF-8")};
  }
  if (auto r = CheckName("host", batch.header.host, limits)) return r;
  const Trace& t = batch.trace;
  if (static_cast<int64_t>(t.names.size()) > limits.max_names) {
    return BatchRejection{"string_table_too_large",
                          absl::StrCat(t.names.size(), " names, more than the ",
                                       limits.max_names, " a batch may hold")};
  }
  int64_t table_bytes = 0;
  for (size_t i = 0; i < t.names.size(); ++i) {
    if (auto r = CheckName(absl::StrCat("name #", i), t.names[i], limits)) {
      return r;
    }
    table_bytes += static_cast<int64_t>(t.names[i].size());
  }
  if (table_bytes > limits.max_string_table_bytes) {
    return BatchRejection{
        "string_table_too_large",
        absl::StrCat(table_bytes, " bytes of names, more than the ",
                     limits.max_string_table_bytes, " a batch may hold")};
  }
  if (static_cast<int64_t>(t.gpu.size() + t.cpu.size()) > limits.max_events) {
    return BatchRejection{
        "too_many_events",
        absl::StrCat(t.gpu.size() + t.cpu.size(), " events, more than the ",
                     limits.max_events, " a batch may hold")};
  }
  // Identities of min and max (lo > hi: no event).
  int64_t lo = INT64_MAX, hi = INT64_MIN;
  for (size_t i = 0; i < t.gpu.size(); ++i) {
    const GpuActivity& a = t.gpu[i];
    if (auto r = CheckInterval(t, "GPU activity", i, a.name, a.start_ns,
                               a.end_ns, limits)) {
      return r;
    }
    lo = std::min(lo, a.start_ns);
    hi = std::max(hi, a.end_ns);
  }
  for (size_t i = 0; i < t.cpu.size(); ++i) {
    const CpuEvent& e = t.cpu[i];
    if (auto r = CheckInterval(t, "CPU event", i, e.name, e.start_ns, e.end_ns,
                               limits)) {
      return r;
    }
    lo = std::min(lo, e.start_ns);
    hi = std::max(hi, e.end_ns);
  }
  // A collective record describes one of the batch's kernels: no more of
  // them than GPU activities, and times like theirs.
  if (t.collectives.size() > t.gpu.size()) {
    return BatchRejection{
        "too_many_events",
        absl::StrCat(t.collectives.size(), " collective records for ",
                     t.gpu.size(), " GPU activities (at most one each)")};
  }
  for (size_t i = 0; i < t.collectives.size(); ++i) {
    const CollectiveKernel& c = t.collectives[i];
    if (auto r = CheckInterval(t, "collective kernel", i, c.kernel_name,
                               c.start_ns, c.end_ns, limits)) {
      return r;
    }
    lo = std::min(lo, c.start_ns);
    hi = std::max(hi, c.end_ns);
  }
  // Subtract in unsigned arithmetic: the spread of hostile values may not
  // fit in int64.
  if (lo <= hi && static_cast<uint64_t>(hi) - static_cast<uint64_t>(lo) >
                      static_cast<uint64_t>(limits.max_batch_time_spread_ns)) {
    return BatchRejection{
        "timestamps_out_of_range",
        absl::StrCat("events span ",
                     (static_cast<uint64_t>(hi) - static_cast<uint64_t>(lo)) /
                         86'400'000'000'000ull,
                     " days within one batch")};
  }
  // The observation (docs/semantics.md#observations): a real interval that
  // covers every event of the batch, so that what lies outside every
  // observation really was unobserved.
  if (const std::optional<ObservationInfo>& o = batch.header.observation) {
    if (o->id == 0 || o->end_ns < o->start_ns ||
        !IsAcceptedEventTime(o->start_ns) || !IsAcceptedEventTime(o->end_ns)) {
      return BatchRejection{
          "bad_observation",
          absl::StrCat("observation ", absl::Hex(o->id, absl::kZeroPad16), " [",
                       o->start_ns, ", ", o->end_ns,
                       "] ns: ", o->id == 0 ? "id 0" : "not an interval")};
    }
    if (lo <= hi && (lo < o->start_ns || hi > o->end_ns)) {
      return BatchRejection{
          "event_outside_observation",
          absl::StrCat("events cover [", lo, ", ", hi,
                       "] ns, outside observation ",
                       absl::Hex(o->id, absl::kZeroPad16), " [", o->start_ns,
                       ", ", o->end_ns, "] ns")};
    }
  }
  return std::nullopt;
}

}  // namespace bubblewatch
