// Text plumbing of the tokenizer: JSON field access with error paths, UTF-8, the byte-level
// alphabet, and regex matching on PCRE2.
#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <algorithm>
#include <limits>

#include "tokenizer_parts.h"

namespace odc::data::tokenizer_detail {

// ---- JsonRef --------------------------------------------------------------------------------

std::string JsonRef::child_path(std::string_view key) const {
  return path_.empty() ? std::string(key) : fmt::format("{}.{}", path_, key);
}

void JsonRef::require_object() const {
  if (!value_->is_object()) fail("expected a JSON object, found {}", value_->type_name());
}

bool JsonRef::has(std::string_view key) const {
  if (!value_->is_object()) return false;
  const auto it = value_->find(key);
  return it != value_->end() && !it->is_null();
}

JsonRef JsonRef::at(std::string_view key) const {
  require_object();
  const auto it = value_->find(key);
  if (it == value_->end() || it->is_null()) {
    odc::fail("{}: missing field '{}'", *origin_, child_path(key));
  }
  return JsonRef(*it, child_path(key), *origin_);
}

JsonRef JsonRef::at(std::size_t index) const {
  if (!value_->is_array() || index >= value_->size()) fail("no element [{}]", index);
  return JsonRef((*value_)[index], fmt::format("{}[{}]", path_, index), *origin_);
}

std::optional<JsonRef> JsonRef::find(std::string_view key) const {
  require_object();
  const auto it = value_->find(key);
  if (it == value_->end() || it->is_null()) return std::nullopt;
  return JsonRef(*it, child_path(key), *origin_);
}

std::size_t JsonRef::array_size() const {
  if (!value_->is_array()) fail("expected an array, found {}", value_->type_name());
  return value_->size();
}

std::string JsonRef::string() const {
  if (!value_->is_string()) fail("expected a string, found {}", value_->dump());
  return value_->get<std::string>();
}

bool JsonRef::boolean() const {
  if (!value_->is_boolean()) fail("expected true or false, found {}", value_->dump());
  return value_->get<bool>();
}

std::int64_t JsonRef::integer() const {
  if (value_->is_number_unsigned()) {
    const auto value = value_->get<std::uint64_t>();
    if (value > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max())) {
      fail("integer {} out of range", value);
    }
    return static_cast<std::int64_t>(value);
  }
  if (!value_->is_number_integer()) fail("expected an integer, found {}", value_->dump());
  return value_->get<std::int64_t>();
}

std::string JsonRef::string_or(std::string_view key, std::string fallback) const {
  const auto member = find(key);
  return member ? member->string() : std::move(fallback);
}

bool JsonRef::boolean_or(std::string_view key, bool fallback) const {
  const auto member = find(key);
  return member ? member->boolean() : fallback;
}

std::int64_t JsonRef::integer_or(std::string_view key, std::int64_t fallback) const {
  const auto member = find(key);
  return member ? member->integer() : fallback;
}

std::int32_t JsonRef::token_id() const {
  const std::int64_t id = integer();
  if (id < 0 || id > std::numeric_limits<std::int32_t>::max()) {
    fail("token id {} out of range [0, {}]", id, std::numeric_limits<std::int32_t>::max());
  }
  return static_cast<std::int32_t>(id);
}

void JsonRef::fail_unsupported_type(std::string_view what, std::string_view type,
                                    std::string_view supported) const {
  odc::fail("{}: {}: unsupported {} type '{}' (supported: {})", *origin_, child_path("type"), what,
            type, supported);
}

// ---- UTF-8 ----------------------------------------------------------------------------------

namespace {

// Length of the valid UTF-8 sequence starting at text[pos], or 0 if it is invalid (overlong forms,
// surrogates and code points above U+10FFFF are invalid, as in Rust and the WHATWG decoder).
std::size_t valid_sequence_length(std::string_view text, std::size_t pos) {
  const auto byte = [&](std::size_t i) { return static_cast<unsigned char>(text[i]); };
  const unsigned char lead = byte(pos);
  if (lead < 0x80) return 1;
  std::size_t length = 0;
  unsigned char low = 0x80;
  unsigned char high = 0xBF;
  if (lead >= 0xC2 && lead <= 0xDF) {
    length = 2;
  } else if (lead >= 0xE0 && lead <= 0xEF) {
    length = 3;
    if (lead == 0xE0) low = 0xA0;
    if (lead == 0xED) high = 0x9F;
  } else if (lead >= 0xF0 && lead <= 0xF4) {
    length = 4;
    if (lead == 0xF0) low = 0x90;
    if (lead == 0xF4) high = 0x8F;
  } else {
    return 0;
  }
  for (std::size_t i = 1; i < length; ++i) {
    if (pos + i >= text.size()) return 0;
    const unsigned char next = byte(pos + i);
    if (i == 1 ? (next < low || next > high) : (next < 0x80 || next > 0xBF)) return 0;
  }
  return length;
}

}  // namespace

