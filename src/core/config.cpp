#include "odc/core/config.h"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <set>
#include <sstream>
#include <string_view>
#include <system_error>
#include <utility>

#include <yaml-cpp/eventhandler.h>
#include <yaml-cpp/parser.h>

#include "odc/core/error.h"

namespace odc {
namespace {

constexpr std::string_view kDefaultSource = "default";
constexpr std::string_view kSetSource = "--set";
constexpr std::string_view kEnvironmentPrefix = "environment ";
// A suggestion further away than this is more likely noise than the intended name.
constexpr std::size_t kMaxSuggestionDistance = 2;

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

std::string join(const std::vector<std::string>& items, std::string_view separator) {
  std::string out;
  for (std::size_t i = 0; i < items.size(); ++i) {
    if (i > 0) out += separator;
    out += items[i];
  }
  return out;
}

std::string trim(std::string_view text) {
  const std::size_t first = text.find_first_not_of(" \t");
  if (first == std::string_view::npos) return {};
  const std::size_t last = text.find_last_not_of(" \t");
  return std::string(text.substr(first, last - first + 1));
}

std::size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<std::size_t> previous(b.size() + 1);
  std::vector<std::size_t> current(b.size() + 1);
  for (std::size_t j = 0; j <= b.size(); ++j) previous[j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    current[0] = i;
    for (std::size_t j = 1; j <= b.size(); ++j) {
      const std::size_t substitution = previous[j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1);
      current[j] = std::min({previous[j] + 1, current[j - 1] + 1, substitution});
    }
    std::swap(previous, current);
  }
  return previous[b.size()];
}

// The candidate nearest to `word` within kMaxSuggestionDistance (first one on ties), or "".
std::string closest(std::string_view word, const std::vector<std::string>& candidates) {
  std::string best;
  std::size_t best_distance = kMaxSuggestionDistance + 1;
  for (const auto& candidate : candidates) {
    const std::size_t distance = edit_distance(word, candidate);
    if (distance < best_distance) {
      best = candidate;
      best_distance = distance;
    }
  }
  return best;
}

std::string did_you_mean(const std::string& suggestion) {
  return suggestion.empty() ? std::string() : fmt::format("; did you mean '{}'?", suggestion);
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

// "unknown config key 'train.lrr' in run.yaml:3; did you mean 'train.lr'?" A typo anywhere in the
// path is caught by edit distance; a right key in the wrong section by matching the last part. An
// empty `where` means the program itself asked for an undeclared key.
std::string unknown_key_message(const std::string& key, const std::string& where,
                                const std::vector<TunableSpec>& specs) {
  std::vector<std::string> paths;
  for (const auto& spec : specs) paths.push_back(spec.path);
  std::string suggestion = closest(key, paths);
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
    message += fmt::format(" (keys of section '{}': {})", section_of(key), join(siblings, ", "));
  }
  return message;
}

const char* kind_name(ValueKind kind) {
  switch (kind) {
    case ValueKind::integer: return "an integer";
    case ValueKind::number: return "a number";
    case ValueKind::boolean: return "true or false";
    case ValueKind::string: return "a string";
    case ValueKind::map: return "a mapping of keys";
  }
  return "a value";
}

std::string describe(const YAML::Node& node) {
  switch (node.Type()) {
    case YAML::NodeType::Scalar: return fmt::format("'{}'", node.Scalar());
    case YAML::NodeType::Sequence: return "a list";
    case YAML::NodeType::Map: return "a mapping";
    case YAML::NodeType::Null: return "an empty value";
    case YAML::NodeType::Undefined: break;
  }
  return "nothing";
}

// Environment and --set values are one-line texts of their own, so a line number would mislead.
bool is_file_source(std::string_view source) {
  return source != kDefaultSource && source != kSetSource &&
         !source.starts_with(kEnvironmentPrefix);
}

std::string location(const std::string& source, const YAML::Mark& mark) {
  if (is_file_source(source) && !mark.is_null()) return fmt::format("{}:{}", source, mark.line + 1);
  return source;
}

// More nodes than this reached through aliases is an "alias bomb", not a config: a few lines of
// nested aliases can describe 10^9 nodes, which every walk of the tree (dump, canonical, the model
// config) would expand. Real configs reuse an anchor for a value or a small block.
constexpr std::uint64_t kMaxAliasedNodes = 10000;

// A first pass over the parse events of the document YAML::Load reads, rejecting what it accepts
// but no config can hold: an alias inside the very node its anchor names (a cyclic tree, on which
// every recursive walk overflows the stack) and aliases expanding to more than kMaxAliasedNodes.
// Errors are YAML::ParserException at the alias, so parse_yaml names the file, line and column.
class AliasCheck final : public YAML::EventHandler {
 public:
  void OnDocumentStart(const YAML::Mark&) override {}
  void OnDocumentEnd() override {}
  void OnAnchor(const YAML::Mark&, const std::string& name) override { pending_name_ = name; }
  void OnNull(const YAML::Mark&, YAML::anchor_t anchor) override { leaf(anchor); }
  void OnScalar(const YAML::Mark&, const std::string&, YAML::anchor_t anchor, const std::string&) override {
    leaf(anchor);
  }
  void OnAlias(const YAML::Mark& mark, YAML::anchor_t anchor) override {
    const auto known = names_.find(anchor);
    const std::string alias = known != names_.end() && !known->second.empty() ? "*" + known->second : "an alias";
    if (std::any_of(open_.begin(), open_.end(), [&](const Open& o) { return o.anchor == anchor; })) {
      throw YAML::ParserException(
          mark, fmt::format("{} refers to a node that contains it (a cycle, which no config value can be)", alias));
    }
    const auto size = sizes_.find(anchor);
    if (size == sizes_.end()) return;  // unknown anchors are the parser's own error
    aliased_ += size->second;
    if (aliased_ > kMaxAliasedNodes) {
      throw YAML::ParserException(mark, fmt::format("{} makes the aliases of this document expand to more than {} "
                                                    "nodes (nested aliases multiply)",
                                                    alias, kMaxAliasedNodes));
    }
    add(size->second);
  }
  void OnSequenceStart(const YAML::Mark&, const std::string&, YAML::anchor_t anchor, YAML::EmitterStyle::value) override {
    open(anchor);
  }
  void OnSequenceEnd() override { close(); }
  void OnMapStart(const YAML::Mark&, const std::string&, YAML::anchor_t anchor, YAML::EmitterStyle::value) override {
    open(anchor);
  }
  void OnMapEnd() override { close(); }

