#pragma once
// The data.* keys, declared once (core/key.h): odc-train's own (data.train, data.format, ...), the
// ones odc-train and odc-sim share (packing, cost model, shuffle and seed: data_config.h lists them),
// and, beside the trainer's declaration, odc-sim's other default of a key both read (the *_sim
// variants: the simulator's data.max_length drops what the trainer's would refuse, ...).
#include <cstdint>
#include <string>
#include "odc/core/key.h"

namespace odc::keys {

inline const Key<std::string> data_train = Key<std::string>::required("data.train", "training data file");
inline const Key<std::string> data_eval{"data.eval", std::string(), "held-out data file, in data.train's format (data.format, data.tokenizer, data.chat_template): its "
              "loss and perplexity are measured every train.eval_every steps and at the end (empty = none)"};
inline const Key<std::int64_t> data_eval_max_sequences{"data.eval_max_sequences", 0, "evaluate on the first N sequences of data.eval (0 = all)", Range::at_least(0)};
inline const Key<std::string> data_format{"data.format", "tokens", "data format: tokens = pre-tokenized JSONL {\"input_ids\": [...], \"loss_mask\": [...]}; bin = "
              "binary PREFIX.bin + PREFIX.idx written by odc-data convert (memory-mapped); chat = JSONL of "
              "{\"messages\": [...]}, {\"prompt\", \"completion\"} or {\"text\"} records, tokenized with "
              "data.tokenizer and data.chat_template (loss on assistant turns / completions); text = JSONL of "
              "{\"text\": ...} records (loss on all tokens); rollouts = JSONL RL rollout records {\"prompt_ids\", "
              "\"completion_ids\", \"logprobs\", \"ref_logprobs\", \"reward\" + \"group\" or \"advantage\"} for "
              "train.objective grpo (loss on the completions)", {"tokens", "bin", "chat", "text", "rollouts"}};
inline const Key<std::string> data_tokenizer{"data.tokenizer", std::string(), "tokenizer.json for data.format chat/text; empty = <model.checkpoint>/tokenizer.json"};
inline const Key<std::string> data_chat_template{"data.chat_template", "auto", "chat template of data.format chat: llama3, chatml (Qwen), or auto (from tokenizer_config.json "
              "next to the tokenizer, else from its special tokens)", {"auto", "llama3", "chatml"}};
inline const Key<std::string> data_extra_fields{"data.extra_fields", "error", "a record field its data.format does not define (tokens: input_ids, loss_mask, labels, "
              "attention_mask; chat: messages, or prompt + completion, or text; text: text): error (names it "
              "and its file:line; a typo such as loss_msk would otherwise train on every token) or ignore", {"error", "ignore"}};
inline const Key<std::int64_t> data_minibatch_size = Key<std::int64_t>::unset("data.minibatch_size", "sequences per rank per optimizer step; set this or data.global_batch_size (neither: 4 per rank)", Range::at_least(1));
inline const Key<std::int64_t> data_global_batch_size = Key<std::int64_t>::unset("data.global_batch_size", "sequences per optimizer step over all ranks, instead of data.minibatch_size (set one of the two); "
              "need not divide by the world size with data.balance lb_mini, local_sort or round_robin (ranks then "
              "run different numbers of sequences); lb_micro (auto with train.comm collective) and lb_mini_equal "
              "need a multiple", Range::at_least(1));
inline const Key<std::int64_t> data_max_length{"data.max_length", 0, "longest sequence (tokens) to train on; 0 = no limit (model.config.max_position_embeddings is only "
              "warned about); longer ones are handled by data.over_length (odc-sim drops them by default, as "
              "a dataset filter)", Range::at_least(0)};
inline const Key<std::string> data_over_length{"data.over_length", "error", "what a sequence longer than data.max_length does: error (names its file:line or bin index and "
              "length), truncate (keeps its first data.max_length tokens and their mask), drop (left out; the "
              "number is logged)", {"error", "truncate", "drop"}};
inline const Key<std::int64_t> data_max_tokens_per_microbatch{"data.max_tokens_per_microbatch", 0, "token cap of a packed microbatch; 0 = the longest sequence of the data times data.packing_ratio; "
              "auto = the largest a rank's memory holds (odc-train's memory plan: odc-train --plan-memory)", {"auto"}, Range::at_least(0)};
inline const Key<double> data_packing_ratio{"data.packing_ratio", number("1.0"), "multiplies the default token cap (ignored when a cap is set)", Range::above(0)};
inline const Key<std::string> data_balance{"data.balance", "auto", "how the global minibatch is split over ranks and microbatches: local_sort, lb_micro (equal "
              "microbatch counts), lb_mini (balances whole-minibatch work; odc only), lb_mini_equal (lb_micro's "
              "equal sequence counts per rank, each rank keeping its own microbatch count, as RL frameworks need; "
              "odc only); auto = lb_mini with odc, lb_micro with collective; round_robin = no balancing (items r, "
              "r+N, ... packed in order)", {"auto", "local_sort", "lb_micro", "lb_mini", "round_robin", "lb_mini_equal"}};
inline const Key<std::string> data_cost_model{"data.cost_model", "flops", "per-sequence cost the planners balance: linear (tokens), quadratic (cost_a*s^2 + cost_b*s), flops "
              "(from the model shape), measured (data.cost_points, interpolated)", {"linear", "quadratic", "flops", "measured"}};
inline const Key<double> data_cost_a{"data.cost_a", number("0.0"), "quadratic cost model: coefficient of s^2 (odc-train --calibrate-cost fits it)", Range::at_least(0)};
inline const Key<double> data_cost_b{"data.cost_b", number("1.0"), "quadratic cost model: coefficient of s", Range::at_least(0)};
inline const Key<double> data_cost_c{"data.cost_c", number("0.0"), "any cost model: the fixed cost of one microbatch, in the cost's units (the reference's fit's c); the "
              "planners weigh it when they choose microbatch counts and splits", Range::at_least(0)};
inline const Key<std::string> data_cost_points = Key<std::string>::unset("data.cost_points", "measured cost model: LENGTH:SECONDS,... of one sequence per microbatch, lengths increasing "
              "(odc-train --calibrate-cost prints them)");
inline const Key<bool> data_shuffle{"data.shuffle", true, "draw minibatches from a seeded shuffle of the data, reshuffled every epoch (false: in file order)"};
inline const Key<std::int64_t> data_seed{"data.seed", 0, "seed of the data order (odc-sim: also of its synthetic lengths)"};

// odc-sim's defaults of the data.* keys it reads with odc-train, beside the trainer's: its lengths
// come from data.lengths (data.format says their format), it drops what is too long as a dataset
// filter, and its cost model can be the reference implementation's fit.
inline const Key<std::string> data_format_sim = data_format.variant(
    "lengths",
    "format of data.lengths: lengths (a text file, one length per line), tokens (pre-tokenized JSONL), bin "
    "(odc-data convert output), rollouts (an RL run's rollout records: prompt + completion lengths)",
    {"lengths", "tokens", "bin", "rollouts"});
inline const Key<std::int64_t> data_max_length_sim = data_max_length.variant(
    65536,
    "longest sequence kept; longer ones are dropped or truncated (data.over_length); 0 = keep the lengths "
    "of data.lengths as they are",
    Range::at_least(0));
inline const Key<std::string> data_over_length_sim = data_over_length.variant(
    "drop",
    "a sequence longer than max_length (synthetic: outside [min_length, max_length]): drop (a dataset "
    "filter, as the reference implementation does; synthetic: the log-normal truncated to the limits) or "
    "truncate (cut it to the limit: piles sequences up at the cap)",
    {"drop", "truncate"});
// The trainer's has no default (data.global_batch_size may be set instead).
inline const Key<std::int64_t> data_minibatch_size_sim = data_minibatch_size.variant(
    4, "sequences per simulated device per optimizer step", Range::at_least(1));
inline const Key<std::string> data_cost_model_sim = data_cost_model.variant(
    "flops",
    "per-sequence cost the planners balance: linear (tokens), quadratic (cost_a*s^2 + cost_b*s), flops "
    "(from the model shape), measured (data.cost_points), fit (a*u^2 + b*u, u = s/32000, from sim.fit)",
    {"linear", "quadratic", "flops", "measured", "fit"});

}  // namespace odc::keys
