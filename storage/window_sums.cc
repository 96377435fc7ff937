#include "storage/window_sums.h"

#include <array>
#include <cstring>
#include <optional>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "base/status_macros.h"

namespace bubblewatch {
namespace {

constexpr uint8_t kFormat = kRunningSumsFormat;
constexpr int kFields = 10 + kNumBubbleCauses;
constexpr size_t kRecordBytes = 1 + 2 * kFields * 8;

int64_t Wrap(uint64_t v) { return static_cast<int64_t>(v); }
int64_t WrapAdd(int64_t a, int64_t b) {
  return Wrap(static_cast<uint64_t>(a) + static_cast<uint64_t>(b));
}
int64_t WrapSub(int64_t a, int64_t b) {
  return Wrap(static_cast<uint64_t>(a) - static_cast<uint64_t>(b));
}

// The fields of `s` in their stored order.
template <typename Sums, typename F>
void ForEachField(Sums& s, F f) {
  f(s.windows);
  f(s.span_ns);
  f(s.compute_ns);
  f(s.bubble_ns);
  for (auto& a : s.attribution) f(a);
  f(s.partial_windows);
  f(s.capacity_ns);
  f(s.collective_windows);
  f(s.comm_wait_ns);
  f(s.straggler_wait_ns);
  f(s.straggler_cost_ns);
}

// The fields of `s` in their stored order, as pointers: Add and Subtract go
// field by field without listing them again.
template <typename Sums>
auto FieldsOf(Sums& s) {
  std::array<decltype(&s.windows), kFields> out;
  size_t i = 0;
  ForEachField(s, [&](auto& field) { out[i++] = &field; });
  return out;
}

void PutInt64(int64_t v, std::string& out) {
  const auto u = static_cast<uint64_t>(v);
  for (int shift = 0; shift < 64; shift += 8) {
    out.push_back(static_cast<char>((u >> shift) & 0xff));
  }
}

int64_t GetInt64(const char* p) {
  uint64_t u = 0;
  for (int i = 7; i >= 0; --i) u = (u << 8) | static_cast<uint8_t>(p[i]);
  return static_cast<int64_t>(u);
}

// As FleetJobPeriod::Add counts them from the window's point; the oracle
// test holds the two together.
void AddCollectiveSums(const std::optional<WindowCollectives>& collectives,
                       int64_t ranks_left_out, WindowSums& sums) {
  if (!collectives.has_value()) return;
  ++sums.collective_windows;
  for (const RankWindow& r : collectives->ranks) {
    sums.comm_wait_ns += r.comm_wait_ns;
  }
  for (const StragglerWindow& s : collectives->stragglers) {
    sums.straggler_wait_ns += s.wait_caused_ns;
  }
  sums.straggler_cost_ns += StragglerCostNs(*collectives, ranks_left_out);
}

}  // namespace

void WindowSums::Add(const WindowSums& o) {
  std::array<int64_t*, kFields> mine = FieldsOf(*this);
  std::array<const int64_t*, kFields> theirs = FieldsOf(o);
  for (int i = 0; i < kFields; ++i) *mine[i] = WrapAdd(*mine[i], *theirs[i]);
}

void WindowSums::Subtract(const WindowSums& o) {
  std::array<int64_t*, kFields> mine = FieldsOf(*this);
  std::array<const int64_t*, kFields> theirs = FieldsOf(o);
  for (int i = 0; i < kFields; ++i) *mine[i] = WrapSub(*mine[i], *theirs[i]);
}

absl::StatusOr<WindowSums> SumsOfWindow(const WindowSummaryView& window) {
  ASSIGN_OR_RETURN(const UtilizationStats job, window.DecodeJobStats());
  WindowSums s;
  s.windows = 1;
  s.span_ns = job.span_ns;
  s.compute_ns = job.compute_ns;
  s.bubble_ns = job.bubble_ns;
  for (int c = 0; c < kNumBubbleCauses; ++c)
    s.attribution[c] = job.attribution[c];
  // As FleetJobPeriod::Add computes them from the window's point
  // (storage/window_queries.cc); the oracle test holds the two together.
  const int64_t capacity = static_cast<int64_t>(window.device_count()) *
                           (window.end_ns() - window.start_ns());
  s.partial_windows = job.span_ns < capacity ? 1 : 0;
  s.capacity_ns = capacity;
  ASSIGN_OR_RETURN(const std::optional<WindowCollectives> collectives,
                   window.DecodeCollectives());
  const std::optional<WindowTrim> trim = window.trimmed();
  AddCollectiveSums(collectives, trim.has_value() ? trim->ranks : 0, s);
  return s;
}

absl::StatusOr<WindowSums> SumsOfEncodedWindow(absl::string_view bytes,
                                               std::vector<uint64_t>& scratch) {
  if (reinterpret_cast<uintptr_t>(bytes.data()) % 8 != 0) {
    scratch.resize((bytes.size() + 7) / 8);
    if (!bytes.empty()) std::memcpy(scratch.data(), bytes.data(), bytes.size());
    bytes = absl::string_view(reinterpret_cast<const char*>(scratch.data()),
                              bytes.size());
  }
  ASSIGN_OR_RETURN(const WindowSummaryView view,
                   WindowSummaryView::Open(bytes));
  return SumsOfWindow(view);
}

std::string EncodeRunningSums(const RunningSumsRecord& record) {
  std::string out;
  out.reserve(kRecordBytes);
  out.push_back(static_cast<char>(kFormat));
  ForEachField(record.before, [&](int64_t v) { PutInt64(v, out); });
  ForEachField(record.own, [&](int64_t v) { PutInt64(v, out); });
  return out;
}

absl::StatusOr<RunningSumsRecord> DecodeRunningSums(absl::string_view bytes) {
  if (bytes.size() != kRecordBytes ||
      static_cast<uint8_t>(bytes[0]) != kFormat) {
    return absl::DataLossError(absl::StrCat(
        "corrupt running-sums record: ", bytes.size(), " bytes, format ",
        bytes.empty() ? -1 : static_cast<int>(static_cast<uint8_t>(bytes[0]))));
  }
  RunningSumsRecord r;
  const char* p = bytes.data() + 1;
  ForEachField(r.before, [&](int64_t& v) {
    v = GetInt64(p);
    p += 8;
  });
  ForEachField(r.own, [&](int64_t& v) {
    v = GetInt64(p);
    p += 8;
  });
  return r;
}

std::string EncodeLastRunningSums(int64_t start_ns,
                                  const RunningSumsRecord& record) {
  std::string out;
  out.reserve(8 + kRecordBytes);
  PutInt64(start_ns, out);
  out.append(EncodeRunningSums(record));
  return out;
}

absl::StatusOr<RunningSumsRecord> DecodeLastRunningSums(absl::string_view bytes,
                                                        int64_t* start_ns) {
  if (bytes.size() < 8) {
    return absl::DataLossError(absl::StrCat(
        "corrupt newest running-sums record: ", bytes.size(), " bytes"));
  }
  *start_ns = GetInt64(bytes.data());
  return DecodeRunningSums(bytes.substr(8));
}

}  // namespace bubblewatch
