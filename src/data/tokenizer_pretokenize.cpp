// Normalizers and pre-tokenizers: what happens to text between added-token matching and the BPE
// model. Semantics follow the reference `tokenizers` library (Rust); offsets are not tracked
// because only ids are needed.
#include <unicode/bytestream.h>
#include <unicode/locid.h>
#include <unicode/normalizer2.h>
#include <unicode/unistr.h>

#include "tokenizer_parts.h"

namespace odc::data::tokenizer_detail {

namespace {

constexpr std::string_view kNormalizerTypes =
    "NFC, NFD, NFKC, NFKD, Lowercase, Prepend, Replace, Strip, Sequence";
constexpr std::string_view kPreTokenizerTypes = "Split, ByteLevel, Metaspace, Sequence";

bool is_ascii(std::string_view text) {
  for (const char c : text) {
    if (static_cast<unsigned char>(c) >= 0x80) return false;
  }
  return true;
}

// ---- normalizers ----------------------------------------------------------------------------

class UnicodeNormalizer final : public Normalizer {
 public:
  UnicodeNormalizer(const JsonRef& config, const std::string& form) {
    UErrorCode status = U_ZERO_ERROR;
    if (form == "NFC") normalizer_ = icu::Normalizer2::getNFCInstance(status);
    if (form == "NFD") normalizer_ = icu::Normalizer2::getNFDInstance(status);
    if (form == "NFKC") normalizer_ = icu::Normalizer2::getNFKCInstance(status);
    if (form == "NFKD") normalizer_ = icu::Normalizer2::getNFKDInstance(status);
    if (U_FAILURE(status) || normalizer_ == nullptr) {
      config.fail("ICU could not provide the {} normalizer: {}", form, u_errorName(status));
    }
  }
  void normalize(std::string& text) const override {
    if (is_ascii(text)) return;  // every normalization form leaves ASCII unchanged
    std::string out;
    icu::StringByteSink<std::string> sink(&out, static_cast<int32_t>(text.size()));
    UErrorCode status = U_ZERO_ERROR;
    normalizer_->normalizeUTF8(0, icu::StringPiece(text.data(), static_cast<int32_t>(text.size())),
                               sink, nullptr, status);
    if (U_FAILURE(status)) odc::fail("Unicode normalization failed: {}", u_errorName(status));
    text = std::move(out);
  }

 private:
  const icu::Normalizer2* normalizer_ = nullptr;
};

class LowercaseNormalizer final : public Normalizer {
 public:
  void normalize(std::string& text) const override {
    if (is_ascii(text)) {
      for (char& c : text) {
        if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
      }
      return;
    }
    // The root locale gives the language-neutral full lowercase mapping (final sigma included),
    // as Rust's str::to_lowercase.
    icu::UnicodeString wide = icu::UnicodeString::fromUTF8(text);
    wide.toLower(icu::Locale::getRoot());
    text.clear();
    wide.toUTF8String(text);
  }
};

class PrependNormalizer final : public Normalizer {
 public:
  explicit PrependNormalizer(const JsonRef& config) : prepend_(config.at("prepend").string()) {}
  void normalize(std::string& text) const override {
    if (!text.empty()) text.insert(0, prepend_);
  }

 private:
  std::string prepend_;
};

class ReplaceNormalizer final : public Normalizer {
 public:
  explicit ReplaceNormalizer(const JsonRef& config)
      : pattern_(config.at("pattern")), content_(config.at("content").string()) {}
  void normalize(std::string& text) const override { text = pattern_.replace_all(text, content_); }

 private:
  Pattern pattern_;
  std::string content_;
};

class StripNormalizer final : public Normalizer {
 public:
  explicit StripNormalizer(const JsonRef& config)
      : left_(config.boolean_or("strip_left", true)), right_(config.boolean_or("strip_right", true)) {}
  void normalize(std::string& text) const override {
    text = std::string(strip(text, is_unicode_whitespace, left_, right_));
  }

 private:
  bool left_;
  bool right_;
};

class SequenceNormalizer final : public Normalizer {
 public:
  explicit SequenceNormalizer(const JsonRef& config) {
    const JsonRef list = config.at("normalizers");
    for (std::size_t i = 0; i < list.array_size(); ++i) {
      if (auto stage = make_normalizer(list.at(i))) stages_.push_back(std::move(stage));
    }
  }
  void normalize(std::string& text) const override {
    for (const auto& stage : stages_) stage->normalize(text);
  }

