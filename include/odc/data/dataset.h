#pragma once
// Token datasets: sequences of token ids, each with a per-token target mask (1 = the token is a
// prediction target, i.e. it is trained on when predicted from the previous position).
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace odc::data {

struct SequenceView {
  std::span<const std::int32_t> tokens;
  std::span<const std::uint8_t> target_mask;  // same length as tokens
};

// The policy-gradient inputs of a rollout (data.format rollouts; rollouts.h), per token of its
// sequence: the log-probability with which the sampling policy drew token i (read where i is a
// target, i.e. a response token), the reference policy's (empty: none), and its advantage.
struct PolicyView {
  std::span<const float> logprobs;
  std::span<const float> ref_logprobs;
  float advantage = 0.0f;
  // Its group's rewards differ: an advantage of 0 is then rounding (a spread below what a float
  // advantage holds after rl.scale_rewards), not equal rewards.
  bool rewards_differ = false;
  std::optional<double> temperature;  // the sampling temperature, when the records say it
};

class TokenDataset {
 public:
  virtual ~TokenDataset() = default;
  virtual std::int64_t size() const = 0;
  virtual SequenceView get(std::int64_t index) const = 0;
  virtual std::int64_t length(std::int64_t index) const = 0;
  // Number of prediction targets of a sequence: positions 1..len-1 whose mask is set.
  virtual std::int64_t target_count(std::int64_t index) const = 0;
  virtual std::string describe() const = 0;  // e.g. "data/train.jsonl (1000 sequences)"
  // Where sequence `index` comes from, for error messages: "data/train.jsonl:17" (file:line) for
  // the JSONL formats, "data/train.idx: sequence 16" for the binary one; by default
  // "<describe()>: sequence <index>".
  virtual std::string record(std::int64_t index) const;
  // A rollout's policy inputs; none for the supervised formats (the default).
  virtual std::optional<PolicyView> policy(std::int64_t index) const {
    (void)index;
    return std::nullopt;
  }
  std::int64_t max_length() const;
  // Why none of the first `count` sequences has a target (for the refusal of a dataset that would
  // train or score nothing): a one-token sequence has none (nothing precedes its token, which is
  // so never predicted), so "every loss_mask is 0" would blame the wrong thing. Names how many are
  // one token long and the first of them, and how many others mask every token after the first.
  virtual std::string no_targets_reason(std::int64_t count) const;
};

// Pre-tokenized JSONL: one object per line, {"input_ids": [...], "loss_mask": [...]}.
// loss_mask is optional (default: every token is a target); when present it must have the same
// length as input_ids and hold 0/1 (or booleans). Empty lines are skipped. Token ids must lie in
// [0, vocab_size). Every problem is an odc::Error naming "file:line" and what is wrong.
// Sequences held in memory back to back (the JSONL formats read everything at open). A subclass
// appends each sequence's tokens and mask and calls end_sequence().
class InMemoryTokenDataset : public TokenDataset {
 public:
  std::int64_t size() const override { return static_cast<std::int64_t>(offsets_.size()) - 1; }
  SequenceView get(std::int64_t index) const override;
  std::int64_t length(std::int64_t index) const override;
  std::int64_t target_count(std::int64_t index) const override;
  std::string record(std::int64_t index) const override;  // "path:line"

 protected:
  explicit InMemoryTokenDataset(std::string path) : path_(std::move(path)), offsets_{0} {}
  const std::string& path() const { return path_; }
  std::int64_t total_tokens() const { return static_cast<std::int64_t>(tokens_.size()); }
  // Closes the sequence made of the tokens/masks appended since the previous one, read from line
  // `line` (1-based) of the file.
  void end_sequence(std::int64_t line);
  std::vector<std::int32_t> tokens_;
  std::vector<std::uint8_t> masks_;

 private:
  std::string path_;
  std::vector<std::int64_t> offsets_;  // size()+1 entries into tokens_/masks_
  std::vector<std::int64_t> target_counts_;
  std::vector<std::int64_t> lines_;    // per sequence: its line in the file
};

class JsonlTokenDataset final : public InMemoryTokenDataset {
 public:
  // ignore_extra_fields (data.extra_fields: ignore) skips fields other than input_ids, loss_mask,
  // labels and attention_mask; by default such a field is an error naming it.
  JsonlTokenDataset(const std::string& path, std::int64_t vocab_size, bool ignore_extra_fields = false);
  std::string describe() const override;
};

// What the text formats need: the tokenizer.json to tokenize with and the chat template
// (auto|llama3|chatml; see chat_format.h). Unused by "tokens" and "bin".
struct TextDataOptions {
  std::string tokenizer_path;
  std::string chat_template = "auto";
  // data.extra_fields: false (error) refuses a field a record of its format does not define (tokens,
  // chat, prompt/completion, text); true ignores it.
  bool ignore_extra_fields = false;
  // data.format rollouts: how advantages are scaled from rewards (rl.scale_rewards; rollouts.h).
  std::string scale_rewards = "group";
};

// Opens a dataset by format name: "tokens" = pre-tokenized JSONL, "bin" = binary shards, "chat" =
// messages / prompt+completion / text JSONL, "text" = {"text": ...} JSONL (the last two tokenized
// at open with text.tokenizer_path), "rollouts" = RL rollout records (rollouts.h; advantages from
// the rewards with scale_rewards "group"). Errors name the path.
std::unique_ptr<TokenDataset> open_dataset(const std::string& path, const std::string& format,
                                           std::int64_t vocab_size, const TextDataOptions& text = {});

// What opening `path` as `format` refuses before reading a record (a directory; a JSONL file that
// cannot be opened), checked up front by a job whose ranks all read the same file so that the
// error is printed once, not once per rank (odc-train). The readers check the same again.
void check_dataset_opens(const std::string& path, const std::string& format);

// An unknown field's error names odc-train's key in its hint ("data.extra_fields: ignore skips
// unknown fields"); a tool whose switch is an option rewrites `message` to name `option` instead
// ("--extra-fields ignore"). Other messages come back as they are.
std::string name_extra_fields_option(const std::string& message, std::string_view option);

}  // namespace odc::data
