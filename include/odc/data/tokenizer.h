#pragma once
// A Hugging Face `tokenizer.json` tokenizer: encode text to token ids and decode them back, with
// the same ids as the `tokenizers` library for the BPE families LLaMA-family checkpoints ship:
// byte-level BPE (LLaMA-3, Qwen2/Qwen3: Split regex + ByteLevel) and SentencePiece-style BPE
// (LLaMA-2: Prepend/Replace "▁" normalizers, byte fallback, fused unknowns). Added/special tokens
// are matched in the raw text first and never split.
//
// Supported components (anything else is an odc::Error naming the type and its JSON field, so a
// tokenizer that would silently produce different ids never loads):
//   normalizer     NFC NFD NFKC NFKD Lowercase Prepend Replace Strip Sequence
//   pre_tokenizer  Split ByteLevel Metaspace Sequence
//   model          BPE (merges as "a b" strings or ["a", "b"] pairs, ignore_merges, byte_fallback,
//                  fuse_unk, unk_token)
//   post_processor TemplateProcessing ByteLevel Sequence
//   decoder        ByteLevel Metaspace Replace ByteFallback Fuse Strip Sequence
//
// Regex patterns run on PCRE2 (UTF + Unicode properties) with `\s`/`\S` mapped to the Unicode
// White_Space property as in Oniguruma, which the reference library uses. Input text must be valid
// UTF-8 (an odc::Error names the byte offset otherwise). A Tokenizer is immutable after loading;
// copies share the loaded tables and all methods are safe to call from several threads.
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace odc::data {

namespace tokenizer_detail {
struct TokenizerImpl;
}

class Tokenizer {
 public:
  // Loads tokenizer.json; malformed input is an odc::Error naming the file and the JSON field.
  static Tokenizer from_file(const std::string& path);
  // `origin` names the text in error messages (a path, or e.g. "<inline>").
  static Tokenizer from_json_text(std::string_view json, const std::string& origin);

  // add_special_tokens applies the post_processor (e.g. LLaMA-2's TemplateProcessing adds <s>).
  std::vector<std::int32_t> encode(std::string_view text, bool add_special_tokens = false) const;
  // Ids that name no token are skipped, as in the reference library: models often pad their
  // embedding past the tokenizer's vocabulary, and generation may emit such ids.
  std::string decode(std::span<const std::int32_t> ids, bool skip_special_tokens = false) const;

  std::optional<std::int32_t> token_to_id(std::string_view token) const;
  // The token's string as stored in the vocabulary (byte-level tokens in their mapped alphabet);
  // an odc::Error for an id that names no token.
  std::string id_to_token(std::int32_t id) const;
  // 1 + the largest id of the model vocabulary and the added tokens.
  std::int64_t vocab_size() const;
  // True for added tokens flagged "special" (skipped by decode(..., skip_special_tokens=true)).
  bool is_special(std::int32_t id) const;
  // Where the tokenizer came from (the path or origin given when loading).
  const std::string& origin() const;

 private:
  explicit Tokenizer(std::shared_ptr<const tokenizer_detail::TokenizerImpl> impl);
  std::shared_ptr<const tokenizer_detail::TokenizerImpl> impl_;
};

// Whether the tokenizer.json files `first` and `second` give the same ids to the same text: their
// model type, vocabulary, merges, other model options, added tokens (id and text), normalizer and
// pre-tokenizer compared. The first difference in words ("the vocabulary: "ab" is id 5 in the
// first, 7 in the second"), or std::nullopt when they agree. An odc::Error for a file that cannot
// be read as JSON.
std::optional<std::string> tokenizer_difference(const std::string& first, const std::string& second);

}  // namespace odc::data
