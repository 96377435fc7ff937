#include "serve/window_materializer.h"

#include <librdkafka/rdkafka.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/status_macros.h"
#include "kafka/kafka_admin.h"
#include "kafka/kafka_config.h"
#include "kafka/kafka_handles.h"
#include "kafka/kafka_status.h"
#include "processor/fleet_topics.h"
#include "schemas/window_summary_codec.h"
#include "spdlog/spdlog.h"
#include "storage/window_key.h"

namespace bubblewatch {
namespace {

constexpr int kPollMs = 100;
constexpr absl::Duration kMetadataTimeout = absl::Seconds(10);
// A partition whose high watermark no fetch has reported yet is asked for
// it at most this often (a blocking request).
constexpr absl::Duration kWatermarkQueryInterval = absl::Seconds(1);
constexpr absl::Duration kWarningInterval = absl::Seconds(10);

absl::string_view Bytes(const void* data, size_t size) {
  return data == nullptr
             ? absl::string_view()
             : absl::string_view(static_cast<const char*>(data), size);
}

}  // namespace

absl::Status WindowMaterializerOptions::Validate() const {
  std::vector<std::string> problems;
  if (brokers.empty()) problems.push_back("brokers must not be empty");
  if (windows_topic.empty()) problems.push_back("windows_topic is empty");
  auto positive = [&](absl::string_view name, absl::Duration d) {
    if (d <= absl::ZeroDuration()) {
      problems.push_back(
          absl::StrCat(name, " must be > 0, got ", absl::FormatDuration(d)));
    }
  };
  positive("retention", retention);
  positive("retention_interval", retention_interval);
  positive("max_batch_wait", max_batch_wait);
  positive("metadata_interval", metadata_interval);
  positive("missing_topic_retry", missing_topic_retry);
  if (max_batch_messages < 1) {
    problems.push_back(absl::StrCat("max_batch_messages must be >= 1, got ",
                                    max_batch_messages));
  }
  if (problems.empty()) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrJoin(problems, "; "));
}

class WindowMaterializer::Impl {
 public:
  Impl(const WindowMaterializerOptions& options, WindowStore* store,
       RdKafkaPtr consumer)
      : options_(options), store_(store), consumer_(std::move(consumer)) {
    status_.topic = options_.windows_topic;
  }

  absl::Status Run() {
    absl::Time next_metadata = absl::InfinitePast();
    absl::Time next_retention = absl::InfinitePast();
    while (!stop_.load()) {
      const absl::Time now = absl::Now();
      if (now >= next_metadata) {
        RETURN_IF_ERROR(RefreshPartitions());
        next_metadata = now + (partitions_ == 0 ? options_.missing_topic_retry
                                                : options_.metadata_interval);
      }
      if (now >= next_retention) {
        absl::StatusOr<RetentionStats> trimmed =
            store_->ApplyRetention(options_.retention);
        if (!trimmed.ok()) return trimmed.status();
        if (trimmed->windows_deleted > 0) {
          spdlog::info("retention removed {} windows of {} jobs",
                       trimmed->windows_deleted, trimmed->jobs_trimmed);
        }
        next_retention = now + options_.retention_interval;
      }
      if (partitions_ == 0) {
        absl::SleepFor(absl::Milliseconds(kPollMs));
        continue;
      }
      std::vector<RdKafkaMessagePtr> batch;
      RETURN_IF_ERROR(Gather(batch));
      if (!batch.empty()) RETURN_IF_ERROR(Apply(batch));
      UpdateLag();
    }
    return absl::OkStatus();
  }

  void Stop() { stop_.store(true); }

  MaterializerStatus status() const {
    absl::MutexLock lock(&mu_);
    return status_;
  }

 private:
  // Reads the partition count; assigns every partition (again) when it
  // grew, each from the next offset the store holds (the beginning when it
  // holds none).
  absl::Status RefreshPartitions() {
    absl::StatusOr<int> count = TopicPartitionCount(
        consumer_.get(), options_.windows_topic, kMetadataTimeout);
    if (absl::IsNotFound(count.status())) {
      if (!missing_logged_) {
        spdlog::warn(
            "windows topic {} does not exist (yet); waiting for it (a "
            "processor creates it on its first assignment, `bubblewatch "
            "topics create` beforehand)",
            options_.windows_topic);
        missing_logged_ = true;
      }
      return absl::OkStatus();
    }
    if (!count.ok()) {
      spdlog::warn("reading the metadata of {}: {}", options_.windows_topic,
                   count.status().ToString());
      return absl::OkStatus();
    }
    if (*count <= partitions_) return absl::OkStatus();
    RdKafkaPartitionListPtr list(rd_kafka_topic_partition_list_new(*count));
    std::vector<std::string> resumed;
    for (int32_t p = 0; p < *count; ++p) {
      if (!next_offset_.contains(p)) {
        ASSIGN_OR_RETURN(std::optional<PartitionProgress> stored,
                         store_->Progress(options_.windows_topic, p));
        next_offset_[p] = stored ? stored->committed_position : -1;
      }
      const int64_t next = next_offset_[p];
      rd_kafka_topic_partition_list_add(list.get(),
                                        options_.windows_topic.c_str(), p)
          ->offset = next >= 0 ? next : RD_KAFKA_OFFSET_BEGINNING;
      if (next >= 0) resumed.push_back(absl::StrCat(p, "@", next));
    }
    RETURN_IF_ERROR(KafkaErrorToStatus(
        rd_kafka_assign(consumer_.get(), list.get()),
        absl::StrCat("assigning the partitions of ", options_.windows_topic)));
    spdlog::info("following {}: {} partitions, resuming {} from the store{}",
                 options_.windows_topic, *count,
                 resumed.empty() ? "none" : absl::StrJoin(resumed, " "),
                 resumed.size() < static_cast<size_t>(*count)
                     ? ", the others from the beginning"
                     : "");
    partitions_ = *count;
    absl::MutexLock lock(&mu_);
    status_.partitions = partitions_;
    return absl::OkStatus();
  }

