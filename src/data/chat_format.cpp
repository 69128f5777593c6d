// Chat templates written natively: each record becomes template tokens (looked up by id, never
// re-tokenized) around separately tokenized text, with the target mask set on what the model
// should learn to produce.
#include "odc/data/chat_format.h"

#include <algorithm>
#include <filesystem>
#include <fstream>

#include "odc/core/config.h"
#include "odc/core/error.h"
#include "odc/core/text.h"
#include "record_fields.h"

namespace odc::data {

namespace {

using nlohmann::json;

constexpr const char* kLlama3Tokens[] = {"<|begin_of_text|>", "<|start_header_id|>", "<|end_header_id|>",
                                         "<|eot_id|>"};

// tokenizer_config.json next to tokenizer.json, or null when there is none.
json read_tokenizer_config(const std::string& tokenizer_path) {
  if (tokenizer_path.empty()) return nullptr;
  const std::filesystem::path path = std::filesystem::path(tokenizer_path).parent_path() / "tokenizer_config.json";
  std::ifstream in(path, std::ios::binary);
  if (!in) return nullptr;
  try {
    json config = json::parse(in);
    if (!config.is_object()) fail("{}: expected a JSON object, found {}", path.string(), config.type_name());
    return config;
  } catch (const json::exception& e) {
    fail("{}: malformed JSON ({})", path.string(), e.what());
  }
}

// A special-token entry of tokenizer_config.json: "text", {"content": "text", ...} or null.
std::optional<std::string> config_token(const json& config, const char* key, const std::string& tokenizer_path) {
  if (!config.is_object()) return std::nullopt;
  const auto it = config.find(key);
  if (it == config.end() || it->is_null()) return std::nullopt;
  if (it->is_string()) return it->get<std::string>();
  if (it->is_object() && it->contains("content") && (*it)["content"].is_string()) {
    return (*it)["content"].get<std::string>();
  }
  fail("tokenizer_config.json next to {}: \"{}\" must be a string or {{\"content\": ...}}, found {}",
       tokenizer_path, key, it->dump());
}

// The Jinja template text of tokenizer_config.json (a string, or a list of named templates).
std::string config_chat_template(const json& config) {
  if (!config.is_object()) return "";
  const auto it = config.find("chat_template");
  if (it == config.end()) return "";
  if (it->is_string()) return it->get<std::string>();
  std::string all;
  if (it->is_array()) {
    for (const json& entry : *it) {
      if (entry.is_object() && entry.contains("template") && entry["template"].is_string()) {
        all += entry["template"].get<std::string>();
      }
    }
  }
  return all;
}

void append(TokenizedSample& sample, const std::vector<std::int32_t>& ids, bool target) {
  sample.tokens.insert(sample.tokens.end(), ids.begin(), ids.end());
  sample.target_mask.insert(sample.target_mask.end(), ids.size(), target ? 1 : 0);
}

void append(TokenizedSample& sample, std::int32_t id, bool target) {
  sample.tokens.push_back(id);
  sample.target_mask.push_back(target ? 1 : 0);
}

const std::string& string_field(const json& record, const char* key, const std::string& where) {
  const auto it = record.find(key);
  if (it == record.end()) fail("{}: missing \"{}\"", where, key);
  if (!it->is_string()) fail("{}: \"{}\" must be a string, found {}", where, key, it->type_name());
  return it->get_ref<const std::string&>();
}

}  // namespace

const char* chat_template_name(ChatTemplate chat_template) {
  return chat_template == ChatTemplate::llama3 ? "llama3" : "chatml";
}

ChatTemplate resolve_chat_template(const std::string& name, const Tokenizer& tokenizer,
                                   const std::string& tokenizer_path) {
  if (name == "llama3") return ChatTemplate::llama3;
  if (name == "chatml") return ChatTemplate::chatml;
  if (name != "auto") fail("data.chat_template: unknown template '{}' (expected auto, llama3 or chatml)", name);
  // The model's own template names the family most reliably; the special tokens are the fallback.
  const std::string jinja = config_chat_template(read_tokenizer_config(tokenizer_path));
  if (!jinja.empty()) {
    if (jinja.find("<|start_header_id|>") != std::string::npos) return ChatTemplate::llama3;
    if (jinja.find("<|im_start|>") != std::string::npos) return ChatTemplate::chatml;
    fail("{}: the chat_template of tokenizer_config.json is neither LLaMA-3 (<|start_header_id|>) nor "
         "ChatML (<|im_start|>); set data.chat_template to llama3 or chatml",
         tokenizer_path);
  }
  if (tokenizer.token_to_id("<|start_header_id|>") && tokenizer.token_to_id("<|eot_id|>")) return ChatTemplate::llama3;
  if (tokenizer.token_to_id("<|im_start|>") && tokenizer.token_to_id("<|im_end|>")) return ChatTemplate::chatml;
  fail("{}: cannot pick a chat template: the tokenizer has neither LLaMA-3's <|start_header_id|>/<|eot_id|> nor "
       "ChatML's <|im_start|>/<|im_end|>, and no tokenizer_config.json chat_template is next to it",
       tokenizer.origin());
}

ChatFormatter::ChatFormatter(Tokenizer tokenizer, std::optional<ChatTemplate> chat_template,
                             const std::string& tokenizer_path)
    : tokenizer_(std::move(tokenizer)), template_(chat_template) {
  if (template_ == ChatTemplate::llama3) {
    begin_of_text_ = require_token(kLlama3Tokens[0]);
    turn_start_ = require_token(kLlama3Tokens[1]);
    header_end_ = require_token(kLlama3Tokens[2]);
    turn_end_ = require_token(kLlama3Tokens[3]);
  } else if (template_ == ChatTemplate::chatml) {
    turn_start_ = require_token("<|im_start|>");
    turn_end_ = require_token("<|im_end|>");
  }

  const json config = read_tokenizer_config(tokenizer_path);
  if (config.is_object()) {
    if (const auto bos = config_token(config, "bos_token", tokenizer_path)) {
      const auto add_bos = config.find("add_bos_token");
      if (add_bos == config.end() || !add_bos->is_boolean() || add_bos->get<bool>()) bos_ = require_token(*bos);
    }
    if (const auto eos = config_token(config, "eos_token", tokenizer_path)) eos_ = require_token(*eos);
  } else {
    // No tokenizer_config.json: the conventional BOS/EOS of the families this project trains.
    for (const char* name : {"<|begin_of_text|>", "<s>"}) {
      if (!bos_) bos_ = tokenizer_.token_to_id(name);
    }
    for (const char* name : {"<|end_of_text|>", "</s>", "<|endoftext|>", "<|im_end|>"}) {
      if (!eos_) eos_ = tokenizer_.token_to_id(name);
    }
  }
}

std::int32_t ChatFormatter::require_token(const std::string& token) const {
  const auto id = tokenizer_.token_to_id(token);
  if (!id) fail("{}: the tokenizer has no token \"{}\"", tokenizer_.origin(), token);
  return *id;
}

TokenizedSample ChatFormatter::format_record(const json& record, const std::string& where) const {
  if (!record.is_object()) fail("{}: expected a JSON object, found {}", where, record.type_name());
  if (record.contains("messages")) return format_messages(record["messages"], where);
  if (record.contains("prompt") || record.contains("completion")) return format_prompt_completion(record, where);
  if (record.contains("text")) return format_text(string_field(record, "text", where));
  fail("{}: expected \"messages\", \"prompt\" + \"completion\" or \"text\"{}", where,
       record.contains("input_ids") ? " (a pre-tokenized record: set data.format: tokens)" : "");
}

TokenizedSample ChatFormatter::format_text_record(const json& record, const std::string& where) const {
  if (!record.is_object()) fail("{}: expected a JSON object with \"text\", found {}", where, record.type_name());
  if (!record.contains("text")) {
    const char* hint = record.contains("input_ids")  ? " (a pre-tokenized record: set data.format: tokens)"
                       : record.contains("messages") ? " (a chat record: set data.format: chat)"
                                                     : "";
    fail("{}: missing \"text\"{}", where, hint);
  }
  return format_text(string_field(record, "text", where));
}

TokenizedSample ChatFormatter::format_messages(const json& messages, const std::string& where) const {
  if (!template_) fail("{}: \"messages\" records need a chat template", where);
  if (!messages.is_array() || messages.empty()) {
    fail("{}: \"messages\" must be a non-empty array of {{\"role\", \"content\"}} objects", where);
  }
  TokenizedSample sample;
  bool has_assistant = false;  // any target message
  bool any_assistant = false;
  if (template_ == ChatTemplate::llama3) append(sample, begin_of_text_, false);
  for (std::size_t i = 0; i < messages.size(); ++i) {
    const json& message = messages[i];
    const std::string at = fmt::format("{}: messages[{}]", where, i);
    if (!message.is_object()) fail("{}: expected an object with \"role\" and \"content\", found {}", at, message.type_name());
    const std::string& role = string_field(message, "role", at);
    if (role != "system" && role != "user" && role != "assistant") {
      fail("{}: unknown role \"{}\" (expected system, user or assistant)", at, role);
    }
    static const std::vector<std::string> kMessageFields = {"role", "content", "weight"};
    // A message's other fields ("name", "tool_calls", ...) change what a chat template renders:
    // skipping them would train on text unlike the template's, so extra-fields ignore (which skips a
    // record's unknown top-level fields) does not apply here.
    refuse_unknown_fields(message, kMessageFields, at, "a message",
                          "; a message's fields shape what the chat template renders, so they are refused even "
                          "where unknown record fields are ignored: remove it from the messages");
    const std::string& content = string_field(message, "content", at);
    // "weight" (TRL's convention): 0/false makes the message's tokens not targets, 1/true makes them
    // targets, on any role; absent, assistant turns are the targets.
    bool target = role == "assistant";
    any_assistant = any_assistant || target;
    if (const auto weight = message.find("weight"); weight != message.end()) {
      if (weight->is_boolean()) {
        target = weight->get<bool>();
      } else if (weight->is_number_integer() && (weight->get<std::int64_t>() == 0 || weight->get<std::int64_t>() == 1)) {
        target = weight->get<std::int64_t>() == 1;
      } else if (weight->is_number_float() && (weight->get<double>() == 0.0 || weight->get<double>() == 1.0)) {
        target = weight->get<double>() == 1.0;
      } else {
        fail("{}: \"weight\" must be 0, 1, true or false, found {}", at,
             weight->is_structured() ? std::string(weight->type_name()) : weight->dump());
      }
    }
    has_assistant = has_assistant || target;
    append(sample, turn_start_, false);
    if (template_ == ChatTemplate::llama3) {
      append(sample, tokenizer_.encode(role), false);
      append(sample, header_end_, false);
      append(sample, tokenizer_.encode("\n\n"), false);
      append(sample, tokenizer_.encode(strip(content, is_python_whitespace)), target);
      append(sample, turn_end_, target);
    } else {
      append(sample, tokenizer_.encode(role + "\n"), false);
      append(sample, tokenizer_.encode(content), target);
      append(sample, turn_end_, target);
      append(sample, tokenizer_.encode("\n"), false);
    }
  }
  // Without an assistant turn nothing would be trained on; that is a data bug, not a sample.
  if (!has_assistant) {
    fail("{}: the conversation has no assistant message{} (nothing to train on)", where,
         any_assistant ? " with a weight other than 0" : "");
  }
  return sample;
}

std::vector<std::int32_t> ChatFormatter::generation_prompt(const std::string& user_message) const {
  if (!template_) fail("{}: a chat prompt needs a chat template (llama3 or chatml)", tokenizer_.origin());
  TokenizedSample sample;
  if (template_ == ChatTemplate::llama3) append(sample, begin_of_text_, false);
  for (const std::string role : {"user", "assistant"}) {
    append(sample, turn_start_, false);
    if (template_ == ChatTemplate::llama3) {
      append(sample, tokenizer_.encode(role), false);
      append(sample, header_end_, false);
      append(sample, tokenizer_.encode("\n\n"), false);
      if (role == "user") {
        append(sample, tokenizer_.encode(strip(user_message, is_python_whitespace)), false);
        append(sample, turn_end_, false);
      }
    } else {
      append(sample, tokenizer_.encode(role + "\n"), false);
      if (role == "user") {
        append(sample, tokenizer_.encode(user_message), false);
        append(sample, turn_end_, false);
        append(sample, tokenizer_.encode("\n"), false);
      }
    }
  }
  return sample.tokens;
}

TokenizedSample ChatFormatter::format_prompt_completion(const json& record, const std::string& where) const {
  const std::string& prompt = string_field(record, "prompt", where);
  const std::string& completion = string_field(record, "completion", where);
  if (!eos_) fail("{}: prompt/completion records need an end-of-sequence token; {} defines none", where, tokenizer_.origin());
  TokenizedSample sample;
  if (bos_) append(sample, *bos_, false);
  append(sample, tokenizer_.encode(prompt), false);
  append(sample, tokenizer_.encode(completion), true);
  append(sample, *eos_, true);
  return sample;
}

TokenizedSample ChatFormatter::format_text(const std::string& text) const {
  TokenizedSample sample;
  if (bos_) append(sample, *bos_, true);
  append(sample, tokenizer_.encode(text), true);
  if (eos_) append(sample, *eos_, true);
  return sample;
}

}  // namespace odc::data
