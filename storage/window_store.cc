#include "storage/window_store.h"

#include <algorithm>
#include <cstring>
#include <memory>

#include "absl/strings/str_cat.h"
#include "base/option_problems.h"
#include "storage/rocksdb_window_store.h"

namespace bubblewatch {

absl::Status WindowStoreOptions::Validate() const {
  OptionProblems p("WindowStoreOptions");
  p.Check(block_cache_bytes >= 1, "block_cache_bytes",
          absl::StrCat("must be >= 1, not ", block_cache_bytes));
  p.Check(write_buffer_bytes >= 1, "write_buffer_bytes",
          absl::StrCat("must be >= 1, not ", write_buffer_bytes));
  p.Check(max_write_buffers >= 2, "max_write_buffers",
          absl::StrCat("must be >= 2, not ", max_write_buffers));
  return p.ToStatus();
}

void EncodedWindows::Add(int64_t start_ns, absl::string_view bytes) {
  // 64 KiB chunks: a job's hour (360 windows of ~1.2 KiB) takes 7.
  constexpr size_t kChunkWords = (64 << 10) / sizeof(uint64_t);
  const size_t words = (bytes.size() + 7) / 8;
  if (chunks_.empty() || used_words_ + words > chunk_words_) {
    chunk_words_ = std::max(kChunkWords, words);
    chunks_.push_back(std::make_unique_for_overwrite<uint64_t[]>(chunk_words_));
    used_words_ = 0;
  }
  uint64_t* data = chunks_.back().get() + used_words_;
  if (!bytes.empty()) std::memcpy(data, bytes.data(), bytes.size());
  used_words_ += words;
  windows_.push_back(
      Entry{.start_ns = start_ns, .data = data, .size = bytes.size()});
}

absl::StatusOr<std::unique_ptr<WindowStore>> OpenRocksDbWindowStore(
    absl::string_view path, const WindowStoreOptions& options) {
  absl::StatusOr<std::unique_ptr<RocksDbWindowStore>> store =
      RocksDbWindowStore::Open(path, options,
                               RocksDbWindowStore::Mode::kPrimary);
  if (!store.ok()) return store.status();
  return std::unique_ptr<WindowStore>(std::move(store).value());
}

absl::StatusOr<std::unique_ptr<WindowStoreReader>>
OpenRocksDbWindowStoreReadOnly(absl::string_view path,
                               const WindowStoreOptions& options) {
  absl::StatusOr<std::unique_ptr<RocksDbWindowStore>> store =
      RocksDbWindowStore::Open(path, options,
                               RocksDbWindowStore::Mode::kSecondary);
  if (!store.ok()) return store.status();
  return std::unique_ptr<WindowStoreReader>(std::move(store).value());
}

}  // namespace bubblewatch
