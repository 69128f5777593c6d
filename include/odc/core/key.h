#pragma once
// A configuration key declared once, typed: Key<T> holds the key's path, its default (a T, and the
// YAML text the dump writes for it), its doc, and the values it may take (a Range for numbers,
// choices for strings, words for integers). Everything else takes the key from here:
//   key.spec()          the TunableSpec a schema lists (core/config.h validates values against it
//                       as they load: range and choices, naming the key and its source);
//   key.read(config)    the effective value, typed;
//   key.default_value() the default, typed: the default of a settings field the key sets
//                       (`double lr = keys::train_lr.default_value();`, never a literal).
// A key is declared beside the component that uses it (comm.* in distributed, data.* in data,
// checkpoint.* in train/checkpoint, ...), as `inline const Key<T> name{...}` in a *_keys.h header.
// Where two tools read the same path with different defaults (odc-train's data.max_length is 0,
// odc-sim's 65536), the second default is written in the same declaration: key.variant(...) gives
// the other tool's Key, with the same path (tests/structure/check_keys.py checks a path is declared
// once, a variant of it aside).
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <yaml-cpp/yaml.h>

#include "odc/core/config.h"

namespace odc {

// A key's default as a value of its type and as the YAML text the dump shows. Numbers are written
// as text (number("3.0e-3")): the value is that text read once, so the dump keeps its spelling.
template <class T>
struct KeyDefault {
  std::optional<T> value;  // nullopt: no default (the key is unset unless given)
  std::string text;        // YAML text; empty with no value
};

struct NumberDefault {
  double value;
  std::string text;
};
// The default of a Key<double>, as written in YAML ("3.0e-3", "0.9", "600").
NumberDefault number(const char* text);

namespace key_detail {
std::string int_text(std::int64_t value);
std::string string_text(const std::string& value);  // the empty string is "\"\""
[[noreturn]] void throw_key_without_default(const std::string& path);
}  // namespace key_detail

template <class T>
struct KeyKind;
template <>
struct KeyKind<std::int64_t> {
  static constexpr ValueKind kind = ValueKind::integer;
  static KeyDefault<std::int64_t> make(std::int64_t v) { return {v, key_detail::int_text(v)}; }
  static std::int64_t get(const Config& c, const std::string& p) { return c.get_int(p); }
};
template <>
struct KeyKind<double> {
  static constexpr ValueKind kind = ValueKind::number;
  static KeyDefault<double> make(const NumberDefault& v) { return {v.value, v.text}; }
  static double get(const Config& c, const std::string& p) { return c.get_double(p); }
};
template <>
struct KeyKind<bool> {
  static constexpr ValueKind kind = ValueKind::boolean;
  static KeyDefault<bool> make(bool v) { return {v, v ? "true" : "false"}; }
  static bool get(const Config& c, const std::string& p) { return c.get_bool(p); }
};
template <>
struct KeyKind<std::string> {
  static constexpr ValueKind kind = ValueKind::string;
  static KeyDefault<std::string> make(const std::string& v) { return {v, key_detail::string_text(v)}; }
  static std::string get(const Config& c, const std::string& p) { return c.get_string(p); }
};
// A free-form mapping (model.config), validated by its consumer; its default is YAML text.
struct MapValue {
  std::string text;
};
template <>
struct KeyKind<YAML::Node> {
  static constexpr ValueKind kind = ValueKind::map;
  static KeyDefault<YAML::Node> make(const MapValue& v);
  static YAML::Node get(const Config& c, const std::string& p) { return c.get_map(p); }
};

template <class T>
class Key {
 public:
  // With a default, and for numbers the range of values that make sense.
  template <class D>
  Key(std::string path, const D& default_value, std::string doc, Range range = {})
      : path_(std::move(path)), default_(KeyKind<T>::make(default_value)), doc_(std::move(doc)), range_(range) {}
  // With a default and the values it may take: choices of a string, words an integer also accepts
  // besides numbers in `range` (e.g. "auto", read with read_word).
  template <class D>
  Key(std::string path, const D& default_value, std::string doc, std::vector<std::string> choices, Range range = {})
      : path_(std::move(path)), default_(KeyKind<T>::make(default_value)), doc_(std::move(doc)),
        choices_(std::move(choices)), range_(range) {}

  // A key without a default: unset unless given (read_optional), or required of the user.
  static Key unset(std::string path, std::string doc, Range range = {}) { return Key(std::move(path), std::move(doc), range, false); }
  static Key required(std::string path, std::string doc) { return Key(std::move(path), std::move(doc), {}, true); }

  // The same path with another tool's default, doc and values (odc-sim's data.max_length).
  template <class D>
  Key variant(const D& default_value, std::string doc, std::vector<std::string> choices = {}, Range range = {}) const {
    Key other = *this;
    // reset first: assigning one YAML::Node to another writes through to the tree they share
    other.default_.value.reset();
    other.default_ = KeyKind<T>::make(default_value);
    other.doc_ = std::move(doc);
    other.choices_ = std::move(choices);
    other.range_ = range;
    return other;
  }
  template <class D>
  Key variant(const D& default_value, std::string doc, Range range) const {
    return variant(default_value, std::move(doc), {}, range);
  }

  const std::string& path() const { return path_; }
  // The values a number may take (a command-line flag that sets the same quantity checks these too).
  const Range& range() const { return range_; }
  bool has_default() const { return default_.value.has_value(); }
  // The default as a value; a key without one has none to give (a programmer's error).
  const T& default_value() const {
    if (!default_.value) key_has_no_default(path_);
    return *default_.value;
  }
  TunableSpec spec() const {
    TunableSpec spec{path_, KeyKind<T>::kind, default_.text, doc_, choices_, required_, range_};
    return spec;
  }
  T read(const Config& config) const { return KeyKind<T>::get(config, path_); }
  std::optional<T> read_optional(const Config& config) const {
    if (!config.has(path_)) return std::nullopt;
    return read(config);
  }
  bool is_set(const Config& config) const { return config.has(path_); }
  // An integer key's word ("auto"), nullopt when it holds a number.
  std::optional<std::string> read_word(const Config& config) const { return config.get_int_word(path_); }
  // Where the effective value came from ("default", a file, --set, an environment variable).
  std::string source(const Config& config) const { return config.source_of(path_); }
  bool given(const Config& config) const { return config.source_of(path_) != "default"; }

 private:
  Key(std::string path, std::string doc, Range range, bool required)
      : path_(std::move(path)), doc_(std::move(doc)), range_(range), required_(required) {}
  [[noreturn]] static void key_has_no_default(const std::string& path);

  std::string path_;
  KeyDefault<T> default_;
  std::string doc_;
  std::vector<std::string> choices_;
  Range range_;
  bool required_ = false;
};

template <class T>
[[noreturn]] void Key<T>::key_has_no_default(const std::string& path) {
  key_detail::throw_key_without_default(path);
}

}  // namespace odc
