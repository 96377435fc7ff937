#include "storage/window_store.h"

#include "storage/rocksdb_window_store.h"

namespace bubblewatch {

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
