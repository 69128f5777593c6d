// Decoders (token strings back to text) and post-processors (special tokens around an encoded
// sequence), following the reference `tokenizers` library.
#include "tokenizer_parts.h"

namespace odc::data::tokenizer_detail {

namespace {

constexpr std::string_view kDecoderTypes =
    "ByteLevel, Metaspace, Replace, ByteFallback, Fuse, Strip, Sequence";
constexpr std::string_view kPostProcessorTypes = "TemplateProcessing, ByteLevel, Sequence";

// Byte-level tokens map back to raw bytes; a token with a character outside the byte alphabet (an
// added token such as "<|eot_id|>" is fine, one with a space is not) contributes its own UTF-8
// bytes. Bytes that do not form UTF-8 become U+FFFD.
class ByteLevelDecoder final : public Decoder {
 public:
  void decode_chain(std::vector<std::string>& tokens) const override {
    std::string bytes;
    for (const std::string& token : tokens) {
      const std::size_t mark = bytes.size();
      bool mapped = true;
      for (std::size_t pos = 0; pos < token.size();) {
        const int byte = unicode_to_byte(next_code_point(token, pos));
        if (byte < 0) {
          mapped = false;
          break;
        }
        bytes.push_back(static_cast<char>(byte));
      }
      if (!mapped) {
        bytes.resize(mark);
        bytes += token;
      }
    }
    tokens.assign(1, utf8_lossy(bytes));
  }
};

class MetaspaceDecoder final : public Decoder {
 public:
  explicit MetaspaceDecoder(const JsonRef& config) {
    const JsonRef replacement = config.at("replacement");
    replacement_ = replacement.string();
    std::size_t pos = 0;
    if (!replacement_.empty()) next_code_point(replacement_, pos);
    if (replacement_.empty() || pos != replacement_.size()) {
      replacement.fail("expected exactly one character, found \"{}\"", replacement_);
    }
    if (const auto scheme = config.find("prepend_scheme")) {
      strip_first_ = scheme->string() != "never";
    } else {
      strip_first_ = config.boolean_or("add_prefix_space", true);
    }
  }
  void decode_chain(std::vector<std::string>& tokens) const override {
    for (std::size_t i = 0; i < tokens.size(); ++i) {
      std::string out;
      std::string_view token = tokens[i];
      for (std::size_t pos = token.find(replacement_); ; pos = token.find(replacement_)) {
        out.append(token.substr(0, pos));
        if (pos == std::string_view::npos) break;
        // The reference drops the replacement characters of the first token (the prepended
        // space) instead of turning them into spaces.
        if (!(i == 0 && strip_first_)) out.push_back(' ');
        token.remove_prefix(pos + replacement_.size());
      }
      tokens[i] = std::move(out);
    }
  }

 private:
  std::string replacement_;
  bool strip_first_ = true;
};

class ReplaceDecoder final : public Decoder {
 public:
  explicit ReplaceDecoder(const JsonRef& config)
      : pattern_(config.at("pattern")), content_(config.at("content").string()) {}
  void decode_chain(std::vector<std::string>& tokens) const override {
    for (std::string& token : tokens) token = pattern_.replace_all(token, content_);
  }

 private:
  Pattern pattern_;
  std::string content_;
};

// Runs of <0xNN> tokens become the text their bytes spell; a run that is not valid UTF-8 becomes
// one U+FFFD per byte, as in the reference library.
class ByteFallbackDecoder final : public Decoder {
 public:
  void decode_chain(std::vector<std::string>& tokens) const override {
    std::vector<std::string> out;
    out.reserve(tokens.size());
    std::string bytes;
    std::size_t byte_count = 0;
    const auto flush = [&] {
      if (byte_count == 0) return;
      if (invalid_utf8_at(bytes) != std::string_view::npos) {
        std::string replacement;
        for (std::size_t i = 0; i < byte_count; ++i) append_utf8(replacement, 0xFFFD);
        out.push_back(std::move(replacement));
      } else {
        out.push_back(bytes);
      }
      bytes.clear();
      byte_count = 0;
    };
    for (std::string& token : tokens) {
      if (const int byte = parse_byte_token(token); byte >= 0) {
        bytes.push_back(static_cast<char>(byte));
        ++byte_count;
        continue;
      }
      flush();
      out.push_back(std::move(token));
    }
    flush();
    tokens = std::move(out);
  }

