#include "ingest/chrome/block_pipeline.h"

#include <algorithm>
#include <thread>
#include <utility>

namespace bubblewatch {
namespace {

int ExtraParseThreads(int requested) {
  if (requested >= 0) return requested;
  const unsigned cores = std::thread::hardware_concurrency();
  return cores <= 1 ? 0 : static_cast<int>(std::min(cores - 1, 3u));
}

}  // namespace

BlockPipeline::BlockPipeline(int parse_threads, MergeFn merge, DoneFn done)
    : extra_threads_(ExtraParseThreads(parse_threads)),
      merge_(std::move(merge)),
      done_(std::move(done)) {
  for (int i = 0; i <= extra_threads_; ++i) {
    parsers_.push_back(std::make_unique<ChromeEventParser>());
  }
  map_ = std::make_unique<OrderedParallelMap<ChromeEventBlock>>(
      extra_threads_, [this](ChromeEventBlock& block, int worker) {
        parsers_[worker]->Parse(block);
      });
}

void BlockPipeline::Submit(std::unique_ptr<ChromeEventBlock> block) {
  map_->Push(std::move(block));
  // Bounded memory: at most two blocks more than there are threads.
  while (map_->size() > static_cast<size_t>(extra_threads_) + 2) {
    MergeOldest();
  }
}

absl::Status BlockPipeline::Finish() {
  while (map_->size() > 0) MergeOldest();
  return status_;
}

void BlockPipeline::MergeOldest() {
  std::unique_ptr<ChromeEventBlock> block = map_->PopOldest();
  if (block == nullptr) return;
  if (status_.ok()) status_ = merge_(*block);
  if (done_) done_(*block);
}

}  // namespace bubblewatch
