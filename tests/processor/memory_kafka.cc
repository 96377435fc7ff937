#include "tests/processor/memory_kafka.h"

#include <algorithm>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace bubblewatch::testing {

ConsumedMessage ConsumedRecord(int32_t partition, int64_t offset,
                               const MemoryRecord& record) {
  return ConsumedMessage{
      .partition = partition,
      .offset = offset,
      .payload = {reinterpret_cast<const uint8_t*>(record.value.data()),
                  record.value.size()},
      .key = record.key,
      .read_headers =
          [](const void* source) {
            return static_cast<const MemoryRecord*>(source)->headers;
          },
      .headers_source = &record};
}

absl::Status MemoryKafka::Produce(const std::string& topic, int32_t partition,
                                  absl::string_view key,
                                  absl::string_view value) {
  ++produce_calls_;
  if (crashed()) return absl::AbortedError("crashed");
  if (refusals_left_ > 0) {
    --refusals_left_;
    return refusal_;
  }
  auto it = topics_->topics.find(topic);
  if (it == topics_->topics.end() || it->second.empty()) {
    return absl::NotFoundError(absl::StrCat("no topic ", topic));
  }
  const int32_t n = static_cast<int32_t>(it->second.size());
  if (partition == kAnyPartition) {
    // A stable hash (FNV-1a), not std::hash: the same on every run.
    uint32_t h = 2166136261u;
    for (char c : key) h = (h ^ static_cast<uint8_t>(c)) * 16777619u;
    partition = static_cast<int32_t>(h % static_cast<uint32_t>(n));
  }
  if (partition < 0 || partition >= n) {
    return absl::NotFoundError(
        absl::StrCat("no partition ", partition, " of ", topic));
  }
  queue_.push_back(Queued{topic, partition,
                          MemoryRecord{std::string(key), std::string(value)},
                          nullptr});
  return absl::OkStatus();
}

bool MemoryKafka::Write() {
  if (budget_->Take()) return true;
  // The process is gone: whatever it was doing stops with this.
  if (shared_->fatal.ok()) shared_->fatal = absl::AbortedError("crashed");
  return false;
}

void MemoryKafka::Deliver() {
  std::vector<Queued> queue = std::move(queue_);
  queue_.clear();
  for (Queued& q : queue) {
    // A crashed process serves no more reports: its records stay
    // undelivered, as they would after a kill.
    if (crashed()) return;
    if (q.fallback != nullptr &&
        (dead_letter_refusals_left_ > 0 || delivery_failures_left_ > 0)) {
      const bool refused = dead_letter_refusals_left_ > 0;
      if (refused) {
        --dead_letter_refusals_left_;
      } else {
        --delivery_failures_left_;
      }
      --shared_->undelivered;
      DeadLetterError error{
          .refused = refused,
          .status = refused ? absl::OkStatus()
                            : absl::Status(
                                  delivery_failure_.code(),
                                  absl::StrCat("delivering to ", q.topic, ": ",
                                               delivery_failure_.message())),
          .description = refused ? "Broker: Message size too large"
                                 : std::string(delivery_failure_.message())};
      if (dead_letter_sink_ != nullptr) {
        dead_letter_sink_->OnDeliveryFailed(error, std::move(q.fallback));
      }
      continue;
    }
    if (delivery_failures_left_ > 0) {
      --delivery_failures_left_;
      --shared_->undelivered;
      shared_->fatal =
          absl::Status(delivery_failure_.code(),
                       absl::StrCat("delivering to ", q.topic, ": ",
                                    delivery_failure_.message()));
      continue;
    }
    if (!Write()) return;
    topics_->topics[q.topic][q.partition].push_back(std::move(q.record));
    --shared_->undelivered;
  }
}

absl::Status MemoryKafka::CommitOffsets(
    const std::vector<PartitionOffset>& offsets, bool sync) {
  if (!Write()) return absl::AbortedError("crashed");
  for (const PartitionOffset& o : offsets) {
    topics_->group_offsets[{o.topic, o.partition}] = o.offset;
  }
  return absl::OkStatus();
}

absl::Status MemoryKafka::ProduceRecord(const std::string& topic,
                                        int32_t partition,
                                        absl::string_view key,
                                        std::optional<absl::string_view> value,
                                        absl::string_view what) {
  if (partition == kAnyPartition) {
    return absl::InvalidArgumentError("a changelog record names its partition");
  }
  absl::Status s = Produce(topic, partition, key, value.value_or(""));
  if (!s.ok()) {
    return absl::Status(
        s.code(), absl::StrCat("writing ", what, " of ", key, " to ", topic,
                               ": ", s.message()));
  }
  queue_.back().record.tombstone = !value.has_value();
  return absl::OkStatus();
}

absl::Status MemoryKafka::ReadPartition(
    const std::string& topic, int32_t partition, absl::Duration timeout,
    absl::FunctionRef<void(const Record&)> visit) {
  if (crashed()) return absl::AbortedError("crashed");
  auto it = topics_->topics.find(topic);
  if (it == topics_->topics.end() || partition < 0 ||
      partition >= static_cast<int32_t>(it->second.size())) {
    return absl::NotFoundError(
        absl::StrCat("no partition ", partition, " of ", topic));
  }
  const std::vector<MemoryRecord>& log = it->second[partition];
  for (size_t i = 0; i < log.size(); ++i) {
    Record r{.offset = static_cast<int64_t>(i), .key = log[i].key};
    if (!log[i].tombstone) r.value = log[i].value;
    visit(r);
  }
  return absl::OkStatus();
}

