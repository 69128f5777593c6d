#pragma once
// Datasets of text JSONL tokenized when opened: format "chat" (messages, prompt/completion or text
// records, see chat_format.h) and format "text" (only {"text": ...} records). The result lives in
// memory like the pre-tokenized JSONL dataset, so training never tokenizes again.
#include <cstdint>
#include <string>
#include <vector>

#include "odc/data/chat_format.h"
#include "odc/data/dataset.h"

namespace odc::data {

class TextJsonlDataset final : public InMemoryTokenDataset {
 public:
  enum class Kind { chat, text };
  // Every problem is an odc::Error naming "file:line". Token ids must lie in [0, vocab_size), the
  // model's vocabulary (a tokenizer larger than the model is caught here). A top-level field its
  // record kind does not define ("messages"; "prompt" + "completion"; "text") is an error naming it,
  // unless `ignore_extra_fields` (data.extra_fields: ignore).
  TextJsonlDataset(const std::string& path, Kind kind, const ChatFormatter& formatter, std::int64_t vocab_size,
                   bool ignore_extra_fields = false);
  std::string describe() const override;

 private:
  std::string kind_name_;
};

// data.tokenizer as configured, or <checkpoint>/tokenizer.json when it is empty.
std::string resolve_tokenizer_path(const std::string& configured, const std::string& checkpoint_dir);

}  // namespace odc::data
