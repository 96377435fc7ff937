#include "kafka/fetch_wakeup.h"

#include <algorithm>

#include "kafka/kafka_config.h"
#include "kafka/kafka_handles.h"
#include "spdlog/spdlog.h"

namespace bubblewatch {

FetchWakeup::FetchWakeup(absl::Duration initial_wait, absl::Duration max_wait,
                         int librdkafka_version)
    : needed_(Needed(librdkafka_version)),
      initial_wait_(initial_wait),
      max_wait_(max_wait),
      learned_(initial_wait),
      wait_(initial_wait) {}

bool FetchWakeup::Needed(int librdkafka_version) {
  return librdkafka_version < kRdKafkaVersionWithFetchQueueBackoff;
}

void FetchWakeup::OnMessage(absl::Time now) {
  if (seek_at_ != absl::InfinitePast()) {
    learned_ = std::clamp(4 * (now - seek_at_), initial_wait_, max_wait_);
    seek_at_ = absl::InfinitePast();
  }
  since_ = now;
  wait_ = learned_;
}

bool FetchWakeup::Due(absl::Time now) {
  if (since_ == absl::InfinitePast()) since_ = now;
  if (now - since_ < wait_) return false;
  since_ = now;
  seek_at_ = now;
  wait_ = std::min(wait_ * 2, max_wait_);
  ++seeks_;
  return true;
}

void FetchWakeup::WakeIfStalled(rd_kafka_t* consumer,
                                absl::Span<const Position> positions,
                                absl::Time now) {
  if (!needed_) return;
  std::vector<const Position*> lagging;
  for (const Position& p : positions) {
    int64_t low = 0, high = 0;
    const std::string topic(p.topic);
    if (p.next_offset >= 0 &&
        rd_kafka_get_watermark_offsets(consumer, topic.c_str(), p.partition,
                                       &low,
                                       &high) == RD_KAFKA_RESP_ERR_NO_ERROR &&
        high > p.next_offset) {
      lagging.push_back(&p);
    }
  }
  if (lagging.empty() || !Due(now)) return;
  RdKafkaPartitionListPtr list(
      rd_kafka_topic_partition_list_new(static_cast<int>(lagging.size())));
  for (const Position* p : lagging) {
    const std::string topic(p->topic);
    rd_kafka_topic_partition_list_add(list.get(), topic.c_str(), p->partition)
        ->offset = p->next_offset;
    sought_[p->topic].insert(p->partition);
  }
  // Asynchronous (timeout 0): the poll loop goes on at once.
  if (rd_kafka_error_t* error =
          rd_kafka_seek_partitions(consumer, list.get(), 0)) {
    rd_kafka_error_destroy(error);
  }
}

bool FetchWakeup::Refetched(absl::string_view topic, int32_t partition,
                            int64_t offset, int64_t next_offset) {
  if (sought_.empty() || offset >= next_offset) return false;
  auto it = sought_.find(topic);
  if (it == sought_.end() || !it->second.contains(partition)) return false;
  ++refetched_;
  return true;
}

void FetchWakeup::Forget(absl::string_view topic, int32_t partition) {
  if (auto it = sought_.find(topic); it != sought_.end()) {
    it->second.erase(partition);
  }
}

void FetchWakeup::LogSummary() const {
  if (seeks_ == 0) return;
  spdlog::info(
      "woke librdkafka's sleeping fetcher {} time(s) (kafka/fetch_wakeup.h); "
      "{} message(s) sent again skipped",
      seeks_, refetched_);
}

}  // namespace bubblewatch
