#include "config_keys.h"

#include <algorithm>
#include <cctype>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "config_values.h"

namespace odc::config_keys {

using config_values::did_you_mean;

std::vector<std::string> split_path(std::string_view path) {
  std::vector<std::string> parts;
  std::size_t start = 0;
  while (true) {
    const std::size_t dot = path.find('.', start);
    parts.emplace_back(path.substr(start, dot == std::string_view::npos ? dot : dot - start));
    if (dot == std::string_view::npos) return parts;
    start = dot + 1;
  }
}

std::string section_of(const std::string& path) { return path.substr(0, path.find('.')); }

std::string key_of(const std::string& path) {
  const std::size_t dot = path.rfind('.');
  return dot == std::string::npos ? path : path.substr(dot + 1);
}

std::vector<std::string> section_names(const std::vector<TunableSpec>& specs) {
  std::vector<std::string> sections;
  for (const auto& spec : specs) {
    const std::string section = section_of(spec.path);
    if (std::find(sections.begin(), sections.end(), section) == sections.end()) {
      sections.push_back(section);
    }
  }
  return sections;
}

const TunableSpec* find_spec(const std::vector<TunableSpec>& specs, const std::string& path) {
  const auto it = std::find_if(specs.begin(), specs.end(),
                               [&](const TunableSpec& spec) { return spec.path == path; });
  return it == specs.end() ? nullptr : &*it;
}

std::string unknown_key_message(const std::string& key, const std::string& where,
                                const std::vector<TunableSpec>& specs) {
  std::vector<std::string> paths;
  for (const auto& spec : specs) paths.push_back(spec.path);
  std::string suggestion = closest_name(key, paths);
  if (suggestion.empty()) {
    for (const auto& spec : specs) {
      if (key_of(spec.path) == key_of(key)) {
        suggestion = spec.path;
        break;
      }
    }
  }
  std::string message = where.empty() ? fmt::format("config key '{}' is not declared", key)
                                      : fmt::format("unknown config key '{}' in {}", key, where);
  if (!suggestion.empty()) return message + did_you_mean(suggestion);
  std::vector<std::string> siblings;
  for (const auto& spec : specs) {
    if (section_of(spec.path) == section_of(key)) siblings.push_back(key_of(spec.path));
  }
  if (!siblings.empty()) {
    message += fmt::format(" (keys of section '{}': {})", section_of(key), fmt::join(siblings, ", "));
  }
  return message;
}

std::string environment_variable(const std::string& path) {
  std::string name = "ODC_";
  for (const char c : path) {
    name += c == '.' ? '_' : static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  }
  return name;
}

std::string upper(std::string_view text) {
  std::string out(text);
  for (char& c : out) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return out;
}

}  // namespace odc::config_keys
