#include "schemas/window_summary_codec.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <iterator>
#include <optional>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "flatbuffers/flatbuffers.h"
#include "schemas/window_summary_generated.h"

namespace bubblewatch {
namespace {

using flatbuffers::FlatBufferBuilder;
using flatbuffers::Offset;

// fb::RankClock::flags.
constexpr uint8_t kClockConnected = 1;
constexpr uint8_t kClockCorrected = 2;

// The C++ enum is stored as is: it must name the schema's values one for one.
static_assert(std::size(kAllClosedBy) ==
              static_cast<size_t>(fb::ClosedBy::MAX) + 1);
static_assert(static_cast<uint8_t>(WindowSummary::ClosedBy::kWatermark) ==
              static_cast<uint8_t>(fb::ClosedBy::Watermark));
static_assert(static_cast<uint8_t>(WindowSummary::ClosedBy::kIdleTimeout) ==
              static_cast<uint8_t>(fb::ClosedBy::IdleTimeout));
static_assert(static_cast<uint8_t>(WindowSummary::ClosedBy::kEndMarker) ==
              static_cast<uint8_t>(fb::ClosedBy::EndMarker));
static_assert(static_cast<uint8_t>(WindowSummary::ClosedBy::kObservationEnd) ==
              static_cast<uint8_t>(fb::ClosedBy::ObservationEnd));
static_assert(static_cast<uint8_t>(WindowSummary::ClosedBy::kBufferFull) ==
              static_cast<uint8_t>(fb::ClosedBy::BufferFull));

// ---- Encoding ----

Offset<fb::KernelRef> EncodeKernel(FlatBufferBuilder& b,
                                   const std::optional<KernelRef>& kernel) {
  if (!kernel) return 0;  // Absent field: no kernel.
  // Devices and bubbles often name the same kernels: store each name once.
  auto name = b.CreateSharedString(kernel->name);
  return fb::CreateKernelRef(b, name, kernel->start_ns, kernel->end_ns,
                             kernel->stream);
}

Offset<flatbuffers::Vector<int64_t>> EncodeAttribution(FlatBufferBuilder& b,
                                                       const Attribution& a) {
  return b.CreateVector(a.data(), a.size());
}

Offset<fb::UtilizationStats> EncodeStats(FlatBufferBuilder& b,
                                         const UtilizationStats& s) {
  auto culprit = EncodeKernel(b, s.culprit_before_bubble);
  auto attribution = EncodeAttribution(b, s.attribution);
  return fb::CreateUtilizationStats(
      b, s.span_ns, s.compute_ns, s.bubble_ns, s.largest_bubble_ns,
      s.largest_bubble_start_ns, culprit, attribution);
}

Offset<fb::BubbleReport> EncodeBubble(FlatBufferBuilder& b,
                                      const BubbleReport& r) {
  auto before = EncodeKernel(b, r.before);
  auto after = EncodeKernel(b, r.after);
  auto attribution = EncodeAttribution(b, r.attribution);
  auto blamed = b.CreateSharedString(r.blamed);
  return fb::CreateBubbleReport(b, r.device, r.start_ns, r.end_ns, before,
                                after, attribution,
                                static_cast<uint8_t>(r.cause), blamed);
}

Offset<fb::WindowCollectives> EncodeCollectives(
    FlatBufferBuilder& b, const std::optional<WindowCollectives>& c) {
  if (!c) return 0;  // Absent: single-rank windows keep their bytes.
  // Rows in the compact form, each host name once (a host holds several
  // ranks).
  std::vector<fb::RankRow> rows;
  rows.reserve(c->ranks.size());
  std::vector<Offset<flatbuffers::String>> hosts;
  absl::flat_hash_map<absl::string_view, int32_t> host_index;
  for (const RankWindow& r : c->ranks) {
    int32_t host = -1;
    if (!r.host.empty()) {
      auto [it, inserted] = host_index.try_emplace(
          r.host.str(), static_cast<int32_t>(host_index.size()));
      if (inserted) hosts.push_back(b.CreateString(r.host.str()));
      host = it->second;
    }
    rows.emplace_back(r.rank, r.device, host, r.span_ns, r.compute_ns,
                      r.comm_ns, r.comm_exposed_ns, r.comm_wait_ns,
                      r.wait_caused_ns, r.arrived_last, r.clock_offset_ns);
  }
  auto rows_vec = b.CreateVectorOfStructs(rows);
  auto hosts_vec = b.CreateVector(hosts);
  // The pids only when some rank's is known, so a window without them
  // keeps the bytes it had before them.
  Offset<flatbuffers::Vector<int64_t>> pids_vec = 0;
  if (std::any_of(c->ranks.begin(), c->ranks.end(),
                  [](const RankWindow& r) { return r.pid >= 0; })) {
    std::vector<int64_t> pids;
    pids.reserve(c->ranks.size());
    for (const RankWindow& r : c->ranks) {
      pids.push_back(std::max<int64_t>(r.pid, -1));
    }
    pids_vec = b.CreateVector(pids);
  }
  // The clocks only when some rank's differs from the default, so a window
  // without clock figures keeps the bytes it had before them.
  Offset<flatbuffers::Vector<const fb::RankClock*>> clocks_vec = 0;
  const bool any_clock =
      std::any_of(c->ranks.begin(), c->ranks.end(), [](const RankWindow& r) {
        return r.clock_drift_ns_per_s != 0 || r.clock_instances != 0 ||
               r.clock_residual_ns != 0 || r.clock_connected ||
               r.clock_corrected;
      });
  if (any_clock) {
    std::vector<fb::RankClock> clocks;
    clocks.reserve(c->ranks.size());
    for (const RankWindow& r : c->ranks) {
      clocks.emplace_back(
          r.clock_drift_ns_per_s, r.clock_instances, r.clock_residual_ns,
          static_cast<uint8_t>((r.clock_connected ? kClockConnected : 0) |
                               (r.clock_corrected ? kClockCorrected : 0)));
    }
    clocks_vec = b.CreateVectorOfStructs(clocks);
  }
  std::vector<Offset<fb::StragglerWindow>> stragglers;
  stragglers.reserve(c->stragglers.size());
  for (const StragglerWindow& s : c->stragglers) {
    auto attribution = EncodeAttribution(b, s.causes);
    // Absent when empty: a window without root blame keeps its bytes.
    auto host = s.host.empty() ? 0 : b.CreateSharedString(s.host);
    Offset<flatbuffers::Vector<const fb::StragglerVia*>> via = 0;
    if (!s.via.empty()) {
      std::vector<fb::StragglerVia> rows_via;
      rows_via.reserve(s.via.size());
      for (const Straggler::Via& v : s.via) {
        rows_via.emplace_back(v.rank, v.wait_ns);
      }
      via = b.CreateVectorOfStructs(rows_via);
    }
    stragglers.push_back(fb::CreateStragglerWindow(
        b, s.rank, s.wait_caused_ns, s.arrived_last, s.compute_ns, s.comm_ns,
        attribution, s.unattributed_ns, host, s.direct_wait_caused_ns, via,
        s.saved_ns, std::max<int64_t>(s.pid, -1)));
  }
  auto stragglers_vec = b.CreateVector(stragglers);
  // Absent without timelines: a window stored without them keeps its bytes.
  Offset<fb::RankTimelines> timelines = 0;
  if (!c->timelines.empty()) {
    std::vector<uint16_t> counts;
    std::vector<int32_t> starts;
    std::vector<uint32_t> merged;
    std::vector<uint32_t> bins;
    std::vector<uint8_t> states;
    std::vector<uint32_t> us;
    for (const RankTimeline& t : c->timelines) {
      counts.push_back(static_cast<uint16_t>(t.segments.size()));
      starts.push_back(t.start_us);
      merged.push_back(t.merged_us);
      bins.push_back(t.bin_us);
      for (const TimelineSegment& seg : t.segments) {
        states.push_back(seg.state);
        us.push_back(seg.us);
      }
    }
    auto counts_vec = b.CreateVector(counts);
    auto starts_vec = b.CreateVector(starts);
    auto merged_vec = b.CreateVector(merged);
    auto bins_vec = b.CreateVector(bins);
    auto states_vec = b.CreateVector(states);
    auto us_vec = b.CreateVector(us);
    timelines = fb::CreateRankTimelines(b, counts_vec, starts_vec, merged_vec,
                                        bins_vec, states_vec, us_vec);
  }
  return fb::CreateWindowCollectives(
      b, c->key, c->kernels, c->matched, c->unmatched, c->unsynchronized,
      c->used, c->unattributed, c->seq_backwards,
      /*ranks=*/0, stragglers_vec, c->seq_jumps, rows_vec, hosts_vec,
      clocks_vec, c->job_ns, c->job_ns_without_stragglers, timelines, pids_vec);
}

// ---- Decoding (after the Verifier) ----

absl::Status DataLoss(absl::string_view what) {
  return absl::DataLossError(absl::StrCat("corrupt WindowSummary: ", what));
}

std::optional<KernelRef> DecodeKernel(const fb::KernelRef* k) {
  if (k == nullptr) return std::nullopt;
  return KernelRef{.name = k->name() ? k->name()->str() : "",
                   .start_ns = k->start_ns(),
                   .end_ns = k->end_ns(),
                   .stream = k->stream()};
}

absl::Status DecodeAttribution(const flatbuffers::Vector<int64_t>* v,
                               Attribution& out) {
  out.fill(0);
  if (v == nullptr) return absl::OkStatus();
  if (v->size() != out.size()) {
    return DataLoss(absl::StrCat("attribution has ", v->size(),
                                 " entries, expected ", out.size()));
  }
  for (size_t i = 0; i < out.size(); ++i) out[i] = v->Get(i);
  return absl::OkStatus();
}

absl::Status DecodeStats(const fb::UtilizationStats* s, UtilizationStats& out) {
  out = UtilizationStats{};
  if (s == nullptr) return absl::OkStatus();
  out.span_ns = s->span_ns();
  out.compute_ns = s->compute_ns();
  out.bubble_ns = s->bubble_ns();
  out.largest_bubble_ns = s->largest_bubble_ns();
  out.largest_bubble_start_ns = s->largest_bubble_start_ns();
  out.culprit_before_bubble = DecodeKernel(s->culprit_before_bubble());
  return DecodeAttribution(s->attribution_ns(), out.attribution);
}

absl::Status DecodeBubble(const fb::BubbleReport* r, BubbleReport& out) {
  if (r->cause() >= kNumBubbleCauses) {
    return DataLoss(absl::StrCat("unknown bubble cause ", r->cause()));
  }
  out.device = r->device();
  out.start_ns = r->start_ns();
  out.end_ns = r->end_ns();
  out.before = DecodeKernel(r->before());
  out.after = DecodeKernel(r->after());
  out.cause = static_cast<BubbleCause>(r->cause());
  out.blamed = r->blamed() ? r->blamed()->str() : "";
  return DecodeAttribution(r->attribution_ns(), out.attribution);
}

std::optional<WindowTrim> DecodeTrim(const fb::WindowTrim* t) {
  if (t == nullptr) return std::nullopt;
  return WindowTrim{.limit_bytes = t->limit_bytes(),
                    .original_bytes = t->original_bytes(),
                    .names_cut = t->names_cut(),
                    .devices = t->devices(),
                    .top_bubbles = t->top_bubbles(),
                    .ranks = t->ranks(),
                    .stragglers = t->stragglers(),
                    .via = t->via(),
                    .timelines = t->timelines()};
}

// A rank's figures from either stored form (fb::RankRow, fb::RankWindow:
// the same accessors).
template <typename Stored>
RankWindow RankFrom(const Stored& r, SharedString host) {
  return RankWindow{.rank = r.rank(),
                    .host = std::move(host),
                    .device = r.device(),
                    .span_ns = r.span_ns(),
                    .compute_ns = r.compute_ns(),
                    .comm_ns = r.comm_ns(),
                    .comm_exposed_ns = r.comm_exposed_ns(),
                    .comm_wait_ns = r.comm_wait_ns(),
                    .wait_caused_ns = r.wait_caused_ns(),
                    .arrived_last = r.arrived_last(),
                    .clock_offset_ns = r.clock_offset_ns()};
}

absl::Status DecodeCollectives(const fb::WindowCollectives* in,
                               std::optional<WindowCollectives>& out,
                               const WindowCollectives* like = nullptr,
                               bool with_timelines = true) {
  out.reset();
  if (in == nullptr) return absl::OkStatus();
  if (in->key() > 2) {
    return DataLoss(absl::StrCat("unknown collective key ", in->key()));
  }
  WindowCollectives& c = out.emplace();
  c.key = in->key();
  c.kernels = in->kernels();
  c.matched = in->matched();
  c.unmatched = in->unmatched();
  c.unsynchronized = in->unsynchronized();
  c.used = in->used();
  c.unattributed = in->unattributed();
  c.seq_backwards = in->seq_backwards();
  c.seq_jumps = in->seq_jumps();
  c.job_ns = in->what_if_job_ns();
  c.job_ns_without_stragglers = in->what_if_job_ns_without_stragglers();
  // A rank's host: the SharedString of `like`'s rank i when the text is
  // the same, else a new one.
  auto host_of = [like](size_t i, const flatbuffers::String* text) {
    if (text == nullptr) return SharedString();
    const absl::string_view view(text->c_str(), text->size());
    if (like != nullptr && i < like->ranks.size() &&
        like->ranks[i].host.str() == view) {
      return like->ranks[i].host;
    }
    return SharedString(view);
  };
  if (const auto* rows = in->rank_rows()) {
    const auto* hosts = in->rank_hosts();
    const int32_t host_count =
        hosts != nullptr ? static_cast<int32_t>(hosts->size()) : 0;
    c.ranks.reserve(rows->size());
    for (const fb::RankRow* r : *rows) {
      if (r->host() < -1 || r->host() >= host_count) {
        return DataLoss(absl::StrCat("rank ", r->rank(), " names host ",
                                     r->host(), " of ", host_count));
      }
      const size_t i = c.ranks.size();
      c.ranks.push_back(RankFrom(
          *r, host_of(i, r->host() < 0 ? nullptr : hosts->Get(r->host()))));
    }
  } else if (const auto* ranks = in->ranks()) {
    c.ranks.reserve(ranks->size());
    for (const fb::RankWindow* r : *ranks) {
      const size_t i = c.ranks.size();
      c.ranks.push_back(RankFrom(*r, host_of(i, r->host())));
    }
  }
  if (const auto* pids = in->rank_pids()) {
    if (pids->size() != c.ranks.size()) {
      return DataLoss(absl::StrCat(pids->size(), " rank pids for ",
                                   c.ranks.size(), " ranks"));
    }
    for (size_t i = 0; i < c.ranks.size(); ++i) {
      c.ranks[i].pid =
          std::max<int64_t>(pids->Get(static_cast<uint32_t>(i)), -1);
    }
  }
  if (const auto* clocks = in->rank_clocks()) {
    if (clocks->size() != c.ranks.size()) {
      return DataLoss(absl::StrCat(clocks->size(), " rank clocks for ",
                                   c.ranks.size(), " ranks"));
    }
    for (size_t i = 0; i < c.ranks.size(); ++i) {
      const fb::RankClock* k = clocks->Get(static_cast<uint32_t>(i));
      RankWindow& r = c.ranks[i];
      r.clock_drift_ns_per_s = k->drift_ns_per_s();
      r.clock_instances = k->instances();
      r.clock_residual_ns = k->residual_ns();
      r.clock_connected = (k->flags() & kClockConnected) != 0;
      r.clock_corrected = (k->flags() & kClockCorrected) != 0;
    }
  }
  if (const auto* stragglers = in->stragglers()) {
    c.stragglers.reserve(stragglers->size());
    for (const fb::StragglerWindow* s : *stragglers) {
      StragglerWindow& o = c.stragglers.emplace_back();
      o.rank = s->rank();
      o.wait_caused_ns = s->wait_caused_ns();
      o.arrived_last = s->arrived_last();
      o.compute_ns = s->compute_ns();
      o.comm_ns = s->comm_ns();
      o.unattributed_ns = s->unattributed_ns();
      if (s->host() != nullptr) o.host = s->host()->str();
      o.direct_wait_caused_ns = s->direct_wait_caused_ns();
      if (const auto* via = s->via()) {
        o.via.reserve(via->size());
        for (const fb::StragglerVia* v : *via) {
          o.via.push_back(
              Straggler::Via{.rank = v->rank(), .wait_ns = v->wait_ns()});
        }
      }
      o.saved_ns = s->saved_ns();
      o.pid = std::max<int64_t>(s->pid(), -1);
      RETURN_IF_ERROR(DecodeAttribution(s->attribution_ns(), o.causes));
    }
  }
  const fb::RankTimelines* t = with_timelines ? in->timelines() : nullptr;
  if (t != nullptr) {
    const auto* counts = t->counts();
    const auto* starts = t->start_us();
    const auto* merged = t->merged_us();
    const auto* bins = t->bin_us();
    const auto* states = t->states();
    const auto* us = t->us();
    const size_t n = c.ranks.size();
    if (counts == nullptr || starts == nullptr || merged == nullptr ||
        bins == nullptr || states == nullptr || us == nullptr ||
        counts->size() != n || starts->size() != n || merged->size() != n ||
        bins->size() != n || states->size() != us->size()) {
      return DataLoss(absl::StrCat("rank timelines do not fit ", n, " ranks"));
    }
    c.timelines.resize(n);
    size_t next = 0;
    for (size_t i = 0; i < n; ++i) {
      const uint32_t k = static_cast<uint32_t>(i);
      RankTimeline& o = c.timelines[i];
      o.start_us = starts->Get(k);
      o.merged_us = merged->Get(k);
      o.bin_us = bins->Get(k);
      const size_t count = counts->Get(k);
      if (count > states->size() - next) {
        return DataLoss(absl::StrCat("rank timelines hold ", states->size(),
                                     " segments, fewer than counted"));
      }
      o.segments.resize(count);
      for (size_t j = 0; j < count; ++j, ++next) {
        const uint32_t at = static_cast<uint32_t>(next);
        o.segments[j] = {.state = states->Get(at), .us = us->Get(at)};
      }
    }
    if (next != states->size()) {
      return DataLoss(absl::StrCat("rank timelines hold ", states->size(),
                                   " segments, ", next, " counted"));
    }
  }
  return absl::OkStatus();
}

}  // namespace

std::string EncodeWindowSummary(const WindowSummary& summary) {
  const WindowAnalysis& w = summary.window;
  FlatBufferBuilder b(1024);
  std::vector<Offset<fb::DeviceWindow>> devices;
  devices.reserve(w.devices.size());
  for (const DeviceWindow& d : w.devices) {
    auto stats = EncodeStats(b, d.stats);
    devices.push_back(fb::CreateDeviceWindow(b, d.device, stats, d.kernels));
  }
  auto devices_vec = b.CreateVector(devices);
  std::vector<Offset<fb::BubbleReport>> bubbles;
  bubbles.reserve(w.top_bubbles.size());
  for (const BubbleReport& r : w.top_bubbles) {
    bubbles.push_back(EncodeBubble(b, r));
  }
  auto bubbles_vec = b.CreateVector(bubbles);
  auto job_stats = EncodeStats(b, w.job);
  auto job = b.CreateString(summary.job);
  auto collectives = EncodeCollectives(b, summary.collectives);
  Offset<fb::WindowTrim> trimmed = 0;
  if (const std::optional<WindowTrim>& t = summary.trimmed) {
    trimmed = fb::CreateWindowTrim(
        b, t->limit_bytes, t->original_bytes, t->names_cut, t->devices,
        t->top_bubbles, t->ranks, t->stragglers, t->via, t->timelines);
  }
  fb::WindowSummaryBuilder out(b);
  out.add_schema_version(kWindowSummarySchemaVersion);
  out.add_job(job);
  out.add_start_ns(w.start_ns);
  out.add_end_ns(w.end_ns);
  out.add_job_stats(job_stats);
  out.add_devices(devices_vec);
  out.add_top_bubbles(bubbles_vec);
  out.add_gpu_events(summary.gpu_events);
  out.add_cpu_events(summary.cpu_events);
  out.add_late_events(summary.late_events);
  out.add_closed_by(static_cast<fb::ClosedBy>(summary.closed_by));
  out.add_host_skew_ns(summary.host_skew_ns);
  // Both added later: absent (0, none) they leave the bytes as before.
  if (!collectives.IsNull()) out.add_collectives(collectives);
  out.add_late_collectives(summary.late_collectives);
  // Added later: absent (-1, the default) leaves the bytes as before.
  if (summary.observed_ns) out.add_observed_ns(*summary.observed_ns);
  // Added later: a window that fits has none, and its bytes are as before.
  if (!trimmed.IsNull()) out.add_trimmed(trimmed);
  fb::FinishWindowSummaryBuffer(b, out.Finish());
  return std::string(reinterpret_cast<const char*>(b.GetBufferPointer()),
                     b.GetSize());
}

// Verifies the buffer at `data` (8-byte aligned) and its root's checks.
absl::StatusOr<const fb::WindowSummary*> VerifiedRoot(const uint8_t* data,
                                                      size_t size) {
  flatbuffers::Verifier verifier(data, size);
  if (!fb::VerifyWindowSummaryBuffer(verifier)) {
    return DataLoss(absl::StrCat(
        size, " bytes fail the FlatBuffers verifier or lack identifier BWWS"));
  }
  const fb::WindowSummary* in = fb::GetWindowSummary(data);
  if (in->schema_version() != kWindowSummarySchemaVersion) {
    return DataLoss(absl::StrCat("unsupported schema_version ",
                                 in->schema_version(), " (this build reads ",
                                 kWindowSummarySchemaVersion, ")"));
  }
  // A value appended to the enum after this build: refused rather than read
  // as another reason (docs/state.md#windows).
  if (static_cast<uint8_t>(in->closed_by()) >
      static_cast<uint8_t>(fb::ClosedBy::MAX)) {
    return DataLoss(
        absl::StrCat("unknown closed_by ", static_cast<int>(in->closed_by())));
  }
  return in;
}

absl::StatusOr<WindowSummary> DecodeWindowSummary(
    absl::string_view bytes, WindowDetail detail,
    std::vector<uint64_t>* scratch) {
  const auto* data = reinterpret_cast<const uint8_t*>(bytes.data());
  // FlatBuffers reads scalars and vectors in place, and RocksDB hands values
  // over at any address (UBSan: misaligned loads): decode from an 8-byte
  // aligned copy when the bytes are not aligned.
  std::vector<uint64_t> local;
  if (reinterpret_cast<uintptr_t>(data) % alignof(uint64_t) != 0) {
    std::vector<uint64_t>& aligned = scratch != nullptr ? *scratch : local;
    if (aligned.size() < (bytes.size() + 7) / 8) {
      aligned.resize((bytes.size() + 7) / 8);
    }
    std::memcpy(aligned.data(), bytes.data(), bytes.size());
    data = reinterpret_cast<const uint8_t*>(aligned.data());
  }
  ASSIGN_OR_RETURN(const fb::WindowSummary* in,
                   VerifiedRoot(data, bytes.size()));
  WindowSummary out;
  out.job = in->job()->str();
  WindowAnalysis& w = out.window;
  w.start_ns = in->start_ns();
  w.end_ns = in->end_ns();
  RETURN_IF_ERROR(DecodeStats(in->job_stats(), w.job));
  if (const auto* devices = in->devices()) {
    w.devices.resize(devices->size());
    for (flatbuffers::uoffset_t i = 0; i < devices->size(); ++i) {
      const fb::DeviceWindow* d = devices->Get(i);
      w.devices[i].device = d->device();
      w.devices[i].kernels = d->kernels();
      if (detail == WindowDetail::kFull) {
        RETURN_IF_ERROR(DecodeStats(d->stats(), w.devices[i].stats));
      }
    }
  }
  if (const auto* bubbles = in->top_bubbles()) {
    w.top_bubbles.resize(bubbles->size());
    for (flatbuffers::uoffset_t i = 0; i < bubbles->size(); ++i) {
      RETURN_IF_ERROR(DecodeBubble(bubbles->Get(i), w.top_bubbles[i]));
    }
  }
  out.gpu_events = in->gpu_events();
  out.cpu_events = in->cpu_events();
  out.late_events = in->late_events();
  out.closed_by = static_cast<WindowSummary::ClosedBy>(in->closed_by());
  out.host_skew_ns = in->host_skew_ns();
  out.late_collectives = in->late_collectives();
  if (in->observed_ns() >= 0) out.observed_ns = in->observed_ns();
  out.trimmed = DecodeTrim(in->trimmed());
  RETURN_IF_ERROR(DecodeCollectives(in->collectives(), out.collectives));
  return out;
}

absl::StatusOr<WindowSummaryView> WindowSummaryView::Open(
    absl::string_view bytes) {
  ASSIGN_OR_RETURN(const fb::WindowSummary* in,
                   VerifiedRoot(reinterpret_cast<const uint8_t*>(bytes.data()),
                                bytes.size()));
  return WindowSummaryView(in);
}

int64_t WindowSummaryView::start_ns() const { return root_->start_ns(); }
int64_t WindowSummaryView::end_ns() const { return root_->end_ns(); }
int64_t WindowSummaryView::gpu_events() const { return root_->gpu_events(); }
int64_t WindowSummaryView::cpu_events() const { return root_->cpu_events(); }
int64_t WindowSummaryView::late_events() const { return root_->late_events(); }

int64_t WindowSummaryView::host_skew_ns() const {
  return root_->host_skew_ns();
}

int64_t WindowSummaryView::late_collectives() const {
  return root_->late_collectives();
}

std::optional<int64_t> WindowSummaryView::observed_ns() const {
  const int64_t ns = root_->observed_ns();
  return ns >= 0 ? std::optional<int64_t>(ns) : std::nullopt;
}

std::optional<WindowTrim> WindowSummaryView::trimmed() const {
  return DecodeTrim(root_->trimmed());
}

absl::StatusOr<std::optional<WindowCollectives>>
WindowSummaryView::DecodeCollectives(const WindowCollectives* like,
                                     bool with_timelines) const {
  std::optional<WindowCollectives> out;
  RETURN_IF_ERROR(::bubblewatch::DecodeCollectives(root_->collectives(), out,
                                                   like, with_timelines));
  return out;
}

WindowSummary::ClosedBy WindowSummaryView::closed_by() const {
  return static_cast<WindowSummary::ClosedBy>(root_->closed_by());
}

int32_t WindowSummaryView::device_count() const {
  return root_->devices() ? static_cast<int32_t>(root_->devices()->size()) : 0;
}

absl::StatusOr<UtilizationStats> WindowSummaryView::DecodeJobStats() const {
  UtilizationStats out;
  RETURN_IF_ERROR(DecodeStats(root_->job_stats(), out));
  return out;
}

int32_t WindowSummaryView::top_bubble_count() const {
  return root_->top_bubbles()
             ? static_cast<int32_t>(root_->top_bubbles()->size())
             : 0;
}

BubbleReport WindowSummaryView::TopBubbleExtent(int32_t i) const {
  const fb::BubbleReport* r = root_->top_bubbles()->Get(i);
  BubbleReport out;
  out.device = r->device();
  out.start_ns = r->start_ns();
  out.end_ns = r->end_ns();
  return out;
}

absl::StatusOr<BubbleReport> WindowSummaryView::DecodeTopBubble(
    int32_t i) const {
  BubbleReport out;
  RETURN_IF_ERROR(DecodeBubble(root_->top_bubbles()->Get(i), out));
  return out;
}

}  // namespace bubblewatch
