// MemoryKafka: an in-memory CommitKafka, ChangelogKafka
// (processor/commit_kafka.h) and DeadLetterKafka (dead_letter_sink.h) for
// unit tests of the commit protocol and the partition task: one object
// serves all three, as one producer does in `process`, so that a Flush
// delivers the changelog's records and the dead letters with the windows.
// Topics are vectors of records per partition; group offsets a map. A produced
// record waits in a queue until Poll or Flush "delivers" it: appends it to its
// partition and uncounts it from RuntimeShared::undelivered, as the processor's
// delivery callback does, or fails it and sets RuntimeShared::fatal.
//
// Injectable failures:
//   - RefuseProduces: Produce refuses at once (a status, e.g. "message too
//     large" or a full queue), for the next N calls;
//   - FailDeliveries: the next N records fail in their delivery report
//     (a dead letter's failure goes to its DeadLetterSink, as
//     DeadLetterError{.refused = false}, unless RefuseDeadLetters);
//   - RefuseDeadLetters: the next N dead letters are refused for good in
//     their delivery report (too large for the topic, say);
//   - a CrashBudget: after N writes (records delivered, offset commits; a
//     budget shared with the store's file system counts its writes too)
//     the "process" is gone: nothing more is written, RuntimeShared::fatal
//     is set and every call fails with kAborted. The topics keep what was
//     written, for a restarted pipeline over a new MemoryKafka sharing the
//     same MemoryTopics.
//
// MemoryConsumerKafka, last: an in-memory ConsumerKafka
// (processor/consumer_kafka.h) over the same MemoryTopics, its assignments
// and revocations scripted by the test.
#ifndef BUBBLEWATCH_TESTS_PROCESSOR_MEMORY_KAFKA_H_
#define BUBBLEWATCH_TESTS_PROCESSOR_MEMORY_KAFKA_H_

#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "processor/commit_kafka.h"
#include "processor/consumer_kafka.h"
#include "processor/dead_letter_sink.h"
#include "processor/runtime_shared.h"
#include "rocksdb/file_system.h"

namespace bubblewatch::testing {

struct MemoryRecord {
  std::string key;
  std::string value;
  bool tombstone = false;  // A null value (then `value` is empty).
  std::vector<std::pair<std::string, std::string>> headers;
  bool operator==(const MemoryRecord&) const = default;
};

// `record`, read at `offset` of partition `partition`, as the processor's
// consumer hands a message to PartitionTask (views into `record`, which
// must outlive it).
ConsumedMessage ConsumedRecord(int32_t partition, int64_t offset,
                               const MemoryRecord& record);

// What survives a crash: the topics and the group offsets.
struct MemoryTopics {
  // topic -> partitions -> records, in offset order.
  std::map<std::string, std::vector<std::vector<MemoryRecord>>> topics;
  std::map<std::pair<std::string, int32_t>, int64_t> group_offsets;
  bool operator==(const MemoryTopics&) const = default;
};

// Writes allowed before a crash, shared by everything that writes.
struct CrashBudget {
  std::optional<int64_t> writes_left;  // nullopt: no crash.
  bool crashed = false;
  int64_t writes = 0;  // Writes made.
  // One write: false (and crashed from then on) when the budget is spent.
  bool Take() {
    if (crashed) return false;
    if (writes_left.has_value()) {
      if (*writes_left == 0) {
        crashed = true;
        return false;
      }
      --*writes_left;
    }
    ++writes;
    return true;
  }
};

// A store's file system whose WAL appends each take a write from a crash
// budget; once it is spent they fail, as a killed process writes nothing
// more (the crash harnesses' store, beside MemoryKafka's topics).
class CrashingFileSystem : public rocksdb::FileSystemWrapper {
 public:
  CrashingFileSystem() : FileSystemWrapper(rocksdb::FileSystem::Default()) {}
  const char* Name() const override { return "CrashingFileSystem"; }
  void set_budget(CrashBudget* budget) { budget_ = budget; }
  CrashBudget* budget() const { return budget_; }
  rocksdb::IOStatus NewWritableFile(
      const std::string& name, const rocksdb::FileOptions& options,
      std::unique_ptr<rocksdb::FSWritableFile>* result,
      rocksdb::IODebugContext* dbg) override;

