// Tokenizer: loads tokenizer.json into its pipeline stages and runs them. Encoding follows the
// reference library's order: added tokens are cut out of the raw text first (never split, never
// normalized unless flagged), the remaining text is normalized, cut again at "normalized" added
// tokens, pre-tokenized, and each pre-token goes through the BPE model.
#include "odc/data/tokenizer.h"

#include <fstream>
#include <sstream>

#include "tokenizer_parts.h"

namespace odc::data {

using tokenizer_detail::AddedToken;
using tokenizer_detail::AddedTokenMatcher;
using tokenizer_detail::Json;
using tokenizer_detail::JsonRef;
using tokenizer_detail::TokenizerImpl;

namespace tokenizer_detail {

namespace {

// Rust regex's Unicode \w, which the reference uses to decide what a "single word" is.
bool is_word_character(std::string_view character) {
  static const Regex word(R"([\p{Alphabetic}\p{M}\p{Nd}\p{Pc}\x{200C}\x{200D}])", "word-character class");
  return !word.find_all(character).empty();
}

// The UTF-8 character that ends at `end` / starts at `begin`.
std::string_view character_before(std::string_view text, std::size_t end) {
  const std::size_t start = code_point_start_before(text, end);
  return text.substr(start, end - start);
}

std::string_view character_at(std::string_view text, std::size_t begin) {
  std::size_t end = begin;
  next_code_point(text, end);
  return text.substr(begin, end - begin);
}

bool is_whitespace(std::string_view character) {
  std::size_t pos = 0;
  return is_unicode_whitespace(next_code_point(character, pos));
}

}  // namespace

AddedTokenMatcher::AddedTokenMatcher(std::vector<std::string> contents, std::vector<const AddedToken*> tokens)
    : contents_(std::move(contents)), tokens_(std::move(tokens)) {
  nodes_.emplace_back();
  for (std::size_t i = 0; i < contents_.size(); ++i) {
    std::int32_t node = 0;
    for (const char c : contents_[i]) {
      const auto byte = static_cast<unsigned char>(c);
      std::int32_t next = child(node, byte);
      if (next < 0) {
        next = static_cast<std::int32_t>(nodes_.size());
        auto& children = nodes_[static_cast<std::size_t>(node)].children;
        children.insert(std::upper_bound(children.begin(), children.end(), std::make_pair(byte, std::int32_t{-1})),
                        {byte, next});
        nodes_.emplace_back();
      }
      node = next;
    }
    nodes_[static_cast<std::size_t>(node)].token = static_cast<std::int32_t>(i);
    if (!contents_[i].empty()) first_byte_[static_cast<unsigned char>(contents_[i][0])] = true;
  }
}

std::int32_t AddedTokenMatcher::child(std::int32_t node, unsigned char byte) const {
  const auto& children = nodes_[static_cast<std::size_t>(node)].children;
  const auto it = std::lower_bound(children.begin(), children.end(), std::make_pair(byte, std::int32_t{-1}));
  return it != children.end() && it->first == byte ? it->second : -1;
}

std::vector<AddedTokenMatcher::Segment> AddedTokenMatcher::split(std::string_view text) const {
  std::vector<Segment> segments;
  std::size_t covered = 0;  // end of the last emitted segment
  std::size_t pos = 0;
  while (pos < text.size()) {
    if (!first_byte_[static_cast<unsigned char>(text[pos])]) {
      ++pos;
      continue;
    }
    // Longest content starting here; the first position with any match is the leftmost one.
    std::int32_t best = -1;
    std::size_t best_end = 0;
    std::int32_t node = 0;
    for (std::size_t j = pos; j < text.size(); ++j) {
      node = child(node, static_cast<unsigned char>(text[j]));
      if (node < 0) break;
      if (nodes_[static_cast<std::size_t>(node)].token >= 0) {
        best = nodes_[static_cast<std::size_t>(node)].token;
        best_end = j + 1;
      }
    }
    if (best < 0) {
      ++pos;
      continue;
    }
    std::size_t start = pos;
    std::size_t stop = best_end;
    pos = best_end;  // a rejected match is skipped whole, as the reference's non-overlapping scan does
    const AddedToken& token = *tokens_[static_cast<std::size_t>(best)];
    if (token.single_word) {
      const bool word_before = start > 0 && is_word_character(character_before(text, start));
      const bool word_after = stop < text.size() && is_word_character(character_at(text, stop));
      if (word_before || word_after) continue;
    }
    if (token.lstrip) {
      while (start > covered && is_whitespace(character_before(text, start))) {
        start -= character_before(text, start).size();
      }
    }
    if (token.rstrip) {
      while (stop < text.size() && is_whitespace(character_at(text, stop))) stop += character_at(text, stop).size();
      pos = stop;
    }
    if (start > covered) segments.push_back({covered, start, -1});
    segments.push_back({start, stop, token.id});
    covered = stop;
  }
  if (covered < text.size()) segments.push_back({covered, text.size(), -1});
  return segments;
}

}  // namespace tokenizer_detail

namespace {

std::vector<AddedToken> parse_added_tokens(const JsonRef& root) {
  std::vector<AddedToken> tokens;
  const auto list = root.find("added_tokens");
  if (!list) return tokens;
  for (std::size_t i = 0; i < list->array_size(); ++i) {
    const JsonRef entry = list->at(i);
    entry.require_object();
    AddedToken token;
    token.id = entry.at("id").token_id();
    token.content = entry.at("content").string();
    if (token.content.empty()) entry.fail("added token {} has empty content", token.id);
    token.single_word = entry.boolean_or("single_word", false);
    token.lstrip = entry.boolean_or("lstrip", false);
    token.rstrip = entry.boolean_or("rstrip", false);
    token.special = entry.boolean_or("special", false);
    token.normalized = entry.boolean_or("normalized", !token.special);
    tokens.push_back(std::move(token));
  }
  return tokens;
}

std::shared_ptr<TokenizerImpl> load(const Json& document, const std::string& origin) {
  auto impl = std::make_shared<TokenizerImpl>();
  impl->origin = origin;
  const JsonRef root(document, "", impl->origin);
  root.require_object();

  impl->model = std::make_unique<tokenizer_detail::BpeModel>(root.at("model"));
  const Json null_value;
  const auto stage = [&](const char* key) {
    const auto found = root.find(key);
    return found ? *found : JsonRef(null_value, key, impl->origin);
  };
  impl->normalizer = tokenizer_detail::make_normalizer(stage("normalizer"));
  impl->pre_tokenizer = tokenizer_detail::make_pre_tokenizer(stage("pre_tokenizer"));
  impl->post_processor = tokenizer_detail::make_post_processor(stage("post_processor"));
  impl->decoder = tokenizer_detail::make_decoder(stage("decoder"));

  impl->added_tokens = parse_added_tokens(root);
  std::int64_t max_id = impl->model->max_id();
  for (std::size_t i = 0; i < impl->added_tokens.size(); ++i) {
    const AddedToken& token = impl->added_tokens[i];
    const std::string where = fmt::format("{}: added_tokens[{}]", origin, i);
    if (const auto model_id = impl->model->token_to_id(token.content); model_id && *model_id != token.id) {
      odc::fail("{}: \"{}\" has id {} but model.vocab gives it id {}", where, token.content, token.id, *model_id);
    }
    if (!impl->added_by_content.emplace(token.content, token.id).second) {
      odc::fail("{}: \"{}\" is listed twice", where, token.content);
    }
    if (!impl->added_by_id.emplace(token.id, i).second) {
      odc::fail("{}: id {} is used by two added tokens", where, token.id);
    }
    max_id = std::max<std::int64_t>(max_id, token.id);
  }
  impl->vocab_size = max_id + 1;
  for (const auto* ids : {&impl->post_processor.prefix, &impl->post_processor.suffix}) {
    for (const std::int32_t id : *ids) {
      if (!impl->added_by_id.contains(id) && impl->model->id_to_token(id) == nullptr) {
        odc::fail("{}: post_processor: special token id {} names no token of the vocabulary", origin, id);
      }
    }
  }

  std::vector<std::string> raw_contents;
  std::vector<const AddedToken*> raw_tokens;
  std::vector<std::string> normalized_contents;
  std::vector<const AddedToken*> normalized_tokens;
  for (const AddedToken& token : impl->added_tokens) {
    if (token.normalized && impl->normalizer) {
      std::string content = token.content;
      impl->normalizer->normalize(content);
      if (content.empty()) continue;  // nothing left to match
      normalized_contents.push_back(std::move(content));
      normalized_tokens.push_back(&token);
    } else {
      raw_contents.push_back(token.content);
      raw_tokens.push_back(&token);
    }
  }
  impl->raw_matcher = AddedTokenMatcher(std::move(raw_contents), std::move(raw_tokens));
  impl->normalized_matcher = AddedTokenMatcher(std::move(normalized_contents), std::move(normalized_tokens));
  return impl;
}

// Pre-tokenizes one stretch of ordinary (normalized) text and runs the model on every piece.
void encode_ordinary(const TokenizerImpl& impl, std::string_view text, bool first_section,
                     std::vector<std::int32_t>& ids) {
  std::vector<std::string> pieces{std::string(text)};
  if (impl.pre_tokenizer) impl.pre_tokenizer->split(pieces, first_section);
  for (const std::string& piece : pieces) impl.model->tokenize(piece, ids);
}

}  // namespace

Tokenizer::Tokenizer(std::shared_ptr<const TokenizerImpl> impl) : impl_(std::move(impl)) {}

Tokenizer Tokenizer::from_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) odc::fail("{}: cannot open tokenizer file (expected a Hugging Face tokenizer.json)", path);
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) odc::fail("{}: read error", path);
  return from_json_text(text.str(), path);
}