 private:
  std::vector<std::unique_ptr<Normalizer>> stages_;
};

// ---- pre-tokenizers -------------------------------------------------------------------------

enum class SplitBehavior { removed, isolated, merged_with_previous, merged_with_next, contiguous };

SplitBehavior parse_behavior(const JsonRef& field) {
  const std::string name = field.string();
  if (name == "Removed") return SplitBehavior::removed;
  if (name == "Isolated") return SplitBehavior::isolated;
  if (name == "MergedWithPrevious") return SplitBehavior::merged_with_previous;
  if (name == "MergedWithNext") return SplitBehavior::merged_with_next;
  if (name == "Contiguous") return SplitBehavior::contiguous;
  field.fail("unknown split behavior '{}' (expected Removed, Isolated, MergedWithPrevious, "
             "MergedWithNext or Contiguous)", name);
}

struct Segment {
  std::size_t begin;
  std::size_t end;
  bool is_match;
};

// Splits text around the matches the way the reference library's NormalizedString::split does:
// the text is cut into alternating match / non-match segments, which the behavior then drops or
// glues to a neighbour. Empty pieces never survive.
void split_on_matches(std::string_view text, const std::vector<std::pair<std::size_t, std::size_t>>& matches,
                      SplitBehavior behavior, bool invert, std::vector<std::string>& out) {
  std::vector<Segment> segments;
  std::size_t previous = 0;
  for (const auto& [begin, end] : matches) {
    if (begin == end) continue;
    if (begin > previous) segments.push_back({previous, begin, invert});
    segments.push_back({begin, end, !invert});
    previous = end;
  }
  if (previous < text.size()) segments.push_back({previous, text.size(), invert});

  std::vector<std::pair<std::size_t, std::size_t>> pieces;
  bool previous_match = false;
  switch (behavior) {
    case SplitBehavior::removed:
      for (const Segment& s : segments) {
        if (!s.is_match) pieces.emplace_back(s.begin, s.end);
      }
      break;
    case SplitBehavior::isolated:
      for (const Segment& s : segments) pieces.emplace_back(s.begin, s.end);
      break;
    case SplitBehavior::merged_with_previous:
      for (const Segment& s : segments) {
        if (s.is_match && !previous_match && !pieces.empty()) {
          pieces.back().second = s.end;
        } else {
          pieces.emplace_back(s.begin, s.end);
        }
        previous_match = s.is_match;
      }
      break;
    case SplitBehavior::merged_with_next:
      for (auto it = segments.rbegin(); it != segments.rend(); ++it) {
        if (it->is_match && !previous_match && !pieces.empty()) {
          pieces.back().first = it->begin;
        } else {
          pieces.emplace_back(it->begin, it->end);
        }
        previous_match = it->is_match;
      }
      std::reverse(pieces.begin(), pieces.end());
      break;
    case SplitBehavior::contiguous:
      for (const Segment& s : segments) {
        if (s.is_match == previous_match && !pieces.empty()) {
          pieces.back().second = s.end;
        } else {
          pieces.emplace_back(s.begin, s.end);
        }
        previous_match = s.is_match;
      }
      break;
  }
  for (const auto& [begin, end] : pieces) {
    if (end > begin) out.emplace_back(text.substr(begin, end - begin));
  }
}

class SplitPreTokenizer final : public PreTokenizer {
 public:
  explicit SplitPreTokenizer(const JsonRef& config)
      : pattern_(config.at("pattern")),
        behavior_(parse_behavior(config.at("behavior"))),
        invert_(config.boolean_or("invert", false)) {}
  void split(std::vector<std::string>& pieces, bool) const override {
    std::vector<std::string> out;
    out.reserve(pieces.size() * 2);
    for (const std::string& piece : pieces) {
      split_on_matches(piece, pattern_.find_all(piece), behavior_, invert_, out);
    }
    pieces = std::move(out);
  }

 private:
  Pattern pattern_;
  SplitBehavior behavior_;
  bool invert_;
};

// GPT-2's pre-tokenization regex, used by ByteLevel when use_regex is set.
constexpr std::string_view kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

// Maps every byte of a piece to its byte-level code point, so BPE works on printable strings.
class ByteLevelPreTokenizer final : public PreTokenizer {
 public:
  explicit ByteLevelPreTokenizer(const JsonRef& config)
      : add_prefix_space_(config.boolean_or("add_prefix_space", true)) {
    if (config.boolean_or("use_regex", true)) {
      regex_ = std::make_unique<Regex>(kGpt2Pattern, fmt::format("{}: {}", config.origin(), config.path()));
    }
    for (int b = 0; b < 256; ++b) {
      append_utf8(byte_strings_[static_cast<std::size_t>(b)], byte_to_unicode()[static_cast<std::size_t>(b)]);
    }
  }
  void split(std::vector<std::string>& pieces, bool) const override {
    std::vector<std::string> out;
    out.reserve(pieces.size());
    std::vector<std::string> words;
    for (std::string& piece : pieces) {
      if (add_prefix_space_ && piece.rfind(' ', 0) != 0) piece.insert(0, " ");
      words.clear();
      if (regex_) {
        split_on_matches(piece, regex_->find_all(piece), SplitBehavior::isolated, false, words);
      } else {
        words.push_back(std::move(piece));
      }
      for (const std::string& word : words) {
        std::string mapped;
        mapped.reserve(word.size() * 2);
        for (const char c : word) mapped += byte_strings_[static_cast<unsigned char>(c)];
        out.push_back(std::move(mapped));
      }
    }
    pieces = std::move(out);
  }

