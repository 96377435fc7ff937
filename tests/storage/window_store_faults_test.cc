// Write failures, injected under RocksDB through its FileSystem API: a full
// disk or an I/O error while writing the WAL must fail Commit with a reason
// and leave nothing of the batch behind. (Tests run as root, so a read-only
// directory cannot be simulated with chmod; a failing file system can.)
#include <atomic>
#include <memory>
#include <string>

#include "absl/strings/match.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "rocksdb/env.h"
#include "rocksdb/file_system.h"
#include "storage/rocksdb_window_store.h"
#include "tests/storage/storage_test_util.h"

namespace bubblewatch {
namespace {

using ::bubblewatch::testing::TempDir;
using ::bubblewatch::testing_util::kWindowNs;
using ::bubblewatch::testing_util::SampleWindow;
using ::testing::HasSubstr;

enum class Fault { kNone, kNoSpace, kIoError };

// Fails appends to WAL files (*.log) while a fault is armed.
class FaultyFileSystem : public rocksdb::FileSystemWrapper {
 public:
  FaultyFileSystem() : FileSystemWrapper(rocksdb::FileSystem::Default()) {}
  const char* Name() const override { return "FaultyFileSystem"; }

  void Arm(Fault fault) { fault_ = fault; }
  Fault fault() const { return fault_; }

  rocksdb::IOStatus NewWritableFile(
      const std::string& name, const rocksdb::FileOptions& options,
      std::unique_ptr<rocksdb::FSWritableFile>* result,
      rocksdb::IODebugContext* dbg) override;

 private:
  std::atomic<Fault> fault_{Fault::kNone};
};

class FaultyWalFile : public rocksdb::FSWritableFileOwnerWrapper {
 public:
  FaultyWalFile(std::unique_ptr<rocksdb::FSWritableFile> file,
                const FaultyFileSystem* fs)
      : FSWritableFileOwnerWrapper(std::move(file)), fs_(fs) {}

  rocksdb::IOStatus Append(const rocksdb::Slice& data,
                           const rocksdb::IOOptions& options,
                           rocksdb::IODebugContext* dbg) override {
    switch (fs_->fault()) {
      case Fault::kNoSpace:
        return rocksdb::IOStatus::NoSpace("injected",
                                          "No space left on device");
      case Fault::kIoError:
        return rocksdb::IOStatus::IOError("injected", "Input/output error");
      case Fault::kNone:
        break;
    }
    return FSWritableFileOwnerWrapper::Append(data, options, dbg);
  }
  rocksdb::IOStatus Append(const rocksdb::Slice& data,
                           const rocksdb::IOOptions& options,
                           const rocksdb::DataVerificationInfo& info,
                           rocksdb::IODebugContext* dbg) override {
    return Append(data, options, dbg);
  }

 private:
  const FaultyFileSystem* fs_;
};

rocksdb::IOStatus FaultyFileSystem::NewWritableFile(
    const std::string& name, const rocksdb::FileOptions& options,
    std::unique_ptr<rocksdb::FSWritableFile>* result,
    rocksdb::IODebugContext* dbg) {
  rocksdb::IOStatus s = target()->NewWritableFile(name, options, result, dbg);
  if (s.ok() && absl::EndsWith(name, ".log")) {
    *result = std::make_unique<FaultyWalFile>(std::move(*result), this);
  }
  return s;
}

class WindowStoreFaults : public ::testing::Test {
 protected:
  WindowStoreFaults()
      : fs_(std::make_shared<FaultyFileSystem>()),
        env_(rocksdb::NewCompositeEnv(fs_)) {}

  std::unique_ptr<RocksDbWindowStore> OpenFaulty() {
    auto store = RocksDbWindowStore::Open(
        dir_.path(), {}, RocksDbWindowStore::Mode::kPrimary, env_.get());
    EXPECT_TRUE(store.ok()) << store.status();
    return store.ok() ? std::move(store).value() : nullptr;
  }

  // Reopens with the real file system and counts what survived.
  void ExpectOnlyFirstBatchStored() {
    auto store = OpenRocksDbWindowStore(dir_.path());
    ASSERT_TRUE(store.ok()) << store.status();
    auto windows =
        (*store)->Scan("job", absl::InfinitePast(), absl::InfiniteFuture());
    ASSERT_TRUE(windows.ok());
    ASSERT_EQ(windows->size(), 1u);
    EXPECT_EQ((*windows)[0].window.start_ns, 0);
    auto progress = (*store)->Progress("t", 0);
    ASSERT_TRUE(progress.ok() && progress->has_value());
    EXPECT_EQ((*progress)->committed_position, 1);
    auto info = (*store)->Job("job");
    ASSERT_TRUE(info.ok() && info->has_value());
    EXPECT_EQ((*info)->window_count, 1);
    auto other = (*store)->Job("other");
    ASSERT_TRUE(other.ok());
    EXPECT_FALSE(other->has_value());
  }

  static StoreBatch Batch(int64_t start, int64_t position) {
    StoreBatch b;
    b.windows.push_back(SampleWindow("job", start));
    b.progress.push_back({"t", 0, position, position});
    return b;
  }

  TempDir dir_;
  std::shared_ptr<FaultyFileSystem> fs_;
  std::unique_ptr<rocksdb::Env> env_;
};

TEST_F(WindowStoreFaults, FullDiskFailsCommitWithAReasonAndWritesNothing) {
  {
    auto store = OpenFaulty();
    ASSERT_TRUE(store->Commit(Batch(0, 1)).ok());
    fs_->Arm(Fault::kNoSpace);
    StoreBatch second = Batch(kWindowNs, 2);
    second.windows.push_back(SampleWindow("other", 0));
    absl::Status status = store->Commit(second);
    EXPECT_EQ(status.code(), absl::StatusCode::kResourceExhausted) << status;
    EXPECT_THAT(status.message(), HasSubstr("committing 2 windows"));
    EXPECT_THAT(status.message(), HasSubstr("No space left on device"));
    // Still refused, without crashing, while the disk stays full.
    EXPECT_FALSE(store->Commit(Batch(2 * kWindowNs, 3)).ok());
    fs_->Arm(Fault::kNone);
  }
  ExpectOnlyFirstBatchStored();
}

TEST_F(WindowStoreFaults, IoErrorFailsCommitAsUnavailable) {
  {
    auto store = OpenFaulty();
    ASSERT_TRUE(store->Commit(Batch(0, 1)).ok());
    fs_->Arm(Fault::kIoError);
    absl::Status status = store->Commit(Batch(kWindowNs, 2));
    EXPECT_EQ(status.code(), absl::StatusCode::kUnavailable) << status;
    EXPECT_THAT(status.message(), HasSubstr("Input/output error"));
    fs_->Arm(Fault::kNone);
  }
  ExpectOnlyFirstBatchStored();
}

}  // namespace
}  // namespace bubblewatch
