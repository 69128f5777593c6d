#include "odc/core/config.h"

#include <unistd.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <set>
#include <sstream>
#include <system_error>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "odc/core/error.h"
#include "odc/core/text.h"
#include "config_keys.h"
#include "config_values.h"
#include "yaml_text.h"

namespace odc {
namespace {

using config_values::check_value;
using config_values::did_you_mean;
using config_values::kind_name;
using config_keys::environment_variable;
using config_keys::find_spec;
using config_keys::key_of;
using config_keys::kNonConfigVariables;
using config_keys::section_names;
using config_keys::section_of;
using config_keys::split_path;
using config_keys::unknown_key_message;
using config_keys::upper;
using yaml_text::describe;
using yaml_text::parse_boolean;
using yaml_text::parse_integer;
using yaml_text::parse_number;

constexpr std::string_view kDefaultSource = "default";
constexpr std::string_view kSetSource = "--set";
constexpr std::string_view kEnvironmentPrefix = "environment ";

// Environment and --set values are one-line texts of their own, so a line number would mislead.
bool is_file_source(std::string_view source) {
  return source != kDefaultSource && source != kSetSource &&
         !source.starts_with(kEnvironmentPrefix);
}

// The comment that follows `key:` on the key's line of `text` ('#' and what follows, trimmed), or ""
// when the line holds none there (or the mark or text is unknown). A value YAML read as a comment
// (`stop: ### Answer`) leaves the key empty, which is valid YAML and so not refused.
std::string comment_after_key(std::string_view text, const YAML::Mark& mark, const std::string& key) {
  if (text.empty() || mark.is_null() || mark.pos < 0) return {};
  const auto start = static_cast<std::size_t>(mark.pos);
  if (start >= text.size()) return {};
  const std::size_t end = std::min(text.find('\n', start), text.size());
  const std::string_view line = text.substr(start, end - start);
  if (!line.starts_with(key)) return {};
  const std::size_t colon = line.find(':', key.size());
  if (colon == std::string_view::npos) return {};
  const std::string rest = trim(line.substr(colon + 1), " \t\r");
  return rest.starts_with('#') ? rest : std::string();
}

std::string location(const std::string& source, const YAML::Mark& mark) {
  if (is_file_source(source) && !mark.is_null()) return fmt::format("{}:{}", source, mark.line + 1);
  return source;
}

// Text is UTF-8, as YAML requires (yaml-cpp passes other bytes through, but no dump could write
// them back: the emitter replaces them, so the dump would name a different file), and the keys of
// a map tunable are names at every depth: dotted --set paths address them and the consumers turn
// the map into JSON (model.config -> LlamaConfig, config.json), whose keys are strings.
void check_text(const TunableSpec& spec, const YAML::Node& node, const std::string& source) {
  if (node.IsScalar()) {
    const std::string& text = node.Scalar();
    if (const std::size_t at = invalid_utf8_at(text); at != std::string_view::npos) {
      fail("config key '{}' in {} holds text that is not valid UTF-8 (byte {:#04x} after '{}')", spec.path,
           location(source, node.Mark()), static_cast<unsigned char>(text[at]), text.substr(0, at));
    }
    // A NUL (YAML's "\0") is valid UTF-8, but every path, name and message is cut at it by the
    // system calls and libraries downstream: the file opened would not be the one named.
    if (const std::size_t at = text.find('\0'); at != std::string::npos) {
      fail("config key '{}' in {} holds a NUL character (after '{}'); paths and names cannot contain one",
           spec.path, location(source, node.Mark()), text.substr(0, at));
    }
  } else if (node.IsSequence()) {
    for (const auto& item : node) check_text(spec, item, source);
  } else if (node.IsMap()) {
    for (const auto& entry : node) {
      if (!entry.first.IsScalar()) {
        fail("config key '{}' in {} has a key that is {}, expected a name", spec.path,
             location(source, entry.first.Mark()), describe(entry.first));
      }
      check_text(spec, entry.first, source);
      check_text(spec, entry.second, source);
    }
  }
}

[[noreturn]] void fail_unset(const TunableSpec& spec) {
  if (spec.required) {
    fail("config key '{}' is required but was not set ({}); set it in the config file, with "
         "--set {}=... or {}",
         spec.path, spec.doc, spec.path, environment_variable(spec.path));
  }
  fail("config key '{}' has no value ({}); it is optional and was not set", spec.path, spec.doc);
}

void expect_kind(const TunableSpec& spec, ValueKind kind) {
  if (spec.kind != kind) {
    fail("config key '{}' holds {} but was read as {}", spec.path, kind_name(spec.kind),
         kind_name(kind));
  }
}

}  // namespace

Config::Config(std::vector<TunableSpec> specs) : specs_(std::move(specs)) {
  std::set<std::string> seen;
  for (const auto& declared : specs_) {
    const auto parts = split_path(declared.path);
    ODC_CHECK(parts.size() == 2 && !parts[0].empty() && !parts[1].empty(),
              "tunable path '{}' must be 'section.key'", declared.path);
    ODC_CHECK(seen.insert(declared.path).second, "tunable '{}' is declared twice", declared.path);
    ODC_CHECK(declared.choices.empty() || declared.kind == ValueKind::string || declared.kind == ValueKind::integer,
              "tunable '{}' has choices but is neither a string nor an integer", declared.path);
    ODC_CHECK(!declared.required || declared.default_value.empty(),
              "required tunable '{}' has a default", declared.path);
    ODC_CHECK(!declared.range.bounded() || declared.kind == ValueKind::integer || declared.kind == ValueKind::number,
              "tunable '{}' has a range but is not a number", declared.path);
    if (!declared.default_value.empty()) {
      const std::string label = fmt::format("the default of {}", declared.path);
      set_value(declared, yaml_text::parse(declared.default_value, label, false),
                std::string(kDefaultSource));
    }
  }
}

void Config::load_yaml_file(const std::string& path) {
  std::error_code status;
  if (!std::filesystem::exists(path, status)) {
    fail("cannot read config file '{}': no such file", path);
  }
  if (std::filesystem::is_directory(path, status)) {
    fail("cannot read config file '{}': it is a directory", path);
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    fail("cannot read config file '{}': {}", path,
         std::error_code(errno, std::generic_category()).message());
  }
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) fail("cannot read config file '{}': read error", path);
  load_yaml_text(text.str(), path);
}

