// Key<T>'s out-of-line parts: the default's text of each kind, numbers read from their text.
#include "odc/core/key.h"

#include <cstdlib>
#include <string>

#include "odc/core/error.h"

namespace odc {

NumberDefault number(const char* text) {
  char* end = nullptr;
  const double value = std::strtod(text, &end);
  ODC_CHECK(end != text && *end == '\0', "a key's default '{}' is not a number", text);
  return {value, text};
}

KeyDefault<YAML::Node> KeyKind<YAML::Node>::make(const MapValue& v) { return {YAML::Load(v.text), v.text}; }

namespace key_detail {

std::string int_text(std::int64_t value) { return std::to_string(value); }

std::string string_text(const std::string& value) { return value.empty() ? "\"\"" : value; }

void throw_key_without_default(const std::string& path) {
  fail("config key '{}' has no default (it is unset unless given): read it with read_optional", path);
}

}  // namespace key_detail
}  // namespace odc
