#include "kafka/fetch_wakeup.h"

#include <algorithm>

#include "kafka/kafka_config.h"

namespace bubblewatch {

FetchWakeup::FetchWakeup(absl::Duration initial_wait, absl::Duration max_wait)
    : initial_wait_(initial_wait),
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

int FetchWakeup::Seek(rd_kafka_t* consumer, const std::string& topic,
                      const std::vector<Lagging>& lagging) {
  if (lagging.empty()) return 0;
  rd_kafka_topic_partition_list_t* list =
      rd_kafka_topic_partition_list_new(static_cast<int>(lagging.size()));
  for (const Lagging& l : lagging) {
    rd_kafka_topic_partition_list_add(list, topic.c_str(), l.partition)
        ->offset = l.next_offset;
  }
  // Asynchronous (timeout 0): the poll loop goes on at once.
  if (rd_kafka_error_t* error = rd_kafka_seek_partitions(consumer, list, 0)) {
    rd_kafka_error_destroy(error);
  }
  rd_kafka_topic_partition_list_destroy(list);
  return static_cast<int>(lagging.size());
}

}  // namespace bubblewatch