  // Polls one batch: until max_batch_messages, max_batch_wait after its
  // first message, or a poll that brings nothing (caught up).
  absl::Status Gather(std::vector<RdKafkaMessagePtr>& batch) {
    absl::Time deadline = absl::InfiniteFuture();
    while (static_cast<int>(batch.size()) < options_.max_batch_messages &&
           !stop_.load()) {
      const int timeout_ms =
          batch.empty() ? kPollMs
                        : static_cast<int>(std::clamp<int64_t>(
                              absl::ToInt64Milliseconds(deadline - absl::Now()),
                              0, kPollMs));
      RdKafkaMessagePtr m(rd_kafka_consumer_poll(consumer_.get(), timeout_ms));
      if (!m) break;
      if (m->err == RD_KAFKA_RESP_ERR__PARTITION_EOF) continue;
      if (m->err != RD_KAFKA_RESP_ERR_NO_ERROR) {
        absl::Status s = KafkaErrorToStatus(
            m->err, absl::StrCat("consuming ", options_.windows_topic));
        if (absl::IsUnauthenticated(s) || m->err == RD_KAFKA_RESP_ERR__FATAL) {
          return s;
        }
        Warn(s.ToString());
        continue;
      }
      if (batch.empty()) deadline = absl::Now() + options_.max_batch_wait;
      batch.push_back(std::move(m));
      if (absl::Now() >= deadline) break;
    }
    return absl::OkStatus();
  }

  // One store commit: the newest version of each window of the batch (or
  // its deletion), the job records, the next offset of each partition.
  absl::Status Apply(const std::vector<RdKafkaMessagePtr>& batch) {
    // (job, start) -> the last version in the batch; nullopt: deleted.
    std::map<std::pair<std::string, int64_t>, std::optional<WindowSummary>>
        latest;
    absl::flat_hash_map<std::string, JobUpdate> jobs;
    std::map<int32_t, int64_t> next;
    int64_t invalid = 0;
    std::vector<uint64_t> scratch;
    for (const RdKafkaMessagePtr& m : batch) {
      int64_t& n = next[m->partition];
      n = std::max(n, m->offset + 1);
      const absl::string_view key = Bytes(m->key, m->key_len);
      const auto skip = [&](absl::string_view why) {
        ++invalid;
        Warn(absl::StrCat("skipping ", options_.windows_topic, "/",
                          m->partition, "@", m->offset, ": ", why));
      };
      if (m->payload == nullptr) {  // A tombstone.
        std::string job;
        int64_t start = 0;
        if (!ParseWindowTopicKey(key, &job, &start) ||
            !ValidateJobName(job).ok()) {
          skip("a tombstone whose key is not JOB@WINDOW_START_NS");
          continue;
        }
        latest[{std::move(job), start}] = std::nullopt;
        continue;
      }
      absl::StatusOr<WindowSummary> w = DecodeWindowSummary(
          Bytes(m->payload, m->len), WindowDetail::kFull, &scratch);
      if (!w.ok()) {
        skip(w.status().message());
        continue;
      }
      if (!ValidateJobName(w->job).ok() ||
          w->window.end_ns < w->window.start_ns ||
          key != WindowTopicKey(w->job, w->window.start_ns)) {
        skip("the key does not name the window in the value");
        continue;
      }
      rd_kafka_timestamp_type_t type;
      const int64_t ms = rd_kafka_message_timestamp(m.get(), &type);
      const absl::Time published =
          ms >= 0 ? absl::FromUnixMillis(ms) : absl::Now();
      auto [it, added] = jobs.try_emplace(w->job);
      JobUpdate& u = it->second;
      if (added) u.job = w->job;
      u.last_event_ns = std::max(u.last_event_ns, w->window.end_ns);
      u.last_seen_wall = std::max(u.last_seen_wall, published);
      latest[{w->job, w->window.start_ns}] = *std::move(w);
    }
    StoreBatch out;
    int64_t deletes = 0;
    for (auto& [key, window] : latest) {
      if (window) {
        out.windows.push_back(*std::move(window));
      } else {
        out.window_deletes.push_back(
            WindowDelete{.job = key.first, .start_ns = key.second});
        ++deletes;
      }
    }
    for (auto& [job, update] : jobs) out.jobs.push_back(std::move(update));
    for (const auto& [p, offset] : next) {
      out.progress.push_back(PartitionProgress{.topic = options_.windows_topic,
                                               .partition = p,
                                               .resume_offset = offset,
                                               .committed_position = offset,
                                               .state = {}});
    }
    absl::Status written = store_->Commit(out);
    if (!written.ok()) {
      return absl::Status(
          written.code(),
          absl::StrCat("cannot write windows to the store, stopping: ",
                       written.message()));
    }
    for (const auto& [p, offset] : next) next_offset_[p] = offset;
    absl::MutexLock lock(&mu_);
    status_.windows_applied += static_cast<int64_t>(out.windows.size());
    status_.windows_deleted += deletes;
    status_.invalid_messages += invalid;
    return absl::OkStatus();
  }