std::optional<std::size_t> find_invalid_utf8(std::string_view text) {
  std::size_t pos = 0;
  while (pos < text.size()) {
    const std::size_t length = valid_sequence_length(text, pos);
    if (length == 0) return pos;
    pos += length;
  }
  return std::nullopt;
}

char32_t next_code_point(std::string_view text, std::size_t& pos) {
  const auto byte = [&](std::size_t i) { return static_cast<char32_t>(static_cast<unsigned char>(text[i])); };
  const char32_t lead = byte(pos);
  if (lead < 0x80) {
    pos += 1;
    return lead;
  }
  if (lead < 0xE0) {
    const char32_t cp = ((lead & 0x1F) << 6) | (byte(pos + 1) & 0x3F);
    pos += 2;
    return cp;
  }
  if (lead < 0xF0) {
    const char32_t cp = ((lead & 0x0F) << 12) | ((byte(pos + 1) & 0x3F) << 6) | (byte(pos + 2) & 0x3F);
    pos += 3;
    return cp;
  }
  const char32_t cp = ((lead & 0x07) << 18) | ((byte(pos + 1) & 0x3F) << 12) |
                      ((byte(pos + 2) & 0x3F) << 6) | (byte(pos + 3) & 0x3F);
  pos += 4;
  return cp;
}

void append_utf8(std::string& out, char32_t cp) {
  if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

std::string utf8_lossy(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size());
  std::size_t pos = 0;
  while (pos < bytes.size()) {
    const std::size_t length = valid_sequence_length(bytes, pos);
    if (length > 0) {
      out.append(bytes.substr(pos, length));
      pos += length;
      continue;
    }
    // Skip the maximal prefix of a valid sequence (the lead byte plus the continuation bytes that
    // could still have completed it), replacing it by one U+FFFD.
    const auto lead = static_cast<unsigned char>(bytes[pos]);
    std::size_t skip = 1;
    if (lead >= 0xC2 && lead <= 0xF4) {
      const std::size_t expected = lead <= 0xDF ? 2 : lead <= 0xEF ? 3 : 4;
      while (skip < expected && pos + skip < bytes.size()) {
        const auto next = static_cast<unsigned char>(bytes[pos + skip]);
        const bool second = skip == 1;
        unsigned char low = 0x80;
        unsigned char high = 0xBF;
        if (second && lead == 0xE0) low = 0xA0;
        if (second && lead == 0xED) high = 0x9F;
        if (second && lead == 0xF0) low = 0x90;
        if (second && lead == 0xF4) high = 0x8F;
        if (next < low || next > high) break;
        ++skip;
      }
    }
    append_utf8(out, 0xFFFD);
    pos += skip;
  }
  return out;
}

bool is_unicode_whitespace(char32_t cp) {
  return (cp >= 0x09 && cp <= 0x0D) || cp == 0x20 || cp == 0x85 || cp == 0xA0 || cp == 0x1680 ||
         (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 || cp == 0x202F ||
         cp == 0x205F || cp == 0x3000;
}

// ---- byte-level alphabet --------------------------------------------------------------------

const std::array<char32_t, 256>& byte_to_unicode() {
  static const std::array<char32_t, 256> table = [] {
    std::array<char32_t, 256> map{};
    // Printable Latin-1 bytes stand for themselves; the rest are shifted past U+00FF in order.
    char32_t shifted = 256;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
      map[static_cast<std::size_t>(b)] = printable ? static_cast<char32_t>(b) : shifted++;
    }
    return map;
  }();
  return table;
}

int unicode_to_byte(char32_t cp) {
  static const std::array<int, 512> table = [] {
    std::array<int, 512> map{};
    map.fill(-1);
    const auto& forward = byte_to_unicode();
    for (int b = 0; b < 256; ++b) map[forward[static_cast<std::size_t>(b)]] = b;
    return map;
  }();
  return cp < table.size() ? table[cp] : -1;
}

// ---- Regex ----------------------------------------------------------------------------------

