#pragma once
// Deterministic synthetic SFT data: tasks a tiny model can learn (copy, reverse, sort, add), with
// the prompt masked out of the loss and sequence lengths drawn from a log-normal distribution
// clipped to [min_length, max_length] (a long tail like real SFT corpora).
//
// Vocabulary: 0 = <pad>, 1 = <bos>, 2 = <sep>, 3 = <eos>, 4..7 = task markers
// (copy, reverse, sort, add), 8.. = payload symbols (for add: 8..17 are the digits 0..9).
// A sequence is  <bos> <task> x_1 .. x_n <sep> y_1 .. y_m <eos>  with targets y_1..y_m, <eos>.
#include <cstdint>
#include <string>
#include <vector>

namespace odc::data {

struct SynthOptions {
  std::int64_t num_sequences = 1000;
  std::int64_t vocab_size = 64;    // >= 18
  std::int64_t min_length = 16;    // >= 8
  std::int64_t max_length = 512;
  double mean_length = 128;        // mean of the (unclipped) log-normal
  double sigma = 1.0;              // log-space standard deviation (spread of the tail)
  std::vector<std::string> tasks = {"copy", "reverse", "sort", "add"};
  std::uint64_t seed = 0;
};

struct SynthSequence {
  std::vector<std::int32_t> input_ids;
  std::vector<std::uint8_t> loss_mask;
};

// Validates the options (clear odc::Error naming the option) and generates the sequences.
std::vector<SynthSequence> generate_synth(const SynthOptions& options);
// Writes them as pre-tokenized JSONL (format "tokens").
void write_synth_jsonl(const SynthOptions& options, const std::string& path);

}  // namespace odc::data
