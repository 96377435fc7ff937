#include "tests/testing/temp_dir.h"

#include <stdlib.h>

#include <filesystem>
#include <system_error>

#include "gtest/gtest.h"

namespace bubblewatch::testing {

TempDir::TempDir() {
  std::string pattern =
      (std::filesystem::temp_directory_path() / "bw-test-XXXXXX").string();
  EXPECT_NE(mkdtemp(pattern.data()), nullptr) << "mkdtemp " << pattern;
  path_ = pattern;
}

TempDir::~TempDir() {
  std::error_code ec;
  std::filesystem::remove_all(path_, ec);
}

}  // namespace bubblewatch::testing
