// The BPE model: a word (one pre-token) starts as one symbol per character and adjacent pairs are
// merged by rank, lowest first (ties: leftmost first), until no listed pair remains. A priority
// queue over the live pairs makes this O(n log n) in the word length, which matters for the
// SentencePiece-style tokenizers whose "word" is a whole text section. Characters missing from the
// vocabulary become <0xNN> byte tokens (byte_fallback) or the unknown token.
#include <queue>

#include "tokenizer_parts.h"

namespace odc::data::tokenizer_detail {

namespace {

// Splits a merges entry into its two tokens: either "a b" or ["a", "b"].
std::pair<std::string, std::string> parse_merge(const JsonRef& entry) {
  if (entry.value().is_string()) {
    const std::string line = entry.string();
    const std::size_t space = line.find(' ');
    if (space == std::string::npos || line.find(' ', space + 1) != std::string::npos) {
      entry.fail("expected a merge \"left right\" with exactly one space, found \"{}\"", line);
    }
    return {line.substr(0, space), line.substr(space + 1)};
  }
  if (entry.value().is_array()) {
    if (entry.array_size() != 2) {
      entry.fail("expected a merge [\"left\", \"right\"] of two tokens, found {}", entry.value().dump());
    }
    return {entry.at(std::size_t{0}).string(), entry.at(std::size_t{1}).string()};
  }
  entry.fail("expected a merge as \"left right\" or [\"left\", \"right\"], found {}", entry.value().dump());
}

}  // namespace

BpeModel::BpeModel(const JsonRef& model) {
  model.require_object();
  const std::string type = model.string_or("type", "BPE");
  if (type != "BPE") model.fail_unsupported_type("model", type, "BPE");
  // Options that would change the ids this implementation produces are refused, not ignored.
  if (const auto dropout = model.find("dropout")) {
    if (!dropout->value().is_number() || dropout->value().get<double>() != 0.0) {
      dropout->fail("BPE dropout (random merges) is not supported; expected null, found {}",
                    dropout->value().dump());
    }
  }
  for (const char* affix : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    if (const auto field = model.find(affix); field && !field->string().empty()) {
      field->fail("is not supported (expected null or \"\", found \"{}\")", field->string());
    }
  }
  byte_fallback_ = model.boolean_or("byte_fallback", false);
  // SentencePiece-style models run BPE over whole text sections. When every vocabulary entry
  // with a "▁" past its first character is made of "▁" only, no token (and so no merge result)
  // can span a point where "▁" follows another character, and long words may be cut there.
  split_at_metaspace_ = true;
  fuse_unk_ = model.boolean_or("fuse_unk", false);
  ignore_merges_ = model.boolean_or("ignore_merges", false);

  const JsonRef vocab = model.at("vocab");
  if (!vocab.value().is_object()) vocab.fail("expected an object {{token: id}}, found {}", vocab.value().type_name());
  std::int32_t max_id = -1;
  for (const auto& [token, id_value] : vocab.value().items()) {
    const JsonRef id_ref(id_value, fmt::format("{}[\"{}\"]", vocab.path(), token), vocab.origin());
    const std::int32_t id = id_ref.token_id();
    vocab_.emplace(token, id);
    max_id = std::max(max_id, id);
  }
  tokens_.assign(static_cast<std::size_t>(max_id + 1), std::string());
  has_token_.assign(tokens_.size(), false);
  for (const auto& [token, id] : vocab_) {
    const auto index = static_cast<std::size_t>(id);
    if (has_token_[index]) {
      vocab.fail("tokens \"{}\" and \"{}\" share id {}", tokens_[index], token, id);
    }
    tokens_[index] = token;
    has_token_[index] = true;
    if (token.find(kMetaspace, 1) != std::string::npos) {
      for (std::size_t pos = 0; pos < token.size() && split_at_metaspace_; pos += kMetaspace.size()) {
        split_at_metaspace_ = token.compare(pos, kMetaspace.size(), kMetaspace) == 0;
      }
    }
    std::size_t pos = 0;
    if (!token.empty()) {
      const char32_t cp = next_code_point(token, pos);
      if (pos == token.size()) char_ids_.emplace(cp, id);
    }
  }

  {
    std::size_t pos = 0;
    split_at_metaspace_ = split_at_metaspace_ && char_ids_.count(next_code_point(kMetaspace, pos)) > 0;
  }
  byte_ids_.fill(-1);
  for (int b = 0; b < 256; ++b) {
    if (const auto id = token_to_id(fmt::format("<0x{:02X}>", b))) byte_ids_[static_cast<std::size_t>(b)] = *id;
  }
  if (const auto unk = model.find("unk_token")) {
    const std::string name = unk->string();
    const auto id = token_to_id(name);
    if (!id) unk->fail("unknown token \"{}\" is not in model.vocab", name);
    unk_id_ = *id;
  }

  static const Json no_merges = Json::array();
  const JsonRef merges = model.find("merges") ? model.at("merges") : JsonRef(no_merges, "model.merges", model.origin());
  const std::size_t count = merges.array_size();
  std::size_t capacity = 16;
  merge_shift_ = 60;
  while (capacity < 2 * count) {
    capacity *= 2;
    --merge_shift_;
  }
  merge_slots_.assign(capacity, MergeSlot{});
  for (std::size_t rank = 0; rank < count; ++rank) {
    const JsonRef entry = merges.at(rank);
    const auto [left, right] = parse_merge(entry);
    const auto left_id = token_to_id(left);
    const auto right_id = token_to_id(right);
    if (!left_id || !right_id) {
      entry.fail("merge references token \"{}\" which is not in model.vocab", !left_id ? left : right);
    }
    const auto merged_id = token_to_id(left + right);
    if (!merged_id) entry.fail("merge result \"{}{}\" is not in model.vocab", left, right);
    // A repeated pair keeps its last rank, as the reference library's map insertion does.
    insert_merge(pair_key(*left_id, *right_id), Merge{static_cast<std::int32_t>(rank), *merged_id});
  }
}

namespace {
std::size_t slot_of(std::uint64_t key, int shift) {
  return static_cast<std::size_t>((key * 0x9E3779B97F4A7C15ull) >> shift);
}
}  // namespace

void BpeModel::insert_merge(std::uint64_t key, Merge merge) {
  const std::size_t mask = merge_slots_.size() - 1;
  for (std::size_t slot = slot_of(key, merge_shift_);; slot = (slot + 1) & mask) {
    MergeSlot& entry = merge_slots_[slot];
    if (entry.key == kEmptyKey || entry.key == key) {
      entry.key = key;
      entry.merge = merge;
      return;
    }
  }
}

const BpeModel::Merge* BpeModel::find_merge(std::int32_t left, std::int32_t right) const {
  if (left < 0 || right < 0) return nullptr;  // unknown characters never merge
  const std::uint64_t key = pair_key(left, right);
  const std::size_t mask = merge_slots_.size() - 1;
  for (std::size_t slot = slot_of(key, merge_shift_);; slot = (slot + 1) & mask) {
    const MergeSlot& entry = merge_slots_[slot];
    if (entry.key == key) return &entry.merge;
    if (entry.key == kEmptyKey) return nullptr;
  }
}

std::optional<std::int32_t> BpeModel::token_to_id(std::string_view token) const {
  const auto it = vocab_.find(std::string(token));
  if (it == vocab_.end()) return std::nullopt;
  return it->second;
}

const std::string* BpeModel::id_to_token(std::int32_t id) const {
  if (id < 0 || static_cast<std::size_t>(id) >= tokens_.size() || !has_token_[static_cast<std::size_t>(id)]) {
    return nullptr;
  }
  return &tokens_[static_cast<std::size_t>(id)];
}

void BpeModel::merge_symbols(std::vector<std::int32_t>& symbols) const {
  const auto n = static_cast<std::int32_t>(symbols.size());
  if (n < 2) return;
  std::vector<std::int32_t> next(symbols.size());
  std::vector<std::int32_t> prev(symbols.size());
  std::vector<bool> alive(symbols.size(), true);
  for (std::int32_t i = 0; i < n; ++i) {
    next[static_cast<std::size_t>(i)] = i + 1 < n ? i + 1 : -1;
    prev[static_cast<std::size_t>(i)] = i - 1;
  }
  struct Candidate {
    std::int32_t rank;
    std::int32_t pos;  // left symbol; a merged symbol keeps its left position
    std::int32_t merged_id;
    bool operator>(const Candidate& other) const {
      return rank != other.rank ? rank > other.rank : pos > other.pos;
    }
  };
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<>> queue;
  const auto push_pair = [&](std::int32_t left) {
    if (left < 0) return;
    const std::int32_t right = next[static_cast<std::size_t>(left)];
    if (right < 0) return;
    if (const Merge* merge = find_merge(symbols[static_cast<std::size_t>(left)], symbols[static_cast<std::size_t>(right)])) {
      queue.push({merge->rank, left, merge->merged_id});
    }
  };
  for (std::int32_t i = 0; i + 1 < n; ++i) push_pair(i);

  while (!queue.empty()) {
    const Candidate top = queue.top();
    queue.pop();
    const auto pos = static_cast<std::size_t>(top.pos);
    if (!alive[pos] || next[pos] < 0) continue;
    const auto right = static_cast<std::size_t>(next[pos]);
    // Stale entry: one side has been merged into something else since it was queued.
    const Merge* merge = find_merge(symbols[pos], symbols[right]);
    if (merge == nullptr || merge->merged_id != top.merged_id) continue;
    symbols[pos] = top.merged_id;
    alive[right] = false;
    next[pos] = next[right];
    if (next[right] >= 0) prev[static_cast<std::size_t>(next[right])] = top.pos;
    push_pair(prev[pos]);
    push_pair(top.pos);
  }
  std::size_t out = 0;
  for (std::size_t i = 0; i < symbols.size(); ++i) {
    if (alive[i]) symbols[out++] = symbols[i];
  }
  symbols.resize(out);
}

void BpeModel::emit_unknown(std::string_view character, std::size_t word_begin,
                            std::vector<std::int32_t>& out) const {
  if (byte_fallback_) {
    bool all_bytes = true;
    for (const char c : character) all_bytes = all_bytes && byte_ids_[static_cast<unsigned char>(c)] >= 0;
    if (all_bytes) {
      for (const char c : character) out.push_back(byte_ids_[static_cast<unsigned char>(c)]);
      return;
    }
  }
  // Without an unknown token the character is dropped, as the reference library does.
  if (!unk_id_) return;
  // Fusing stays within the word, as in the reference library.
  if (fuse_unk_ && out.size() > word_begin && out.back() == *unk_id_) return;
  out.push_back(*unk_id_);
}

void BpeModel::tokenize(std::string_view word, std::vector<std::int32_t>& out) const {
  // Long words (SentencePiece-style sections) rarely repeat and would bloat the cache.
  constexpr std::size_t kMaxCachedWordBytes = 64;
  constexpr std::size_t kMaxCacheEntries = 1 << 16;
  if (word.empty()) return;
  if (word.size() > kMaxCachedWordBytes) {
    tokenize_uncached(word, out);
    return;
  }
  const std::string key(word);
  {
    const std::lock_guard<std::mutex> lock(cache_mutex_);
    if (const auto it = cache_.find(key); it != cache_.end()) {
      out.insert(out.end(), it->second.begin(), it->second.end());
      return;
    }
  }
  std::vector<std::int32_t> ids;
  tokenize_uncached(word, ids);
  out.insert(out.end(), ids.begin(), ids.end());
  const std::lock_guard<std::mutex> lock(cache_mutex_);
  if (cache_.size() < kMaxCacheEntries) cache_.emplace(key, std::move(ids));
}

void BpeModel::tokenize_uncached(std::string_view word, std::vector<std::int32_t>& out) const {
  if (ignore_merges_) {
    // LLaMA-3: a pre-token that is itself a vocabulary entry is emitted whole, even where the
    // merges would have split it differently.
    if (const auto id = token_to_id(word)) {
      out.push_back(*id);
      return;
    }
  }
  if (split_at_metaspace_ && word.size() > kMetaspaceChunkBytes) {
    // Cut before every "▁" that follows a non-"▁": no token spans such a point (see the
    // constructor), so merging the pieces separately gives the same ids, without one huge queue.
    std::size_t start = 0;
    for (std::size_t pos = word.find(kMetaspace, 1); pos != std::string_view::npos;
         pos = word.find(kMetaspace, pos + kMetaspace.size())) {
      if (pos - start < kMetaspaceChunkBytes) continue;
      if (word.substr(pos - kMetaspace.size(), kMetaspace.size()) == kMetaspace) continue;
      merge_word(word.substr(start, pos - start), out);
      start = pos;
    }
    merge_word(word.substr(start), out);
    return;
  }
  merge_word(word, out);
}

void BpeModel::merge_word(std::string_view word, std::vector<std::int32_t>& out) const {
  // Unknown characters carry -(1 + their byte offset) so they can be expanded after merging; they
  // never merge because no merge pair holds a negative id.
  std::vector<std::int32_t> symbols;
  symbols.reserve(word.size());
  for (std::size_t pos = 0; pos < word.size();) {
    const std::size_t start = pos;
    const char32_t cp = next_code_point(word, pos);
    const auto it = char_ids_.find(cp);
    symbols.push_back(it != char_ids_.end() ? it->second : -1 - static_cast<std::int32_t>(start));
  }
  merge_symbols(symbols);
  const std::size_t word_begin = out.size();
  for (const std::int32_t symbol : symbols) {
    if (symbol >= 0) {
      out.push_back(symbol);
      continue;
    }
    const auto start = static_cast<std::size_t>(-1 - symbol);
    emit_unknown(word.substr(start, utf8_length_of_lead(static_cast<unsigned char>(word[start]))), word_begin, out);
  }
}

}  // namespace odc::data::tokenizer_detail
