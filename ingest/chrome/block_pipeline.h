// Blocks of "traceEvents" elements parsed on several threads and merged in
// file order on the calling thread: what lets the Chrome reader use every
// core while its result stays that of reading one event at a time.
//
// Promises:
//   - Each submitted block is parsed (ChromeEventParser, one per thread) and
//     then passed to `merge` on the calling thread, in submission order,
//     exactly once, unless an earlier merge failed: from the first failing
//     merge on, nothing more is merged and status() keeps that error.
//   - After its merge (or instead of it, once one failed) each block goes
//     to `done`, e.g. to give its buffer back for reuse.
//   - Memory stays bounded: at most parse_threads + 2 blocks are in flight;
//     Submit merges the oldest ones while there are more.
//   - The thread count changes the speed only.
// Blocks still in flight when the pipeline is destroyed (an early error) are
// dropped unmerged; a block a thread is parsing is finished first.
#ifndef BUBBLEWATCH_INGEST_CHROME_BLOCK_PIPELINE_H_
#define BUBBLEWATCH_INGEST_CHROME_BLOCK_PIPELINE_H_

#include <functional>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "ingest/chrome/chrome_event_parser.h"
#include "ingest/chrome/ordered_parallel_map.h"

namespace bubblewatch {

// parse_threads: threads that parse events besides the calling thread;
// kChromeParseThreadsAuto = one less than the machine's cores, at most 3;
// 0 = the calling thread alone. Only the speed depends on it.
inline constexpr int kChromeParseThreadsAuto = -1;

class BlockPipeline {
 public:
  using MergeFn = std::function<absl::Status(ChromeEventBlock& block)>;
  using DoneFn = std::function<void(ChromeEventBlock& block)>;

  BlockPipeline(int parse_threads, MergeFn merge, DoneFn done);
  BlockPipeline(const BlockPipeline&) = delete;
  BlockPipeline& operator=(const BlockPipeline&) = delete;

  // Queues `block` for parsing; merges the oldest blocks while too many are
  // in flight.
  void Submit(std::unique_ptr<ChromeEventBlock> block);
  // Merges every block still in flight; returns status().
  absl::Status Finish();
  // OK, or the first merge's error.
  const absl::Status& status() const { return status_; }

 private:
  void MergeOldest();

  const int extra_threads_;
  const MergeFn merge_;
  const DoneFn done_;
  absl::Status status_;
  // One parser per parsing thread; declared before the map, whose threads
  // use them, so that it is destroyed (joined) first.
  std::vector<std::unique_ptr<ChromeEventParser>> parsers_;
  std::unique_ptr<OrderedParallelMap<ChromeEventBlock>> map_;
};

}  // namespace bubblewatch

#endif  // BUBBLEWATCH_INGEST_CHROME_BLOCK_PIPELINE_H_
