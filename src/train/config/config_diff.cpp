#include "odc/train/config/config_diff.h"

#include <map>
#include <set>
#include <sstream>

#include <fmt/format.h>
#include <yaml-cpp/yaml.h>

#include "odc/core/error.h"

namespace odc::train {

namespace {

// Keys whose change between jobs is the point of a new job, not a change of the run.
const std::set<std::string> kPerJobKeys = {"checkpoint.resume", "train.stop_at_step"};

// "a.b=value" lines of Config::canonical() -> {a.b: value}.
std::map<std::string, std::string> canonical_values(const Config& config) {
  std::map<std::string, std::string> out;
  std::istringstream lines(config.canonical());
  for (std::string line; std::getline(lines, line);) {
    const auto eq = line.find('=');
    if (eq != std::string::npos) out[line.substr(0, eq)] = line.substr(eq + 1);
  }
  return out;
}

}  // namespace

std::vector<ConfigChange> config_changes(const std::string& saved_yaml, const Config& current,
                                         std::vector<std::string>* skipped) {
  YAML::Node root;
  try {
    root = YAML::Load(saved_yaml);
  } catch (const YAML::Exception& e) {
    fail("the checkpoint's saved config is not YAML: {}", e.what());
  }
  if (!root.IsMap()) fail("the checkpoint's saved config is not a YAML mapping of sections");
  // Each key is loaded on its own, so a key this version renamed or dropped (or a value it no
  // longer accepts) leaves the others comparable.
  Config saved(current.specs());
  std::set<std::string> loaded;
  for (const auto& section : root) {
    if (!section.second.IsMap()) continue;
    for (const auto& entry : section.second) {
      const std::string key = section.first.Scalar() + "." + entry.first.Scalar();
      YAML::Node one;
      one[section.first.Scalar()][entry.first.Scalar()] = entry.second;
      try {
        saved.load_yaml_text(YAML::Dump(one), "the checkpoint's saved config");
        loaded.insert(key);
      } catch (const Error&) {
        if (skipped != nullptr) skipped->push_back(key);
      }
    }
  }
  const auto before = canonical_values(saved);
  const auto after = canonical_values(current);
  std::vector<ConfigChange> changes;
  for (const auto& spec : current.specs()) {
    if (!loaded.count(spec.path) || kPerJobKeys.count(spec.path)) continue;
    const auto old_value = before.find(spec.path);
    const auto new_value = after.find(spec.path);
    if (old_value == before.end() || new_value == after.end() || old_value->second == new_value->second) continue;
    changes.push_back({spec.path, old_value->second, new_value->second});
  }
  return changes;
}

std::string describe_changes(const std::vector<ConfigChange>& changes) {
  std::string out;
  for (const auto& c : changes) out += fmt::format("{}{} {} -> {}", out.empty() ? "" : ", ", c.key, c.saved, c.now);
  return out;
}

}  // namespace odc::train