void Config::load_yaml_text(const std::string& text, const std::string& source) {
  const YAML::Node root = yaml_text::parse(text, source, true);
  // All or nothing: a file with one bad key leaves the config as it was.
  std::map<std::string, Value> before = values_;
  try {
    merge_node(root, "", source, text);
  } catch (...) {
    values_.swap(before);
    throw;
  }
}

std::vector<std::string> Config::apply_environment() {
  std::map<std::string, Value> before = values_;
  std::vector<std::string> names;
  try {
    for (const auto& declared : specs_) {
      const std::string variable = environment_variable(declared.path);
      names.push_back(variable);
      const char* text = std::getenv(variable.c_str());
      if (text == nullptr) continue;
      const std::string source = std::string(kEnvironmentPrefix) + variable;
      set_value(declared, yaml_text::parse_value(text, source, variable + "='", "'"), source);
    }
  } catch (...) {
    values_.swap(before);
    throw;
  }
  // ODC_<SECTION>_... of one of this config's sections that names none of its keys: a typo that
  // would otherwise go unnoticed. Other ODC_ variables (the build scripts', another tool's
  // sections) are none of this config's business.
  std::vector<std::string> prefixes;
  for (const auto& section : section_names(specs_)) prefixes.push_back(environment_variable(section) + "_");
  // Unknown keys are refused in files and --set; a variable of one of this config's sections
  // (in any letter case: ODC_train_lr was ignored silently) is refused the same way.
  std::vector<std::string> ignored;
  const auto restore = [&] { values_.swap(before); };  // all or nothing, as a file
  for (char** entry = environ; entry != nullptr && *entry != nullptr; ++entry) {
    const std::string_view text(*entry);
    const std::string variable(text.substr(0, text.find('=')));
    const std::string name = upper(variable);
    if (!name.starts_with("ODC_") || std::find(names.begin(), names.end(), variable) != names.end() ||
        std::find(kNonConfigVariables.begin(), kNonConfigVariables.end(), name) != kNonConfigVariables.end()) {
      continue;
    }
    if (std::find(names.begin(), names.end(), name) != names.end()) {
      restore();
      fail("environment variable {} is not read: config variables are upper case; did you mean '{}'?", variable,
           name);
    }
    // A map tunable's keys are free-form names that may hold '_', so ODC_MODEL_CONFIG_HIDDEN_SIZE
    // cannot say which key it means: the whole variable takes a YAML mapping merged key by key.
    for (const auto& declared : specs_) {
      const std::string map_variable = environment_variable(declared.path);
      if (declared.kind == ValueKind::map && name.starts_with(map_variable + "_")) {
        restore();
        fail("environment variable {} names no config key: {} is a mapping, set its keys with {}='{{key: value}}' "
             "(merged key by key) or --set {}.KEY=VALUE",
             variable, declared.path, map_variable, declared.path);
      }
    }
    const bool in_a_section = std::any_of(prefixes.begin(), prefixes.end(),
                                          [&](const std::string& prefix) { return name.starts_with(prefix); });
    if (!in_a_section) continue;  // another tool's section: none of this config's business
    restore();
    fail("environment variable {} names no config key{}", variable, did_you_mean(closest_name(name, names)));
  }
  return ignored;
}

