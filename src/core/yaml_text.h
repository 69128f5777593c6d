#pragma once
// The YAML text handling under odc::Config: parsing with the checks yaml-cpp lacks (alias cycles and
// alias bombs), reading scalars as the declared kinds, merging trees, emitting a
// tree so that it loads back the same, and the canonical text of a tree. Config's own concern is
// the schema; this file's is the text, so the two can be read (and fuzzed) apart.
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <yaml-cpp/yaml.h>

namespace odc::yaml_text {

// Parses one document; a second document ('---' after the first) and a merge key (<<) are
// syntax errors here (yaml-cpp dropped the first and took the second for a key named "<<"). A syntax error is odc::Error "YAML syntax error in LABEL:LINE:COLUMN: ..."
// (with_line) or "... in LABEL at column C: ..." (one-line texts: environment values, --set).
YAML::Node parse(const std::string& text, const std::string& label, bool with_line);

// parse() of a one-line value (--set, an environment variable) whose plain (unquoted) text YAML
// must read as written: one that would lose or change text (a comment: '###' read as nothing,
// 'a #b' as 'a'; an anchor '&', a tag '!', a directive '%', a block scalar '|' or '>') is
// odc::Error naming it and how to quote it: `before` "TEXT" `after` (--set 'rl.stop="###"').
YAML::Node parse_value(const std::string& text, const std::string& label, const std::string& before,
                       const std::string& after);

// A node as an error message names it: "'text'", "a list", "a mapping", "an empty value".
std::string describe(const YAML::Node& node);

// Scalars read as YAML writes them (an explicit '+' allowed); nullopt when the text is not one.
std::optional<std::int64_t> parse_integer(std::string_view text);
// Decimal digits with an optional sign: an integer whatever its size (parse_integer may still refuse it).
bool is_integer_text(std::string_view text);
std::optional<double> parse_number(std::string_view text);  // finite numbers only
std::optional<bool> parse_boolean(const YAML::Node& node);  // true/false, yes/no, on/off

// base with overlay's keys laid over it, recursively; a fresh tree (no aliasing).
YAML::Node merged(const YAML::Node& base, const YAML::Node& overlay);
// keys[first..] -> {k1: {k2: ... leaf}} for `--set model.config.a.b=value`.
YAML::Node nested(const std::vector<std::string>& keys, std::size_t first, const YAML::Node& leaf);

// YAML text of a node that loads back to the same node (quoted scalars stay quoted).
std::string emitted(const YAML::Node& node);
// Every line of text indented by `spaces`.
std::string indented(const std::string& text, std::size_t spaces);

// Canonical text, equal for equal content: strings quoted and escaped, map keys sorted.
std::string canonical_string(std::string_view text);
std::string canonical_node(const YAML::Node& node);

}  // namespace odc::yaml_text