Tokenizer Tokenizer::from_json_text(std::string_view json, const std::string& origin) {
  Json document;
  try {
    document = Json::parse(json.begin(), json.end());
  } catch (const Json::exception& e) {
    odc::fail("{}: malformed tokenizer JSON ({})", origin, e.what());
  }
  try {
    return Tokenizer(load(document, origin));
  } catch (const Json::exception& e) {
    // nlohmann throws for type mismatches that slipped past the explicit checks; keep the origin.
    odc::fail("{}: invalid tokenizer.json ({})", origin, e.what());
  }
}

std::vector<std::int32_t> Tokenizer::encode(std::string_view text, bool add_special_tokens) const {
  if (const std::size_t bad = invalid_utf8_at(text); bad != std::string_view::npos) {
    odc::fail("{}: cannot encode text that is not valid UTF-8 (byte offset {}, byte 0x{:02X})", impl_->origin,
              bad, static_cast<unsigned char>(text[bad]));
  }
  const TokenizerImpl& impl = *impl_;
  std::vector<std::int32_t> ids;
  ids.reserve(text.size() / 3 + 4);
  if (add_special_tokens) ids = impl.post_processor.prefix;
  for (const auto& section : impl.raw_matcher.split(text)) {
    if (section.id >= 0) {
      ids.push_back(section.id);
      continue;
    }
    std::string normalized(text.substr(section.begin, section.end - section.begin));
    if (impl.normalizer) impl.normalizer->normalize(normalized);
    if (normalized.empty()) continue;
    for (const auto& part : impl.normalized_matcher.split(normalized)) {
      if (part.id >= 0) {
        ids.push_back(part.id);
        continue;
      }
      encode_ordinary(impl, std::string_view(normalized).substr(part.begin, part.end - part.begin),
                      section.begin == 0 && part.begin == 0, ids);
    }
  }
  if (add_special_tokens) ids.insert(ids.end(), impl.post_processor.suffix.begin(), impl.post_processor.suffix.end());
  return ids;
}