void Config::apply_assignment(const std::string& assignment) {
  const auto [key, text] = split_assignment(assignment);
  const YAML::Node value =
      yaml_text::parse_value(text, fmt::format("--set '{}'", assignment), fmt::format("--set '{}=", key), "'");
  const auto parts = split_path(key);
  const bool well_formed = std::none_of(parts.begin(), parts.end(),
                                        [](const std::string& part) { return part.empty(); });
  // The tunable is the first two components; deeper ones address keys inside a map tunable.
  const TunableSpec* target =
      parts.size() >= 2 && well_formed ? find_spec(specs_, parts[0] + "." + parts[1]) : nullptr;
  if (target == nullptr) throw Error(unknown_key_message(key, std::string(kSetSource), specs_));
  if (parts.size() == 2) {
    set_value(*target, value, std::string(kSetSource));
    return;
  }
  if (target->kind != ValueKind::map) {
    fail("config key '{}' in --set holds {}, so '{}' cannot name a key inside it", target->path,
         kind_name(target->kind), key);
  }
  set_value(*target, yaml_text::nested(parts, 2, value), std::string(kSetSource));
}

void Config::validate(const std::vector<std::string>& not_needed) const {
  std::vector<std::string> missing;
  for (const auto& declared : specs_) {
    if (std::find(not_needed.begin(), not_needed.end(), declared.path) != not_needed.end()) continue;
    if (declared.required && !values_.contains(declared.path)) {
      missing.push_back(fmt::format("'{}' ({}; --set {}=... or {})", declared.path, declared.doc,
                                    declared.path, environment_variable(declared.path)));
    }
  }
  if (!missing.empty()) {
    fail("missing required config key{}: {}", missing.size() > 1 ? "s" : "", fmt::join(missing, "; "));
  }
}

bool Config::has(const std::string& path) const {
  spec(path);  // an undeclared path is a bug in the caller, not "unset"
  return values_.contains(path);
}

std::int64_t Config::get_int(const std::string& path) const {
  const TunableSpec& declared = spec(path);
  expect_kind(declared, ValueKind::integer);
  const auto it = values_.find(path);
  if (it == values_.end()) fail_unset(declared);
  const auto value = parse_integer(it->second.node.Scalar());
  if (!value) {
    fail("config key '{}' is '{}', which this program cannot resolve to a number here: set a number", path,
         it->second.node.Scalar());
  }
  return *value;
}