 private:
  static int hex_digit(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
  }
  static int parse_byte_token(std::string_view token) {
    if (token.size() != 6 || token.substr(0, 3) != "<0x" || token[5] != '>') return -1;
    const int high = hex_digit(token[3]);
    const int low = hex_digit(token[4]);
    return high < 0 || low < 0 ? -1 : high * 16 + low;
  }
};

class FuseDecoder final : public Decoder {
 public:
  void decode_chain(std::vector<std::string>& tokens) const override {
    std::string joined;
    for (const std::string& token : tokens) joined += token;
    tokens.assign(1, std::move(joined));
  }
};

// Removes up to `start` leading and `stop` trailing copies of one character from every token
// (LLaMA-2 uses it to drop the space that stands for the prepended "▁").
class StripDecoder final : public Decoder {
 public:
  explicit StripDecoder(const JsonRef& config)
      : start_(config.integer_or("start", 0)), stop_(config.integer_or("stop", 0)) {
    const JsonRef content = config.at("content");
    content_ = content.string();
    std::size_t pos = 0;
    if (!content_.empty()) next_code_point(content_, pos);
    if (content_.empty() || pos != content_.size()) {
      content.fail("expected exactly one character, found \"{}\"", content_);
    }
    if (start_ < 0 || stop_ < 0) config.fail("start and stop must be >= 0");
  }
  void decode_chain(std::vector<std::string>& tokens) const override {
    for (std::string& token : tokens) {
      std::string_view view = token;
      for (std::int64_t i = 0; i < start_ && view.substr(0, content_.size()) == content_; ++i) {
        view.remove_prefix(content_.size());
      }
      for (std::int64_t i = 0; i < stop_ && view.size() >= content_.size() &&
                               view.substr(view.size() - content_.size()) == content_;
           ++i) {
        view.remove_suffix(content_.size());
      }
      token = std::string(view);
    }
  }

 private:
  std::string content_;
  std::int64_t start_;
  std::int64_t stop_;
};

class SequenceDecoder final : public Decoder {
 public:
  explicit SequenceDecoder(const JsonRef& config) {
    const JsonRef list = config.at("decoders");
    for (std::size_t i = 0; i < list.array_size(); ++i) {
      if (auto stage = make_decoder(list.at(i))) stages_.push_back(std::move(stage));
    }
  }
  void decode_chain(std::vector<std::string>& tokens) const override {
    for (const auto& stage : stages_) stage->decode_chain(tokens);
  }

 private:
  std::vector<std::unique_ptr<Decoder>> stages_;
};

// TemplateProcessing's "single" template: special tokens around the one sequence "$A".
PostProcessor template_processing(const JsonRef& config) {
  const JsonRef special_tokens = config.at("special_tokens");
  special_tokens.require_object();
  const JsonRef single = config.at("single");
  PostProcessor result;
  bool seen_sequence = false;
  for (std::size_t i = 0; i < single.array_size(); ++i) {
    const JsonRef item = single.at(i);
    item.require_object();
    if (const auto sequence = item.find("Sequence")) {
      const std::string id = sequence->at("id").string();
      if (id != "A") sequence->fail("the single-sequence template can only hold sequence A, found {}", id);
      if (seen_sequence) item.fail("sequence A appears twice in the template");
      seen_sequence = true;
      continue;
    }
    const auto special = item.find("SpecialToken");
    if (!special) item.fail("expected {{\"SpecialToken\": ...}} or {{\"Sequence\": ...}}, found {}", item.value().dump());
    const std::string name = special->at("id").string();
    const auto entry = special_tokens.find(name);
    if (!entry) special->fail("special token \"{}\" is not defined in {}", name, special_tokens.path());
    const JsonRef ids = entry->at("ids");
    auto& target = seen_sequence ? result.suffix : result.prefix;
    for (std::size_t j = 0; j < ids.array_size(); ++j) target.push_back(ids.at(j).token_id());
  }
  if (!seen_sequence) single.fail("the template has no sequence A");
  return result;
}

}  // namespace

std::unique_ptr<Decoder> make_decoder(const JsonRef& config) {
  if (config.is_null()) return nullptr;
  const std::string type = config.at("type").string();
  if (type == "ByteLevel") return std::make_unique<ByteLevelDecoder>();
  if (type == "Metaspace") return std::make_unique<MetaspaceDecoder>(config);
  if (type == "Replace") return std::make_unique<ReplaceDecoder>(config);
  if (type == "ByteFallback") return std::make_unique<ByteFallbackDecoder>();
  if (type == "Fuse") return std::make_unique<FuseDecoder>();
  if (type == "Strip") return std::make_unique<StripDecoder>(config);
  if (type == "Sequence") return std::make_unique<SequenceDecoder>(config);
  config.fail_unsupported_type("decoder", type, kDecoderTypes);
}

PostProcessor make_post_processor(const JsonRef& config) {
  if (config.is_null()) return {};
  const std::string type = config.at("type").string();
  // ByteLevel post-processing only trims offsets, which do not exist here.
  if (type == "ByteLevel") return {};
  if (type == "TemplateProcessing") return template_processing(config);
  if (type == "Sequence") {
    const JsonRef list = config.at("processors");
    PostProcessor combined;
    for (std::size_t i = 0; i < list.array_size(); ++i) {
      // Each processor wraps the result of the previous ones.
      PostProcessor stage = make_post_processor(list.at(i));
      stage.prefix.insert(stage.prefix.end(), combined.prefix.begin(), combined.prefix.end());
      combined.suffix.insert(combined.suffix.end(), stage.suffix.begin(), stage.suffix.end());
      combined.prefix = std::move(stage.prefix);
    }
    return combined;
  }
  config.fail_unsupported_type("post_processor", type, kPostProcessorTypes);
}

}  // namespace odc::data::tokenizer_detail
