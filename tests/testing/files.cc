#include "tests/testing/files.h"

#include <unistd.h>

#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace bubblewatch::testing {

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream bytes;
  bytes << in.rdbuf();
  return bytes.str();
}

void WriteFile(const std::string& path, absl::string_view bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  out.close();
  if (!out) ADD_FAILURE() << "could not write " << path;
}

std::string WriteUniqueTempFile(const std::string& name,
                                absl::string_view bytes) {
  std::string path =
      absl::StrCat(::testing::TempDir(), "/", getpid(), "_", name);
  WriteFile(path, bytes);
  return path;
}

}  // namespace bubblewatch::testing
