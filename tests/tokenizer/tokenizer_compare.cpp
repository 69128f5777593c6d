// odc_tokenizer_compare: encodes a corpus with odc::data::Tokenizer and compares the ids with the
// reference written by tokenizers_equality.py (Hugging Face's `tokenizers` on the same
// tokenizer.json files). Per tokenizer it prints how many strings are equal (without and with
// special tokens), whether decoding the reference ids gives the reference text, whether
// decode(encode(s)) == s for the byte-level tokenizers, and the encode speed on 1 MiB of the corpus.
// Exit status 1 unless everything is equal.
//
// usage: odc_tokenizer_compare CORPUS.json REFERENCE.json
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <exception>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "odc/core/error.h"
#include "odc/data/tokenizer.h"

namespace {

using nlohmann::json;
using Clock = std::chrono::steady_clock;

constexpr int kMaxReported = 5;

json read_json(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) odc::fail("{}: cannot open", path);
  try {
    return json::parse(in);
  } catch (const json::exception& e) {
    odc::fail("{}: malformed JSON ({})", path, e.what());
  }
}

std::string show_ids(const std::vector<std::int32_t>& ids, std::size_t around) {
  const std::size_t begin = around > 4 ? around - 4 : 0;
  const std::size_t end = std::min(ids.size(), around + 6);
  std::string out = begin > 0 ? "[... " : "[";
  for (std::size_t i = begin; i < end; ++i) out += fmt::format("{}{}", i > begin ? ", " : "", ids[i]);
  out += end < ids.size() ? " ...]" : "]";
  return fmt::format("{} (length {})", out, ids.size());
}

std::string quoted(const std::string& text) {
  const std::string shown = json(text).dump();
  return shown.size() > 200 ? shown.substr(0, 200) + "...\" (" + std::to_string(text.size()) + " bytes)" : shown;
}

// Counts equal pairs and reports the first few differences.
class Tally {
 public:
  explicit Tally(std::string what) : what_(std::move(what)) {}
  void ids(std::size_t index, const std::string& text, const std::vector<std::int32_t>& ours,
           const std::vector<std::int32_t>& reference) {
    ++total_;
    if (ours == reference) {
      ++equal_;
      return;
    }
    if (++reported_ > kMaxReported) return;
    const auto diff = std::mismatch(ours.begin(), ours.end(), reference.begin(), reference.end());
    const auto at = static_cast<std::size_t>(diff.first - ours.begin());
    std::cout << fmt::format("  {} mismatch #{} at corpus[{}] {}\n    ours: {}\n    ref:  {}\n", what_,
                             reported_, index, quoted(text), show_ids(ours, at), show_ids(reference, at));
  }
  void text(std::size_t index, const std::string& ours, const std::string& expected) {
    ++total_;
    if (ours == expected) {
      ++equal_;
      return;
    }
    if (++reported_ > kMaxReported) return;
    std::cout << fmt::format("  {} mismatch #{} at corpus[{}]\n    ours:     {}\n    expected: {}\n", what_,
                             reported_, index, quoted(ours), quoted(expected));
  }
  void skip() { ++skipped_; }
  bool all_equal() const { return equal_ == total_; }
  std::string summary() const {
    std::string line = fmt::format("{} {}/{}", what_, equal_, total_);
    if (skipped_ > 0) line += fmt::format(" ({} skipped)", skipped_);
    return line;
  }

 private:
  std::string what_;
  std::size_t total_ = 0;
  std::size_t equal_ = 0;
  std::size_t skipped_ = 0;
  int reported_ = 0;
};

std::vector<std::int32_t> as_ids(const json& array) { return array.get<std::vector<std::int32_t>>(); }

bool compare(const json& reference, const std::vector<std::string>& corpus) {
  const std::string name = reference.at("name").get<std::string>();
  const std::string path = reference.at("path").get<std::string>();
  const bool byte_level = reference.at("byte_level").get<bool>();
  std::cout << fmt::format("{}: {}\n", name, path);

  const auto load_start = Clock::now();
  const odc::data::Tokenizer tokenizer = odc::data::Tokenizer::from_file(path);
  const std::chrono::duration<double> load_time = Clock::now() - load_start;

  Tally encode("encode"), special("encode+special"), decode("decode"), roundtrip("roundtrip");
  const json& ids = reference.at("ids");
  const json& decoded = reference.at("decoded");
  for (std::size_t i = 0; i < corpus.size(); ++i) {
    const std::vector<std::int32_t> ours = tokenizer.encode(corpus[i]);
    const std::vector<std::int32_t> expected = as_ids(ids.at(i));
    encode.ids(i, corpus[i], ours, expected);
    const std::string expected_text = decoded.at(i).get<std::string>();
    decode.text(i, tokenizer.decode(expected), expected_text);
    if (byte_level) {
      // A normalizer (Qwen's NFC) legitimately changes text; the reference shows where.
      if (expected_text != corpus[i]) {
        roundtrip.skip();
      } else {
        roundtrip.text(i, tokenizer.decode(ours), corpus[i]);
      }
    }
  }
  const json& special_indices = reference.at("special_indices");
  for (std::size_t k = 0; k < special_indices.size(); ++k) {
    const auto i = special_indices.at(k).get<std::size_t>();
    special.ids(i, corpus[i], tokenizer.encode(corpus[i], true), as_ids(reference.at("special_ids").at(k)));
  }

  // Speed: the corpus joined and repeated to 1 MiB, encoded in one call.
  std::string text;
  while (text.size() < (1u << 20)) {
    for (const std::string& s : corpus) {
      text += s;
      text += '\n';
    }
  }
  text.resize(1u << 20);
  while (!text.empty() && (static_cast<unsigned char>(text.back()) & 0xC0) == 0x80) text.pop_back();
  if (!text.empty() && static_cast<unsigned char>(text.back()) >= 0xC0) text.pop_back();
  const auto encode_start = Clock::now();
  const std::size_t token_count = tokenizer.encode(text).size();
  const std::chrono::duration<double> encode_time = Clock::now() - encode_start;

  std::cout << fmt::format("{}: {}, {}, {}{} | vocab {} | load {:.2f} s | 1 MiB -> {} tokens in {:.3f} s\n", name,
                           encode.summary(), special.summary(), decode.summary(),
                           byte_level ? ", " + roundtrip.summary() : "", tokenizer.vocab_size(),
                           load_time.count(), token_count, encode_time.count());
  return encode.all_equal() && special.all_equal() && decode.all_equal() && roundtrip.all_equal();
}

int run(int argc, char** argv) {
  if (argc != 3) {
    std::cerr << "usage: odc_tokenizer_compare CORPUS.json REFERENCE.json\n";
    return 2;
  }
  const std::vector<std::string> corpus = read_json(argv[1]).get<std::vector<std::string>>();
  const json reference = read_json(argv[2]);
  std::cout << fmt::format("corpus: {} strings; reference: {}\n", corpus.size(),
                           reference.at("reference").get<std::string>());
  bool ok = true;
  for (const json& entry : reference.at("tokenizers")) {
    if (entry.at("ids").size() != corpus.size()) {
      odc::fail("{}: reference for {} has {} entries, corpus {}", argv[2], entry.at("name").get<std::string>(),
                entry.at("ids").size(), corpus.size());
    }
    ok = compare(entry, corpus) && ok;
  }
  std::cout << (ok ? "tokenizer equality: PASS\n" : "tokenizer equality: FAIL\n");
  return ok ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {
    std::cerr << "odc_tokenizer_compare: error: " << e.what() << '\n';
    return 1;
  }
}