 private:
  struct Open {
    YAML::anchor_t anchor;
    std::uint64_t nodes;  // expanded, this node included
  };
  void name(YAML::anchor_t anchor) {
    if (anchor != YAML::NullAnchor) names_[anchor] = pending_name_;
    pending_name_.clear();
  }
  void add(std::uint64_t nodes) {
    if (!open_.empty()) open_.back().nodes += nodes;
  }
  void leaf(YAML::anchor_t anchor) {
    name(anchor);
    if (anchor != YAML::NullAnchor) sizes_[anchor] = 1;
    add(1);
  }
  void open(YAML::anchor_t anchor) {
    name(anchor);
    open_.push_back({anchor, 1});
  }
  void close() {
    const Open done = open_.back();
    open_.pop_back();
    if (done.anchor != YAML::NullAnchor) sizes_[done.anchor] = done.nodes;
    add(done.nodes);
  }

  std::vector<Open> open_;  // collections being read, innermost last
  std::map<YAML::anchor_t, std::uint64_t> sizes_;
  std::map<YAML::anchor_t, std::string> names_;
  std::string pending_name_;
  std::uint64_t aliased_ = 0;
};

YAML::Node parse_yaml(const std::string& text, const std::string& label, bool with_line) {
  try {
    std::istringstream in(text);
    YAML::Parser parser(in);
    AliasCheck check;
    parser.HandleNextDocument(check);
    return YAML::Load(text);
  } catch (const YAML::Exception& error) {
    if (with_line) {
      fail("YAML syntax error in {}:{}:{}: {}", label, error.mark.line + 1, error.mark.column + 1,
           error.msg);
    }
    fail("YAML syntax error in {} at column {}: {}", label, error.mark.column + 1, error.msg);
  }
}

std::optional<std::int64_t> parse_integer(std::string_view text) {
  // from_chars rejects the explicit '+' that YAML allows.
  if (text.size() > 1 && text.front() == '+' && text[1] != '-') text.remove_prefix(1);
  std::int64_t value = 0;
  const char* end = text.data() + text.size();
  const auto [stop, error] = std::from_chars(text.data(), end, value);
  if (text.empty() || error != std::errc() || stop != end) return std::nullopt;
  return value;
}

std::optional<double> parse_number(std::string_view text) {
  if (text.size() > 1 && text.front() == '+' && text[1] != '-') text.remove_prefix(1);
  double value = 0.0;
  const char* end = text.data() + text.size();
  const auto [stop, error] = std::from_chars(text.data(), end, value);
  // Infinity and NaN parse but are never a sensible setting for a trainer tunable.
  if (text.empty() || error != std::errc() || stop != end || !std::isfinite(value)) {
    return std::nullopt;
  }
  return value;
}

std::optional<bool> parse_boolean(const YAML::Node& node) {
  bool value = false;
  // yaml-cpp's own decoder accepts the YAML spellings (true/false, yes/no, on/off, any case form).
  if (!node.IsScalar() || !YAML::convert<bool>::decode(node, value)) return std::nullopt;
  return value;
}

void check_value(const TunableSpec& spec, const YAML::Node& node, const std::string& where) {
  const auto mismatch = [&] {
    fail("config key '{}' in {} expects {}, found {}", spec.path, where, kind_name(spec.kind),
         describe(node));
  };
  switch (spec.kind) {
    case ValueKind::integer:
      if (!node.IsScalar() || !parse_integer(node.Scalar())) mismatch();
      return;
    case ValueKind::number:
      if (!node.IsScalar() || !parse_number(node.Scalar())) mismatch();
      return;
    case ValueKind::boolean:
      if (!parse_boolean(node)) mismatch();
      return;
    case ValueKind::string:
      if (!node.IsScalar()) mismatch();
      if (!spec.choices.empty() && std::find(spec.choices.begin(), spec.choices.end(),
                                             node.Scalar()) == spec.choices.end()) {
        fail("config key '{}' in {} expects one of {}, found '{}'{}", spec.path, where,
             join(spec.choices, ", "), node.Scalar(), did_you_mean(closest(node.Scalar(), spec.choices)));
      }
      return;
    case ValueKind::map:
      if (!node.IsMap()) mismatch();
      return;
  }
}

// Offset of the first byte that does not begin a well-formed UTF-8 sequence (overlong forms,
// surrogates and code points past U+10FFFF are not well-formed), or npos.
std::size_t invalid_utf8_at(std::string_view text) {
  std::size_t i = 0;
  while (i < text.size()) {
    const auto byte = [&](std::size_t k) { return static_cast<unsigned char>(text[k]); };
    const unsigned char lead = byte(i);
    if (lead < 0x80) {
      ++i;
      continue;
    }
    std::size_t length = 0;
    unsigned char low = 0x80;  // the range the second byte must lie in
    unsigned char high = 0xBF;
    if (lead >= 0xC2 && lead <= 0xDF) {
      length = 2;
    } else if (lead >= 0xE0 && lead <= 0xEF) {
      length = 3;
      if (lead == 0xE0) low = 0xA0;   // overlong
      if (lead == 0xED) high = 0x9F;  // surrogates
    } else if (lead >= 0xF0 && lead <= 0xF4) {
      length = 4;
      if (lead == 0xF0) low = 0x90;   // overlong
      if (lead == 0xF4) high = 0x8F;  // past U+10FFFF
    } else {
      return i;
    }
    if (text.size() - i < length || byte(i + 1) < low || byte(i + 1) > high) return i;
    for (std::size_t k = 2; k < length; ++k) {
      if ((byte(i + k) & 0xC0) != 0x80) return i;
    }
    i += length;
  }
  return std::string_view::npos;
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

// base with overlay's keys laid over it, recursively: inside a map tunable every layer overrides
// only the keys it names, as it does for the sections. Returns a fresh tree (no aliasing).
YAML::Node merged(const YAML::Node& base, const YAML::Node& overlay) {
  if (!base.IsDefined() || !base.IsMap() || !overlay.IsMap()) return YAML::Clone(overlay);
  YAML::Node out = YAML::Clone(base);
  for (const auto& entry : overlay) {
    if (!entry.first.IsScalar()) {
      out.force_insert(YAML::Clone(entry.first), YAML::Clone(entry.second));
      continue;
    }
    const std::string& key = entry.first.Scalar();
    const YAML::Node& existing = out;
    out[key] = merged(existing[key], entry.second);
  }
  return out;
}

// keys[first..] -> {k1: {k2: ... leaf}} for `--set model.config.a.b=value`.
YAML::Node nested(const std::vector<std::string>& keys, std::size_t first, const YAML::Node& leaf) {
  if (first == keys.size()) return leaf;
  YAML::Node map(YAML::NodeType::Map);
  map[keys[first]] = nested(keys, first + 1, leaf);
  return map;
}

constexpr std::size_t kMaxImplicitKeyBytes = 200;

// True when a scalar holds a control character. yaml-cpp reads a lone carriage return as part of
// a plain scalar ("lr: 0.1\r # x", "{a: 1\r, b: 2}") but its emitter writes such text plain, where
// a reader takes the carriage return for a line break: only the double-quoted style ("\r")
// carries it through a dump.
bool has_control_character(std::string_view text) {
  return std::any_of(text.begin(), text.end(), [](char c) {
    return static_cast<unsigned char>(c) < 0x20 || c == '\x7f';
  });
}

// Emits a node keeping quoted scalars quoted, so a dumped "true" string stays a string.
void emit(YAML::Emitter& out, const YAML::Node& node) {
  switch (node.Type()) {
    case YAML::NodeType::Scalar:
      if (!node.Tag().empty() && node.Tag() != "?" && node.Tag() != "!") {
        out << YAML::VerbatimTag(node.Tag());
      }
      if (node.Tag() == "!" || has_control_character(node.Scalar())) out << YAML::DoubleQuoted;
      out << node.Scalar();
      return;
    case YAML::NodeType::Sequence:
      out << YAML::BeginSeq;
      for (const auto& item : node) emit(out, item);
      out << YAML::EndSeq;
      return;
    case YAML::NodeType::Map:
      out << YAML::BeginMap;
      for (const auto& entry : node) {
        // YAML caps an implicit key at 1024 characters, which yaml-cpp's emitter does not check
        // (and its parser enforces): a long key, whose escapes may take four characters a byte,
        // goes in the explicit "? key" form.
        if (entry.first.Scalar().size() + entry.first.Tag().size() > kMaxImplicitKeyBytes) out << YAML::LongKey;
        out << YAML::Key;
        emit(out, entry.first);
        out << YAML::Value;
        emit(out, entry.second);
      }
      out << YAML::EndMap;
      return;
    case YAML::NodeType::Null:
    case YAML::NodeType::Undefined:
      out << YAML::Null;
      return;
  }
}

std::string emitted(const YAML::Node& node) {
  YAML::Emitter out;
  emit(out, node);
  ODC_CHECK(out.good(), "cannot emit a config value as YAML: {}", out.GetLastError());
  return out.c_str();
}

std::string indented(const std::string& text, std::size_t spaces) {
  const std::string pad(spaces, ' ');
  std::string out = pad;
  for (const char c : text) {
    out += c;
    if (c == '\n') out += pad;
  }
  return out;
}

std::string canonical_string(std::string_view text) {
  std::string out = "\"";
  for (const char c : text) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      out += fmt::format("\\x{:02x}", static_cast<unsigned>(static_cast<unsigned char>(c)));
    } else {
      out += c;
    }
  }
  return out + "\"";
}