namespace {

// Oniguruma's \s is the Unicode White_Space property; PCRE2's (with UCP) is \p{Z} plus \h and \v,
// which adds U+180E. Rewriting the escapes keeps the two engines' splits identical.
std::string translate_oniguruma(std::string_view pattern) {
  std::string out;
  out.reserve(pattern.size() + 16);
  for (std::size_t i = 0; i < pattern.size(); ++i) {
    if (pattern[i] == '\\' && i + 1 < pattern.size()) {
      const char next = pattern[i + 1];
      if (next == 's') {
        out += "\\p{White_Space}";
      } else if (next == 'S') {
        out += "\\P{White_Space}";
      } else {
        out += pattern.substr(i, 2);
      }
      ++i;
      continue;
    }
    out.push_back(pattern[i]);
  }
  return out;
}

std::string pcre2_message(int code) {
  PCRE2_UCHAR buffer[256];
  pcre2_get_error_message(code, buffer, sizeof(buffer));
  return std::string(reinterpret_cast<const char*>(buffer));
}

struct MatchDataDeleter {
  void operator()(pcre2_match_data* data) const { pcre2_match_data_free(data); }
};
struct JitStackDeleter {
  void operator()(pcre2_jit_stack* stack) const { pcre2_jit_stack_free(stack); }
};
struct MatchContextDeleter {
  void operator()(pcre2_match_context* context) const { pcre2_match_context_free(context); }
};

// The default 32 KiB JIT stack can run out on long runs of whitespace against lookaheads; one
// larger stack per thread avoids that without allocating per call.
pcre2_match_context* thread_match_context() {
  thread_local std::unique_ptr<pcre2_jit_stack, JitStackDeleter> stack(
      pcre2_jit_stack_create(64 * 1024, 8 * 1024 * 1024, nullptr));
  thread_local std::unique_ptr<pcre2_match_context, MatchContextDeleter> context = [] {
    std::unique_ptr<pcre2_match_context, MatchContextDeleter> created(pcre2_match_context_create(nullptr));
    if (created && stack) pcre2_jit_stack_assign(created.get(), nullptr, stack.get());
    return created;
  }();
  return context.get();
}

}  // namespace

Regex::Regex(std::string_view pattern, const std::string& where) : where_(where) {
  const std::string translated = translate_oniguruma(pattern);
  int error = 0;
  PCRE2_SIZE offset = 0;
  code_.reset(pcre2_compile(reinterpret_cast<PCRE2_SPTR>(translated.data()), translated.size(),
                            PCRE2_UTF | PCRE2_UCP, &error, &offset, nullptr));
  if (!code_) {
    odc::fail("{}: invalid regex /{}/ at offset {}: {}", where, pattern, offset, pcre2_message(error));
  }
  // JIT is an optimization only: without it (error or unsupported platform) matching still works.
  pcre2_jit_compile(code_.get(), PCRE2_JIT_COMPLETE);
}

void Regex::CodeDeleter::operator()(pcre2_real_code_8* code) const { pcre2_code_free(code); }

std::vector<std::pair<std::size_t, std::size_t>> Regex::find_all(std::string_view text) const {
  std::vector<std::pair<std::size_t, std::size_t>> matches;
  std::unique_ptr<pcre2_match_data, MatchDataDeleter> data(
      pcre2_match_data_create_from_pattern(code_.get(), nullptr));
  if (!data) odc::fail("{}: out of memory allocating regex match data", where_);
  const auto subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  std::size_t start = 0;
  while (start <= text.size()) {
    // The caller validated the UTF-8 once; PCRE2 would otherwise re-check the whole subject on
    // every call, which is quadratic over a long text.
    const int rc = pcre2_match(code_.get(), subject, text.size(), start, PCRE2_NO_UTF_CHECK, data.get(),
                               thread_match_context());
    if (rc == PCRE2_ERROR_NOMATCH) break;
    if (rc < 0) odc::fail("{}: regex matching failed: {}", where_, pcre2_message(rc));
    const PCRE2_SIZE* ovector = pcre2_get_ovector_pointer(data.get());
    const std::size_t begin = ovector[0];
    const std::size_t end = ovector[1];
    matches.emplace_back(begin, end);
    if (end > begin) {
      start = end;
    } else {
      // An empty match: resume one code point later so the scan always advances.
      if (end >= text.size()) break;
      std::size_t next = end;
      next_code_point(text, next);
      start = next;
    }
  }
  return matches;
}

// ---- Pattern --------------------------------------------------------------------------------

Pattern::Pattern(const JsonRef& config) {
  config.require_object();
  if (const auto literal = config.find("String")) {
    literal_ = literal->string();
  } else if (const auto regex = config.find("Regex")) {
    regex_ = std::make_unique<Regex>(regex->string(), fmt::format("{}: {}", config.origin(), regex->path()));
  } else {
    config.fail("a pattern needs \"String\" or \"Regex\", found {}", config.value().dump());
  }
}

std::vector<std::pair<std::size_t, std::size_t>> Pattern::find_all(std::string_view text) const {
  if (regex_) return regex_->find_all(text);
  std::vector<std::pair<std::size_t, std::size_t>> matches;
  if (literal_.empty()) return matches;
  for (std::size_t pos = text.find(literal_); pos != std::string_view::npos;
       pos = text.find(literal_, pos + literal_.size())) {
    matches.emplace_back(pos, pos + literal_.size());
  }
  return matches;
}

std::string Pattern::replace_all(std::string_view text, std::string_view content) const {
  std::string out;
  out.reserve(text.size());
  std::size_t copied = 0;
  for (const auto& [begin, end] : find_all(text)) {
    out.append(text.substr(copied, begin - copied));
    out.append(content);
    copied = end;
  }
  out.append(text.substr(copied));
  return out;
}

}  // namespace odc::data::tokenizer_detail
