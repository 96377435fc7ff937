// ConfigFile: a command's options read from a YAML file (`--config FILE`),
// so that a deployment keeps `bubblewatch process --config
// /etc/bubblewatch/process.yaml` instead of a long command line.
//
// The file is one YAML map. Its keys are the command's long option names
// without "--" (`store`, `window`, `property`); its values:
//   - an option with one value: a scalar (`window: 10s`, `store: /var/lib/bw`);
//   - a switch: `true` or `false` (false = as if not given);
//   - a repeatable option: a list (`fail-if: [a, b]`) or one scalar;
//   - `property` (-X): a map of librdkafka properties
//     (`property: {security.protocol: SASL_SSL, sasl.password.file: /p}`),
//     or a list of "key=value" strings.
// What it promises: every problem is one line of kInvalidArgument that names
// the file, the line (1-based) and the key: a file that cannot be read, YAML
// that does not parse, a top level that is not a map, an unknown key, a key
// given twice, a value of the wrong shape (a list for a one-value option, a
// map anywhere but `property`, no value). Values are not checked here (an
// integer or a duration is parsed by CommandLine, which names the line too);
// a value is never quoted in an error, as `property` may hold secrets.
//
// How the file and the command line combine is CommandLine's business
// (cli/command_line.h): the command line wins.
#ifndef BUBBLEWATCH_CLI_CONFIG_FILE_H_
#define BUBBLEWATCH_CLI_CONFIG_FILE_H_

#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace bubblewatch {

// The shape of value an option takes.
enum class ConfigKind {
  kScalar,      // One value.
  kSwitch,      // A flag without value: true or false.
  kList,        // Repeatable: a list or one scalar.
  kProperties,  // -X: a map key -> value, or a list of "key=value".
};

// One key of the file.
struct ConfigSetting {
  std::string key;                  // The option name, without "--".
  std::vector<std::string> values;  // One for kScalar; "key=value" for -X.
  int line = 0;                     // 1-based line of the key.

  bool operator==(const ConfigSetting& o) const {
    return key == o.key && values == o.values;  // Not the line.
  }
};

// The options a file may set, by name.
using ConfigSchema = absl::flat_hash_map<std::string, ConfigKind>;

// Parses `text` (the content of `path`, which errors name) against `schema`.
// Settings come in file order. An empty document sets nothing.
absl::StatusOr<std::vector<ConfigSetting>> ParseConfigFile(
    absl::string_view text, absl::string_view path, const ConfigSchema& schema);

// Reads `path` and parses it as above.
absl::StatusOr<std::vector<ConfigSetting>> LoadConfigFile(
    const std::string& path, const ConfigSchema& schema);

// The keys whose values differ between two readings of one file (added,
// removed or changed), in the order of `after` then the removed ones.
std::vector<std::string> ChangedConfigKeys(
    const std::vector<ConfigSetting>& before,
    const std::vector<ConfigSetting>& after);

}  // namespace bubblewatch

#endif  // BUBBLEWATCH_CLI_CONFIG_FILE_H_
