#include "ingest/batched_trace.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <optional>
#include <utility>
#include <vector>

#include "schemas/time_types.h"

namespace bubblewatch {
namespace {

// FNV-1a over 64-bit words with a final avalanche: one multiply per word, so
// hashing tens of millions of events costs a fraction of sending them. It is
// an identity, not a security boundary.
class StreamHasher {
 public:
  void Add(uint64_t word) { h_ = (h_ ^ word) * 0x100000001b3ULL; }
  void Add(absl::string_view s) {
    Add(static_cast<uint64_t>(s.size()));
    size_t i = 0;
    for (; i + 8 <= s.size(); i += 8) {
      uint64_t w;
      std::memcpy(&w, s.data() + i, 8);
      Add(w);
    }
    uint64_t tail = 0;
    std::memcpy(&tail, s.data() + i, s.size() - i);
    Add(tail);
  }
  uint64_t Finish() const {
    uint64_t z = h_ + 0x9e3779b97f4a7c15ULL;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    z ^= z >> 31;
    return z == 0 ? 1 : z;
  }

 private:
  uint64_t h_ = 0xcbf29ce484222325ULL;
};

}  // namespace

uint64_t StreamProducerId(const Trace& trace, const BatchHeader& identity,
                          const BatchingOptions& options) {
  StreamHasher h;
  h.Add(absl::string_view(identity.job.data(), identity.job.size()));
  h.Add(absl::string_view(identity.host.data(), identity.host.size()));
  h.Add(static_cast<uint64_t>(static_cast<int64_t>(identity.rank)));
  h.Add(static_cast<uint64_t>(static_cast<int64_t>(identity.world_size)));
  h.Add(static_cast<uint64_t>(options.max_events));
  h.Add(static_cast<uint64_t>(options.max_span_ns));
  h.Add(static_cast<uint64_t>(trace.names.size()));
  for (const std::string& name : trace.names) {
    h.Add(absl::string_view(name.data(), name.size()));
  }
  h.Add(static_cast<uint64_t>(trace.gpu.size()));
  for (const GpuActivity& a : trace.gpu) {
    h.Add(static_cast<uint64_t>(a.start_ns));
    h.Add(static_cast<uint64_t>(a.end_ns));
    h.Add(a.correlation);
    h.Add(a.bytes);
    h.Add((uint64_t{a.name} << 32) | static_cast<uint32_t>(a.device));
    h.Add((static_cast<uint64_t>(static_cast<uint32_t>(a.stream)) << 16) |
          (static_cast<uint64_t>(a.kind) << 8) | (a.pageable ? 1 : 0));
  }
  h.Add(static_cast<uint64_t>(trace.cpu.size()));
  for (const CpuEvent& e : trace.cpu) {
    h.Add(static_cast<uint64_t>(e.start_ns));
    h.Add(static_cast<uint64_t>(e.end_ns));
    h.Add(e.correlation);
    h.Add(e.thread);
    h.Add((uint64_t{e.name} << 8) | static_cast<uint64_t>(e.category));
  }
  // Only when present: ids of streams without collectives stay as they were.
  if (!trace.collectives.empty()) {
    h.Add(static_cast<uint64_t>(trace.collectives.size()));
    for (const CollectiveKernel& c : trace.collectives) {
      h.Add(static_cast<uint64_t>(c.start_ns));
      h.Add(static_cast<uint64_t>(c.end_ns));
      h.Add((static_cast<uint64_t>(static_cast<uint32_t>(c.device)) << 32) |
            static_cast<uint32_t>(c.stream));
      h.Add((uint64_t{c.kernel_name} << 32) | c.collective);
      h.Add((uint64_t{c.process_group} << 32) | c.group_ranks);
      h.Add((uint64_t{c.dtype} << 32) | static_cast<uint32_t>(c.group_size));
      h.Add(static_cast<uint64_t>(c.seq));
      h.Add(static_cast<uint64_t>(c.in_elements));
      h.Add(static_cast<uint64_t>(c.out_elements));
    }
  }
  return h.Finish();
}

BatchedTrace::BatchedTrace(Trace trace, const BatchHeader& identity,
                           const BatchingOptions& options)
    : trace_(std::make_unique<Trace>(std::move(trace))),
      header_(identity),
      encoder_(trace_.get()) {
  auto by_start = [](const auto& a, const auto& b) {
    return a.start_ns < b.start_ns;
  };
  // Readers and the synthetic fleet usually emit sorted runs already.
  std::vector<GpuActivity>& gpu = trace_->gpu;
  std::vector<CpuEvent>& cpu = trace_->cpu;
  if (!std::is_sorted(gpu.begin(), gpu.end(), by_start)) {
    std::stable_sort(gpu.begin(), gpu.end(), by_start);
  }
  if (!std::is_sorted(cpu.begin(), cpu.end(), by_start)) {
    std::stable_sort(cpu.begin(), cpu.end(), by_start);
  }
  header_.sequence = 0;
  // A send/recv's pair index counts over the whole stream, so that the
  // processor pairs its two ends whatever window cuts them
  // (docs/semantics.md#streaming-collectives).
  NumberPointToPointPairs(*trace_);

  const int64_t max_events = std::max<int64_t>(1, options.max_events);
  size_t g = 0;
  size_t c = 0;
  while (g < gpu.size() || c < cpu.size()) {
    BatchSlice slice{
        .gpu_begin = g, .gpu_end = g, .cpu_begin = c, .cpu_end = c};
    int64_t count = 0;
    bool first = true;
    while (count < max_events && (g < gpu.size() || c < cpu.size())) {
      const bool take_gpu =
          c >= cpu.size() ||
          (g < gpu.size() && gpu[g].start_ns <= cpu[c].start_ns);
      const int64_t start = take_gpu ? gpu[g].start_ns : cpu[c].start_ns;
      if (first) {
        slice.first_start_ns = start;
        first = false;
      } else if (options.max_span_ns > 0 &&
                 start - slice.first_start_ns >= options.max_span_ns) {
        break;
      }
      slice.last_start_ns = start;
      take_gpu ? ++g : ++c;
      ++count;
    }
    slice.gpu_end = g;
    slice.cpu_end = c;
    batches_.push_back(slice);
  }
  PlaceCollectives();
  if (header_.producer_id == 0) {
    header_.producer_id = StreamProducerId(*trace_, header_, options);
  }
  // One observation per stream (docs/semantics.md#observations): its id is
  // the producer id, its interval the trace's covered time. Set after the
  // producer id, which hashes the content only.
  if (!header_.observation) {
    std::optional<EventNs> lo, hi;  // None: no event.
    for (const GpuActivity& a : gpu) {
      LowerTo(lo, a.start_ns);
      RaiseTo(hi, a.end_ns);
    }
    for (const CpuEvent& e : cpu) {
      LowerTo(lo, e.start_ns);
      RaiseTo(hi, e.end_ns);
    }
    for (const CollectiveKernel& k : trace_->collectives) {
      LowerTo(lo, k.start_ns);
      RaiseTo(hi, k.end_ns);
    }
    if (lo && *lo <= *hi) {
      header_.observation = ObservationInfo{
          .id = header_.producer_id, .start_ns = *lo, .end_ns = *hi};
    }
  }
}

void BatchedTrace::PlaceCollectives() {
  std::vector<CollectiveKernel>& collectives = trace_->collectives;
  if (collectives.empty() || batches_.empty()) {
    // Nothing to place, or no batch to carry it: a trace without events
    // sends nothing.
    return;
  }
  const std::vector<GpuActivity>& gpu = trace_->gpu;
  std::stable_sort(collectives.begin(), collectives.end(),
                   [](const CollectiveKernel& a, const CollectiveKernel& b) {
                     return a.start_ns < b.start_ns;
                   });
  std::vector<bool> claimed(gpu.size(), false);
  auto batch_of_time = [&](int64_t start_ns) {
    auto it = std::upper_bound(
        batches_.begin(), batches_.end(), start_ns,
        [](int64_t t, const BatchSlice& b) { return t < b.first_start_ns; });
    return it == batches_.begin()
               ? size_t{0}
               : static_cast<size_t>(it - batches_.begin()) - 1;
  };
  auto batch_of_gpu = [&](size_t g) {
    // The first batch whose GPU range ends after g holds it: the ranges
    // partition gpu in order.
    auto it = std::upper_bound(
        batches_.begin(), batches_.end(), g,
        [](size_t i, const BatchSlice& b) { return i < b.gpu_end; });
    return static_cast<size_t>(it - batches_.begin());
  };
  std::vector<std::pair<size_t, size_t>> order;  // (batch, record index)
  order.reserve(collectives.size());
  for (size_t i = 0; i < collectives.size(); ++i) {
    const CollectiveKernel& c = collectives[i];
    auto first = std::lower_bound(
        gpu.begin(), gpu.end(), c.start_ns,
        [](const GpuActivity& a, int64_t t) { return a.start_ns < t; });
    size_t batch = SIZE_MAX;
    for (auto it = first; it != gpu.end() && it->start_ns == c.start_ns; ++it) {
      const size_t g = static_cast<size_t>(it - gpu.begin());
      if (claimed[g] || it->kind != GpuActivityKind::kKernel ||
          it->end_ns != c.end_ns || it->device != c.device ||
          it->stream != c.stream || it->name != c.kernel_name) {
        continue;
      }
      claimed[g] = true;
      batch = batch_of_gpu(g);
      break;
    }
    if (batch == SIZE_MAX) batch = batch_of_time(c.start_ns);
    order.emplace_back(batch, i);
  }
  std::stable_sort(
      order.begin(), order.end(),
      [](const auto& a, const auto& b) { return a.first < b.first; });
  std::vector<CollectiveKernel> placed;
  placed.reserve(collectives.size());
  size_t next = 0;
  for (size_t b = 0; b < batches_.size(); ++b) {
    batches_[b].collectives_begin = placed.size();
    while (next < order.size() && order[next].first == b) {
      placed.push_back(collectives[order[next].second]);
      ++next;
    }
    batches_[b].collectives_end = placed.size();
  }
  collectives = std::move(placed);
}

std::span<const uint8_t> BatchedTrace::Encode(size_t i) {
  const BatchSlice& s = batches_[i];
  BatchHeader header = header_;
  header.sequence = i;
  return encoder_.Encode(header, s.gpu_begin, s.gpu_end, s.cpu_begin, s.cpu_end,
                         s.collectives_begin, s.collectives_end);
}

std::span<const uint8_t> BatchedTrace::EncodeEndMarker() {
  BatchHeader header = header_;
  header.sequence = batches_.size();
  header.end_of_stream = true;
  return encoder_.Encode(header, 0, 0, 0, 0);
}

}  // namespace bubblewatch
