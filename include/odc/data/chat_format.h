#pragma once
// Turns SFT records into token ids plus a target mask, with the chat template of the model family
// written natively (no Jinja engine):
//   llama3  <|begin_of_text|><|start_header_id|>ROLE<|end_header_id|>\n\nCONTENT<|eot_id|>...
//           (content trimmed, as the official template does)
//   chatml  <|im_start|>ROLE\nCONTENT<|im_end|>\n...        (Qwen2/Qwen2.5/Qwen3)
// No default system prompt is inserted. The template text around a message and its content are
// tokenized separately, so a mask boundary never falls inside a token.
//
// Records (one JSON object per JSONL line):
//   {"messages": [{"role": "system"|"user"|"assistant", "content": "..."}, ...]}
//       targets: every assistant message's content and its end-of-turn token
//   {"prompt": "...", "completion": "..."}   [BOS] prompt completion EOS; targets: completion + EOS
//   {"text": "..."}                          [BOS] text EOS; targets: all tokens
// BOS/EOS come from tokenizer_config.json next to tokenizer.json when present (bos_token,
// eos_token, add_bos_token), otherwise from the family's defaults.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "odc/data/tokenizer.h"

namespace odc::data {

enum class ChatTemplate { llama3, chatml };

const char* chat_template_name(ChatTemplate chat_template);

// "llama3" or "chatml"; "auto" picks the family from tokenizer_config.json's chat_template (when
// the file sits next to tokenizer_path) or else from the tokenizer's special tokens. An odc::Error
// names what was looked at when no family fits.
ChatTemplate resolve_chat_template(const std::string& name, const Tokenizer& tokenizer,
                                   const std::string& tokenizer_path);

struct TokenizedSample {
  std::vector<std::int32_t> tokens;
  std::vector<std::uint8_t> target_mask;  // 1 = trained on when predicted; same length as tokens
};

class ChatFormatter {
 public:
  // tokenizer_path locates tokenizer_config.json (for BOS/EOS; may be empty); the tokenizer must
  // hold the template's special tokens (an odc::Error names the missing one). Without a template
  // only prompt/completion and text records can be formatted.
  ChatFormatter(Tokenizer tokenizer, std::optional<ChatTemplate> chat_template,
                const std::string& tokenizer_path);

  // Any of the three record kinds. `where` ("file:line") prefixes every error.
  TokenizedSample format_record(const nlohmann::json& record, const std::string& where) const;
  // The ids a model continues to answer `user_message`: one user turn, then the assistant's turn
  // header, as the chat template's add_generation_prompt renders it (no assistant content).
  std::vector<std::int32_t> generation_prompt(const std::string& user_message) const;
  // Only {"text": ...} records.
  TokenizedSample format_text_record(const nlohmann::json& record, const std::string& where) const;

  const Tokenizer& tokenizer() const { return tokenizer_; }
  std::optional<ChatTemplate> chat_template() const { return template_; }
  std::optional<std::int32_t> bos() const { return bos_; }
  std::optional<std::int32_t> eos() const { return eos_; }

 private:
  TokenizedSample format_messages(const nlohmann::json& messages, const std::string& where) const;
  TokenizedSample format_prompt_completion(const nlohmann::json& record, const std::string& where) const;
  TokenizedSample format_text(const std::string& text) const;
  std::int32_t require_token(const std::string& token) const;

  Tokenizer tokenizer_;
  std::optional<ChatTemplate> template_;
  std::optional<std::int32_t> bos_;
  std::optional<std::int32_t> eos_;
  // Template tokens: llama3 uses all four, chatml start/end only.
  std::int32_t begin_of_text_ = -1;
  std::int32_t turn_start_ = -1;  // <|start_header_id|> / <|im_start|>
  std::int32_t header_end_ = -1;  // <|end_header_id|>
  std::int32_t turn_end_ = -1;    // <|eot_id|> / <|im_end|>
};

}  // namespace odc::data