// Map keys sorted so that two configs with the same content compare equal whatever the order of
// their keys; scalars by text, since the consumer of a map decides their types.
std::string canonical_node(const YAML::Node& node) {
  switch (node.Type()) {
    case YAML::NodeType::Scalar: return canonical_string(node.Scalar());
    case YAML::NodeType::Sequence: {
      std::vector<std::string> items;
      for (const auto& item : node) items.push_back(canonical_node(item));
      return "[" + join(items, ",") + "]";
    }
    case YAML::NodeType::Map: {
      std::vector<std::string> entries;
      for (const auto& entry : node) {
        entries.push_back(canonical_node(entry.first) + ":" + canonical_node(entry.second));
      }
      std::sort(entries.begin(), entries.end());
      return "{" + join(entries, ",") + "}";
    }
    case YAML::NodeType::Null:
    case YAML::NodeType::Undefined: break;
  }
  return "null";
}

std::string environment_variable(const std::string& path) {
  std::string name = "ODC_";
  for (const char c : path) {
    name += c == '.' ? '_' : static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  }
  return name;
}

// "a.b=value" -> {"a.b", "value"}; shared by the command line and apply_assignment.
std::pair<std::string, std::string> split_assignment(const std::string& assignment) {
  const std::size_t equals = assignment.find('=');
  std::string key = trim(std::string_view(assignment).substr(0, equals));
  if (equals == std::string::npos || key.empty()) {
    fail("--set expects key=value (e.g. --set train.lr=3e-4), got '{}'", assignment);
  }
  return {std::move(key), assignment.substr(equals + 1)};
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
    ODC_CHECK(declared.choices.empty() || declared.kind == ValueKind::string,
              "tunable '{}' has choices but is not a string", declared.path);
    ODC_CHECK(!declared.required || declared.default_value.empty(),
              "required tunable '{}' has a default", declared.path);
    if (!declared.default_value.empty()) {
      const std::string label = fmt::format("the default of {}", declared.path);
      set_value(declared, parse_yaml(declared.default_value, label, false),
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
  const YAML::Node root = parse_yaml(text, source, true);
  // All or nothing: a file with one bad key leaves the config as it was.
  std::map<std::string, Value> before = values_;
  try {
    merge_node(root, "", source);
  } catch (...) {
    values_.swap(before);
    throw;
  }
}

void Config::apply_environment() {
  std::map<std::string, Value> before = values_;
  try {
    for (const auto& declared : specs_) {
      const std::string variable = environment_variable(declared.path);
      const char* text = std::getenv(variable.c_str());
      if (text == nullptr) continue;
      const std::string source = std::string(kEnvironmentPrefix) + variable;
      set_value(declared, parse_yaml(text, source, false), source);
    }
  } catch (...) {
    values_.swap(before);
    throw;
  }
}

void Config::apply_assignment(const std::string& assignment) {
  const auto [key, text] = split_assignment(assignment);
  const YAML::Node value = parse_yaml(text, fmt::format("--set '{}'", assignment), false);
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
  set_value(*target, nested(parts, 2, value), std::string(kSetSource));
}

void Config::validate() const {
  std::vector<std::string> missing;
  for (const auto& declared : specs_) {
    if (declared.required && !values_.contains(declared.path)) {
      missing.push_back(fmt::format("'{}' ({}; --set {}=... or {})", declared.path, declared.doc,
                                    declared.path, environment_variable(declared.path)));
    }
  }
  if (!missing.empty()) {
    fail("missing required config key{}: {}", missing.size() > 1 ? "s" : "", join(missing, "; "));
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
  return parse_integer(it->second.node.Scalar()).value();
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
        out += fmt::format("  {}:{}\n{}\n", key, suffix, indented(emitted(it->second.node), 4));
      } else {
        out += fmt::format("  {}: {}{}\n", key, emitted(it->second.node), suffix);
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
        case ValueKind::integer: value = fmt::format("{}", parse_integer(node.Scalar()).value()); break;
        // fmt's shortest round-trip form: 3e-4 and 0.0003 give the same text.
        case ValueKind::number: value = fmt::format("{}", parse_number(node.Scalar()).value()); break;
        case ValueKind::boolean: value = parse_boolean(node).value() ? "true" : "false"; break;
        case ValueKind::string: value = canonical_string(node.Scalar()); break;
        case ValueKind::map: value = canonical_node(node); break;
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
    value.node = merged(it->second.node, node);
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
                        const std::string& source) {
  const bool top = prefix.empty();
  if (node.IsNull()) return;  // an empty file, or a section whose keys are all commented out
  if (!node.IsMap()) {
    if (top) {
      fail("config {} must be a mapping of sections ({}), found {}", location(source, node.Mark()),
           join(section_names(specs_), ", "), describe(node));
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
        std::string hint = did_you_mean(closest(name, sections));
        if (find_spec(specs_, name) != nullptr) {
          hint = fmt::format("; write it nested: '{}:' then '  {}: ...'", section_of(name),
                             key_of(name));
        } else if (hint.empty()) {
          hint = fmt::format(" (sections: {})", join(sections, ", "));
        }
        fail("unknown config section '{}' in {}{}", name, where, hint);
      }
      merge_node(entry.second, name, source);
      continue;
    }
    const TunableSpec* target = find_spec(specs_, path);
    if (target == nullptr) throw Error(unknown_key_message(path, where, specs_));
    set_value(*target, entry.second, source);
  }
}

CommandLine parse_command_line(int argc, char** argv) {
  CommandLine result;
  for (int i = 1; i < argc; ++i) {
    const std::string argument = argv[i];
    if (argument == "--help" || argument == "-h") {
      result.help = true;
    } else if (argument == "--dump-config") {
      result.dump_config = true;
    } else if (argument == "--calibrate-cost") {
      result.calibrate_cost = true;
    } else if (argument == "--set") {
      if (i + 1 >= argc) fail("--set needs a key=value argument (e.g. --set train.lr=3e-4)");
      split_assignment(argv[++i]);  // reject a malformed assignment where the user typed it
      result.assignments.emplace_back(argv[i]);
    } else if (argument.starts_with("--set=")) {
      result.assignments.push_back(argument.substr(6));
      split_assignment(result.assignments.back());
    } else if (argument.size() > 1 && argument.front() == '-') {
      fail("unknown option '{}'{} (usage: CONFIG.yaml [--set key=value]... [--dump-config] "
           "[--calibrate-cost] [--help])",
           argument, did_you_mean(closest(argument, {"--set", "--dump-config", "--calibrate-cost", "--help"})));
    } else if (argument.empty()) {
      fail("empty command-line argument where a config file name was expected");
    } else if (!result.config_file.empty()) {
      fail("only one config file may be given, got '{}' and '{}'", result.config_file, argument);
    } else {
      result.config_file = argument;
    }
  }
  return result;
}

}  // namespace odc
