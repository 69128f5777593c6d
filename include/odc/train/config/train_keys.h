#pragma once
// The trainer's train.* and debug.* keys that no lower component reads, declared once (core/key.h).
#include <cstdint>
#include <string>
#include "odc/core/key.h"
#include "odc/core/thread_limit.h"

namespace odc::keys {

inline const Key<std::int64_t> train_steps = Key<std::int64_t>::unset("train.steps", "optimizer steps (minibatches) to run; set this or train.epochs (neither: 200 steps)", Range::at_least(0));
inline const Key<std::int64_t> train_epochs = Key<std::int64_t>::unset("train.epochs", "passes over the dataset, instead of train.steps: ceil(sequences / global batch) steps per epoch, the "
              "last step of each epoch trains the remainder (fewer sequences); every step stays within one epoch", Range::at_least(1));
inline const Key<std::int64_t> train_eval_every{"train.eval_every", 0, "evaluate on data.eval every N optimizer steps and at the end of the run (0 = only at the end)", Range::at_least(0)};
inline const Key<double> train_lr{"train.lr", number("3.0e-3"), "peak learning rate", Range::above(0)};
inline const Key<double> train_min_lr{"train.min_lr", number("3.0e-4"), "learning rate at the end of the decay (inverse_sqrt: its floor)", Range::at_least(0)};
inline const Key<std::int64_t> train_warmup_steps = Key<std::int64_t>::unset("train.warmup_steps", "linear warmup steps; set this or train.warmup_ratio (neither: 20 steps)", Range::at_least(0));
inline const Key<double> train_warmup_ratio = Key<double>::unset("train.warmup_ratio", "warmup as a fraction of the run's steps (rounded to the nearest step), instead of train.warmup_steps", Range::at_least(0).and_at_most(1));
inline const Key<std::string> train_warmup_start{"train.warmup_start", "lr_over_warmup", "where warmup starts: lr_over_warmup (step 0 trains at lr / warmup, step s at lr * (s + 1) / "
              "warmup) or zero (lr * s / warmup: step 0 at lr 0, as Hugging Face transformers' and TRL's "
              "schedulers)", {"lr_over_warmup", "zero"}};
inline const Key<std::string> train_schedule{"train.schedule", "cosine", "after warmup: cosine, linear (decay to train.min_lr at the end), constant, wsd (constant, then a "
              "linear decay to train.min_lr over the last train.decay_ratio of the steps), inverse_sqrt "
              "(lr * sqrt(warmup / (step + 1)), floored at train.min_lr)", {"cosine", "linear", "constant", "wsd", "inverse_sqrt"}};
inline const Key<double> train_decay_ratio{"train.decay_ratio", number("0.1"), "wsd: the fraction of the run's steps (rounded to the nearest step) that decays to train.min_lr", Range::at_least(0).and_at_most(1)};
inline const Key<double> train_weight_decay{"train.weight_decay", number("0.01"), "decoupled weight decay (matrices only)", Range::at_least(0)};
inline const Key<double> train_beta1{"train.beta1", number("0.9"), "AdamW beta1", Range::at_least(0).and_below(1)};
inline const Key<double> train_beta2{"train.beta2", number("0.95"), "AdamW beta2", Range::at_least(0).and_below(1)};
inline const Key<double> train_eps{"train.eps", number("1.0e-8"), "AdamW epsilon", Range::above(0)};
inline const Key<double> train_grad_clip{"train.grad_clip", number("1.0"), "global gradient-norm clip; 0 disables", Range::at_least(0)};
inline const Key<std::string> train_loss_reduction{"train.loss_reduction", "token", "token = mean over all target tokens of the global minibatch; sequence = mean over sequences "
              "of each sequence's mean token loss", {"token", "sequence"}};
inline const Key<std::string> train_context_parallel{"train.context_parallel", "auto", "context parallelism: auto = a sequence longer than the microbatch cap "
              "(data.max_tokens_per_microbatch) is split over several ranks, each holding a zig-zag share of its tokens and exchanging "
              "keys and values with the others at every layer (train.comm odc: the fewest ranks whose share fits, chosen per "
              "minibatch; collective: every sequence over groups of train.context_parallel_degree ranks); off = such a "
              "sequence is an error", {"auto", "off"}};
inline const Key<std::int64_t> train_context_parallel_degree{"train.context_parallel_degree", 0, "train.comm collective: the ranks of each "
              "static context-parallel group (0 = the fewest whose share fits the longest sequence; 1 = none); odc: the most ranks "
              "one sequence may be split over (0 = the world)", Range::at_least(0)};
inline const Key<std::int64_t> train_threads{"train.threads", 1, "compute threads per rank (BLAS); at most 4 x the machine's hardware threads", Range::at_least(1).and_at_most(static_cast<double>(kMaxComputeThreads))};
inline const Key<std::string> train_metrics_file{"train.metrics_file", std::string(), "JSON lines of per-step metrics (empty = none)"};
inline const Key<std::string> train_trace_file{"train.trace_file", std::string(), "Chrome trace-event JSON of the per-rank timeline (one track per rank; opens in Perfetto); "
              "written by rank 0 at the end (empty = none; {rank} in the name becomes 0, as in train.metrics_file)"};
inline const Key<std::int64_t> train_trace_steps{"train.trace_steps", 20, "trace only the first N steps (0 = all; a trace holds every unit of every microbatch)", Range::at_least(0)};
inline const Key<double> train_peak_flops{"train.peak_flops", number("0"), "peak FLOP/s of one rank for MFU; 0 = CPU: the best FMA peak measured at start-up on this CPU model, "
              "cached (~/.cache/odc/cpu-peak.json or $ODC_PEAK_CACHE) and equal on every rank; GPU: the device table", Range::at_least(0)};
inline const Key<std::int64_t> train_log_every{"train.log_every", 1, "log a progress line every N steps", Range::at_least(1)};
inline const Key<std::string> train_log_level{"train.log_level", "info", "log level", {"trace", "debug", "info", "warn", "error"}};
inline const Key<std::int64_t> train_stop_at_step{"train.stop_at_step", 0, "end this run (after checkpointing) once this many steps are done, without changing the schedule "
              "of train.steps (0 = run to train.steps)", Range::at_least(0)};
inline const Key<double> debug_checkpoint_delay_ms{"debug.checkpoint_delay_ms", number("0"), "sleep after writing this rank's checkpoint shards, before the commit (crash-safety tests)", Range::at_least(0)};
inline const Key<std::int64_t> debug_checkpoint_delay_rank{"debug.checkpoint_delay_rank", -1, "the rank that sleeps debug.checkpoint_delay_ms (-1: every rank; rank-failure tests)", Range::at_least(-1)};
inline const Key<std::int64_t> debug_ranks_per_host{"debug.ranks_per_host", 0, "treat consecutive blocks of this many ranks as hosts (train.sharding on one machine; 0: the real hosts)", Range::at_least(0)};
inline const Key<std::int64_t> debug_slow_rank{"debug.slow_rank", -1, "rank that sleeps debug.delay_ms before each microbatch (-1: none)", Range::at_least(-1)};
inline const Key<double> debug_delay_ms{"debug.delay_ms", number("0"), "injected per-microbatch delay of debug.slow_rank (straggler studies)", Range::at_least(0)};

}  // namespace odc::keys
