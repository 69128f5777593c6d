// Whether two tokenizer.json files give the same ids to the same text (tokenizer.h,
// tokenizer_difference): a reference model whose tokenizer is another would score the policy's ids
// as other text, whatever the size of its vocabulary.
#include <fstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "odc/core/error.h"
#include "odc/data/tokenizer.h"

namespace odc::data {

namespace {

using nlohmann::json;

json read_tokenizer_json(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail("{}: cannot open tokenizer file (expected a Hugging Face tokenizer.json)", path);
  try {
    return json::parse(in);
  } catch (const json::exception& e) {
    fail("{}: not valid JSON (a Hugging Face tokenizer.json): {}", path, e.what());
  }
}

json field(const json& j, const char* key) { return j.is_object() && j.contains(key) ? j.at(key) : json(); }

// The first vocabulary entry that differs, in words.
std::string vocab_difference(const json& a, const json& b) {
  if (!a.is_object() || !b.is_object()) return "the vocabularies differ";
  for (const auto& [token, id] : a.items()) {
    if (!b.contains(token)) return fmt::format("the vocabulary: {} is id {} in the first, absent from the second", json(token).dump(), id.dump());
    if (b.at(token) != id) {
      return fmt::format("the vocabulary: {} is id {} in the first, {} in the second", json(token).dump(), id.dump(),
                         b.at(token).dump());
    }
  }
  for (const auto& [token, id] : b.items()) {
    if (!a.contains(token)) return fmt::format("the vocabulary: {} (id {}) is in the second only", json(token).dump(), id.dump());
  }
  return "the vocabularies differ";
}

// The first entry of two lists that differs, in words.
std::string list_difference(const char* what, const json& a, const json& b) {
  const std::size_t n = std::min(a.size(), b.size());
  for (std::size_t i = 0; i < n; ++i) {
    if (a[i] != b[i]) return fmt::format("{} {}: {} in the first, {} in the second", what, i, a[i].dump(), b[i].dump());
  }
  return fmt::format("{}: {} in the first, {} in the second", what, a.size(), b.size());
}

}  // namespace

std::optional<std::string> tokenizer_difference(const std::string& first, const std::string& second) {
  const json a = read_tokenizer_json(first), b = read_tokenizer_json(second);
  json model_a = field(a, "model"), model_b = field(b, "model");
  if (field(model_a, "type") != field(model_b, "type")) {
    return fmt::format("the model type: {} in the first, {} in the second", field(model_a, "type").dump(),
                       field(model_b, "type").dump());
  }
  if (field(model_a, "vocab") != field(model_b, "vocab")) {
    return vocab_difference(field(model_a, "vocab"), field(model_b, "vocab"));
  }
  if (field(model_a, "merges") != field(model_b, "merges")) {
    return list_difference("merge rule", field(model_a, "merges"), field(model_b, "merges"));
  }
  // Added tokens by id and text (their other flags only steer matching in raw text).
  const auto added = [](const json& j) {
    json out = json::array();
    for (const auto& t : field(j, "added_tokens")) out.push_back({field(t, "id"), field(t, "content")});
    return out;
  };
  if (added(a) != added(b)) return list_difference("added token", added(a), added(b));
  for (const char* stage : {"normalizer", "pre_tokenizer"}) {
    if (field(a, stage) != field(b, stage)) return fmt::format("the {}: {} in the first, {} in the second", stage,
                                                               field(a, stage).dump(), field(b, stage).dump());
  }
  for (auto* m : {&model_a, &model_b}) {
    if (!m->is_object()) continue;
    m->erase("vocab");
    m->erase("merges");
  }
  if (model_a != model_b) return fmt::format("the model's options: {} in the first, {} in the second", model_a.dump(), model_b.dump());
  return std::nullopt;
}

}  // namespace odc::data
