#include "odc/data/prompts.h"

#include <algorithm>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "odc/core/error.h"
#include "odc/core/hash.h"
#include "jsonl_records.h"

namespace odc::data {

std::vector<Prompt> read_prompts(const std::string& path) {
  std::vector<Prompt> out;
  read_jsonl_records(path, "cannot open the prompts file (JSONL: {\"prompt\": TEXT, \"answer\": TEXT} per line)",
                     [&](const nlohmann::json& record, const std::string& where, std::int64_t) {
    if (!record.is_object() || !record.contains("prompt") || !record.at("prompt").is_string() ||
        !record.contains("answer") || !record.at("answer").is_string()) {
      fail("{}: expected {{\"prompt\": TEXT, \"answer\": TEXT}}", where);
    }
    out.push_back({record.at("prompt").get<std::string>(), record.at("answer").get<std::string>(), where, {}});
  });
  if (out.empty()) fail("{}: no prompts", path);
  return out;
}

PromptSet::PromptSet(const std::string& path, const std::string& tokenizer_path, const std::string& chat_template)
    : path_(path), tokenizer_(Tokenizer::from_file(tokenizer_path)), prompts_(read_prompts(path)) {
  std::optional<ChatFormatter> formatter;
  if (!chat_template.empty()) {
    template_ = resolve_chat_template(chat_template, tokenizer_, tokenizer_path);
    formatter.emplace(tokenizer_, template_, tokenizer_path);
    // The template's end-of-turn marker ends a completion too.
    for (const char* marker : {"<|im_end|>", "<|eot_id|>"}) {
      if (const auto id = tokenizer_.token_to_id(marker)) end_of_turn_.push_back(*id);
    }
  }
  for (auto& p : prompts_) {
    p.ids = formatter ? formatter->generation_prompt(p.text) : tokenizer_.encode(p.text, true);
    if (p.ids.empty()) fail("{}: prompt '{}' encodes to no tokens", p.where, p.text);
  }
}

std::int64_t PromptSet::longest() const {
  std::size_t most = 0;
  for (const auto& p : prompts_) most = std::max(most, p.ids.size());
  return static_cast<std::int64_t>(most);
}

std::uint64_t PromptSet::fingerprint() const {
  Fnv1a h;
  for (const auto& p : prompts_) {
    h.add_value(p.ids.size()).add(p.ids.data(), p.ids.size() * sizeof(std::int32_t));
    h.add_value(p.answer.size()).add(p.answer);
  }
  return h.value();
}

std::string PromptSet::describe() const {
  return fmt::format("{} ({} prompts{})", path_, prompts_.size(),
                     template_ ? fmt::format(", chat template {}", chat_template_name(*template_)) : std::string());
}

}  // namespace odc::data