std::string Tokenizer::decode(std::span<const std::int32_t> ids, bool skip_special_tokens) const {
  const TokenizerImpl& impl = *impl_;
  std::vector<std::string> tokens;
  tokens.reserve(ids.size());
  for (const std::int32_t id : ids) {
    if (const auto added = impl.added_by_id.find(id); added != impl.added_by_id.end()) {
      const AddedToken& token = impl.added_tokens[added->second];
      if (!(skip_special_tokens && token.special)) tokens.push_back(token.content);
      continue;
    }
    if (const std::string* token = impl.model->id_to_token(id)) tokens.push_back(*token);
  }
  if (!impl.decoder) {
    std::string joined;
    for (std::size_t i = 0; i < tokens.size(); ++i) {
      if (i > 0) joined += ' ';
      joined += tokens[i];
    }
    return joined;
  }
  impl.decoder->decode_chain(tokens);
  std::string text;
  for (const std::string& token : tokens) text += token;
  return text;
}

std::optional<std::int32_t> Tokenizer::token_to_id(std::string_view token) const {
  if (const auto it = impl_->added_by_content.find(std::string(token)); it != impl_->added_by_content.end()) {
    return it->second;
  }
  return impl_->model->token_to_id(token);
}

std::string Tokenizer::id_to_token(std::int32_t id) const {
  if (const auto added = impl_->added_by_id.find(id); added != impl_->added_by_id.end()) {
    return impl_->added_tokens[added->second].content;
  }
  if (const std::string* token = impl_->model->id_to_token(id)) return *token;
  odc::fail("{}: token id {} names no token (vocabulary size {})", impl_->origin, id, impl_->vocab_size);
}

std::int64_t Tokenizer::vocab_size() const { return impl_->vocab_size; }

bool Tokenizer::is_special(std::int32_t id) const {
  const auto added = impl_->added_by_id.find(id);
  return added != impl_->added_by_id.end() && impl_->added_tokens[added->second].special;
}

const std::string& Tokenizer::origin() const { return impl_->origin; }

}  // namespace odc::data
