#pragma once
// The configuration tree. Every tunable is declared once (path, kind, default, doc, and for numbers
// the range of values that make sense); values come, in increasing precedence, from the declared
// defaults, a YAML file, the environment (ODC_<PATH> with dots as underscores, upper case:
// train.lr -> ODC_TRAIN_LR) and `--set path=value` assignments. Unknown keys, mistyped values,
// values outside their range and missing required keys are odc::Error naming the key path and the
// source (file name, "environment ODC_X", "--set").
// Layers override key by key, also inside map tunables (`--set model.config.hidden_size=64` sets
// one key of the map); a null value (`key:`, `--set key=`) unsets a key that has no default.
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <yaml-cpp/yaml.h>

namespace odc {

enum class ValueKind : std::uint8_t {
  integer,  // int64
  number,   // double
  boolean,  // true/false
  string,   // free text or one of `choices`
  map,      // a free-form YAML mapping validated by its consumer (e.g. model.config)
};

// The values a number may take: each end open (unbounded), inclusive or exclusive. Written as the
// sentence reads: Range::at_least(0).and_below(1) is [0, 1), Range::above(0) is > 0.
class Range {
 public:
  Range() = default;  // any value
  static Range at_least(double minimum);  // >= minimum
  static Range above(double minimum);     // > minimum
  static Range at_most(double maximum);   // <= maximum
  static Range below(double maximum);     // < maximum
  Range and_at_most(double maximum) const;
  Range and_below(double maximum) const;

  bool bounded() const { return lower_.has_value() || upper_.has_value(); }
  bool contains(double value) const;
  // ">= 1", "> 0", "<= 64", "in [0, 1)"; empty when unbounded.
  std::string text() const;

 private:
  struct Bound {
    double value;
    bool inclusive;
  };
  std::optional<Bound> lower_;
  std::optional<Bound> upper_;
};

struct TunableSpec {
  std::string path;                  // "train.lr"
  ValueKind kind;
  std::string default_value;         // YAML text; empty with required=false means "unset"
  std::string doc;
  // Allowed values for strings (empty = any); for an integer, words it also accepts besides
  // numbers (e.g. "auto"), read with Config::get_int_word.
  std::vector<std::string> choices;
  bool required = false;             // must be given by the user (no usable default)
  Range range = {};                  // allowed values of integers and numbers (default: any)
};

// Declarations as the schemas write them.
TunableSpec tunable(std::string path, ValueKind kind, std::string default_value, std::string doc,
                    std::vector<std::string> choices = {}, bool required = false);
TunableSpec tunable(std::string path, ValueKind kind, std::string default_value, std::string doc, Range range);
// An integer in `range` or one of `words`.
TunableSpec tunable(std::string path, std::string default_value, std::string doc, Range range,
                    std::vector<std::string> words);

class Config {
 public:
  explicit Config(std::vector<TunableSpec> specs);

  // Layering. Each throws odc::Error on unknown keys / bad values, naming the source.
  void load_yaml_file(const std::string& path);
  void load_yaml_text(const std::string& text, const std::string& source);
  // Reads the ODC_* variables of declared keys. A variable of one of this config's sections (in any
  // letter case) that names no key is an odc::Error with the nearest name, as an unknown key is in
  // a file; ODC_<MAP>_<KEY> of a map tunable names the ODC_<MAP>='{key: value}' form. Variables of
  // other sections and the launcher's/build's own (kNonConfigVariables in config.cpp) are left
  // alone. Returns the variables ignored (none at present; kept for callers).
  std::vector<std::string> apply_environment();
  void apply_assignment(const std::string& assignment);  // "a.b=value" from --set
  // Checks required keys are present (call after all layers are applied).
  // `not_needed`: required keys this run does without (the online RL loop has no data.train).
  void validate(const std::vector<std::string>& not_needed = {}) const;

  bool has(const std::string& path) const;     // set (by default or by the user)
  std::int64_t get_int(const std::string& path) const;  // odc::Error when the key holds one of its words
  // The word an integer key holds (one of its declared words, e.g. "auto"), nullopt for a number.
  std::optional<std::string> get_int_word(const std::string& path) const;
  double get_double(const std::string& path) const;
  bool get_bool(const std::string& path) const;
  std::string get_string(const std::string& path) const;
  YAML::Node get_map(const std::string& path) const;  // for ValueKind::map
  // Where the effective value came from: "default", a file name, "environment ODC_X", "--set".
  std::string source_of(const std::string& path) const;

  // The effective configuration as YAML (sections in declaration order, one comment per key).
  std::string dump(bool with_docs = true) const;
  // Canonical text of the effective values, for comparing configs across ranks.
  std::string canonical() const;
  const std::vector<TunableSpec>& specs() const { return specs_; }

 private:
  struct Value {
    YAML::Node node;
    std::string source;
  };
  const TunableSpec& spec(const std::string& path) const;
  void set_value(const TunableSpec& spec, const YAML::Node& node, const std::string& source);
  // `text`: the YAML text the node was parsed from (to name a value YAML read as a comment).
  void merge_node(const YAML::Node& node, const std::string& prefix, const std::string& source,
                  std::string_view text);
  std::vector<TunableSpec> specs_;
  std::map<std::string, Value> values_;
};

// "a.b=value" -> {"a.b", "value"} (the first '=' splits; the key trimmed); odc::Error naming the
// text when it has no '=' or no key. What --set takes, on every tool's command line.
std::pair<std::string, std::string> split_assignment(const std::string& assignment);

// The candidate nearest to `word` by edit distance, if it is close enough (two edits) to be the
// intended one; empty otherwise. For "did you mean" hints on keys, choices and options.
std::string closest_name(std::string_view word, const std::vector<std::string>& candidates);

}  // namespace odc