 private:
  bool add_prefix_space_;
  std::unique_ptr<Regex> regex_;
  std::array<std::string, 256> byte_strings_;
};

enum class PrependScheme { always, first, never };

PrependScheme parse_prepend_scheme(const JsonRef& config) {
  if (const auto scheme = config.find("prepend_scheme")) {
    const std::string name = scheme->string();
    if (name == "always") return PrependScheme::always;
    if (name == "first") return PrependScheme::first;
    if (name == "never") return PrependScheme::never;
    scheme->fail("unknown prepend_scheme '{}' (expected always, first or never)", name);
  }
  // Files written before prepend_scheme existed carry add_prefix_space instead.
  return config.boolean_or("add_prefix_space", true) ? PrependScheme::always : PrependScheme::never;
}

std::string single_character(const JsonRef& field) {
  const std::string text = field.string();
  std::size_t pos = 0;
  if (!text.empty()) next_code_point(text, pos);
  if (text.empty() || pos != text.size()) field.fail("expected exactly one character, found \"{}\"", text);
  return text;
}

// SentencePiece's whitespace handling: spaces become "▁", a "▁" is prepended, and each word starts
// at a "▁".
class MetaspacePreTokenizer final : public PreTokenizer {
 public:
  explicit MetaspacePreTokenizer(const JsonRef& config)
      : replacement_(single_character(config.at("replacement"))),
        scheme_(parse_prepend_scheme(config)),
        split_(config.boolean_or("split", true)) {}
  void split(std::vector<std::string>& pieces, bool first_section) const override {
    std::vector<std::string> out;
    for (std::size_t i = 0; i < pieces.size(); ++i) {
      std::string text;
      for (const char c : pieces[i]) {
        if (c == ' ') {
          text += replacement_;
        } else {
          text.push_back(c);
        }
      }
      const bool prepend = scheme_ == PrependScheme::always ||
                           (scheme_ == PrependScheme::first && first_section && i == 0);
      if (prepend && text.rfind(replacement_, 0) != 0) text.insert(0, replacement_);
      if (!split_) {
        if (!text.empty()) out.push_back(std::move(text));
        continue;
      }
      std::vector<std::pair<std::size_t, std::size_t>> matches;
      for (std::size_t pos = text.find(replacement_); pos != std::string::npos;
           pos = text.find(replacement_, pos + replacement_.size())) {
        matches.emplace_back(pos, pos + replacement_.size());
      }
      split_on_matches(text, matches, SplitBehavior::merged_with_next, false, out);
    }
    pieces = std::move(out);
  }

 private:
  std::string replacement_;
  PrependScheme scheme_;
  bool split_;
};

class SequencePreTokenizer final : public PreTokenizer {
 public:
  explicit SequencePreTokenizer(const JsonRef& config) {
    const JsonRef list = config.at("pretokenizers");
    for (std::size_t i = 0; i < list.array_size(); ++i) {
      if (auto stage = make_pre_tokenizer(list.at(i))) stages_.push_back(std::move(stage));
    }
  }
  void split(std::vector<std::string>& pieces, bool first_section) const override {
    for (const auto& stage : stages_) stage->split(pieces, first_section);
  }

 private:
  std::vector<std::unique_ptr<PreTokenizer>> stages_;
};

}  // namespace

std::unique_ptr<Normalizer> make_normalizer(const JsonRef& config) {
  if (config.is_null()) return nullptr;
  const std::string type = config.at("type").string();
  if (type == "NFC" || type == "NFD" || type == "NFKC" || type == "NFKD") {
    return std::make_unique<UnicodeNormalizer>(config, type);
  }
  if (type == "Lowercase") return std::make_unique<LowercaseNormalizer>();
  if (type == "Prepend") return std::make_unique<PrependNormalizer>(config);
  if (type == "Replace") return std::make_unique<ReplaceNormalizer>(config);
  if (type == "Strip") return std::make_unique<StripNormalizer>(config);
  if (type == "Sequence") return std::make_unique<SequenceNormalizer>(config);
  config.fail_unsupported_type("normalizer", type, kNormalizerTypes);
}

std::unique_ptr<PreTokenizer> make_pre_tokenizer(const JsonRef& config) {
  if (config.is_null()) return nullptr;
  const std::string type = config.at("type").string();
  if (type == "Split") return std::make_unique<SplitPreTokenizer>(config);
  if (type == "ByteLevel") return std::make_unique<ByteLevelPreTokenizer>(config);
  if (type == "Metaspace") return std::make_unique<MetaspacePreTokenizer>(config);
  if (type == "Sequence") return std::make_unique<SequencePreTokenizer>(config);
  config.fail_unsupported_type("pre_tokenizer", type, kPreTokenizerTypes);
}

}  // namespace odc::data::tokenizer_detail
