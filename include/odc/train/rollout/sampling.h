#pragma once
// How odc-generate picks each next token from the model's logits: greedy (temperature 0) or
// sampling from softmax(logits / T) restricted to the top-k tokens and the top-p nucleus, after
// an optional repetition penalty. The options, their checks and the picking live here; the
// generation loop is inference.h's.
#include <cstdint>
#include <random>
#include <span>
#include <string>
#include <vector>

namespace odc::train {

struct GenerateOptions {
  std::int64_t max_new_tokens = 64;
  double temperature = 0.0;  // 0 = greedy
  double top_p = 1.0;        // nucleus sampling mass (with temperature > 0)
  // Sample only among the k most likely tokens (with temperature > 0); 0 = off. Applied before
  // top_p, whose mass is then taken of the k tokens' renormalized probabilities.
  std::int64_t top_k = 0;
  // Hugging Face's repetition penalty: every token already in the prompt or the output has its
  // logit divided by P when positive and multiplied by P otherwise, before greedy or sampling
  // picks (so it applies to greedy decoding too). 1 = off.
  double repetition_penalty = 1.0;
  std::uint64_t seed = 0;
  // Generation ends once the decoded output contains one of these (needs a decoder, see
  // generate); the returned text is cut before it.
  std::vector<std::string> stop;
  // false: every step runs the whole sequence again (quadratic; the reference the KV cache is
  // tested against).
  bool use_cache = true;
};

// odc::Error naming the option and the value when one is out of its range.
void check_generate_options(const GenerateOptions& options);

// The index of the first logit that is NaN or infinite (finite weights whose activations
// overflow), or logits.size() when all are finite: what a sampler would otherwise pick from.
std::size_t first_non_finite(std::span<const float> logits);

// Picks tokens for one generation (the options checked, a vocabulary of `vocab` ids).
class TokenSampler {
 public:
  TokenSampler(const GenerateOptions& options, std::int64_t vocab);
  // A token of the prompt or of the output so far (what the repetition penalty penalizes).
  void observe(std::int32_t id);
  // The next token from the logits of the last position (`vocab` values; the penalty is applied
  // in place).
  std::int32_t next(std::span<float> logits);

 private:
  std::int32_t sample(std::span<const float> logits);
  // An upper bound on the nucleus size (the top-p set of most likely tokens whose mass reaches
  // `target`), from one pass over the logits (`top` their largest); probs_ filled.
  std::size_t nucleus_bound(std::span<const float> logits, double top, double target);

  GenerateOptions options_;
  std::int64_t vocab_;
  std::mt19937_64 rng_;
  std::vector<std::int32_t> seen_ids_;  // distinct ids observed, in order
  std::vector<std::uint8_t> seen_;      // per id: observed
  struct Candidate {
    double p;
    std::int32_t id;
  };
  std::vector<Candidate> order_;  // the candidates, the most likely first once sorted
  std::vector<double> probs_;
  std::vector<double> bucket_mass_;            // nucleus_bound's scratch
  std::vector<std::size_t> bucket_count_;
};

}  // namespace odc::train