std::optional<std::string> Config::get_int_word(const std::string& path) const {
  const TunableSpec& declared = spec(path);
  expect_kind(declared, ValueKind::integer);
  const auto it = values_.find(path);
  if (it == values_.end() || parse_integer(it->second.node.Scalar())) return std::nullopt;
  return it->second.node.Scalar();
}

double Config::get_double(const std::string& path) const {
  const TunableSpec& declared = spec(path);
  expect_kind(declared, ValueKind::number);
  const auto it = values_.find(path);
  if (it == values_.end()) fail_unset(declared);
  return parse_number(it->second.node.Scalar()).value();
}

bool Config::get_bool(const std::string& path) const {
  const TunableSpec& declared = spec(path);
  expect_kind(declared, ValueKind::boolean);
  const auto it = values_.find(path);
  if (it == values_.end()) fail_unset(declared);
  return parse_boolean(it->second.node).value();
}

std::string Config::get_string(const std::string& path) const {
  const TunableSpec& declared = spec(path);
  expect_kind(declared, ValueKind::string);
  const auto it = values_.find(path);
  if (it == values_.end()) fail_unset(declared);
  return it->second.node.Scalar();
}

YAML::Node Config::get_map(const std::string& path) const {
  const TunableSpec& declared = spec(path);
  expect_kind(declared, ValueKind::map);
  const auto it = values_.find(path);
  if (it == values_.end()) fail_unset(declared);
  return YAML::Clone(it->second.node);  // a copy: YAML nodes are references
}

std::string Config::source_of(const std::string& path) const {
  spec(path);
  const auto it = values_.find(path);
  return it == values_.end() ? "unset" : it->second.source;
}

std::string Config::dump(bool with_docs) const {
  std::string out;
  for (const auto& section : section_names(specs_)) {
    out += section + ":\n";
    for (const auto& declared : specs_) {
      if (section_of(declared.path) != section) continue;
      const auto it = values_.find(declared.path);
      std::string comment;
      if (with_docs) {
        comment = declared.doc;
        std::replace(comment.begin(), comment.end(), '\n', ' ');
        if (declared.range.bounded()) comment += fmt::format(" [{}]", declared.range.text());
        if (it == values_.end() && declared.required) comment += " [required]";
        if (it != values_.end() && it->second.source != kDefaultSource) {
          comment += fmt::format(" [from {}]", it->second.source);
        }
      }
      const std::string suffix = comment.empty() ? std::string() : "  # " + comment;
      const std::string key = key_of(declared.path);
      if (it == values_.end()) {
        // null loads back as "unset", which only keys without a default can be: the round trip holds.
        out += fmt::format("  {}: null{}\n", key, suffix);
      } else if (it->second.node.IsMap() && it->second.node.size() > 0) {
        const std::string value = yaml_text::indented(yaml_text::emitted(it->second.node), 4);
        out += fmt::format("  {}:{}\n{}\n", key, suffix, value);
      } else {
        out += fmt::format("  {}: {}{}\n", key, yaml_text::emitted(it->second.node), suffix);
      }
    }
  }
  return out;
}

std::string Config::canonical() const {
  std::string out;
  for (const auto& declared : specs_) {
    const auto it = values_.find(declared.path);
    std::string value = "null";
    if (it != values_.end()) {
      const YAML::Node& node = it->second.node;
      switch (declared.kind) {
        case ValueKind::integer: {
          const auto number = parse_integer(node.Scalar());
          value = number ? fmt::format("{}", *number) : node.Scalar();  // or one of its words
          break;
        }
        // fmt's shortest round-trip form: 3e-4 and 0.0003 give the same text.
        case ValueKind::number: value = fmt::format("{}", parse_number(node.Scalar()).value()); break;
        case ValueKind::boolean: value = parse_boolean(node).value() ? "true" : "false"; break;
        case ValueKind::string: value = yaml_text::canonical_string(node.Scalar()); break;
        case ValueKind::map: value = yaml_text::canonical_node(node); break;
      }
    }
    out += fmt::format("{}={}\n", declared.path, value);
  }
  return out;
}

