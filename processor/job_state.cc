#include "processor/job_state.h"

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "processor/legacy_state.h"
#include "schemas/state_record.h"

namespace bubblewatch {

void JobState::NoteProducerEvents(ProducerId producer,
                                  std::optional<EventNs> newest_ns) {
  auto [it, inserted] = producer_newest_ns.try_emplace(producer, newest_ns);
  if (!inserted) it->second = LaterOf(it->second, newest_ns);
}

std::optional<EventNs> JobState::NewestEventNs() const {
  std::optional<EventNs> newest = finalized_through_ns;
  for (const auto& [producer, ns] : producer_newest_ns) {
    newest = LaterOf(newest, ns);
  }
  return newest;
}

bool JobState::AllProducersEnded() const {
  if (producer_sequences.empty()) return false;
  for (const auto& [producer, sequence] : producer_sequences) {
    if (!ended_producers.contains(producer)) return false;
  }
  return true;
}

int JobState::ForgetObservationsBefore(EventNs cutoff_ns) {
  int forgotten = 0;
  for (auto it = last_observations.begin(); it != last_observations.end();) {
    if (it->second.end_ns < cutoff_ns) {
      last_observations.erase(it++);
      ++forgotten;
    } else {
      ++it;
    }
  }
  return forgotten;
}

bool JobState::MarkExpired() {
  if (lifecycle.ended && lifecycle.expired) return false;
  lifecycle.ended = true;
  lifecycle.expired = true;
  return true;
}

int JobState::ForgetProducersBefore(EventNs cutoff_ns) {
  int forgotten = 0;
  for (auto it = producer_newest_ns.begin(); it != producer_newest_ns.end();) {
    if (!it->second || *it->second < cutoff_ns) {
      producer_sequences.erase(it->first);
      ended_producers.erase(it->first);
      producer_newest_ns.erase(it++);
      ++forgotten;
    } else {
      ++it;
    }
  }
  return forgotten;
}

std::string JobState::Serialize() const {
  // Sorted, so equal states serialize equally.
  std::vector<fb::ProducerProgress> producers;
  producers.reserve(producer_sequences.size());
  for (const auto& [producer, sequence] : producer_sequences) {
    auto newest = producer_newest_ns.find(producer);
    producers.emplace_back(
        producer, sequence,
        ToWire(newest != producer_newest_ns.end() ? newest->second
                                                  : finalized_through_ns));
  }
  std::sort(producers.begin(), producers.end(),
            [](const fb::ProducerProgress& a, const fb::ProducerProgress& b) {
              return a.producer_id() < b.producer_id();
            });
  flatbuffers::FlatBufferBuilder builder(64 + 24 * producers.size());
  auto vector = builder.CreateVectorOfStructs(producers);
  // The lifecycle fields only when set: a state without them keeps the
  // bytes it had before they existed.
  flatbuffers::Offset<flatbuffers::Vector<uint64_t>> ended;
  if (!ended_producers.empty()) {
    std::vector<uint64_t> ids(ended_producers.begin(), ended_producers.end());
    std::sort(ids.begin(), ids.end());
    ended = builder.CreateVector(ids);
  }
  flatbuffers::Offset<flatbuffers::Vector<int32_t>> ranks;
  if (!lifecycle.ended_ranks.empty()) {
    std::vector<int32_t> sorted(lifecycle.ended_ranks.begin(),
                                lifecycle.ended_ranks.end());
    std::sort(sorted.begin(), sorted.end());
    ranks = builder.CreateVector(sorted);
  }
  flatbuffers::Offset<flatbuffers::Vector<int64_t>> gaps;
  if (!lifecycle.gaps_ns.empty())
    gaps = builder.CreateVector(lifecycle.gaps_ns);
  // The streams sorted too; a host's name once, however many ranks it has.
  flatbuffers::Offset<
      flatbuffers::Vector<flatbuffers::Offset<fb::ObservationStreamRecord>>>
      streams;
  if (!last_observations.empty()) {
    std::vector<const std::pair<const ObservationStream, ObservationInfo>*>
        sorted;
    sorted.reserve(last_observations.size());
    for (const auto& entry : last_observations) sorted.push_back(&entry);
    std::sort(sorted.begin(), sorted.end(),
              [](const auto* a, const auto* b) { return a->first < b->first; });
    std::vector<flatbuffers::Offset<fb::ObservationStreamRecord>> records;
    records.reserve(sorted.size());
    for (const auto* entry : sorted) {
      const auto& [host, rank, producer] = entry->first;
      const ObservationInfo& o = entry->second;
      auto name = builder.CreateSharedString(host);
      fb::ObservationStreamRecordBuilder stream(builder);
      stream.add_host(name);
      stream.add_rank(rank);
      stream.add_producer_id(producer);
      stream.add_observation_id(o.id);
      stream.add_start_ns(o.start_ns);
      stream.add_end_ns(o.end_ns);
      records.push_back(stream.Finish());
    }
    streams = builder.CreateVector(records);
  }
  fb::JobStateRecordBuilder record(builder);
  record.add_finalized_through_ns(ToWire(finalized_through_ns));
  record.add_producers(vector);
  if (!ended.IsNull()) record.add_ended_producers(ended);
  if (lifecycle.ended) record.add_ended(true);
  if (lifecycle.expired) record.add_expired(true);
  if (!gaps.IsNull()) record.add_gaps_ns(gaps);
  if (lifecycle.batches_after_end != 0) {
    record.add_batches_after_end(lifecycle.batches_after_end);
  }
  // The fields likewise only when set.
  if (lifecycle.overlapping_observations != 0) {
    record.add_overlapping_observations(lifecycle.overlapping_observations);
  }
  if (lifecycle.observations_backwards != 0) {
    record.add_observations_backwards(lifecycle.observations_backwards);
  }
  if (!streams.IsNull()) record.add_last_observations(streams);
  if (buffer_reset_offset != -1) {
    record.add_buffer_reset_offset(buffer_reset_offset);
  }
  // The multi-rank fields likewise only when set.
  if (lifecycle.world_size != -1) record.add_world_size(lifecycle.world_size);
  if (!ranks.IsNull()) record.add_ended_ranks(ranks);
  if (lifecycle.awaiting_ranks()) {
    record.add_awaiting_ranks_since_ns(*lifecycle.awaiting_ranks_since_ns);
  }
  if (split_unit) record.add_split_unit(true);
  auto body = record.Finish();
  return FinishStateRecord(builder, fb::StateBody::JobStateRecord,
                           body.Union());
}

absl::StatusOr<JobState> JobState::Parse(absl::string_view bytes) {
  if (!IsStateRecord(bytes)) return LegacyParseJobState(bytes);
  ASSIGN_OR_RETURN(const fb::StateRecord* record,
                   ReadStateRecord(bytes, fb::StateBody::JobStateRecord,
                                   "stored job state"));
  const fb::JobStateRecord& r = *record->body_as_JobStateRecord();
  JobState state;
  state.finalized_through_ns = FromWire(r.finalized_through_ns());
  state.buffer_reset_offset = r.buffer_reset_offset();
  state.split_unit = r.split_unit();
  state.lifecycle.world_size = r.world_size();
  state.lifecycle.awaiting_ranks_since_ns =
      FromWire(r.awaiting_ranks_since_ns());
  if (r.ended_ranks() != nullptr) {
    for (int32_t rank : *r.ended_ranks()) {
      state.lifecycle.ended_ranks.insert(rank);
    }
  }
  if (r.producers() != nullptr) {
    for (const fb::ProducerProgress* p : *r.producers()) {
      if (!state.producer_sequences.emplace(p->producer_id(), p->sequence())
               .second) {
        return absl::DataLossError(absl::StrCat(
            "stored job state names producer ", p->producer_id(), " twice"));
      }
      state.producer_newest_ns[p->producer_id()] =
          FromWire(p->newest_event_ns());
    }
  }
  if (r.ended_producers() != nullptr) {
    for (uint64_t id : *r.ended_producers()) state.ended_producers.insert(id);
  }
  if (r.last_observations() != nullptr) {
    for (const fb::ObservationStreamRecord* o : *r.last_observations()) {
      ObservationStream stream(
          o->host() != nullptr ? o->host()->str() : std::string(), o->rank(),
          o->producer_id());
      if (!state.last_observations
               .emplace(std::move(stream),
                        ObservationInfo{.id = o->observation_id(),
                                        .start_ns = o->start_ns(),
                                        .end_ns = o->end_ns()})
               .second) {
        return absl::DataLossError(absl::StrCat(
            "stored job state names the observations of host ",
            o->host() != nullptr ? o->host()->str() : std::string(), " rank ",
            o->rank(), " producer ", o->producer_id(), " twice"));
      }
    }
  }
  state.lifecycle = ReadJobLifecycle(bytes);
  return state;
}

}  // namespace bubblewatch