  // Lag from the high watermarks librdkafka caches from its fetches; a
  // partition without one yet is asked for it.
  void UpdateLag() {
    const absl::Time now = absl::Now();
    const bool may_query = now >= next_watermark_query_;
    std::optional<int64_t> total = 0;
    for (int32_t p = 0; p < partitions_; ++p) {
      int64_t low = -1, high = -1;
      rd_kafka_get_watermark_offsets(
          consumer_.get(), options_.windows_topic.c_str(), p, &low, &high);
      if (high < 0 && may_query) {
        next_watermark_query_ = now + kWatermarkQueryInterval;
        if (rd_kafka_query_watermark_offsets(
                consumer_.get(), options_.windows_topic.c_str(), p, &low, &high,
                1000) != RD_KAFKA_RESP_ERR_NO_ERROR) {
          high = -1;
        }
      }
      if (high < 0) {
        total.reset();
        break;
      }
      const int64_t next = std::max<int64_t>(next_offset_[p], low);
      *total += std::max<int64_t>(0, high - std::max<int64_t>(next, 0));
    }
    absl::MutexLock lock(&mu_);
    status_.lag_messages = total;
  }

  void Warn(const std::string& message) {
    const absl::Time now = absl::Now();
    if (now < next_warning_) {
      ++warnings_suppressed_;
      return;
    }
    if (warnings_suppressed_ > 0) {
      spdlog::warn("{} ({} similar warnings suppressed)", message,
                   warnings_suppressed_);
    } else {
      spdlog::warn("{}", message);
    }
    warnings_suppressed_ = 0;
    next_warning_ = now + kWarningInterval;
  }

  const WindowMaterializerOptions options_;
  WindowStore* const store_;
  RdKafkaPtr consumer_;
  std::atomic<bool> stop_{false};
  int32_t partitions_ = 0;
  // Partition -> next offset the store holds progress for; -1: none yet.
  absl::flat_hash_map<int32_t, int64_t> next_offset_;
  bool missing_logged_ = false;
  absl::Time next_watermark_query_ = absl::InfinitePast();
  absl::Time next_warning_ = absl::InfinitePast();
  int64_t warnings_suppressed_ = 0;
  mutable absl::Mutex mu_;
  MaterializerStatus status_ ABSL_GUARDED_BY(mu_);
};

absl::StatusOr<std::unique_ptr<WindowMaterializer>> WindowMaterializer::Create(
    const WindowMaterializerOptions& options, WindowStore* store) {
  RETURN_IF_ERROR(options.Validate());
  KafkaConfig config(options.brokers);
  RETURN_IF_ERROR(config.SetAssignments(options.kafka_properties));
  // librdkafka's assign() wants a group id, though this consumer never
  // joins the group nor commits: offsets live in the store, with the
  // windows. One fixed name that no member uses.
  config.Set("group.id", "bubblewatch-serve");
  RETURN_IF_ERROR(config.Require("enable.auto.commit", "false"));
  config.Set("enable.auto.offset.store", "false");
  // Stored offsets can fall below the topic's start (retention deleted
  // them while serve was down): start over from what is there.
  config.SetDefault("auto.offset.reset", "earliest");
  config.SetDefault("queued.max.messages.kbytes", "16384");
  ASSIGN_OR_RETURN(RdKafkaPtr consumer,
                   NewKafkaClient(RD_KAFKA_CONSUMER, config));
  rd_kafka_poll_set_consumer(consumer.get());
  return std::unique_ptr<WindowMaterializer>(new WindowMaterializer(
      std::make_unique<Impl>(options, store, std::move(consumer))));
}

WindowMaterializer::WindowMaterializer(std::unique_ptr<Impl> impl)
    : impl_(std::move(impl)) {}
WindowMaterializer::~WindowMaterializer() = default;
absl::Status WindowMaterializer::Run() { return impl_->Run(); }
void WindowMaterializer::Stop() { impl_->Stop(); }
MaterializerStatus WindowMaterializer::status() const {
  return impl_->status();
}

}  // namespace bubblewatch