const TunableSpec& Config::spec(const std::string& path) const {
  const TunableSpec* found = find_spec(specs_, path);
  if (found == nullptr) throw Error(unknown_key_message(path, "", specs_));
  return *found;
}

void Config::set_value(const TunableSpec& target, const YAML::Node& node,
                       const std::string& source) {
  const std::string where = location(source, node.Mark());
  // An empty value (`--set rl.stop=`, `stop:`) of a string key whose default is the empty string is that.
  if (node.IsNull() && target.kind == ValueKind::string && target.default_value == "\"\"") {
    return set_value(target, YAML::Node(std::string()), source);
  }
  if (node.IsNull()) {
    // Only a key without a default may be unset, so every key with a default always has a value.
    if (!target.default_value.empty()) {
      fail("config key '{}' in {} expects {}, found an empty value (only keys without a default "
           "can be unset)",
           target.path, where, kind_name(target.kind));
    }
    values_.erase(target.path);
    return;
  }
  check_value(target, node, where);
  check_text(target, node, source);
  Value value{YAML::Clone(node), source};
  const auto it = values_.find(target.path);
  if (target.kind == ValueKind::map && it != values_.end()) {
    value.node = yaml_text::merged(it->second.node, node);
    // Several layers contributed to the map: name them all, each once in a row.
    if (it->second.node.size() > 0) {
      const std::string& before = it->second.source;
      const bool repeated = before == source || before.ends_with(" + " + source);
      value.source = repeated ? before : before + " + " + source;
    }
  }
  // erase + emplace: assigning to a stored YAML::Node would write through to shared trees.
  values_.erase(target.path);
  values_.emplace(target.path, std::move(value));
}

void Config::merge_node(const YAML::Node& node, const std::string& prefix,
                        const std::string& source, std::string_view text) {
  const bool top = prefix.empty();
  if (node.IsNull()) return;  // an empty file, or a section whose keys are all commented out
  if (!node.IsMap()) {
    if (top) {
      fail("config {} must be a mapping of sections ({}), found {}", location(source, node.Mark()),
           fmt::join(section_names(specs_), ", "), describe(node));
    }
    fail("config section '{}' in {} must be a mapping of keys, found {}", prefix,
         location(source, node.Mark()), describe(node));
  }
  std::set<std::string> seen;
  for (const auto& entry : node) {
    const std::string where = location(source, entry.first.Mark());
    if (!entry.first.IsScalar()) {
      fail("config {} has a key that is {}, expected a name", where, describe(entry.first));
    }
    const std::string& name = entry.first.Scalar();
    const std::string path = top ? name : prefix + "." + name;
    if (!seen.insert(name).second) fail("config key '{}' appears twice in {}", path, where);
    if (top) {
      const auto sections = section_names(specs_);
      if (std::find(sections.begin(), sections.end(), name) == sections.end()) {
        std::string hint = did_you_mean(closest_name(name, sections));
        if (find_spec(specs_, name) != nullptr) {
          hint = fmt::format("; write it nested: '{}:' then '  {}: ...'", section_of(name),
                             key_of(name));
        } else if (hint.empty()) {
          hint = fmt::format(" (sections: {})", fmt::join(sections, ", "));
        }
        fail("unknown config section '{}' in {}{}", name, where, hint);
      }
      merge_node(entry.second, name, source, text);
      continue;
    }
    const TunableSpec* target = find_spec(specs_, path);
    if (target == nullptr) throw Error(unknown_key_message(path, where, specs_));
    if (entry.second.IsNull()) {
      const std::string comment = comment_after_key(text, entry.first.Mark(), name);
      if (!comment.empty()) {
        spdlog::warn("config key '{}' in {} is empty: YAML reads the rest of its line ('{}') as a comment; if that "
                     "is the value, quote it: {}: \"{}\"",
                     path, where, comment, name, comment);
      }
    }
    set_value(*target, entry.second, source);
  }
}

}  // namespace odc
