// Pre-tokenized JSONL dataset: parsed once at open into one contiguous token array (plus masks and
// offsets), so a sequence is a span into it and the trainer never touches JSON again.
#include "odc/data/dataset.h"

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <limits>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "odc/core/config.h"
#include "odc/core/error.h"
#include "odc/data/bin_dataset.h"
#include "odc/data/chat_format.h"
#include "odc/data/rollouts.h"
#include "odc/data/text_dataset.h"
#include "jsonl_records.h"
#include "record_fields.h"

namespace odc::data {

namespace {

using nlohmann::json;

// A value an error message shows: scalars as JSON, arrays and objects by kind only (dump() recurses
// once per nesting level, so a line of 100k nested brackets would overflow the stack).
std::string shown(const json& value) {
  if (value.is_array()) return "an array";
  if (value.is_object()) return "an object";
  return value.dump();
}

// Reads one element of input_ids as a token id, or fails naming the line and the position.
std::int32_t parse_token(const json& value, std::size_t position, std::int64_t vocab_size,
                         const std::string& where) {
  if (value.is_number_unsigned()) {
    const auto id = value.get<std::uint64_t>();
    if (id >= static_cast<std::uint64_t>(vocab_size)) {
      fail("{}: token id {} at input_ids[{}] out of range [0, {})", where, id, position,
           vocab_size);
    }
    return static_cast<std::int32_t>(id);
  }
  if (value.is_number_integer()) {
    const auto id = value.get<std::int64_t>();
    if (id < 0 || id >= vocab_size) {
      fail("{}: token id {} at input_ids[{}] out of range [0, {})", where, id, position,
           vocab_size);
    }
    return static_cast<std::int32_t>(id);
  }
  fail("{}: input_ids[{}] must be an integer token id, found {}", where, position, shown(value));
}

// A mask entry is 0/1 or a boolean; anything else (2, 0.5, "1") is almost certainly a bug upstream.
std::uint8_t parse_mask(const json& value, std::size_t position, const std::string& where) {
  if (value.is_boolean()) return value.get<bool>() ? 1 : 0;
  if (value.is_number_integer()) {
    const auto flag = value.get<std::int64_t>();
    if (flag == 0 || flag == 1) return static_cast<std::uint8_t>(flag);
  }
  fail("{}: loss_mask[{}] must be 0, 1, true or false, found {}", where, position, shown(value));
}

// Hugging Face's labels: aligned with input_ids (the model shifts), -100 ignored. labels[i] != -100
// makes token i a target predicted from position i-1, which is loss_mask[i] = 1 here; a label other
// than input_ids[i] would ask for a target other than the next token, which this trainer cannot train.
std::uint8_t parse_label(const json& value, std::int32_t token, std::size_t position, const std::string& where) {
  if (value.is_number_integer()) {
    const auto label = value.get<std::int64_t>();
    if (label == -100) return 0;
    if (label == token) return 1;
    fail("{}: labels[{}] is {} but input_ids[{}] is {}: labels must be -100 (ignored) or equal to input_ids "
         "(this trainer predicts the next token; the shift is implied)",
         where, position, label, position, token);
  }
  fail("{}: labels[{}] must be -100 or the token id at input_ids[{}], found {}", where, position, position,
       shown(value));
}

// The fields a tokens record may hold; any other is refused, since an unread field (a typo such as
// "loss_msk") would train silently on every token.
const std::vector<std::string>& known_fields() {
  static const std::vector<std::string> fields = {"input_ids", "loss_mask", "labels", "attention_mask"};
  return fields;
}

}  // namespace

std::string TokenDataset::record(std::int64_t index) const { return fmt::format("{}: sequence {}", describe(), index); }

std::int64_t TokenDataset::max_length() const {
  std::int64_t longest = 0;
  for (std::int64_t i = 0; i < size(); ++i) longest = std::max(longest, length(i));
  return longest;
}

std::string TokenDataset::no_targets_reason(std::int64_t count) const {
  std::int64_t single = 0;
  std::int64_t first_single = -1;
  for (std::int64_t i = 0; i < count; ++i) {
    if (length(i) != 1) continue;
    if (single++ == 0) first_single = i;
  }
  if (single == 0) return "every loss_mask is 0";
  const std::string one_token = fmt::format(
      "one token long (a one-token sequence has no target: nothing precedes its token, so it is never predicted; "
      "the first is {})", record(first_single));
  if (single == count) return fmt::format("every sequence is {}", one_token);
  return fmt::format("{} of them are {}, and the other {} have loss_mask 0 on every token after the first", single,
                     one_token, count - single);
}

JsonlTokenDataset::JsonlTokenDataset(const std::string& path, std::int64_t vocab_size, bool ignore_extra_fields)
    : InMemoryTokenDataset(path) {
  // Token ids are stored as int32, so a larger vocabulary could not be represented anyway.
  if (vocab_size <= 0 || vocab_size > std::numeric_limits<std::int32_t>::max()) {
    fail("{}: vocab size must be in [1, {}], got {}", path,
         std::numeric_limits<std::int32_t>::max(), vocab_size);
  }
  read_jsonl_records(path, "cannot open dataset file (expected a pre-tokenized JSONL file)",
                     [&](const nlohmann::json& record, const std::string& where, std::int64_t line_number) {
    if (!record.is_object()) {
      fail("{}: expected a JSON object with \"input_ids\", found {}", where, record.type_name());
    }
    const auto ids = record.find("input_ids");
    if (ids == record.end()) {
      // A record of another format: say which data.format reads it.
      const char* hint = record.contains("messages")                                    ? " (a chat record: set data.format: chat)"
                         : record.contains("text") || record.contains("prompt")          ? " (a text record: set data.format: text)"
                                                                                         : "";
      fail("{}: missing \"input_ids\"{}", where, hint);
    }
    if (!ids->is_array()) {
      fail("{}: \"input_ids\" must be an array of token ids, found {}", where, ids->type_name());
    }
    if (ids->empty()) fail("{}: \"input_ids\" is empty (a sequence needs at least one token)", where);

    const std::size_t length = ids->size();
    for (std::size_t j = 0; j < length; ++j) {
      tokens_.push_back(parse_token((*ids)[j], j, vocab_size, where));
    }

    if (!ignore_extra_fields) refuse_unknown_fields(record, known_fields(), where, "a tokens record", kExtraFieldsHint);

    // attention_mask is accepted only when it is all ones: padding inside a record would be trained
    // on as real tokens, and packing makes padding unnecessary.
    if (const auto attention = record.find("attention_mask"); attention != record.end()) {
      if (!attention->is_array()) {
        fail("{}: \"attention_mask\" must be an array of 1s, found {}", where, attention->type_name());
      }
      if (attention->size() != length) {
        fail("{}: \"attention_mask\" has {} entries but \"input_ids\" has {}", where, attention->size(), length);
      }
      for (std::size_t j = 0; j < length; ++j) {
        const json& a = (*attention)[j];
        const bool one = (a.is_number_integer() && a.get<std::int64_t>() == 1) || (a.is_boolean() && a.get<bool>());
        if (!one) {
          fail("{}: attention_mask[{}] is {}: padded records are not supported; remove the padding tokens "
               "(sequences are packed, so no padding is needed) and drop attention_mask",
               where, j, shown(a));
        }
      }
    }

    const auto mask = record.find("loss_mask");
    const auto labels = record.find("labels");
    if (mask != record.end() && labels != record.end()) {
      fail("{}: both \"loss_mask\" and \"labels\" given; give one (labels[i] != -100 is loss_mask[i] = 1)",
           where);
    }
    const std::size_t first = tokens_.size() - length;
    if (labels != record.end()) {
      if (!labels->is_array()) {
        fail("{}: \"labels\" must be an array of token ids or -100, found {}", where, labels->type_name());
      }
      if (labels->size() != length) {
        fail("{}: \"labels\" has {} entries but \"input_ids\" has {}", where, labels->size(), length);
      }
      for (std::size_t j = 0; j < length; ++j) {
        masks_.push_back(parse_label((*labels)[j], tokens_[first + j], j, where));
      }
    } else if (mask == record.end()) {
      masks_.insert(masks_.end(), length, std::uint8_t{1});
    } else {
      if (!mask->is_array()) {
        fail("{}: \"loss_mask\" must be an array of 0/1, found {}", where, mask->type_name());
      }
      if (mask->size() != length) {
        fail("{}: \"loss_mask\" has {} entries but \"input_ids\" has {}", where, mask->size(),
             length);
      }
      for (std::size_t j = 0; j < length; ++j) masks_.push_back(parse_mask((*mask)[j], j, where));
    }

    end_sequence(line_number);
    });
  if (size() == 0) fail("{}: dataset has no sequences (expected one JSON object per line)", path);
}

void InMemoryTokenDataset::end_sequence(std::int64_t line) {
  lines_.push_back(line);
  const std::int64_t begin = offsets_.back();
  const auto end = static_cast<std::int64_t>(tokens_.size());
  // Position 0 is never predicted (nothing precedes it), so its mask does not count.
  target_counts_.push_back(
      std::count_if(masks_.begin() + begin + 1, masks_.begin() + end, [](std::uint8_t m) { return m != 0; }));
  offsets_.push_back(end);
}

SequenceView InMemoryTokenDataset::get(std::int64_t index) const {
  ODC_CHECK(index >= 0 && index < size(), "index {} of {}", index, describe());
  const auto begin = static_cast<std::size_t>(offsets_[static_cast<std::size_t>(index)]);
  const auto count = static_cast<std::size_t>(length(index));
  return SequenceView{std::span<const std::int32_t>(tokens_).subspan(begin, count),
                      std::span<const std::uint8_t>(masks_).subspan(begin, count)};
}

std::int64_t InMemoryTokenDataset::length(std::int64_t index) const {
  ODC_CHECK(index >= 0 && index < size(), "index {} of {}", index, describe());
  return offsets_[static_cast<std::size_t>(index) + 1] - offsets_[static_cast<std::size_t>(index)];
}

std::int64_t InMemoryTokenDataset::target_count(std::int64_t index) const {
  ODC_CHECK(index >= 0 && index < size(), "index {} of {}", index, describe());
  return target_counts_[static_cast<std::size_t>(index)];
}

std::string InMemoryTokenDataset::record(std::int64_t index) const {
  ODC_CHECK(index >= 0 && index < size(), "index {} of {}", index, describe());
  return fmt::format("{}:{}", path_, lines_[static_cast<std::size_t>(index)]);
}

std::string JsonlTokenDataset::describe() const {
  return fmt::format("{} ({} sequences, {} tokens)", path(), size(), tokens_.size());
}

namespace {

// What each format reads, for the message about a path that is not one.
const char* expected_input(const std::string& format) {
  if (format == "tokens") return "a JSONL file of {\"input_ids\": [...]} records";
  if (format == "bin") return "PREFIX of the PREFIX.bin + PREFIX.idx pair that odc-data convert writes";
  if (format == "chat") return "a JSONL file of {\"messages\"}, {\"prompt\", \"completion\"} or {\"text\"} records";
  if (format == "text") return "a JSONL file of {\"text\"} records";
  if (format == "rollouts") return "a JSONL file of {\"prompt_ids\", \"completion_ids\", \"logprobs\", ...} rollout records";
  return nullptr;
}

// Every reader opens its path here first: a directory would read as an empty file (a "read error
// after line 0"); say what it is and which files in it look like datasets.
void check_not_directory(const std::string& path, const std::string& format) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (!fs::is_directory(path, ec) || (format == "bin" && fs::exists(path + ".bin", ec))) return;
  std::vector<std::string> candidates;
  for (const auto& entry : fs::directory_iterator(path, ec)) {
    const std::string ext = entry.path().extension().string();
    if (entry.is_regular_file(ec) && (ext == ".jsonl" || ext == ".json" || ext == ".bin")) {
      candidates.push_back(entry.path().filename().string());
    }
  }
  std::sort(candidates.begin(), candidates.end());
  std::string listed;
  for (std::size_t i = 0; i < candidates.size() && i < 3; ++i) listed += (i == 0 ? "" : ", ") + candidates[i];
  if (candidates.size() > 3) listed += ", ...";
  fail("{}: is a directory, not a dataset file (data.format '{}' reads {}){}", path, format, expected_input(format),
       candidates.empty() ? std::string() : fmt::format("; it holds {}", listed));
}

}  // namespace