 private:
  CrashBudget* budget_ = nullptr;
};

class MemoryKafka : public CommitKafka,
                    public ChangelogKafka,
                    public DeadLetterKafka {
 public:
  // `topics` and `shared` must outlive this.
  MemoryKafka(MemoryTopics* topics, RuntimeShared* shared)
      : topics_(topics), shared_(shared) {}

  void AddTopic(const std::string& topic, int partitions) {
    topics_->topics[topic].resize(partitions);
  }

  void RefuseProduces(absl::Status status, int count = 1) {
    refusal_ = std::move(status);
    refusals_left_ = count;
  }
  void FailDeliveries(absl::Status status, int count = 1) {
    delivery_failure_ = std::move(status);
    delivery_failures_left_ = count;
  }
  void RefuseDeadLetters(int count = 1) { dead_letter_refusals_left_ = count; }
  // Where failed dead letters' reports go (as the processor's delivery
  // callback hands them on); must outlive this, or be reset.
  void set_dead_letter_sink(DeadLetterSink* sink) { dead_letter_sink_ = sink; }
  // Writes beyond `n` (counted from now) are lost with the process.
  void CrashAfterWrites(int64_t n) { budget_->writes_left = n; }
  // Counts this Kafka's writes in `budget` (must outlive this) instead.
  void ShareCrashBudget(CrashBudget* budget) { budget_ = budget; }
  bool crashed() const { return budget_->crashed; }
  // Writes made (delivered records and offset commits; with a shared
  // budget, everyone's).
  int64_t writes() const { return budget_->writes; }
  int64_t produce_calls() const { return produce_calls_; }
  size_t queued() const { return queue_.size(); }

  absl::Status Produce(const std::string& topic, int32_t partition,
                       absl::string_view key, absl::string_view value) override;
  void Poll(absl::Duration timeout) override { Deliver(); }
  void Flush(absl::Duration timeout) override { Deliver(); }
  absl::Status CommitOffsets(const std::vector<PartitionOffset>& offsets,
                             bool sync) override;
  absl::StatusOr<int> PartitionCount(const std::string& topic,
                                     bool just_created,
                                     absl::Duration timeout) override;
  absl::StatusOr<bool> CreateTopicIfMissing(const TopicSpec& spec,
                                            absl::Duration timeout) override;

  // ChangelogKafka. Its records wait in the same queue as Produce's; a
  // read sees what was delivered.
  absl::Status ProduceRecord(const std::string& topic, int32_t partition,
                             absl::string_view key,
                             std::optional<absl::string_view> value,
                             absl::string_view what) override;
  absl::StatusOr<int> TopicPartitions(const std::string& topic,
                                      bool just_created,
                                      absl::Duration timeout) override {
    return PartitionCount(topic, just_created, timeout);
  }
  absl::StatusOr<bool> CreateTopic(const TopicSpec& spec,
                                   absl::Duration timeout) override {
    return CreateTopicIfMissing(spec, timeout);
  }
  absl::Status ReadPartition(
      const std::string& topic, int32_t partition, absl::Duration timeout,
      absl::FunctionRef<void(const Record&)> visit) override;

  // DeadLetterKafka. A dead letter waits in the same queue; its failed
  // delivery goes to the DeadLetterSink (set_dead_letter_sink).
  std::optional<DeadLetterError> ProduceDeadLetter(
      const std::string& topic, const DeadLetter& letter,
      std::unique_ptr<DeadLetter> fallback) override;

 private:
  struct Queued {
    std::string topic;
    int32_t partition;
    MemoryRecord record;
    // A dead letter's minimal form (null for any other record).
    std::unique_ptr<DeadLetter> fallback;
  };
  void Deliver();
  // One write; false when the process is gone (crashed now or before).
  bool Write();

  MemoryTopics* topics_;
  RuntimeShared* shared_;
  std::vector<Queued> queue_;
  absl::Status refusal_;
  int refusals_left_ = 0;
  absl::Status delivery_failure_;
  int delivery_failures_left_ = 0;
  int dead_letter_refusals_left_ = 0;
  DeadLetterSink* dead_letter_sink_ = nullptr;
  CrashBudget own_budget_;
  CrashBudget* budget_ = &own_budget_;
  int64_t produce_calls_ = 0;
};

// A consumer of one topic of `topics`, as one group member sees it: the
// test says which partitions it gets (Assign) or loses (Revoke); the next
// Poll tells the listener (revocations first), each assigned partition
// starting where the listener says, else at the group offset, else at 0
// (auto.offset.reset=earliest). Polls then read the owned partitions in
// partition order, each to its end, then its end of partition (once, until
// more records arrive). Injected errors come before anything else.
class MemoryConsumerKafka : public ConsumerKafka {
 public:
  // Where an assignment hands the listener "no offset yet"
  // (librdkafka's RD_KAFKA_OFFSET_INVALID).
  static constexpr int64_t kNoOffset = -1001;

  // `topics` and `listener` must outlive this.
  MemoryConsumerKafka(MemoryTopics* topics, Listener* listener)
      : topics_(topics), listener_(listener) {}

  // Scripted rebalances, told at the next Poll.
  void Assign(std::vector<int32_t> partitions) {
    to_assign_.insert(to_assign_.end(), partitions.begin(), partitions.end());
  }
  void Revoke(std::vector<int32_t> partitions) {
    to_revoke_.insert(to_revoke_.end(), partitions.begin(), partitions.end());
  }
  // The next Poll returns this error (`code` a librdkafka error code).
  void InjectError(absl::Status error, int code, bool fatal) {
    errors_.push_back({.kind = Event::Kind::kError,
                       .error = std::move(error),
                       .code = code,
                       .fatal = fatal});
  }
  // The next offset the consumer reads of `partition` (-1: not owned).
  int64_t position(int32_t partition) const {
    auto it = positions_.find(partition);
    return it == positions_.end() ? -1 : it->second.next;
  }
  bool closed() const { return closed_; }

  absl::Status Subscribe(const std::string& topic) override;
  Event Poll(absl::Duration timeout) override;
  std::optional<int64_t> HighWatermark(int32_t partition) override;
  void Close() override;

 private:
  struct Position {
    int64_t next = 0;
    bool end_told = false;  // Its end of partition was returned.
  };
  const std::vector<MemoryRecord>& Log(int32_t partition);

  MemoryTopics* topics_;
  Listener* listener_;
  std::string topic_;
  std::vector<int32_t> to_assign_;
  std::vector<int32_t> to_revoke_;
  std::deque<Event> errors_;
  std::map<int32_t, Position> positions_;  // The owned partitions.
  bool closed_ = false;
};

}  // namespace bubblewatch::testing

#endif  // BUBBLEWATCH_TESTS_PROCESSOR_MEMORY_KAFKA_H_
