#include "yaml_text.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <map>
#include <sstream>
#include <system_error>

#include <fmt/format.h>
#include <yaml-cpp/eventhandler.h>
#include <yaml-cpp/parser.h>

#include "odc/core/error.h"
#include "odc/core/text.h"

namespace odc::yaml_text {
namespace {

// More nodes than this reached through aliases is an "alias bomb", not a config: a few lines of
// nested aliases can describe 10^9 nodes, which every walk of the tree (dump, canonical, the model
// config) would expand. Real configs reuse an anchor for a value or a small block.
constexpr std::uint64_t kMaxAliasedNodes = 10000;

// A first pass over the parse events of the document YAML::Load reads, rejecting what it accepts
// but no config can hold: an alias inside the very node its anchor names (a cyclic tree, on which
// every recursive walk overflows the stack) and aliases expanding to more than kMaxAliasedNodes.
// Errors are YAML::ParserException at the alias, so parse() names the file, line and column.
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

// Where a second document starts: YAML::Load reads the first and dropped the rest silently.
class DocumentStart final : public YAML::EventHandler {
 public:
  void OnDocumentStart(const YAML::Mark& mark) override { mark_ = mark; }
  void OnDocumentEnd() override {}
  void OnNull(const YAML::Mark&, YAML::anchor_t) override {}
  void OnAlias(const YAML::Mark&, YAML::anchor_t) override {}
  void OnScalar(const YAML::Mark&, const std::string&, YAML::anchor_t, const std::string&) override {}
  void OnSequenceStart(const YAML::Mark&, const std::string&, YAML::anchor_t, YAML::EmitterStyle::value) override {}
  void OnSequenceEnd() override {}
  void OnMapStart(const YAML::Mark&, const std::string&, YAML::anchor_t, YAML::EmitterStyle::value) override {}
  void OnMapEnd() override {}
  const YAML::Mark& mark() const { return mark_; }

 private:
  YAML::Mark mark_;
};

// yaml-cpp reads a merge key (<<: *base) as a key named "<<", which the schema then reported as a
// misspelt key. Only the plain spelling is a merge key; a quoted "<<" is a name like any other.
void refuse_merge_keys(const YAML::Node& node) {
  if (node.IsSequence()) {
    for (const auto& item : node) refuse_merge_keys(item);
  } else if (node.IsMap()) {
    for (const auto& entry : node) {
      if (entry.first.IsScalar() && entry.first.Scalar() == "<<" && entry.first.Tag() == "?") {
        throw YAML::ParserException(entry.first.Mark(),
                                    "YAML merge keys (<<) are not supported; write the keys out, or use an anchor "
                                    "and alias (&name, *name) for a whole value");
      }
      refuse_merge_keys(entry.second);
    }
  }
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

}  // namespace

YAML::Node parse(const std::string& text, const std::string& label, bool with_line) {
  try {
    std::istringstream in(text);
    YAML::Parser parser(in);
    AliasCheck check;
    parser.HandleNextDocument(check);
    DocumentStart second;
    if (parser.HandleNextDocument(second)) {
      throw YAML::ParserException(second.mark(),
                                  "a second YAML document ('---' after the first): a config is one document; "
                                  "merge the two or remove the '---' line");
    }
    YAML::Node root = YAML::Load(text);
    refuse_merge_keys(root);  // bounded: the alias check above caps the expanded tree
    return root;
  } catch (const YAML::Exception& error) {
    if (with_line) {
      fail("YAML syntax error in {}:{}:{}: {}", label, error.mark.line + 1, error.mark.column + 1,
           error.msg);
    }
    fail("YAML syntax error in {} at column {}: {}", label, error.mark.column + 1, error.msg);
  }
}

namespace {

// Why YAML reads a plain value as other text than it is: its first character, or a comment.
std::string lost_text_reason(const std::string& value) {
  switch (value.front()) {
    case '#': return " (a '#' starts a YAML comment)";
    case '&': return " ('&' starts a YAML anchor)";
    case '!': return " ('!' starts a YAML tag)";
    case '%': return " ('%' starts a YAML directive)";
    case '|':
    case '>': return " ('|' and '>' start a YAML block scalar)";
    default: break;
  }
  if (value.find(" #") != std::string::npos || value.find("\t#") != std::string::npos) {
    return " (a '#' after a space starts a YAML comment)";
  }
  return "";
}

}  // namespace

YAML::Node parse_value(const std::string& text, const std::string& label, const std::string& before,
                       const std::string& after) {
  YAML::Node node = parse(text, label, false);
  const std::string value = trim(text);
  // Empty is the empty value; quoted text is read as YAML writes it; lists and mappings are kinds of their own.
  if (value.empty() || value.front() == '"' || value.front() == '\'' || !(node.IsScalar() || node.IsNull())) {
    return node;
  }
  if (node.IsNull() ? (value == "~" || value == "null" || value == "Null" || value == "NULL")
                    : node.Scalar() == value) {
    return node;
  }
  std::string escaped;
  for (const char c : value) {
    if (c == '"' || c == '\\') escaped += '\\';
    escaped += c;
  }
  const bool shell_quoted = value.find('\'') == std::string::npos;
  fail("{}: YAML reads the value '{}' as {}{}, so text would be lost; to give it as written, quote it: {}\"{}\"{}",
       label, value, describe(node), lost_text_reason(value), shell_quoted ? before : "", escaped,
       shell_quoted ? after : "");
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

std::optional<std::int64_t> parse_integer(std::string_view text) {
  // from_chars rejects the explicit '+' that YAML allows.
  if (text.size() > 1 && text.front() == '+' && text[1] != '-') text.remove_prefix(1);
  std::int64_t value = 0;
  const char* end = text.data() + text.size();
  const auto [stop, error] = std::from_chars(text.data(), end, value);
  if (text.empty() || error != std::errc() || stop != end) return std::nullopt;
  return value;
}

bool is_integer_text(std::string_view text) {
  if (!text.empty() && (text.front() == '+' || text.front() == '-')) text.remove_prefix(1);
  return !text.empty() && std::all_of(text.begin(), text.end(), [](char c) { return c >= '0' && c <= '9'; });
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

YAML::Node nested(const std::vector<std::string>& keys, std::size_t first, const YAML::Node& leaf) {
  if (first == keys.size()) return leaf;
  YAML::Node map(YAML::NodeType::Map);
  map[keys[first]] = nested(keys, first + 1, leaf);
  return map;
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
      return fmt::format("[{}]", fmt::join(items, ","));
    }
    case YAML::NodeType::Map: {
      std::vector<std::string> entries;
      for (const auto& entry : node) {
        entries.push_back(canonical_node(entry.first) + ":" + canonical_node(entry.second));
      }
      std::sort(entries.begin(), entries.end());
      return fmt::format("{{{}}}", fmt::join(entries, ","));
    }
    case YAML::NodeType::Null:
    case YAML::NodeType::Undefined: break;
  }
  return "null";
}

}  // namespace odc::yaml_text
