#include "base/shared_string.h"

#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"

namespace bubblewatch {
namespace {

TEST(SharedString, CopiesShareTheTextAndCompareByIt) {
  const SharedString a = std::string("node-0001.cluster.example.com");
  const SharedString copy = a;
  EXPECT_EQ(&copy.str(), &a.str());  // No second buffer.
  const SharedString other("node-0001.cluster.example.com");
  EXPECT_NE(&other.str(), &a.str());
  EXPECT_EQ(other, a);  // Equal text, separate buffers.
  EXPECT_EQ(a, "node-0001.cluster.example.com");
  EXPECT_EQ(a, std::string("node-0001.cluster.example.com"));
  EXPECT_NE(a, SharedString("node-0002"));
  EXPECT_EQ(absl::string_view(a), "node-0001.cluster.example.com");
  EXPECT_EQ(a.size(), 29u);
}

TEST(SharedString, EmptyIsEmptyHoweverMade) {
  EXPECT_TRUE(SharedString().empty());
  EXPECT_TRUE(SharedString("").empty());
  EXPECT_EQ(SharedString(), SharedString(""));
  EXPECT_EQ(SharedString().str(), "");
  EXPECT_FALSE(SharedString("x").empty());
}

TEST(SharedString, CopiesMayDieOnOtherThreads) {
  const SharedString text("a host name longer than fifteen characters");
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([copy = text] {
      std::vector<SharedString> more(1000, copy);
      ASSERT_EQ(more.back(), "a host name longer than fifteen characters");
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(text, "a host name longer than fifteen characters");
}

}  // namespace
}  // namespace bubblewatch
