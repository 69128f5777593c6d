#pragma once
// Private pieces of the tokenizer (src/data/tokenizer*.cpp): JSON field access with error paths,
// the byte-level alphabet, a PCRE2 regex, and the pipeline stages of a Hugging Face tokenizer —
// normalizer, pre-tokenizer, BPE model, post-processor, decoder — each built from its
// tokenizer.json object. The UTF-8 helpers are core/text.h.
#include <array>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "odc/core/error.h"
#include "odc/core/text.h"

struct pcre2_real_code_8;

namespace odc::data::tokenizer_detail {

using Json = nlohmann::json;

// A JSON value together with where it sits ("model.merges[12]") and the file it came from, so that
// every complaint about it reads "<file>: <path>: <what is wrong>".
class JsonRef {
 public:
  JsonRef(const Json& value, std::string path, const std::string& origin)
      : value_(&value), path_(std::move(path)), origin_(&origin) {}

  const Json& value() const { return *value_; }
  const std::string& path() const { return path_; }
  const std::string& origin() const { return *origin_; }

  bool is_null() const { return value_->is_null(); }
  // Present and not null.
  bool has(std::string_view key) const;
  // A required member of an object (missing or null is an error).
  JsonRef at(std::string_view key) const;
  JsonRef at(std::size_t index) const;
  // A member that may be absent or null.
  std::optional<JsonRef> find(std::string_view key) const;
  std::size_t array_size() const;  // fails unless an array
  void require_object() const;

  std::string string() const;
  bool boolean() const;
  std::int64_t integer() const;
  std::string string_or(std::string_view key, std::string fallback) const;
  bool boolean_or(std::string_view key, bool fallback) const;
  std::int64_t integer_or(std::string_view key, std::int64_t fallback) const;
  // A token id: an integer in [0, 2^31).
  std::int32_t token_id() const;

  template <typename... Args>
  [[noreturn]] void fail(fmt::format_string<Args...> format, Args&&... args) const {
    odc::fail("{}: {}: {}", *origin_, path_.empty() ? std::string("<top level>") : path_,
              fmt::format(format, std::forward<Args>(args)...));
  }
  // "unsupported <what> type 'X' (supported: ...)", naming this object's "type" field.
  [[noreturn]] void fail_unsupported_type(std::string_view what, std::string_view type,
                                          std::string_view supported) const;

 private:
  std::string child_path(std::string_view key) const;
  const Json* value_;
  std::string path_;
  const std::string* origin_;
};

// ---- byte-level alphabet -------------------------------------------------------------------

// GPT-2's byte-to-unicode table: every byte maps to a printable code point, so byte-level tokens
// are valid strings. unicode_to_byte is -1 for code points outside the table.
const std::array<char32_t, 256>& byte_to_unicode();
int unicode_to_byte(char32_t code_point);

// ---- regex ----------------------------------------------------------------------------------

// A compiled PCRE2 pattern (UTF, Unicode properties, JIT where available). Patterns written for
// Oniguruma are translated where the two dialects differ in meaning (see tokenizer_text.cpp).
class Regex {
 public:
  // `where` names the pattern in the error for an invalid one.
  Regex(std::string_view pattern, const std::string& where);

  // All non-overlapping matches, left to right, as (begin, end) byte offsets. text must be valid
  // UTF-8 (checked by the caller once, not per match).
  std::vector<std::pair<std::size_t, std::size_t>> find_all(std::string_view text) const;

 private:
  struct CodeDeleter {
    void operator()(pcre2_real_code_8* code) const;
  };
  std::unique_ptr<pcre2_real_code_8, CodeDeleter> code_;
  std::string where_;
};

// A Split/Replace "pattern": {"String": "..."} (literal) or {"Regex": "..."}.
class Pattern {
 public:
  explicit Pattern(const JsonRef& config);
  std::vector<std::pair<std::size_t, std::size_t>> find_all(std::string_view text) const;
  std::string replace_all(std::string_view text, std::string_view content) const;

 private:
  std::string literal_;
  std::unique_ptr<Regex> regex_;
};

// ---- pipeline stages ------------------------------------------------------------------------

class Normalizer {
 public:
  virtual ~Normalizer() = default;
  virtual void normalize(std::string& text) const = 0;
};
// nullptr for a JSON null.
std::unique_ptr<Normalizer> make_normalizer(const JsonRef& config);

class PreTokenizer {
 public:
  virtual ~PreTokenizer() = default;
  // Splits every piece further. first_section: the text being split starts the input (Metaspace's
  // prepend_scheme "first" needs to know).
  virtual void split(std::vector<std::string>& pieces, bool first_section) const = 0;
};
std::unique_ptr<PreTokenizer> make_pre_tokenizer(const JsonRef& config);

class BpeModel {
 public:
  explicit BpeModel(const JsonRef& model);
  // Appends the ids of one pre-tokenized word.
  void tokenize(std::string_view word, std::vector<std::int32_t>& out) const;
  std::optional<std::int32_t> token_to_id(std::string_view token) const;
  const std::string* id_to_token(std::int32_t id) const;
  std::int32_t max_id() const { return static_cast<std::int32_t>(tokens_.size()) - 1; }

