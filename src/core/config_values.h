#pragma once
// How a value reads against its declaration (config_spec.cpp): the kind, the range, the choices.
// Shared by odc::Config (config.cpp), which calls it for every value a layer sets.
#include <string>

#include <yaml-cpp/yaml.h>

#include "odc/core/config.h"

namespace odc::config_values {

// "; did you mean 'NAME'?" (nothing for an empty suggestion).
std::string did_you_mean(const std::string& suggestion);

// "an integer", "a number", "true or false", "a string", "a mapping of keys".
const char* kind_name(ValueKind kind);

// odc::Error naming the key and `where` when `node` is not of the spec's kind, outside its range
// (an integer beyond 64 bits: the range of a 64-bit integer) or not one of its choices.
void check_value(const TunableSpec& spec, const YAML::Node& node, const std::string& where);

}  // namespace odc::config_values