void check_dataset_opens(const std::string& path, const std::string& format) {
  const char* expected = expected_input(format);
  if (expected == nullptr) return;  // an unknown format: open_dataset names it
  check_not_directory(path, format);
  if (format == "bin") return;  // a prefix: BinTokenDataset names the file of the pair it misses
  if (!std::ifstream(path)) fail("{}: cannot open dataset file (data.format '{}' reads {})", path, format, expected);
}

std::string name_extra_fields_option(const std::string& message, std::string_view option) {
  constexpr std::string_view key = "data.extra_fields: ignore";
  static_assert(kExtraFieldsHint.find(key) != std::string_view::npos, "the hint names the key");
  const auto at = message.rfind(key);
  if (at == std::string::npos || message.find(kExtraFieldsHint.substr(2), at) != at) return message;
  return message.substr(0, at) + std::string(option) + message.substr(at + key.size());
}

std::unique_ptr<TokenDataset> open_dataset(const std::string& path, const std::string& format,
                                           std::int64_t vocab_size, const TextDataOptions& text) {
  if (expected_input(format) != nullptr) check_not_directory(path, format);
  if (format == "tokens") return std::make_unique<JsonlTokenDataset>(path, vocab_size, text.ignore_extra_fields);
  if (format == "bin") return std::make_unique<BinTokenDataset>(path, vocab_size);
  if (format == "chat" || format == "text") {
    if (text.tokenizer_path.empty()) {
      fail("{}: data.format '{}' needs a tokenizer (data.tokenizer, or a model.checkpoint holding "
           "tokenizer.json)", path, format);
    }
    const Tokenizer tokenizer = Tokenizer::from_file(text.tokenizer_path);
    // Plain text needs no template; chat data fails here, before reading, if none fits.
    const std::optional<ChatTemplate> chat_template =
        format == "chat" ? std::optional(resolve_chat_template(text.chat_template, tokenizer, text.tokenizer_path))
                         : std::nullopt;
    const ChatFormatter formatter(tokenizer, chat_template, text.tokenizer_path);
    return std::make_unique<TextJsonlDataset>(
        path, format == "chat" ? TextJsonlDataset::Kind::chat : TextJsonlDataset::Kind::text, formatter, vocab_size,
        text.ignore_extra_fields);
  }
  if (format == "rollouts") {
    return std::make_unique<RolloutDataset>(path, vocab_size, parse_reward_scale(text.scale_rewards),
                                            text.ignore_extra_fields);
  }
  fail("{}: unknown data.format '{}' (supported formats: tokens, bin, chat, text, rollouts)", path, format);
}

}  // namespace odc::data
