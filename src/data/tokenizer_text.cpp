// Text plumbing of the tokenizer: JSON field access with error paths, the byte-level alphabet,
// and regex matching on PCRE2 (the UTF-8 helpers are core/text.h).
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
