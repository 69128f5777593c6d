// model.config read into a LlamaConfig: YAML's scalars typed as JSON's, then LlamaConfig's strict
// reading (odc-train and odc-sim both).
#include "odc/model/model_keys.h"

#include <cctype>
#include <exception>
#include <string>

namespace odc::model {

nlohmann::json yaml_to_json(const YAML::Node& node) {
  switch (node.Type()) {
    case YAML::NodeType::Null:
    case YAML::NodeType::Undefined: return nullptr;
    case YAML::NodeType::Sequence: {
      auto arr = nlohmann::json::array();
      for (const auto& item : node) arr.push_back(yaml_to_json(item));
      return arr;
    }
    case YAML::NodeType::Map: {
      auto obj = nlohmann::json::object();
      for (const auto& kv : node) obj[kv.first.as<std::string>()] = yaml_to_json(kv.second);
      return obj;
    }
    case YAML::NodeType::Scalar: break;
  }
  const std::string text = node.Scalar();
  if (node.Tag() == "!") return text;  // explicitly quoted: a string
  if (text == "true" || text == "True" || text == "TRUE") return true;
  if (text == "false" || text == "False" || text == "FALSE") return false;
  if (text == "null" || text == "~" || text == "Null" || text.empty()) return nullptr;
  const bool looks_integer = !text.empty() && text.find_first_not_of("+-0123456789") == std::string::npos &&
                             std::isdigit(static_cast<unsigned char>(text.back()));
  if (looks_integer) {
    try {
      std::size_t used = 0;
      const long long v = std::stoll(text, &used);
      if (used == text.size()) return v;
    } catch (const std::exception&) {
    }
  }
  try {
    std::size_t used = 0;
    const double v = std::stod(text, &used);
    if (used == text.size()) return v;
  } catch (const std::exception&) {
  }
  return text;
}

LlamaConfig model_config_from(const Config& config) {
  return LlamaConfig::from_json(yaml_to_json(keys::model_config.read(config)), keys::model_config.path(), true);
}


}  // namespace odc::model
