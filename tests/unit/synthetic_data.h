#pragma once
// Synthetic data of the C++ tests (unit, MPI and emulator tests), written once: the fixed
// generator, token sequences with a masked prompt, their JSONL files, and the tiny model the
// trainer tests train on them. The tests' numbers depend on this data: a change here changes them.
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace odc::test {

// A linear congruential generator (Numerical Recipes' constants): the same numbers on every
// platform and standard library, which <random>'s distributions do not promise.
class Lcg {
 public:
  explicit Lcg(std::uint32_t seed) : state_(seed) {}
  std::uint32_t next() {
    state_ = state_ * 1664525u + 1013904223u;
    return state_;
  }

 private:
  std::uint32_t state_;
};

// One synthetic sequence: `length` tokens, each (next() >> shift) % vocab, and its loss mask, 0 on
// the first length / prompt_divisor tokens (a prompt) and 1 after them.
struct SyntheticSequence {
  std::vector<std::int32_t> tokens;
  std::vector<std::uint8_t> mask;
};

inline SyntheticSequence synthetic_sequence(Lcg& rng, int length, std::uint32_t vocab, int shift,
                                            int prompt_divisor) {
  SyntheticSequence s;
  for (int i = 0; i < length; ++i) {
    s.tokens.push_back(static_cast<std::int32_t>((rng.next() >> shift) % vocab));
    s.mask.push_back(i >= length / prompt_divisor ? 1 : 0);
  }
  return s;
}

// {"input_ids": [...], "loss_mask": [...]} and a newline.
inline std::string jsonl_line(const SyntheticSequence& s) {
  std::string ids, mask;
  for (std::size_t i = 0; i < s.tokens.size(); ++i) {
    ids += (i ? ", " : "") + std::to_string(s.tokens[i]);
    mask += (i ? ", " : "") + std::to_string(s.mask[i]);
  }
  return "{\"input_ids\": [" + ids + "], \"loss_mask\": [" + mask + "]}\n";
}

// The JSONL text of a synthetic SFT dataset: `count` sequences from one generator seeded with
// `seed`; sequence s is `length(s, rng)` tokens long (a length drawn from rng uses it first).
// The defaults are the trainer tests' data: tokens below tiny_trainer_model's vocabulary of 50, the
// second half of every sequence a target (as a chat's assistant turn would be).
struct SyntheticJsonl {
  int count = 0;
  std::uint32_t seed = 0;
  std::function<int(int, Lcg&)> length;
  std::uint32_t vocab = 50;
  int shift = 10;
  int prompt_divisor = 2;
};

inline std::string synthetic_jsonl(const SyntheticJsonl& spec) {
  Lcg rng(spec.seed);
  std::string text;
  for (int s = 0; s < spec.count; ++s) {
    const int length = spec.length(s, rng);
    text += jsonl_line(synthetic_sequence(rng, length, spec.vocab, spec.shift, spec.prompt_divisor));
  }
  return text;
}

// The model the trainer tests train on that data (vocabulary 50, 2 layers, GQA 4/2), as the
// model.config assignment of a trainer Config.
inline const char* tiny_trainer_model() {
  return "model.config={vocab_size: 50, hidden_size: 32, intermediate_size: 48, "
         "num_hidden_layers: 2, num_attention_heads: 4, num_key_value_heads: 2}";
}

}  // namespace odc::test
