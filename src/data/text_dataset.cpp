// Text JSONL datasets: each line is formatted and tokenized once at open into one contiguous token
// array (plus masks and offsets), the same layout as the pre-tokenized JSONL dataset.
#include "odc/data/text_dataset.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <limits>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "odc/core/config.h"
#include "odc/core/error.h"
#include "jsonl_records.h"
#include "record_fields.h"

namespace odc::data {

namespace {

// Refuses a top-level field the record's kind does not define, as a tokens record does: a typo
// ("promt") or a field of another kind (a "text" next to "messages") would otherwise be dropped
// without a word. Records without the kind's fields are left to the formatter, which names them.
void check_fields(const nlohmann::json& record, TextJsonlDataset::Kind kind, const std::string& where) {
  if (!record.is_object()) return;
  std::vector<std::string> known;
  const char* what = "";
  if (kind == TextJsonlDataset::Kind::text) {
    if (!record.contains("text")) return;
    known = {"text"};
    what = "a text record";
  } else if (record.contains("messages")) {
    known = {"messages"};
    what = "a chat record";
  } else if (record.contains("prompt") || record.contains("completion")) {
    known = {"prompt", "completion"};
    what = "a prompt/completion record";
  } else if (record.contains("text")) {
    known = {"text"};
    what = "a text record";
  } else {
    return;
  }
  refuse_unknown_fields(record, known, where, what, kExtraFieldsHint);
}

}  // namespace

TextJsonlDataset::TextJsonlDataset(const std::string& path, Kind kind, const ChatFormatter& formatter,
                                   std::int64_t vocab_size, bool ignore_extra_fields)
    : InMemoryTokenDataset(path), kind_name_(kind == Kind::chat ? "chat" : "text") {
  if (vocab_size <= 0 || vocab_size > std::numeric_limits<std::int32_t>::max()) {
    fail("{}: vocab size must be in [1, {}], got {}", path, std::numeric_limits<std::int32_t>::max(), vocab_size);
  }
  read_jsonl_records(path, fmt::format("cannot open dataset file (expected {} JSONL)", kind_name_),
                     [&](const nlohmann::json& record, const std::string& where, std::int64_t line_number) {
    if (!ignore_extra_fields) check_fields(record, kind, where);
    const TokenizedSample sample =
        kind == Kind::chat ? formatter.format_record(record, where) : formatter.format_text_record(record, where);
    if (sample.tokens.empty()) fail("{}: the record tokenizes to no tokens", where);
    for (std::size_t j = 0; j < sample.tokens.size(); ++j) {
      if (sample.tokens[j] >= vocab_size) {
        fail("{}: token id {} (\"{}\") at position {} is outside the model's vocabulary of {} (tokenizer {} has "
             "{} tokens)",
             where, sample.tokens[j], formatter.tokenizer().id_to_token(sample.tokens[j]), j, vocab_size,
             formatter.tokenizer().origin(), formatter.tokenizer().vocab_size());
      }
    }
    tokens_.insert(tokens_.end(), sample.tokens.begin(), sample.tokens.end());
    masks_.insert(masks_.end(), sample.target_mask.begin(), sample.target_mask.end());
    end_sequence(line_number);
    });
  if (size() == 0) fail("{}: dataset has no records (expected one JSON object per line)", path);
}

std::string TextJsonlDataset::describe() const {
  return fmt::format("{} ({} JSONL, {} sequences, {} tokens)", path(), kind_name_, size(), tokens_.size());
}

std::string resolve_tokenizer_path(const std::string& configured, const std::string& checkpoint_dir) {
  if (!configured.empty()) return configured;
  if (checkpoint_dir.empty()) return "";
  return (std::filesystem::path(checkpoint_dir) / "tokenizer.json").string();
}

}  // namespace odc::data
