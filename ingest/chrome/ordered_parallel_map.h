// Work on a stream of items by a few threads, handed back in the order the
// items came: what lets the Chrome-trace reader parse blocks of events on
// every core while the results are merged exactly as a single thread would
// merge them (first error, first copy of a duplicate, name ids, all in file
// order).
//
// The calling thread works too: when it waits for the oldest item, it takes
// a queued one itself instead of sleeping. With 0 extra threads everything
// runs on the calling thread, in order. Threads start only once two items
// are queued at once, so a small input never pays for them.
#ifndef BUBBLEWATCH_INGEST_CHROME_ORDERED_PARALLEL_MAP_H_
#define BUBBLEWATCH_INGEST_CHROME_ORDERED_PARALLEL_MAP_H_

#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

namespace bubblewatch {

template <typename Item>
class OrderedParallelMap {
 public:
  // `work(item, worker)` does an item's work; `worker` is 0 on the calling
  // thread and 1..extra_threads on the others, so that each can keep state
  // of its own (a parser). `work` must not touch state shared between items.
  OrderedParallelMap(int extra_threads, std::function<void(Item&, int)> work)
      : extra_threads_(extra_threads < 0 ? 0 : extra_threads),
        work_(std::move(work)) {}

  // Items still queued are dropped unworked (an early error ends a read);
  // the one a thread is working on is finished first.
  ~OrderedParallelMap() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    queued_cv_.notify_all();
    for (std::thread& t : threads_) t.join();
  }

  OrderedParallelMap(const OrderedParallelMap&) = delete;
  OrderedParallelMap& operator=(const OrderedParallelMap&) = delete;

  // Queues `item`; it comes back from PopOldest after every item pushed
  // before it.
  void Push(std::unique_ptr<Item> item) {
    bool start = false;
    {
      std::lock_guard<std::mutex> lock(mu_);
      in_order_.push_back(Slot{std::move(item), false});
      queued_.push_back(&in_order_.back());
      start = threads_.empty() && extra_threads_ > 0 && queued_.size() >= 2;
    }
    if (start) {
      for (int i = 1; i <= extra_threads_; ++i) {
        threads_.emplace_back([this, i] { Run(i); });
      }
    }
    queued_cv_.notify_one();
  }

  // The oldest item, its work done (on this thread if no other took it);
  // nullptr when nothing is pushed.
  std::unique_ptr<Item> PopOldest() {
    std::unique_lock<std::mutex> lock(mu_);
    if (in_order_.empty()) return nullptr;
    while (!in_order_.front().done) {
      if (!queued_.empty()) {
        WorkOne(lock, /*worker=*/0);
      } else {
        done_cv_.wait(lock);
      }
    }
    std::unique_ptr<Item> item = std::move(in_order_.front().item);
    in_order_.pop_front();
    return item;
  }

  // Items pushed and not yet popped.
  size_t size() const {
    std::lock_guard<std::mutex> lock(mu_);
    return in_order_.size();
  }

 private:
  struct Slot {
    std::unique_ptr<Item> item;
    bool done;
  };

  // Takes the first queued item and works on it with the lock released.
  void WorkOne(std::unique_lock<std::mutex>& lock, int worker) {
    Slot* slot = queued_.front();
    queued_.pop_front();
    lock.unlock();
    work_(*slot->item, worker);
    lock.lock();
    slot->done = true;
    done_cv_.notify_all();
  }

  void Run(int worker) {
    std::unique_lock<std::mutex> lock(mu_);
    while (true) {
      queued_cv_.wait(lock, [this] { return stop_ || !queued_.empty(); });
      if (stop_) return;  // Queued items are dropped with the map.
      WorkOne(lock, worker);
    }
  }

  const int extra_threads_;
  const std::function<void(Item&, int)> work_;
  mutable std::mutex mu_;
  std::condition_variable queued_cv_;
  std::condition_variable done_cv_;
  // Every pushed item in push order; deque keeps slot addresses stable.
  std::deque<Slot> in_order_;
  std::deque<Slot*> queued_;  // Not yet taken by any thread.
  bool stop_ = false;
  std::vector<std::thread> threads_;
};

}  // namespace bubblewatch

#endif  // BUBBLEWATCH_INGEST_CHROME_ORDERED_PARALLEL_MAP_H_
