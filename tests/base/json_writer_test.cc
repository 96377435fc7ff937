#include "base/json_writer.h"

#include <cmath>
#include <limits>

#include "gtest/gtest.h"

namespace bubblewatch {
namespace {

TEST(JsonWriter, WritesNestedValuesWithCommas) {
  JsonWriter w;
  w.BeginObject();
  w.Key("a").Int(1);
  w.Key("b").BeginArray().String("x").Double(1.5).Bool(true).Null().EndArray();
  w.Key("c").BeginObject().EndObject();
  w.EndObject();
  EXPECT_EQ(w.str(), R"({"a":1,"b":["x",1.5,true,null],"c":{}})");
}

TEST(JsonWriter, EscapesStrings) {
  JsonWriter w;
  w.String("q\"b\\n\n\t\x01");
  EXPECT_EQ(w.str(), R"("q\"b\\n\n\t\u0001")");
}

// Regression: a job named "bad\xff\xfe-job" put bytes that are
// not UTF-8 into /api/v1/jobs, which made the whole document invalid.
TEST(JsonWriter, BytesThatAreNotUtf8BecomeReplacementCharacters) {
  JsonWriter w;
  w.String("bad\xff\xfe-job \xC3\xA9");
  EXPECT_EQ(w.str(), "\"bad\\ufffd\\ufffd-job \xC3\xA9\"");
}

TEST(JsonWriter, NonFiniteDoublesBecomeNull) {
  JsonWriter w;
  w.BeginArray()
      .Double(std::numeric_limits<double>::infinity())
      .Double(std::nan(""))
      .EndArray();
  EXPECT_EQ(w.str(), "[null,null]");
}

TEST(JsonWriter, PrettyPrintsWithIndent) {
  JsonWriter w(2);
  w.BeginObject().Key("a").BeginArray().Int(1).EndArray().EndObject();
  EXPECT_EQ(w.str(), "{\n  \"a\": [\n    1\n  ]\n}");
}

}  // namespace
}  // namespace bubblewatch