absl::StatusOr<int> MemoryKafka::PartitionCount(const std::string& topic,
                                                bool just_created,
                                                absl::Duration timeout) {
  if (crashed()) return absl::AbortedError("crashed");
  auto it = topics_->topics.find(topic);
  if (it == topics_->topics.end()) {
    return absl::NotFoundError(absl::StrCat("no topic ", topic));
  }
  return static_cast<int>(it->second.size());
}

absl::StatusOr<bool> MemoryKafka::CreateTopicIfMissing(const TopicSpec& spec,
                                                       absl::Duration timeout) {
  if (crashed()) return absl::AbortedError("crashed");
  auto [it, created] = topics_->topics.try_emplace(spec.name);
  if (created) it->second.resize(spec.partitions);
  return created;
}

std::optional<DeadLetterError> MemoryKafka::ProduceDeadLetter(
    const std::string& topic, const DeadLetter& letter,
    std::unique_ptr<DeadLetter> fallback) {
  if (absl::Status s =
          Produce(topic, kAnyPartition, letter.key, letter.payload);
      !s.ok()) {
    return DeadLetterError{
        .refused = false, .status = s, .description = std::string(s.message())};
  }
  queue_.back().record.headers = letter.headers;
  queue_.back().fallback = std::move(fallback);
  return std::nullopt;
}

const std::vector<MemoryRecord>& MemoryConsumerKafka::Log(int32_t partition) {
  static const std::vector<MemoryRecord> kNone;
  auto it = topics_->topics.find(topic_);
  if (it == topics_->topics.end() || partition < 0 ||
      partition >= static_cast<int32_t>(it->second.size())) {
    return kNone;
  }
  return it->second[partition];
}

absl::Status MemoryConsumerKafka::Subscribe(const std::string& topic) {
  topic_ = topic;
  return absl::OkStatus();
}

ConsumerKafka::Event MemoryConsumerKafka::Poll(absl::Duration timeout) {
  if (closed_) {
    return {.kind = Event::Kind::kError,
            .error = absl::FailedPreconditionError("consumer closed"),
            .fatal = true};
  }
  if (!to_revoke_.empty()) {
    std::vector<int32_t> revoked;
    for (int32_t p : std::exchange(to_revoke_, {})) {
      if (positions_.erase(p) > 0) revoked.push_back(p);
    }
    if (!revoked.empty()) listener_->OnRevoked(revoked);
  }
  if (!to_assign_.empty()) {
    std::vector<PartitionTask::Assigned> assigned;
    for (int32_t p : std::exchange(to_assign_, {})) {
      auto it = topics_->group_offsets.find({topic_, p});
      assigned.push_back({.partition = p,
                          .offset = it == topics_->group_offsets.end()
                                        ? kNoOffset
                                        : it->second});
    }
    listener_->OnAssigned(assigned);
    for (const PartitionTask::Assigned& a : assigned) {
      positions_[a.partition] = {.next = std::max<int64_t>(0, a.offset)};
    }
  }
  if (!errors_.empty()) {
    Event error = std::move(errors_.front());
    errors_.pop_front();
    return error;
  }
  for (auto& [p, position] : positions_) {
    const std::vector<MemoryRecord>& log = Log(p);
    if (position.next < static_cast<int64_t>(log.size())) {
      const MemoryRecord& r = log[position.next];
      position.end_told = false;
      Event event{.kind = Event::Kind::kMessage, .partition = p};
      event.message = ConsumedRecord(p, position.next++, r);
      return event;
    }
    if (!position.end_told) {
      position.end_told = true;
      return {.kind = Event::Kind::kEndOfPartition, .partition = p};
    }
  }
  return {};
}

std::optional<int64_t> MemoryConsumerKafka::HighWatermark(int32_t partition) {
  if (!positions_.contains(partition)) return std::nullopt;
  return static_cast<int64_t>(Log(partition).size());
}

void MemoryConsumerKafka::Close() {
  if (closed_) return;
  closed_ = true;
  std::vector<int32_t> revoked;
  for (const auto& [p, unused] : positions_) revoked.push_back(p);
  positions_.clear();
  if (!revoked.empty()) listener_->OnRevoked(revoked);
}

namespace {

// The WAL file of a CrashingFileSystem: each append takes a write.
class CrashingWalFile : public rocksdb::FSWritableFileOwnerWrapper {
 public:
  CrashingWalFile(std::unique_ptr<rocksdb::FSWritableFile> file,
                  const CrashingFileSystem* fs)
      : FSWritableFileOwnerWrapper(std::move(file)), fs_(fs) {}
  rocksdb::IOStatus Append(const rocksdb::Slice& data,
                           const rocksdb::IOOptions& options,
                           rocksdb::IODebugContext* dbg) override {
    if (fs_->budget() != nullptr && !fs_->budget()->Take()) {
      return rocksdb::IOStatus::IOError("injected", "crashed");
    }
    return FSWritableFileOwnerWrapper::Append(data, options, dbg);
  }
  rocksdb::IOStatus Append(const rocksdb::Slice& data,
                           const rocksdb::IOOptions& options,
                           const rocksdb::DataVerificationInfo& info,
                           rocksdb::IODebugContext* dbg) override {
    return Append(data, options, dbg);
  }

 private:
  const CrashingFileSystem* fs_;
};

}  // namespace

rocksdb::IOStatus CrashingFileSystem::NewWritableFile(
    const std::string& name, const rocksdb::FileOptions& options,
    std::unique_ptr<rocksdb::FSWritableFile>* result,
    rocksdb::IODebugContext* dbg) {
  rocksdb::IOStatus s = target()->NewWritableFile(name, options, result, dbg);
  if (s.ok() && absl::EndsWith(name, ".log")) {
    *result = std::make_unique<CrashingWalFile>(std::move(*result), this);
  }
  return s;
}

}  // namespace bubblewatch::testing
