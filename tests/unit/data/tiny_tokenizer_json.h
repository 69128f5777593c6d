#pragma once
// A tiny byte-level BPE tokenizer.json for the data tests: the token of byte b has id b (GPT-2's
// byte-to-unicode alphabet), one merge ("\n\n" -> 256), and the given special tokens from id 300
// on; with the LLaMA-3 and ChatML special-token sets.
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace odc::test {

inline std::string utf8_of_code_point(char32_t cp) {  // code points below 0x800
  std::string out;
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
  return out;
}

// Byte-level BPE whose token for byte b has id b (GPT-2's byte-to-unicode alphabet), one merge
// ("\n\n" -> 256), and the given special tokens from id 300 on.
inline nlohmann::json tiny_tokenizer(const std::vector<std::string>& specials) {
  using nlohmann::json;
  json vocab = json::object();
  char32_t shifted = 256;
  for (int b = 0; b < 256; ++b) {
    const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
    vocab[utf8_of_code_point(printable ? static_cast<char32_t>(b) : shifted++)] = b;
  }
  vocab["ĊĊ"] = 256;
  json added = json::array();
  for (std::size_t i = 0; i < specials.size(); ++i) {
    added.push_back({{"id", 300 + static_cast<int>(i)}, {"content", specials[i]}, {"special", true},
                     {"normalized", false}});
  }
  return {
      {"added_tokens", added},
      {"normalizer", nullptr},
      {"pre_tokenizer",
       {{"type", "Sequence"},
        {"pretokenizers",
         {{{"type", "Split"},
           {"behavior", "Isolated"},
           {"invert", false},
           {"pattern",
            {{"Regex",
              R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)"}}}},
          {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", false}}}}}},
      {"post_processor", nullptr},
      {"decoder", {{"type", "ByteLevel"}}},
      {"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", {"Ċ Ċ"}}}},
  };
}

inline const std::vector<std::string> kLlama3 = {"<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>",
                                          "<|end_header_id|>", "<|eot_id|>"};
inline const std::vector<std::string> kChatml = {"<|im_start|>", "<|im_end|>", "<|endoftext|>"};

}  // namespace odc::test
