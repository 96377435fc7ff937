#include "tests/processor/task_driver.h"

#include <algorithm>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "gtest/gtest.h"
#include "ingest/batched_trace.h"
#include "ingest/trace_reader.h"
#include "ingest/trace_replay.h"
#include "schemas/window_summary_codec.h"
#include "spdlog/spdlog.h"

namespace bubblewatch::testing {

namespace {
// The poll loop's cadence when no message comes (kPollTimeoutMs).
constexpr absl::Duration kTick = absl::Milliseconds(100);
}  // namespace

StreamProcessorOptions ProcessOptions(const std::string& topic) {
  StreamProcessorOptions o;
  o.brokers = "memory";
  o.topic = topic;
  o.group = topic + "-group";
  o.windows_topic = topic + ".windows";
  o.dlq_topic = topic + ".dlq";
  o.state_topic = topic + ".state";
  o.windower.lateness_ns = 5'000'000'000;
  o.idle_timeout = absl::Seconds(3);
  o.exit_when_idle = absl::Seconds(4);
  return o;
}

absl::StatusOr<std::vector<MemoryRecord>> ProduceRecords(
    const std::vector<std::string>& files, const ProduceFiles& produce) {
  // As cli/produce_command.cc builds its streams from FILEs.
  BatchingOptions batching;
  batching.max_events = produce.batch_events;
  if (produce.replay_speed > 0) {
    // Its default --linger, 50 ms, times the speed.
    batching.max_span_ns =
        static_cast<int64_t>(50'000'000 * produce.replay_speed);
  }
  std::vector<std::unique_ptr<BatchedTrace>> streams;
  for (const std::string& path : files) {
    ASSIGN_OR_RETURN(Trace trace, ReadTraceFile(path));
    BatchHeader identity;
    identity.job = produce.job;
    identity.rank = produce.rank >= 0 ? produce.rank : trace.rank;
    identity.world_size = trace.world_size;
    const bool rank_of_a_job =
        identity.rank > 0 || (identity.rank == 0 && identity.world_size > 1);
    identity.host = !trace.host.empty() ? trace.host
                    : rank_of_a_job     ? ""
                                        : produce.local_host;
    streams.push_back(
        std::make_unique<BatchedTrace>(std::move(trace), identity, batching));
  }
  std::vector<BatchedTrace*> ptrs;
  for (auto& s : streams) ptrs.push_back(s.get());
  std::vector<MemoryRecord> out;
  RETURN_IF_ERROR(ReplayTraces(
      ptrs,
      [&](absl::string_view key, std::span<const uint8_t> message, int64_t) {
        out.push_back(MemoryRecord{
            std::string(key),
            std::string(reinterpret_cast<const char*>(message.data()),
                        message.size())});
        return absl::OkStatus();
      },
      produce.end_markers));
  return out;
}

LogCapture::LogCapture()
    : sink_(std::make_shared<spdlog::sinks::ostream_sink_mt>(out_)),
      level_(static_cast<int>(spdlog::default_logger()->level())) {
  sink_->set_pattern("%v");
  spdlog::default_logger()->sinks().push_back(sink_);
  spdlog::default_logger()->set_level(spdlog::level::info);
}

LogCapture::~LogCapture() {
  auto& sinks = spdlog::default_logger()->sinks();
  sinks.erase(std::remove(sinks.begin(), sinks.end(), sink_), sinks.end());
  spdlog::default_logger()->set_level(
      static_cast<spdlog::level::level_enum>(level_));
}

TaskDriver::TaskDriver(StreamProcessorOptions options, std::string store_dir,
                       int partitions)
    : options_(std::move(options)),
      store_dir_(std::move(store_dir)),
      partitions_(partitions),
      // A fixed wall clock: runs repeat exactly.
      now_(absl::FromUnixSeconds(1'800'000'000)),
      last_message_(now_) {
  topics_.topics[options_.topic].resize(partitions_);
  // The output topics exist, as the broker tests' auto-created ones do;
  // the task creates the changelog when missing.
  if (!options_.windows_topic.empty()) {
    topics_.topics[options_.windows_topic].resize(partitions_);
  }
  if (!options_.dlq_topic.empty()) {
    topics_.topics[options_.dlq_topic].resize(1);
  }
}

TaskDriver::~TaskDriver() = default;

void TaskDriver::Send(absl::string_view key, std::span<const uint8_t> value,
                      int32_t partition) {
  topics_.topics[options_.topic][partition].push_back(MemoryRecord{
      std::string(key),
      std::string(reinterpret_cast<const char*>(value.data()), value.size())});
}

void TaskDriver::Send(absl::string_view key, absl::string_view value,
                      int32_t partition) {
  topics_.topics[options_.topic][partition].push_back(
      MemoryRecord{std::string(key), std::string(value)});
}

void TaskDriver::Send(const std::vector<MemoryRecord>& records,
                      int32_t partition) {
  std::vector<MemoryRecord>& log = topics_.topics[options_.topic][partition];
  log.insert(log.end(), records.begin(), records.end());
}

absl::Status TaskDriver::SendFleet(const SyntheticFleetOptions& fleet,
                                   const BatchingOptions& batching,
                                   bool end_markers) {
  ASSIGN_OR_RETURN(std::vector<SyntheticJob> jobs,
                   GenerateSyntheticFleet(fleet));
  // As `produce --synthetic` batches it.
  std::vector<std::unique_ptr<BatchedTrace>> streams;
  for (SyntheticJob& j : jobs) {
    for (Trace& rank_trace : j.ranks) {
      const BatchHeader identity = TraceIdentity(rank_trace);
      streams.push_back(std::make_unique<BatchedTrace>(std::move(rank_trace),
                                                       identity, batching));
    }
  }
  std::vector<BatchedTrace*> ptrs;
  for (auto& s : streams) ptrs.push_back(s.get());
  return ReplayTraces(
      ptrs,
      [&](absl::string_view key, std::span<const uint8_t> message, int64_t) {
        Send(key, message);
        return absl::OkStatus();
      },
      end_markers);
}

absl::Status TaskDriver::Start() {
  ASSIGN_OR_RETURN(store_, OpenRocksDbWindowStore(store_dir_));
  if (make_observer_) {
    ASSIGN_OR_RETURN(observer_, make_observer_(*store_));
    options_.observer = observer_.get();
  }
  shared_ = std::make_unique<RuntimeShared>();
  health_ = std::make_unique<BrokerHealth>();
  task_ = std::make_unique<PartitionTask>(options_, store_.get(), health_.get(),
                                          shared_.get());
  auto kafka = std::make_unique<MemoryKafka>(&topics_, shared_.get());
  kafka_ = kafka.get();
  std::unique_ptr<StateChangelog> changelog;
  if (!options_.state_topic.empty()) {
    changelog = std::make_unique<StateChangelog>(options_.state_topic, kafka_);
  }
  task_->Connect(std::move(kafka), std::move(changelog), kafka_);
  kafka_->set_dead_letter_sink(task_->dead_letters());
  task_->Start(now_);
  // The assignment: every partition, from the restored resume offset, else
  // the group offset, else the start (auto.offset.reset=earliest).
  std::vector<PartitionTask::Assigned> assigned;
  for (int32_t p = 0; p < partitions_; ++p) {
    assigned.push_back({.partition = p, .offset = -1001});
  }
  task_->Assign(assigned);
  RETURN_IF_ERROR(shared_->fatal);
  positions_.clear();
  for (const PartitionTask::Assigned& a : assigned) {
    int64_t offset = a.offset;
    if (offset < 0) {
      auto it = topics_.group_offsets.find({options_.topic, a.partition});
      offset = it == topics_.group_offsets.end() ? 0 : it->second;
    }
    positions_[a.partition] = offset;
  }
  last_message_ = now_;
  return absl::OkStatus();
}

absl::Status TaskDriver::Tick() {
  kafka_->Poll(absl::ZeroDuration());  // The loop serves delivery reports.
  RETURN_IF_ERROR(shared_->fatal);
  return task_->Tick(now_);
}

absl::Status TaskDriver::Poll(int64_t max_messages) {
  if (task_ == nullptr) RETURN_IF_ERROR(Start());
  int64_t read = 0;
  for (auto& [p, next] : positions_) {
    const std::vector<MemoryRecord>& log = topics_.topics[options_.topic][p];
    for (; next < static_cast<int64_t>(log.size()) && read < max_messages;
         ++next, ++read) {
      const MemoryRecord& r = log[next];
      now_ += absl::Milliseconds(1);
      last_message_ = now_;
      const ConsumedMessage message = ConsumedRecord(p, next, r);
      RETURN_IF_ERROR(task_->OnMessage(message, now_));
      RETURN_IF_ERROR(Tick());
    }
    if (next == static_cast<int64_t>(log.size())) task_->OnEndOfPartition(p);
  }
  return Tick();
}

absl::StatusOr<int64_t> TaskDriver::Unread() {
  if (task_ == nullptr) RETURN_IF_ERROR(Start());
  int64_t unread = 0;
  for (const auto& [p, next] : positions_) {
    unread +=
        static_cast<int64_t>(topics_.topics[options_.topic][p].size()) - next;
  }
  return unread;
}

absl::Status TaskDriver::Advance(absl::Duration by) {
  if (task_ == nullptr) RETURN_IF_ERROR(Start());
  for (absl::Time end = now_ + by; now_ < end;) {
    now_ = std::min(end, now_ + kTick);
    RETURN_IF_ERROR(Tick());
  }
  return absl::OkStatus();
}

absl::Status TaskDriver::RunUntilIdle(absl::Duration limit) {
  RETURN_IF_ERROR(Poll());
  const absl::Time deadline = now_ + limit;
  while (!(now_ - last_message_ >= options_.exit_when_idle &&
           task_->AllClosed())) {
    if (now_ >= deadline) {
      return absl::DeadlineExceededError(
          absl::StrCat("not idle after ", absl::FormatDuration(limit)));
    }
    now_ += kTick;
    RETURN_IF_ERROR(Tick());
  }
  RETURN_IF_ERROR(task_->Finish(now_));
  return shared_->fatal;
}

void TaskDriver::Kill() {
  task_.reset();
  kafka_ = nullptr;
  health_.reset();
  shared_.reset();
  observer_.reset();
  store_.reset();
}

std::vector<WindowSummary> TaskDriver::Stored(
    const std::vector<std::string>& jobs) {
  std::vector<WindowSummary> out;
  std::unique_ptr<WindowStore> opened;
  WindowStore* store = store_.get();
  if (store == nullptr) {
    absl::StatusOr<std::unique_ptr<WindowStore>> s =
        OpenRocksDbWindowStore(store_dir_);
    if (!s.ok()) {
      ADD_FAILURE() << s.status();
      return out;
    }
    opened = *std::move(s);
    store = opened.get();
  }
  for (const std::string& job : jobs) {
    absl::StatusOr<std::vector<WindowSummary>> windows =
        store->Scan(job, absl::InfinitePast(), absl::InfiniteFuture());
    if (!windows.ok()) {
      ADD_FAILURE() << windows.status();
      continue;
    }
    for (WindowSummary& w : *windows) out.push_back(std::move(w));
  }
  return out;
}

std::vector<WindowSummary> TaskDriver::Published() {
  std::vector<WindowSummary> out;
  auto it = topics_.topics.find(options_.windows_topic);
  if (it == topics_.topics.end()) return out;
  for (const std::vector<MemoryRecord>& partition : it->second) {
    for (const MemoryRecord& r : partition) {
      absl::StatusOr<WindowSummary> w = DecodeWindowSummary(r.value);
      if (!w.ok()) {
        ADD_FAILURE() << w.status();
        continue;
      }
      out.push_back(*std::move(w));
    }
  }
  return out;
}

std::vector<MemoryRecord> TaskDriver::DeadLetters() const {
  std::vector<MemoryRecord> out;
  auto it = topics_.topics.find(options_.dlq_topic);
  if (it == topics_.topics.end()) return out;
  for (const std::vector<MemoryRecord>& partition : it->second) {
    out.insert(out.end(), partition.begin(), partition.end());
  }
  return out;
}

}  // namespace bubblewatch::testing
