#include "ingest/trace_replay.h"

#include <algorithm>
#include <queue>
#include <string>
#include <tuple>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "base/status_macros.h"

namespace bubblewatch {

namespace {

// ReplayTraces over `send`; `poll` serves delivery reports while pacing
// waits, `progress` reports (options.progress set).
absl::Status Replay(const std::vector<BatchedTrace*>& streams, ReplaySend send,
                    absl::FunctionRef<void(absl::Duration)> poll,
                    absl::FunctionRef<void(absl::Duration)> progress,
                    const ReplayOptions& options) {
  // (first event time, stream, batch), smallest first.
  using Next = std::tuple<int64_t, size_t, size_t>;
  std::priority_queue<Next, std::vector<Next>, std::greater<Next>> queue;
  int64_t origin_ns = INT64_MAX;
  // A job's streams still sending, and the streams of it that finished:
  // their end markers wait for the job's last batch. Sent right after its
  // own last batch, the marker of the rank whose batches come first in
  // event time ended the job before the other ranks had sent anything
  // (docs/semantics.md#job-lifecycle), and their events came late.
  absl::flat_hash_map<std::string, int> sending;
  absl::flat_hash_map<std::string, std::vector<size_t>> finished;
  for (size_t s = 0; s < streams.size(); ++s) {
    if (streams[s]->num_batches() == 0) continue;
    ++sending[streams[s]->header().job];
    const int64_t first = streams[s]->batch(0).first_start_ns;
    queue.emplace(first, s, 0);
    origin_ns = std::min(origin_ns, first);
  }
  const absl::Time wall_origin = absl::Now();
  absl::Time next_progress = wall_origin + options.progress_interval;
  while (!queue.empty()) {
    const auto [first_ns, s, b] = queue.top();
    queue.pop();
    BatchedTrace& stream = *streams[s];
    if (options.speed > 0) {
      const double event_offset_ns =
          static_cast<double>(stream.batch(b).last_start_ns - origin_ns);
      const absl::Time due =
          wall_origin + absl::Nanoseconds(event_offset_ns / options.speed);
      // Pacing: wait for the replay clock while serving delivery reports.
      for (absl::Time now = absl::Now(); now < due; now = absl::Now()) {
        poll(std::min(due - now, absl::Milliseconds(100)));
        if (options.progress && now >= next_progress) {
          progress(now - wall_origin);
          next_progress = now + options.progress_interval;
        }
      }
    }
    const std::span<const uint8_t> bytes = stream.Encode(b);
    const std::string& job = stream.header().job;
    const std::string key = BatchKey(stream.header(), options.split_ranks);
    RETURN_IF_ERROR(send(key, bytes, stream.batch(b).events()));
    if (b + 1 < stream.num_batches()) {
      queue.emplace(stream.batch(b + 1).first_start_ns, s, b + 1);
    } else if (options.end_markers) {
      std::vector<size_t>& done = finished[job];
      done.push_back(s);
      if (--sending[job] == 0) {
        // Keyed like the streams' batches: same partition, after them.
        for (size_t ended : done) {
          RETURN_IF_ERROR(
              send(BatchKey(streams[ended]->header(), options.split_ranks),
                   streams[ended]->EncodeEndMarker(), 0));
        }
        finished.erase(job);
      }
    }
    if (options.progress) {
      const absl::Time now = absl::Now();
      if (now >= next_progress) {
        progress(now - wall_origin);
        next_progress = now + options.progress_interval;
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace

std::string BatchKey(const BatchHeader& header, int split_ranks) {
  if (split_ranks <= 0 || header.world_size < split_ranks) return header.job;
  if (!header.host.empty()) return absl::StrCat(header.job, "@", header.host);
  if (header.rank >= 0) return absl::StrCat(header.job, "@rank-", header.rank);
  return header.job;
}

absl::Status ReplayTraces(const std::vector<BatchedTrace*>& streams,
                          EventProducer* producer,
                          const ReplayOptions& options) {
  return Replay(
      streams,
      [producer](absl::string_view key, std::span<const uint8_t> message,
                 int64_t events) {
        return producer->Send(key, message, events);
      },
      [producer](absl::Duration timeout) { producer->Poll(timeout); },
      [&](absl::Duration elapsed) {
        options.progress(producer->stats(), elapsed);
      },
      options);
}

absl::Status ReplayTraces(const std::vector<BatchedTrace*>& streams,
                          ReplaySend send, bool end_markers, int split_ranks) {
  ReplayOptions options;
  options.end_markers = end_markers;
  options.split_ranks = split_ranks;
  return Replay(
      streams, send, [](absl::Duration) {}, [](absl::Duration) {}, options);
}

}  // namespace bubblewatch
