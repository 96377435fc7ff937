#include "ingest/chrome/json_container_scan.h"

#include <algorithm>
#include <cstring>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace bubblewatch {
namespace {

// Where a container starting at text[0] ends (offset past its closing
// bracket), scanning it in the stretches that `cuts` give; nullopt when the
// text ends first. The text lies in a buffer with 64 bytes of padding after
// it, as the reader's buffers have.
template <typename Scan>
std::optional<size_t> EndOf(const std::string& text,
                            const std::vector<size_t>& cuts, Scan scan,
                            JsonScanState* final_state = nullptr) {
  std::vector<char> buffer(text.size() + 64, ' ');
  std::memcpy(buffer.data(), text.data(), text.size());
  JsonScanState state;
  size_t begin = 0;
  std::vector<size_t> bounds = cuts;
  bounds.push_back(text.size());
  for (size_t end : bounds) {
    end = std::min(end, text.size());  // Fixed cuts may lie past a short text.
    if (end < begin) continue;
    const char* after = scan(buffer.data() + begin, buffer.data() + end, state);
    if (after != nullptr) return static_cast<size_t>(after - buffer.data());
    begin = end;
  }
  if (final_state != nullptr) *final_state = state;
  return std::nullopt;
}

const char* Vector(const char* p, const char* end, JsonScanState& s) {
  return ScanJsonContainer(p, end, s);
}
const char* Bytewise(const char* p, const char* end, JsonScanState& s) {
  return ScanJsonContainerBytewise(p, end, s);
}

TEST(JsonContainerScan, FindsTheClosingBracketOfAnEvent) {
  const std::string event =
      R"({"ph": "X", "name": "a}b]\"{", "args": {"x": [1, {"y": 2}]}}, {)";
  const size_t end = event.find("}, {") + 1;
  EXPECT_EQ(EndOf(event, {}, Vector), end);
  EXPECT_EQ(EndOf(event, {}, Bytewise), end);
}

TEST(JsonContainerScan, ALongEventEndsWhereItsBracketIs) {
  // Longer than one 64-byte step, brackets and escapes in strings spread
  // over several steps.
  std::string event = R"({"name": ")";
  for (int i = 0; i < 40; ++i) event += R"(x\\\"}]{[)";
  event += R"(", "args": {"k": "v"}})";
  const size_t end = event.size();
  event += R"(, {"ph": "X"})";
  EXPECT_EQ(EndOf(event, {}, Vector), end);
  EXPECT_EQ(EndOf(event, {}, Bytewise), end);
}

// Invalid JSON, but cut as a byte-by-byte reader cuts it: the backslash
// escapes nothing, the bracket after it counts (in a 64-byte step of its own
// and inside a longer text).
TEST(JsonContainerScan, ABackslashOutsideAStringIsAnOrdinaryByte) {
  for (const std::string& pad : {std::string(), std::string(70, ' ')}) {
    const std::string event = "{\"a\": [1\\]," + pad + " \"b\\\"\": 2}, {";
    const size_t end = event.find("}, {") + 1;
    EXPECT_EQ(EndOf(event, {}, Vector), end) << event;
    EXPECT_EQ(EndOf(event, {}, Bytewise), end) << event;
  }
}

TEST(JsonContainerScan, AnUnfinishedContainerCarriesItsStateOver) {
  const std::string text = R"({"a": "open \" string with } and \)";
  JsonScanState vector_state;
  JsonScanState bytewise_state;
  EXPECT_EQ(EndOf(text, {}, Vector, &vector_state), std::nullopt);
  EXPECT_EQ(EndOf(text, {}, Bytewise, &bytewise_state), std::nullopt);
  EXPECT_EQ(vector_state.depth, 1);
  EXPECT_TRUE(vector_state.in_string);
  EXPECT_TRUE(vector_state.escape_pending);  // The trailing backslash.
  EXPECT_EQ(bytewise_state.depth, 1);
  EXPECT_TRUE(bytewise_state.in_string);
  EXPECT_TRUE(bytewise_state.escape_pending);
}

// The vector scan against the bytewise one on random texts made of the bytes
// that matter, cut into random stretches (cuts at 63/64/65 included, where
// an escape or a string crosses a step).
TEST(JsonContainerScan, AgreesWithTheBytewiseScanOnRandomTexts) {
  std::mt19937 rng(20261201);
  const char alphabet[] = {'{', '}', '[', ']', '"', '\\', 'a', ' ', ','};
  std::uniform_int_distribution<int> pick(0, sizeof(alphabet) - 1);
  std::uniform_int_distribution<int> length(1, 300);
  int ended = 0;
  for (int round = 0; round < 20000; ++round) {
    std::string text = "{";
    const int n = length(rng);
    for (int i = 0; i < n; ++i) {
      // Mostly plain bytes, as real JSON is.
      text += rng() % 3 == 0 ? alphabet[pick(rng)] : 'a';
    }
    std::vector<size_t> cuts;
    const int pieces = static_cast<int>(rng() % 4);
    for (int i = 0; i < pieces; ++i) cuts.push_back(rng() % (text.size() + 1));
    if (round % 7 == 0) cuts = {63, 64, 65, 127, 128};
    std::sort(cuts.begin(), cuts.end());
    JsonScanState vs;
    JsonScanState bs;
    const std::optional<size_t> v = EndOf(text, cuts, Vector, &vs);
    const std::optional<size_t> b = EndOf(text, cuts, Bytewise, &bs);
    ASSERT_EQ(v, b) << "text: " << text;
    if (!v) {
      ASSERT_EQ(vs.depth, bs.depth) << text;
      ASSERT_EQ(vs.in_string, bs.in_string) << text;
      ASSERT_EQ(vs.escape_pending, bs.escape_pending) << text;
    } else {
      ++ended;
    }
  }
  // Both outcomes were exercised.
  EXPECT_GT(ended, 1000);
  EXPECT_LT(ended, 19000);
}

}  // namespace
}  // namespace bubblewatch
