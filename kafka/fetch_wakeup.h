// FetchWakeup: restarts a consumer's fetching that librdkafka put to sleep.
//
// librdkafka before 2.4 stops fetching a partition once its queue holds
// queued.max.messages.kbytes and looks again only when its broker thread
// next wakes, up to a second later (librdkafka#2879; 2.4 added
// fetch.queue.backoff.ms). A consumer that empties the queue faster than
// that waits for the rest of the second, however far behind it is: the
// processor caught up on a backlog at a third of its speed
// (docs/performance.md, "Fetching").
//
// What wakes the broker thread from outside is a seek: librdkafka wakes the
// partition's broker when a seek completes. So when the consumer has had no
// message for a while although a partition lags (the high watermark
// librdkafka last saw is past the consumer's next offset), seeking that
// partition to that very offset restarts its fetch at once. Nothing is
// skipped or read twice by the application: the seek goes to the next
// offset it expects, and a message fetched meanwhile (none had arrived) is
// dropped by librdkafka and fetched again.
//
// A seek also abandons a fetch in flight, so it must not come while a fetch
// is merely slow. The wait before a seek is learned: four times the time the
// last seek took to bring a message (at least `initial_wait`, at most
// `max_wait`, librdkafka's own second), so a broker far away, whose every
// fetch takes long, is given that long. A seek that brings nothing (the
// broker is down, or the high watermark was stale) doubles the wait, up to
// `max_wait`. With librdkafka 2.4 or later it never seeks
// (FetchWakeup::Needed()).
//
// Not thread-safe: one instance per consumer, called from its poll loop.
#ifndef BUBBLEWATCH_KAFKA_FETCH_WAKEUP_H_
#define BUBBLEWATCH_KAFKA_FETCH_WAKEUP_H_

#include <librdkafka/rdkafka.h>

#include <cstdint>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "absl/types/span.h"

namespace bubblewatch {

class FetchWakeup {
 public:
  // Where the consumer stands in one assigned partition.
  struct Position {
    absl::string_view topic;
    int32_t partition;
    int64_t next_offset;  // The next offset it expects; < 0: none yet.
  };

  FetchWakeup(absl::Duration initial_wait = absl::Milliseconds(100),
              absl::Duration max_wait = absl::Seconds(1),
              int librdkafka_version = rd_kafka_version());

  // Whether a librdkafka of that version needs it (before 2.4).
  static bool Needed(int librdkafka_version = rd_kafka_version());

  // A message arrived at `now`: the silence starts over, and the first
  // message after a seek teaches the wait.
  void OnMessage(absl::Time now);

  // Called when a poll brought nothing: if a seek is Due, seeks each of
  // `positions` whose partition lags (librdkafka's last high watermark is
  // past its next offset) to its next offset, asynchronously; errors (a
  // partition revoked meanwhile) are ignored: the next assignment starts it
  // anyway. Nothing with a librdkafka that does not need it.
  void WakeIfStalled(rd_kafka_t* consumer, absl::Span<const Position> positions,
                     absl::Time now);

  // Whether a message at `offset` is one sent again after a seek: its
  // partition was sought and the consumer has handled up to `next_offset`
  // already (an asynchronous seek may race a fetch; never a message not yet
  // handled). Counted.
  bool Refetched(absl::string_view topic, int32_t partition, int64_t offset,
                 int64_t next_offset);

  // The partition was (re)assigned: not sought any more.
  void Forget(absl::string_view topic, int32_t partition);

  // Logs how often it sought and skipped, if it ever did (at exit).
  void LogSummary() const;

  // Whether to seek now: no message for the current wait since the last
  // message or the last seek. A true answer counts as a seek.
  bool Due(absl::Time now);

  absl::Duration wait() const { return wait_; }
  int64_t seeks() const { return seeks_; }
  int64_t refetched() const { return refetched_; }

 private:
  bool needed_;
  absl::Duration initial_wait_;
  absl::Duration max_wait_;
  absl::Duration learned_;                     // The wait after messages flow.
  absl::Duration wait_;                        // The wait now.
  absl::Time since_ = absl::InfinitePast();    // Last message or seek.
  absl::Time seek_at_ = absl::InfinitePast();  // A seek awaiting a message.
  int64_t seeks_ = 0;
  int64_t refetched_ = 0;
  // Topic -> partitions sought since their assignment.
  absl::flat_hash_map<std::string, absl::flat_hash_set<int32_t>> sought_;
};

}  // namespace bubblewatch

#endif  // BUBBLEWATCH_KAFKA_FETCH_WAKEUP_H_