 private:
  struct Merge {
    std::int32_t rank;
    std::int32_t merged_id;
  };
  static std::uint64_t pair_key(std::int32_t left, std::int32_t right) {
    return (static_cast<std::uint64_t>(static_cast<std::uint32_t>(left)) << 32) |
           static_cast<std::uint32_t>(right);
  }
  // Merge table: open addressing over pair keys. The lookup sits in the innermost loop of
  // encoding, where node-based std::unordered_map cost a cache miss per probe.
  struct MergeSlot {
    std::uint64_t key = kEmptyKey;
    Merge merge{};
  };
  static constexpr std::uint64_t kEmptyKey = ~std::uint64_t{0};  // ids are >= 0, so never a key
  const Merge* find_merge(std::int32_t left, std::int32_t right) const;
  void insert_merge(std::uint64_t key, Merge merge);
  void merge_symbols(std::vector<std::int32_t>& symbols) const;
  void emit_unknown(std::string_view character, std::size_t word_begin, std::vector<std::int32_t>& out) const;
  void tokenize_uncached(std::string_view word, std::vector<std::int32_t>& out) const;
  void merge_word(std::string_view word, std::vector<std::int32_t>& out) const;
  static constexpr std::string_view kMetaspace = "\xE2\x96\x81";  // U+2581 "▁"
  static constexpr std::size_t kMetaspaceChunkBytes = 256;

  std::unordered_map<std::string, std::int32_t> vocab_;
  std::vector<std::string> tokens_;  // by id; ids the vocabulary skips hold ""
  std::vector<bool> has_token_;
  std::unordered_map<char32_t, std::int32_t> char_ids_;  // single-code-point tokens
  std::vector<MergeSlot> merge_slots_;
  int merge_shift_ = 64;
  // Results for short words: natural text repeats its words, so most pre-tokens skip the merge
  // loop. Bounded; guarded because one Tokenizer may encode on several threads.
  mutable std::mutex cache_mutex_;
  mutable std::unordered_map<std::string, std::vector<std::int32_t>> cache_;
  std::array<std::int32_t, 256> byte_ids_{};  // <0xNN> tokens for byte fallback, -1 if absent
  std::optional<std::int32_t> unk_id_;
  bool byte_fallback_ = false;
  bool fuse_unk_ = false;
  bool ignore_merges_ = false;
  bool split_at_metaspace_ = false;
};

class Decoder {
 public:
  virtual ~Decoder() = default;
  // Rewrites the token strings; the decoded text is their concatenation afterwards.
  virtual void decode_chain(std::vector<std::string>& tokens) const = 0;
};
std::unique_ptr<Decoder> make_decoder(const JsonRef& config);

// The post_processor's effect on ids when special tokens are requested.
struct PostProcessor {
  // Ids to put before and after the encoded sequence (TemplateProcessing's "single" template).
  std::vector<std::int32_t> prefix;
  std::vector<std::int32_t> suffix;
};
PostProcessor make_post_processor(const JsonRef& config);

struct AddedToken {
  std::string content;
  std::int32_t id = 0;
  bool single_word = false;
  bool lstrip = false;
  bool rstrip = false;
  bool normalized = true;
  bool special = false;
};

// Leftmost-longest matching of added tokens' contents in a text, honoring single_word, lstrip and
// rstrip as the reference library's AddedVocabulary does.
class AddedTokenMatcher {
 public:
  struct Segment {
    std::size_t begin;
    std::size_t end;
    std::int32_t id;  // -1: ordinary text
  };
  AddedTokenMatcher() = default;
  // contents[i] is matched for tokens[i].
  AddedTokenMatcher(std::vector<std::string> contents, std::vector<const AddedToken*> tokens);
  bool empty() const { return contents_.empty(); }
  // Splits text into ordinary segments and added-token segments covering it in order.
  std::vector<Segment> split(std::string_view text) const;

 private:
  struct Node {
    std::vector<std::pair<unsigned char, std::int32_t>> children;  // sorted by byte
    std::int32_t token = -1;  // index into contents_ when a content ends here
  };
  std::int32_t child(std::int32_t node, unsigned char byte) const;
  std::vector<std::string> contents_;
  std::vector<const AddedToken*> tokens_;
  std::vector<Node> nodes_;
  std::array<bool, 256> first_byte_{};
};

struct TokenizerImpl {
  std::string origin;
  std::vector<AddedToken> added_tokens;
  std::unordered_map<std::string, std::int32_t> added_by_content;
  std::unordered_map<std::int32_t, std::size_t> added_by_id;  // index into added_tokens
  std::unique_ptr<Normalizer> normalizer;
  std::unique_ptr<PreTokenizer> pre_tokenizer;
  std::unique_ptr<BpeModel> model;
  PostProcessor post_processor;
  std::unique_ptr<Decoder> decoder;
  AddedTokenMatcher raw_matcher;         // added tokens with normalized = false
  AddedTokenMatcher normalized_matcher;  // the others, matched after normalization
  std::int64_t vocab_size = 0;
};

}  // namespace odc::data::tokenizer_detail
