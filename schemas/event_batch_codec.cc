#include "schemas/event_batch_codec.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <span>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "schemas/event_batch_generated.h"

namespace bubblewatch {
namespace {

// One value per record of `field` (peer, pair index: -1 or more, -1 for
// none), or no vector (a null offset) when no record has one.
template <typename T>
flatbuffers::Offset<flatbuffers::Vector<T>> PerRecordField(
    flatbuffers::FlatBufferBuilder& builder,
    std::span<const CollectiveKernel> records, T CollectiveKernel::*field) {
  if (std::none_of(records.begin(), records.end(),
                   [&](const CollectiveKernel& c) { return c.*field >= 0; })) {
    return {};
  }
  T* out = nullptr;
  auto vec = builder.CreateUninitializedVector(records.size(), &out);
  for (const CollectiveKernel& c : records) *out++ = std::max<T>(c.*field, -1);
  return vec;
}

}  // namespace

EventBatchEncoder::EventBatchEncoder(const Trace* trace)
    : trace_(trace),
      builder_(1 << 16),
      remap_(trace->names.size(), 0),
      stamp_(trace->names.size(), 0) {}

uint32_t EventBatchEncoder::Remap(NameId id) {
  if (stamp_[id] != current_stamp_) {
    stamp_[id] = current_stamp_;
    remap_[id] = static_cast<uint32_t>(batch_names_.size());
    batch_names_.push_back(id);
  }
  return remap_[id];
}

std::span<const uint8_t> EventBatchEncoder::Encode(
    const BatchHeader& header, size_t gpu_begin, size_t gpu_end,
    size_t cpu_begin, size_t cpu_end, size_t collectives_begin,
    size_t collectives_end) {
  ++current_stamp_;
  batch_names_.clear();
  builder_.Clear();

  fb::GpuActivity* gpu_out = nullptr;
  auto gpu_vec = builder_.CreateUninitializedVectorOfStructs(
      gpu_end - gpu_begin, &gpu_out);
  for (size_t i = gpu_begin; i < gpu_end; ++i) {
    const GpuActivity& a = trace_->gpu[i];
    *gpu_out++ = fb::GpuActivity(
        a.start_ns, a.end_ns, a.correlation, a.bytes, Remap(a.name), a.device,
        a.stream, static_cast<fb::GpuActivityKind>(a.kind), a.pageable);
  }
  fb::CpuEvent* cpu_out = nullptr;
  auto cpu_vec = builder_.CreateUninitializedVectorOfStructs(
      cpu_end - cpu_begin, &cpu_out);
  for (size_t i = cpu_begin; i < cpu_end; ++i) {
    const CpuEvent& e = trace_->cpu[i];
    *cpu_out++ = fb::CpuEvent(e.start_ns, e.end_ns, e.correlation, e.thread,
                              Remap(e.name),
                              static_cast<fb::CpuEventCategory>(e.category));
  }
  // Left out when there are none, so that such batches are byte for byte
  // what they were before collectives were carried.
  flatbuffers::Offset<flatbuffers::Vector<const fb::CollectiveKernel*>>
      collectives_vec;
  if (collectives_end > collectives_begin) {
    fb::CollectiveKernel* coll_out = nullptr;
    collectives_vec = builder_.CreateUninitializedVectorOfStructs(
        collectives_end - collectives_begin, &coll_out);
    for (size_t i = collectives_begin; i < collectives_end; ++i) {
      const CollectiveKernel& c = trace_->collectives[i];
      *coll_out++ = fb::CollectiveKernel(
          c.start_ns, c.end_ns, c.seq, c.in_elements, c.out_elements,
          Remap(c.kernel_name), RemapOptional(c.collective),
          RemapOptional(c.process_group), RemapOptional(c.group_ranks),
          RemapOptional(c.dtype), c.device, c.stream, c.group_size);
    }
  }
  // Peers and pair indices only when some record has one: other batches
  // keep their bytes.
  const std::span<const CollectiveKernel> records(
      trace_->collectives.data() + collectives_begin,
      collectives_end - collectives_begin);
  auto peers_vec = PerRecordField(builder_, records, &CollectiveKernel::peer);
  auto pair_indices_vec =
      PerRecordField(builder_, records, &CollectiveKernel::pair_index);
  std::vector<flatbuffers::Offset<flatbuffers::String>> strings;
  strings.reserve(batch_names_.size());
  for (NameId id : batch_names_) {
    strings.push_back(builder_.CreateString(trace_->names[id]));
  }
  auto strings_vec = builder_.CreateVector(strings);
  auto job = builder_.CreateString(header.job);
  auto host = builder_.CreateString(header.host);
  fb::EventBatchBuilder batch(builder_);
  batch.add_schema_version(kEventBatchSchemaVersion);
  batch.add_job(job);
  batch.add_host(host);
  batch.add_rank(header.rank);
  batch.add_world_size(header.world_size);
  batch.add_producer_id(header.producer_id);
  batch.add_sequence(header.sequence);
  batch.add_strings(strings_vec);
  batch.add_gpu(gpu_vec);
  batch.add_cpu(cpu_vec);
  if (!collectives_vec.IsNull()) batch.add_collectives(collectives_vec);
  if (!peers_vec.IsNull()) batch.add_collective_peers(peers_vec);
  if (!pair_indices_vec.IsNull()) {
    batch.add_collective_pair_indices(pair_indices_vec);
  }
  // Only when known: a batch without a pid keeps its old bytes.
  if (header.pid >= 0) batch.add_pid(header.pid);
  // Only when set: a batch that is no end marker keeps its old bytes.
  if (header.end_of_stream) batch.add_end_of_stream(true);
  // Only when given: a batch without one keeps its old bytes.
  fb::Observation observation;
  if (header.observation) {
    observation =
        fb::Observation(header.observation->id, header.observation->start_ns,
                        header.observation->end_ns);
    batch.add_observation(&observation);
  }
  fb::FinishEventBatchBuffer(builder_, batch.Finish());
  return {builder_.GetBufferPointer(), builder_.GetSize()};
}

absl::StatusOr<DecodedBatch> DecodeEventBatch(std::span<const uint8_t> bytes) {
  // FlatBuffers structs (8-byte fields) are read in place, and Kafka hands
  // over payloads at any address: decode from an 8-byte aligned copy when
  // the bytes are not aligned.
  std::vector<uint64_t> aligned;
  if (reinterpret_cast<uintptr_t>(bytes.data()) % alignof(uint64_t) != 0) {
    aligned.resize((bytes.size() + 7) / 8);
    std::memcpy(aligned.data(), bytes.data(), bytes.size());
    bytes = {reinterpret_cast<const uint8_t*>(aligned.data()), bytes.size()};
  }
  flatbuffers::Verifier verifier(bytes.data(), bytes.size());
  if (!fb::VerifyEventBatchBuffer(verifier)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "not a valid EventBatch (", bytes.size(),
        " bytes fail the FlatBuffers verifier or lack identifier BWEB)"));
  }
  const fb::EventBatch* batch = fb::GetEventBatch(bytes.data());
  // The Verifier checks the alignment of a vector's length, not of its
  // elements: a hostile offset can leave the 8-byte structs misaligned,
  // and reading them would be undefined behaviour.
  auto misaligned = [](const void* p, size_t align) {
    return reinterpret_cast<uintptr_t>(p) % align != 0;
  };
  // (An empty vector has nothing to read; the builder leaves those
  // unaligned.)
  if ((batch->gpu() != nullptr && batch->gpu()->size() > 0 &&
       misaligned(batch->gpu()->Data(), alignof(fb::GpuActivity))) ||
      (batch->cpu() != nullptr && batch->cpu()->size() > 0 &&
       misaligned(batch->cpu()->Data(), alignof(fb::CpuEvent))) ||
      (batch->collectives() != nullptr && batch->collectives()->size() > 0 &&
       misaligned(batch->collectives()->Data(),
                  alignof(fb::CollectiveKernel)))) {
    return absl::InvalidArgumentError(
        "not a valid EventBatch (an event vector is misaligned)");
  }
  if (batch->schema_version() != kEventBatchSchemaVersion) {
    return absl::InvalidArgumentError(absl::StrCat(
        "unsupported EventBatch schema_version ", batch->schema_version(),
        " (this build reads ", kEventBatchSchemaVersion, ")"));
  }
  DecodedBatch out;
  BatchHeader& h = out.header;
  h.job = batch->job()->str();
  h.host = batch->host() ? batch->host()->str() : "";
  h.rank = batch->rank();
  h.world_size = batch->world_size();
  // Below 0 is unknown, whatever a writer put there.
  h.pid = std::max<int64_t>(batch->pid(), -1);
  h.producer_id = batch->producer_id();
  h.sequence = batch->sequence();
  h.end_of_stream = batch->end_of_stream();
  if (const fb::Observation* o = batch->observation()) {
    h.observation = ObservationInfo{
        .id = o->id(), .start_ns = o->start_ns(), .end_ns = o->end_ns()};
  }

  Trace& t = out.trace;
  t.job = h.job;
  t.host = h.host;
  t.rank = h.rank;
  t.world_size = h.world_size;
  t.pid = h.pid;
  const uint32_t num_names = batch->strings() ? batch->strings()->size() : 0;
  t.names.reserve(num_names);
  for (uint32_t i = 0; i < num_names; ++i) {
    t.names.emplace_back(batch->strings()->Get(i)->string_view());
  }
  if (const auto* gpu = batch->gpu()) {
    t.gpu.reserve(gpu->size());
    for (const fb::GpuActivity* a : *gpu) {
      if (a->name() >= num_names) {
        return absl::InvalidArgumentError(
            absl::StrCat("GPU activity name index ", a->name(),
                         " is outside the string table of ", num_names));
      }
      if (static_cast<uint8_t>(a->kind()) > 2) {
        return absl::InvalidArgumentError(absl::StrCat(
            "unknown GPU activity kind ", static_cast<int>(a->kind())));
      }
      t.gpu.push_back(GpuActivity{
          .start_ns = a->start_ns(),
          .end_ns = a->end_ns(),
          .correlation = a->correlation(),
          .bytes = a->bytes(),
          .name = a->name(),
          .device = a->device(),
          .stream = a->stream(),
          .kind = static_cast<GpuActivityKind>(a->kind()),
          .pageable = a->pageable(),
      });
    }
  }
  if (const auto* cpu = batch->cpu()) {
    t.cpu.reserve(cpu->size());
    for (const fb::CpuEvent* e : *cpu) {
      if (e->name() >= num_names) {
        return absl::InvalidArgumentError(
            absl::StrCat("CPU event name index ", e->name(),
                         " is outside the string table of ", num_names));
      }
      if (static_cast<uint8_t>(e->category()) > 5) {
        return absl::InvalidArgumentError(absl::StrCat(
            "unknown CPU event category ", static_cast<int>(e->category())));
      }
      t.cpu.push_back(CpuEvent{
          .start_ns = e->start_ns(),
          .end_ns = e->end_ns(),
          .correlation = e->correlation(),
          .thread = e->thread(),
          .name = e->name(),
          .category = static_cast<CpuEventCategory>(e->category()),
      });
    }
  }
  const auto* peers = batch->collective_peers();
  const auto* pair_indices = batch->collective_pair_indices();
  const size_t num_collectives =
      batch->collectives() == nullptr ? 0 : batch->collectives()->size();
  for (const auto& [size, what] :
       {std::pair(peers == nullptr ? num_collectives : peers->size(),
                  "collective peers"),
        std::pair(
            pair_indices == nullptr ? num_collectives : pair_indices->size(),
            "collective pair indices")}) {
    if (size != num_collectives) {
      return absl::InvalidArgumentError(
          absl::StrCat(size, " ", what, " for ", num_collectives,
                       " collective records: one each"));
    }
  }
  if (const auto* collectives = batch->collectives()) {
    t.collectives.reserve(collectives->size());
    for (const fb::CollectiveKernel* c : *collectives) {
      const auto index =
          static_cast<flatbuffers::uoffset_t>(t.collectives.size());
      if (c->kernel_name() >= num_names) {
        return absl::InvalidArgumentError(
            absl::StrCat("collective kernel name index ", c->kernel_name(),
                         " is outside the string table of ", num_names));
      }
      for (uint32_t id : {c->collective(), c->process_group(), c->group_ranks(),
                          c->dtype()}) {
        if (id != kNoName && id >= num_names) {
          return absl::InvalidArgumentError(
              absl::StrCat("collective name index ", id,
                           " is outside the string table of ", num_names));
        }
      }
      t.collectives.push_back(CollectiveKernel{
          .start_ns = c->start_ns(),
          .end_ns = c->end_ns(),
          .device = c->device(),
          .stream = c->stream(),
          .kernel_name = c->kernel_name(),
          .collective = c->collective(),
          .process_group = c->process_group(),
          .group_ranks = c->group_ranks(),
          .dtype = c->dtype(),
          .seq = c->seq(),
          .in_elements = c->in_elements(),
          .out_elements = c->out_elements(),
          .group_size = c->group_size(),
          .peer = peers == nullptr ? -1 : std::max(peers->Get(index), -1),
          .pair_index = pair_indices == nullptr
                            ? -1
                            : std::max<int64_t>(pair_indices->Get(index), -1),
      });
    }
  }
  return out;
}

}  // namespace bubblewatch
