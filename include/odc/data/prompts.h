#pragma once
// RL prompts: a JSONL file of {"prompt": TEXT, "answer": TEXT}, one per line, read and tokenized
// once (as plain text with the tokenizer's BOS handling, or as one user turn of a chat template
// rendered for generation). The answer is what a verifier scores a completion against. Every
// problem is an odc::Error naming "file:line".
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "odc/data/chat_format.h"
#include "odc/data/tokenizer.h"

namespace odc::data {

struct Prompt {
  std::string text;
  std::string answer;
  std::string where;              // "file:line"
  std::vector<std::int32_t> ids;  // the tokens a completion continues (at least one)
};

// The records of `path` (not tokenized; at least one).
std::vector<Prompt> read_prompts(const std::string& path);

class PromptSet {
 public:
  // `chat_template`: render each prompt as a user turn of it (auto|llama3|chatml: chat_format.h),
  // or empty to encode the text as it is (with the tokenizer's BOS).
  PromptSet(const std::string& path, const std::string& tokenizer_path, const std::string& chat_template);

  const std::vector<Prompt>& prompts() const { return prompts_; }
  std::int64_t size() const { return static_cast<std::int64_t>(prompts_.size()); }
  const Tokenizer& tokenizer() const { return tokenizer_; }
  // The chat template's end-of-turn ids (<|im_end|>, <|eot_id|>) that end a completion, when chat.
  const std::vector<std::int32_t>& end_of_turn() const { return end_of_turn_; }
  std::int64_t longest() const;           // the most tokens of any prompt
  std::uint64_t fingerprint() const;      // of every prompt's tokens and answer
  std::string describe() const;           // "prompts.jsonl (4096 prompts, chat template chatml)"

 private:
  std::string path_;
  Tokenizer tokenizer_;
  std::optional<ChatTemplate> template_;
  std::vector<Prompt> prompts_;
  std::vector<std::int32_t> end_of_turn_;
};

}  // namespace odc::data
