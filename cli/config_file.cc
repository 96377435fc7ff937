#include "cli/config_file.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace bubblewatch {
namespace {

// yaml-cpp's messages end with a period at most; keep them to one line.
std::string OneLine(std::string text) {
  std::replace(text.begin(), text.end(), '\n', ' ');
  return text;
}

class Problem {
 public:
  explicit Problem(absl::string_view path) : path_(path) {}
  absl::Status At(const YAML::Mark& mark, absl::string_view key,
                  absl::string_view message) const {
    return absl::InvalidArgumentError(absl::StrCat(
        path_, ":", mark.line + 1, ": ",
        key.empty() ? "" : absl::StrCat("'", key, "': "), message));
  }

 private:
  std::string path_;
};

const char* Shape(const YAML::Node& node) {
  switch (node.Type()) {
    case YAML::NodeType::Sequence:
      return "a list";
    case YAML::NodeType::Map:
      return "a map";
    case YAML::NodeType::Null:
      return "nothing";
    default:
      return "a value";
  }
}

// The text of a scalar node; a quoted or plain empty string is a value.
bool ScalarText(const YAML::Node& node, std::string* out) {
  if (!node.IsScalar()) return false;
  *out = node.Scalar();
  return true;
}

}  // namespace

absl::StatusOr<std::vector<ConfigSetting>> ParseConfigFile(
    absl::string_view text, absl::string_view path,
    const ConfigSchema& schema) {
  const Problem problem(path);
  YAML::Node root;
  try {
    root = YAML::Load(std::string(text));
  } catch (const YAML::Exception& e) {
    return problem.At(e.mark, "", OneLine("not YAML: " + e.msg));
  }
  std::vector<ConfigSetting> out;
  if (root.IsNull()) return out;
  if (!root.IsMap()) {
    return problem.At(root.Mark(), "",
                      absl::StrCat("want a map of option names to values, "
                                   "not ",
                                   Shape(root)));
  }
  absl::flat_hash_set<std::string> seen;
  for (const auto& entry : root) {
    const YAML::Node& key_node = entry.first;
    const YAML::Node& value = entry.second;
    std::string key;
    if (!ScalarText(key_node, &key)) {
      return problem.At(key_node.Mark(), "", "a key must be an option name");
    }
    const YAML::Mark mark = key_node.Mark();
    if (absl::StartsWith(key, "-")) {
      return problem.At(mark, key,
                        "write option names without dashes ('store', not "
                        "'--store')");
    }
    auto kind = schema.find(key);
    if (kind == schema.end()) {
      if (key == "X" && schema.contains("property")) {
        return problem.At(mark, key,
                          "unknown key; -X is --property: write 'property:'");
      }
      return problem.At(mark, key,
                        "unknown key (not an option of this "
                        "command; see --help)");
    }
    if (!seen.insert(key).second) {
      return problem.At(mark, key, "given twice");
    }
    ConfigSetting setting{key, {}, mark.line + 1};
    auto wrong = [&](absl::string_view want) {
      return problem.At(
          mark, key,
          absl::StrCat(
              "wrong type: want ", want, ", not ", Shape(value),
              value.IsNull() ? " (write \"\" for an empty value)" : ""));
    };
    std::string scalar;
    switch (kind->second) {
      case ConfigKind::kScalar:
        if (!ScalarText(value, &scalar)) return wrong("one value");
        setting.values.push_back(scalar);
        break;
      case ConfigKind::kSwitch:
        if (!ScalarText(value, &scalar)) return wrong("true or false");
        // YAML 1.2's core schema spellings.
        if (scalar == "true" || scalar == "True" || scalar == "TRUE") {
          setting.values.push_back("true");
        } else if (scalar != "false" && scalar != "False" &&
                   scalar != "FALSE") {
          return problem.At(mark, key, "wrong type: want true or false");
        }
        break;
      case ConfigKind::kList:
      case ConfigKind::kProperties: {
        const bool properties = kind->second == ConfigKind::kProperties;
        if (ScalarText(value, &scalar)) {
          setting.values.push_back(scalar);
        } else if (value.IsSequence()) {
          for (const YAML::Node& item : value) {
            if (!ScalarText(item, &scalar)) {
              return problem.At(item.Mark(), key,
                                absl::StrCat("wrong type: a list item must be "
                                             "one value, not ",
                                             Shape(item)));
            }
            setting.values.push_back(scalar);
          }
        } else if (properties && value.IsMap()) {
          absl::flat_hash_set<std::string> properties_seen;
          for (const auto& p : value) {
            std::string name;
            if (!ScalarText(p.first, &name) || name.empty()) {
              return problem.At(p.first.Mark(), key,
                                "a property name must be one value");
            }
            const std::string where = absl::StrCat(key, ": ", name);
            if (!properties_seen.insert(name).second) {
              return problem.At(p.first.Mark(), where, "given twice");
            }
            if (!ScalarText(p.second, &scalar)) {
              return problem.At(p.first.Mark(), where,
                                absl::StrCat("wrong type: want one value, "
                                             "not ",
                                             Shape(p.second)));
            }
            setting.values.push_back(absl::StrCat(name, "=", scalar));
          }
        } else {
          return wrong(properties ? "a map of properties or a list of "
                                    "key=value"
                                  : "a list or one value");
        }
        if (properties) {
          for (const std::string& v : setting.values) {
            if (v.find('=') == std::string::npos || v.front() == '=') {
              // The value is not quoted: it may be a mistyped secret.
              return problem.At(mark, key,
                                "a list item must look like key=value");
            }
          }
        }
        break;
      }
    }
    out.push_back(std::move(setting));
  }
  return out;
}

absl::StatusOr<std::vector<ConfigSetting>> LoadConfigFile(
    const std::string& path, const ConfigSchema& schema) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return absl::InvalidArgumentError(absl::StrCat(
        "config file '", path, "': cannot read: ", std::strerror(errno)));
  }
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "config file '", path, "': cannot read: ", std::strerror(errno)));
  }
  return ParseConfigFile(text.str(), path, schema);
}

std::vector<std::string> ChangedConfigKeys(
    const std::vector<ConfigSetting>& before,
    const std::vector<ConfigSetting>& after) {
  auto find = [](const std::vector<ConfigSetting>& in, const std::string& key) {
    return std::find_if(in.begin(), in.end(),
                        [&](const ConfigSetting& s) { return s.key == key; });
  };
  std::vector<std::string> changed;
  for (const ConfigSetting& s : after) {
    auto old = find(before, s.key);
    if (old == before.end() || !(*old == s)) changed.push_back(s.key);
  }
  for (const ConfigSetting& s : before) {
    if (find(after, s.key) == after.end()) changed.push_back(s.key);
  }
  return changed;
}

}  // namespace bubblewatch
