// TempDir: a fresh directory for one test (or one fixture), removed with
// everything in it when the object goes away.
#ifndef BUBBLEWATCH_TESTS_TESTING_TEMP_DIR_H_
#define BUBBLEWATCH_TESTS_TESTING_TEMP_DIR_H_

#include <string>

namespace bubblewatch::testing {

class TempDir {
 public:
  // Creates a new, empty directory under the system's temporary directory
  // (TMPDIR, else /tmp) with a name no other TempDir has, even across
  // processes running at once. A failure to create it is a test failure.
  TempDir();
  // Removes the directory and everything in it (errors ignored).
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  // The directory's absolute path, without a trailing '/'.
  const std::string& path() const { return path_; }
  // path() + "/" + name; creates nothing.
  std::string Sub(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

}  // namespace bubblewatch::testing

#endif  // BUBBLEWATCH_TESTS_TESTING_TEMP_DIR_H_
