#include "odc/train/config/config_schema.h"

#include <cctype>
#include <filesystem>
#include <fstream>
#include <limits>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "odc/backend/backend_factory.h"
#include "odc/core/error.h"
#include "odc/core/thread_limit.h"
#include "odc/data/data_config.h"
#include "odc/io/hf_checkpoint.h"
#include "odc/kernels/cudnn_ragged.h"
#include "odc/train/config/batch_schedule.h"
#include "odc/train/config/run_settings.h"

namespace odc::train {

std::vector<TunableSpec> trainer_tunables() {
  using K = ValueKind;
  return {
      // model
      tunable("model.config", K::map,
              "{vocab_size: 64, hidden_size: 256, intermediate_size: 688, num_hidden_layers: 6, "
              "num_attention_heads: 8, num_key_value_heads: 4, rms_norm_eps: 1.0e-5, rope_theta: 10000.0, "
              "max_position_embeddings: 4096, tie_word_embeddings: false}",
              "Hugging Face config.json fields of the model to train from random initialization"),
      tunable("model.checkpoint", K::string, "\"\"",
              "Hugging Face checkpoint directory (config.json + safetensors) to fine-tune; its config.json "
              "replaces model.config (empty = random initialization from model.config)"),
      tunable("model.device", K::string, "cpu",
              "where the model computes: cpu, or cuda = one GPU per rank (a build with CUDA; rank r uses GPU "
              "local rank mod the GPU count; masters, gradients and AdamW state stay on the GPU in float32)",
              {"cpu", "cuda"}),
      tunable("model.dtype", K::string, "float32",
              "compute dtype of activations and weights (masters, gradient sums and optimizer state are float32 "
              "always): float32 (cpu), bfloat16 (cuda; on cpu the bf16 mode that rounds where the CUDA path rounds)",
              {"float32", "bfloat16"}),
      tunable("model.seed", K::integer, "0", "seed of the random initialization (same model on every world size)"),
      tunable("model.attention", K::string, "auto",
              "attention kernels on model.device=cuda: cudnn = cuDNN's fused flash attention (ragged packed "
              "sequences, causal, GQA); native = this project's kernel; auto = cudnn where the installed cuDNN "
              "supports the shape, else native with the reason logged (model.device=cpu: always the CPU kernel)",
              {"auto", "cudnn", "native"}),
      tunable("model.cudnn_workspace_mib", K::integer, std::to_string(kernels::kCudnnWorkspaceLimitMiB),
              "the most workspace (MiB) one cuDNN attention call may take; a call whose graph needs more (cuDNN "
              "below 9.25 sizes the deterministic backward's scratch over the padded batch: B x heads x S x S x 2 "
              "bytes) runs on the native kernels instead, logged once; the memory plan counts this bound",
              Range::at_least(1).and_at_most(1 << 30)),  // MiB: 1 PiB, its bytes far inside int64
      // data: the trainer's own keys, then the ones odc-sim shares (data::data_tunable), in this order
      tunable("data.train", K::string, "", "training data file", {}, true),
      tunable("data.eval", K::string, "\"\"",
              "held-out data file, in data.train's format (data.format, data.tokenizer, data.chat_template): its "
              "loss and perplexity are measured every train.eval_every steps and at the end (empty = none)"),
      tunable("data.eval_max_sequences", K::integer, "0",
              "evaluate on the first N sequences of data.eval (0 = all)", Range::at_least(0)),
      tunable("data.format", K::string, "tokens",
              "data format: tokens = pre-tokenized JSONL {\"input_ids\": [...], \"loss_mask\": [...]}; bin = "
              "binary PREFIX.bin + PREFIX.idx written by odc-data convert (memory-mapped); chat = JSONL of "
              "{\"messages\": [...]}, {\"prompt\", \"completion\"} or {\"text\"} records, tokenized with "
              "data.tokenizer and data.chat_template (loss on assistant turns / completions); text = JSONL of "
              "{\"text\": ...} records (loss on all tokens); rollouts = JSONL RL rollout records {\"prompt_ids\", "
              "\"completion_ids\", \"logprobs\", \"ref_logprobs\", \"reward\" + \"group\" or \"advantage\"} for "
              "train.objective grpo (loss on the completions)",
              {"tokens", "bin", "chat", "text", "rollouts"}),
      tunable("data.tokenizer", K::string, "\"\"",
              "tokenizer.json for data.format chat/text; empty = <model.checkpoint>/tokenizer.json"),
      tunable("data.chat_template", K::string, "auto",
              "chat template of data.format chat: llama3, chatml (Qwen), or auto (from tokenizer_config.json "
              "next to the tokenizer, else from its special tokens)",
              {"auto", "llama3", "chatml"}),
      data::data_tunable("data.extra_fields"),
      tunable("data.minibatch_size", K::integer, "",
              "sequences per rank per optimizer step; set this or data.global_batch_size (neither: 4 per rank)",
              Range::at_least(1)),
      tunable("data.global_batch_size", K::integer, "",
              "sequences per optimizer step over all ranks, instead of data.minibatch_size (set one of the two); "
              "need not divide by the world size with data.balance lb_mini, local_sort or round_robin (ranks then "
              "run different numbers of sequences); lb_micro (auto with train.comm collective) and lb_mini_equal "
              "need a multiple",
              Range::at_least(1)),
      tunable("data.max_length", K::integer, "0",
              "longest sequence (tokens) to train on; 0 = no limit (model.config.max_position_embeddings is only "
              "warned about); longer ones are handled by data.over_length (odc-sim drops them by default, as "
              "a dataset filter)",
              Range::at_least(0)),
      tunable("data.over_length", K::string, "error",
              "what a sequence longer than data.max_length does: error (names its file:line or bin index and "
              "length), truncate (keeps its first data.max_length tokens and their mask), drop (left out; the "
              "number is logged)",
              {"error", "truncate", "drop"}),
      data::data_tunable("data.max_tokens_per_microbatch"),
      data::data_tunable("data.packing_ratio"),
      tunable("data.balance", K::string, "auto",
              "how the global minibatch is split over ranks and microbatches: local_sort, lb_micro (equal "
              "microbatch counts), lb_mini (balances whole-minibatch work; odc only), lb_mini_equal (lb_micro's "
              "equal sequence counts per rank, each rank keeping its own microbatch count, as RL frameworks need; "
              "odc only); auto = lb_mini with odc, lb_micro with collective; round_robin = no balancing (items r, "
              "r+N, ... packed in order)",
              {"auto", "local_sort", "lb_micro", "lb_mini", "round_robin", "lb_mini_equal"}),
      data::data_tunable("data.cost_model"),
      data::data_tunable("data.cost_a"),
      data::data_tunable("data.cost_b"),
      data::data_tunable("data.cost_c"),
      data::data_tunable("data.cost_points"),
      data::data_tunable("data.shuffle"),
      data::data_tunable("data.seed"),
      // train
      tunable("train.comm", K::string, "odc", "communication: odc (on-demand) or collective (FSDP-style)",
              {"odc", "collective"}),
      tunable("train.sharding", K::string, "full",
              "parameter layout across hosts: full (sharded over all ranks), hybrid (sharded within a host, "
              "replicated across hosts, gradients summed across hosts once per minibatch) or hpz (full, plus a "
              "secondary copy sharded within each host that serves the minibatch's gathers); one host: full",
              {"full", "hybrid", "hpz"}),
      tunable("train.steps", K::integer, "",
              "optimizer steps (minibatches) to run; set this or train.epochs (neither: 200 steps)", Range::at_least(0)),
      tunable("train.epochs", K::integer, "",
              "passes over the dataset, instead of train.steps: ceil(sequences / global batch) steps per epoch, the "
              "last step of each epoch trains the remainder (fewer sequences); every step stays within one epoch",
              Range::at_least(1)),
      tunable("train.eval_every", K::integer, "0",
              "evaluate on data.eval every N optimizer steps and at the end of the run (0 = only at the end)",
              Range::at_least(0)),
      tunable("train.lr", K::number, "3.0e-3", "peak learning rate", Range::above(0)),
      tunable("train.min_lr", K::number, "3.0e-4",
              "learning rate at the end of the decay (inverse_sqrt: its floor)", Range::at_least(0)),
      tunable("train.warmup_steps", K::integer, "",
              "linear warmup steps; set this or train.warmup_ratio (neither: 20 steps)", Range::at_least(0)),
      tunable("train.warmup_ratio", K::number, "",
              "warmup as a fraction of the run's steps (rounded to the nearest step), instead of train.warmup_steps",
              Range::at_least(0).and_at_most(1)),
      tunable("train.warmup_start", K::string, "lr_over_warmup",
              "where warmup starts: lr_over_warmup (step 0 trains at lr / warmup, step s at lr * (s + 1) / "
              "warmup) or zero (lr * s / warmup: step 0 at lr 0, as Hugging Face transformers' and TRL's "
              "schedulers)",
              {"lr_over_warmup", "zero"}),
      tunable("train.schedule", K::string, "cosine",
              "after warmup: cosine, linear (decay to train.min_lr at the end), constant, wsd (constant, then a "
              "linear decay to train.min_lr over the last train.decay_ratio of the steps), inverse_sqrt "
              "(lr * sqrt(warmup / (step + 1)), floored at train.min_lr)",
              {"cosine", "linear", "constant", "wsd", "inverse_sqrt"}),
      tunable("train.decay_ratio", K::number, "0.1",
              "wsd: the fraction of the run's steps (rounded to the nearest step) that decays to train.min_lr",
              Range::at_least(0).and_at_most(1)),
      tunable("train.weight_decay", K::number, "0.01", "decoupled weight decay (matrices only)", Range::at_least(0)),
      tunable("train.beta1", K::number, "0.9", "AdamW beta1", Range::at_least(0).and_below(1)),
      tunable("train.beta2", K::number, "0.95", "AdamW beta2", Range::at_least(0).and_below(1)),
      tunable("train.eps", K::number, "1.0e-8", "AdamW epsilon", Range::above(0)),
      tunable("train.grad_clip", K::number, "1.0", "global gradient-norm clip; 0 disables", Range::at_least(0)),
      tunable("train.loss_reduction", K::string, "token",
              "token = mean over all target tokens of the global minibatch; sequence = mean over sequences "
              "of each sequence's mean token loss",
              {"token", "sequence"}),
      tunable("train.recompute", K::string, "none",
              "activation recomputation: none = keep every layer's activations for backward; selective = keep "
              "each layer's input, attention output and log-sum-exp, recompute the rest in backward; full = keep "
              "only each layer's input and recompute its whole forward in backward (gradients bitwise equal)",
              {"none", "selective", "full"}),
      tunable("train.memory_budget_gib", K::number, "0",
              "one rank's memory budget for the memory plan (odc-train --plan-memory): a run whose plan exceeds it "
              "is refused before training, and data.max_tokens_per_microbatch: auto fills it; 0 = what the "
              "device has (a GPU's memory, the host's available memory) over the ranks sharing it, less 5%; else at "
              "least 0.0009765625 (1 MiB) and at most 1048576 (1 PiB)",
              Range::at_least(0).and_at_most(kMaxMemoryBudgetGib)),
      tunable("train.threads", K::integer, "1",
              "compute threads per rank (BLAS); at most 4 x the machine's hardware threads",
              Range::at_least(1).and_at_most(static_cast<double>(kMaxComputeThreads))),
      tunable("train.metrics_file", K::string, "\"\"", "JSON lines of per-step metrics (empty = none)"),
      tunable("train.trace_file", K::string, "\"\"",
              "Chrome trace-event JSON of the per-rank timeline (one track per rank; opens in Perfetto); "
              "written by rank 0 at the end (empty = none; {rank} in the name becomes 0, as in train.metrics_file)"),
      tunable("train.trace_steps", K::integer, "20",
              "trace only the first N steps (0 = all; a trace holds every unit of every microbatch)",
              Range::at_least(0)),
      tunable("train.peak_flops", K::number, "0",
              "peak FLOP/s of one rank for MFU; 0 = CPU: the best FMA peak measured at start-up on this CPU model, "
              "cached (~/.cache/odc/cpu-peak.json or $ODC_PEAK_CACHE) and equal on every rank; GPU: the device table",
              Range::at_least(0)),
      tunable("train.log_every", K::integer, "1", "log a progress line every N steps", Range::at_least(1)),
      tunable("train.log_level", K::string, "info", "log level", {"trace", "debug", "info", "warn", "error"}),
      // comm
      tunable("comm.chunk_bytes", K::integer, "1048576",
              "bytes per one-sided get or gradient push message to a peer on this host (ODC, shared memory)",
              Range::at_least(4096)),
      tunable("comm.network_chunk_bytes", K::integer, "4194304",
              "bytes per gather request's answer or gradient push message to a peer reached over the network "
              "(ODC over UCX: TCP, RDMA)",
              Range::at_least(4096)),
      tunable("comm.max_inflight", K::integer, "8", "ODC messages in flight per rank",
              Range::at_least(1).and_at_most(std::numeric_limits<int>::max())),
      tunable("comm.direct_load", K::boolean, "true",
              "ODC gathers copy straight from peers' shards where UCX maps them (shared memory); false forces "
              "ucp_get through the progress thread"),
      tunable("comm.gather_protocol", K::string, "auto",
              "how an ODC gather over UCX reads an owner's shard: get (one-sided ucp_get, or a plain copy where UCX "
              "maps the owner's memory here), request (a small message asks the owner's progress thread, which "
              "answers with the bytes, by rendezvous into the gathered buffer: fast over TCP, where UCX emulates "
              "gets in software), auto (per owner: get where its memory is mapped here through shared memory, else "
              "request)",
              {"auto", "get", "request"}),
      tunable("comm.deterministic", K::boolean, "false",
              "ODC owners add gradient pushes in a fixed order (per-client buffers folded in rank order): two runs, "
              "and a resumed run, give the same bits; costs one fp32 copy of the parameters per rank. The "
              "collective and single-rank paths are always deterministic"),
      tunable("comm.transport", K::string, "auto",
              "how ODC moves data: ucx (UCX one-sided gets and pushes, any hosts), ipc (memory shared by the ranks "
              "of one host: CUDA IPC on GPUs, shared memory on CPUs), auto (ipc for GPU state or a job started "
              "without MPI, else ucx)",
              {"auto", "ucx", "ipc"}),
      tunable("comm.gather_dtype", K::string, "fp32",
              "element type of gathered unit weights: fp32 (the masters, as the paper's reference under ODC) or bf16 "
              "(a bf16 copy of every shard made at the minibatch start: half the bytes; needs model.dtype bfloat16, "
              "whose compute rounds the weights to bf16 anyway)",
              {"fp32", "bf16"}),
      tunable("comm.timeout_s", K::number, "600", "a wait on a peer longer than this is an error naming the peer",
              Range::above(0)),
      // checkpoint
      tunable("checkpoint.dir", K::string, "\"\"",
              "directory of native checkpoints (step-N/: per-rank shards, optimizer state, data position); empty = "
              "none"),
      tunable("checkpoint.every", K::integer, "0", "save every N steps (0 = only at the end of the run)",
              Range::at_least(0)),
      tunable("checkpoint.keep", K::integer, "3", "keep the newest K checkpoints of this run (0 = all)",
              Range::at_least(0).and_at_most(std::numeric_limits<int>::max())),
      tunable("checkpoint.save_best", K::boolean, "false",
              "an evaluation with the lowest eval loss so far on a step that has no checkpoint saves one there "
              "(false: it is logged, and checkpoint.dir/best.json keeps naming the best evaluated checkpoint)"),
      tunable("checkpoint.accept_manifest_without_checksum", K::boolean, "false",
              "resume a checkpoint whose manifest has no manifest_checksum (written before manifests carried one, or "
              "with the field deleted), whose values cannot be verified; false refuses it, naming this key"),
      tunable("checkpoint.resume", K::string, "auto",
              "auto = continue from the newest complete checkpoint in checkpoint.dir if there is one; never = a fresh "
              "run (checkpoint.dir must hold no checkpoints); or a checkpoint directory (step-N) to continue from: an "
              "earlier step of checkpoint.dir is a rollback, its later checkpoints move to checkpoint.dir/retired/"),
      tunable("checkpoint.export_hf", K::string, "\"\"",
              "at the end of the run, write the trained model as a Hugging Face directory here (config.json, "
              "safetensors, tokenizer files copied from model.checkpoint); empty = no export"),
      tunable("checkpoint.export_dtype", K::string, "auto",
              "dtype of the exported tensors; auto = model.checkpoint's dtype, else float32",
              {"auto", "float32", "bfloat16", "float16"}),
      tunable("checkpoint.export_shard_bytes", K::integer, "5000000000",
              "largest safetensors file of the export before it is split into shards (model-0000K-of-0000N plus "
              "model.safetensors.index.json), each holding whole units (a larger unit gets one of its own); the "
              "ranks write the shards side by side (5000000000 = transformers' 5 GB)",
              Range::at_least(1)),
      tunable("train.stop_at_step", K::integer, "0",
              "end this run (after checkpointing) once this many steps are done, without changing the schedule "
              "of train.steps (0 = run to train.steps)",
              Range::at_least(0)),
      // the objective, and RL (train.objective grpo)
      tunable("train.objective", K::string, "sft",
              "what the model is trained to do: sft = weighted cross-entropy on the targets (train.loss_reduction); "
              "grpo = the clipped policy-gradient objective on rollouts (data.format rollouts; the rl.* keys)",
              {"sft", "grpo"}),
      tunable("rl.epsilon", K::number, "0.2",
              "grpo: the ratio's lower clip bound is 1 - epsilon (and the upper 1 + epsilon unless rl.epsilon_high)",
              Range::at_least(0).and_below(1)),
      tunable("rl.epsilon_high", K::number, "",
              "grpo: the ratio's upper clip bound is 1 + epsilon_high (unset: rl.epsilon; DAPO's clip-higher sets it "
              "above)",
              Range::at_least(0)),
      tunable("rl.kl_beta", K::number, "0",
              "grpo: weight of the KL penalty to the reference policy (k3 estimator over the records' "
              "ref_logprobs; 0 = none)",
              Range::at_least(0)),
      tunable("rl.kl_ratio_weighted", K::boolean, "true",
              "grpo with rl.kl_beta: the penalty's k3 estimate weighted by the importance ratio r (the unbiased "
              "reverse-KL gradient of DeepSeek-V3.2; TRL's use_bias_correction_kl, on by default there too); false "
              "= plain k3"),
      tunable("rl.temperature", K::number, "1",
              "grpo: the policy's softmax temperature: log-probabilities, entropy and gradient of softmax(logits / T), "
              "as the rollouts were sampled (records that say their temperature must match it)",
              Range::above(0)),
      tunable("rl.loss_aggregation", K::string, "dapo",
              "grpo: how token losses add up over the global minibatch: grpo = mean over sequences of each "
              "sequence's mean; dapo = mean over all completion tokens; dr_grpo = sum over tokens / (sequences x "
              "rl.max_completion_length)",
              {"grpo", "dapo", "dr_grpo"}),
      tunable("rl.max_completion_length", K::integer, "0",
              "grpo with rl.loss_aggregation dr_grpo: the constant normaliser's length (the sampler's max new "
              "tokens); 0 = the longest completion of the data",
              Range::at_least(0)),
      tunable("rl.scale_rewards", K::string, "group",
              "grpo on records with rewards: advantage = (reward - group mean) / (std + 1e-4) with the std of the "
              "group, of the whole file (batch), or not scaled (none)",
              {"group", "batch", "none"}),
      tunable("rl.entropy", K::boolean, "true",
              "grpo: measure the policy's mean token entropy on the completions every step (a metric; on a GPU the "
              "logits rows cross to the host for it)"),
      // the online RL loop (rl.prompts)
      tunable("rl.prompts", K::string, "\"\"",
              "grpo's online loop: a prompts JSONL ({\"prompt\": TEXT, \"answer\": TEXT} per line) that the policy "
              "samples from every iteration with its current weights (no data.train); empty = offline, rollout records "
              "from data.train"),
      tunable("rl.iterations", K::integer, "1",
              "online loop: iterations of sample, score, train (the run's length: iterations x "
              "rl.epochs_per_iteration x rollouts / data.global_batch_size steps)",
              Range::at_least(1)),
      tunable("rl.prompts_per_iteration", K::integer, "8",
              "online loop: prompts sampled per iteration (the next ones of rl.prompts in data.seed's order)",
              Range::at_least(1)),
      tunable("rl.group_size", K::integer, "4",
              "online loop: completions per prompt (GRPO's G; a group of one has no spread: advantage 0)",
              Range::at_least(2)),
      tunable("rl.epochs_per_iteration", K::integer, "1",
              "online loop: passes over each iteration's rollouts (TRL's num_iterations)", Range::at_least(1)),
      tunable("rl.max_new_tokens", K::integer, "64", "online loop: the most tokens of a completion", Range::at_least(1)),
      tunable("rl.top_p", K::number, "1", "online loop: nucleus sampling mass", Range::above(0).and_at_most(1)),
      tunable("rl.top_k", K::integer, "0", "online loop: sample among the k most likely tokens (0 = all)",
              Range::at_least(0)),
      tunable("rl.stop", K::string, "\"\"",
              "online loop: a completion also ends once its text contains this string (the token that completes it "
              "is kept); empty = eos ids and rl.max_new_tokens only"),
      tunable("rl.seed", K::integer, "0",
              "online loop: sampling seed; a completion's draws depend only on it, the iteration, its prompt's "
              "position and its sample index",
              Range::at_least(0)),
      tunable("rl.concurrency", K::integer, "16", "online loop: sequences each rank decodes at once",
              Range::at_least(1)),
      tunable("rl.verifier", K::string, "exact",
              "online loop: how a completion is scored against its prompt's answer (rewards.h): exact = the "
              "completion up to its end-of-turn marker, stripped, equals the answer; number = its last number does",
              {"exact", "number"}),
      tunable("rl.reward_command", K::string, "\"\"",
              "online loop: score with this shell command instead of rl.verifier: JSONL {\"prompt\", \"completion\", "
              "\"answer\"} on its stdin, one reward per line on its stdout (run by rank 0)"),
      tunable("rl.reward_timeout_s", K::number, "300",
              "online loop: rl.reward_command's time limit per iteration; past it the command and every process "
              "it started are killed and the run fails naming it",
              Range::above(0)),
      tunable("rl.chat", K::boolean, "false",
              "online loop: render each prompt as a user turn of data.chat_template for generation"),
      // debug
      tunable("debug.checkpoint_delay_ms", K::number, "0",
              "sleep after writing this rank's checkpoint shards, before the commit (crash-safety tests)",
              Range::at_least(0)),
      tunable("debug.checkpoint_delay_rank", K::integer, "-1",
              "the rank that sleeps debug.checkpoint_delay_ms (-1: every rank; rank-failure tests)",
              Range::at_least(-1)),
      tunable("debug.host_staging", K::boolean, "false",
              "stage the host comms (odc over ucx, collective over MPI) through the model backend's memory even for "
              "host state: the path GPU ranks on several hosts take, exercised on a CPU"),
      tunable("debug.ranks_per_host", K::integer, "0",
              "treat consecutive blocks of this many ranks as hosts (train.sharding on one machine; 0: the real hosts)",
              Range::at_least(0)),
      tunable("debug.slow_rank", K::integer, "-1", "rank that sleeps debug.delay_ms before each microbatch (-1: none)",
              Range::at_least(-1)),
      tunable("debug.delay_ms", K::number, "0", "injected per-microbatch delay of debug.slow_rank (straggler studies)",
              Range::at_least(0)),
  };
}

namespace {

// Relations between keys that each key's own range cannot express, checked as the config loads
// (before any data is read or any training runs).
void check_relations(const Config& config) {
  check_exclusive_keys(config);
  const std::string schedule = config.get_string("train.schedule");
  const double lr = config.get_double("train.lr"), min_lr = config.get_double("train.min_lr");
  if (schedule != "constant" && min_lr > lr) {
    fail("train.min_lr ({}) is above train.lr ({}): the {} schedule would raise the learning rate as it decays; "
         "set train.min_lr <= train.lr",
         min_lr, lr, schedule);
  }
  // A key that shapes only something this run does not do would be silently ignored.
  if (schedule != "wsd" && config.source_of("train.decay_ratio") != "default") {
    fail("train.decay_ratio (from {}) shapes only train.schedule wsd, but the schedule is {}; drop it or set "
         "train.schedule: wsd",
         config.source_of("train.decay_ratio"), schedule);
  }
  if (config.get_int("data.max_length") == 0 && config.source_of("data.over_length") != "default") {
    fail("data.over_length (from {}) says what a sequence longer than data.max_length does, but data.max_length is 0 "
         "(no limit); set data.max_length",
         config.source_of("data.over_length"));
  }
  // The objective and its data: rollouts carry what grpo needs, and grpo needs rollouts.
  const bool grpo = config.get_string("train.objective") == "grpo";
  const bool rollouts = config.get_string("data.format") == "rollouts";
  const bool online = !config.get_string("rl.prompts").empty();
  if (online) {
    // The online loop makes its own rollouts: data.train and a run length of steps do not apply.
    for (const char* key : {"data.train", "train.steps", "train.epochs"}) {
      if (config.has(key)) {
        fail("{} (from {}) does not apply to the online RL loop (rl.prompts): it samples its own rollouts, and its "
             "length is rl.iterations; drop {}", key, config.source_of(key), key);
      }
    }
    if (config.source_of("data.format") != "default" && !rollouts) {
      fail("data.format {} (from {}): the online RL loop (rl.prompts) trains on the rollouts it samples; drop "
           "data.format", config.get_string("data.format"), config.source_of("data.format"));
    }
    if (!config.get_string("rl.reward_command").empty() && config.source_of("rl.verifier") != "default") {
      fail("rl.verifier (from {}) and rl.reward_command (from {}) both score completions: give one",
           config.source_of("rl.verifier"), config.source_of("rl.reward_command"));
    }
    const std::string& command = config.get_string("rl.reward_command");
    if (!command.empty() && command.find_first_not_of(" \t\r\n") == std::string::npos) {
      fail("rl.reward_command (from {}) is blank, a command line that runs nothing: set a command, or leave it "
           "empty (the default) for rl.verifier to score", config.source_of("rl.reward_command"));
    }
    if (config.get_string("rl.reward_command").empty() && config.source_of("rl.reward_timeout_s") != "default") {
      fail("rl.reward_timeout_s (from {}) limits rl.reward_command, which is not set (rl.verifier scores the "
           "completions); drop it or set rl.reward_command", config.source_of("rl.reward_timeout_s"));
    }
  } else {
    for (const char* key : {"rl.iterations", "rl.prompts_per_iteration", "rl.group_size", "rl.epochs_per_iteration",
                            "rl.max_new_tokens", "rl.top_p", "rl.top_k", "rl.stop", "rl.seed", "rl.concurrency", "rl.verifier",
                            "rl.reward_command", "rl.reward_timeout_s", "rl.chat"}) {
      if (grpo && config.source_of(key) != "default") {
        fail("{} (from {}) shapes only the online RL loop, and rl.prompts is not set (the rollouts come from "
             "data.train); drop it or set rl.prompts", key, config.source_of(key));
      }
    }
  }
  if (grpo && !rollouts && !online) {
    fail("train.objective grpo trains on rollouts (their sampling log-probabilities and advantages), but "
         "data.format is {}; set data.format: rollouts",
         config.get_string("data.format"));
  }
  if (rollouts && !grpo) {
    fail("data.format rollouts holds RL rollouts, which train.objective {} does not use; set train.objective: grpo",
         config.get_string("train.objective"));
  }
  if (!grpo) {
    for (const auto& spec : config.specs()) {
      const std::string& key = spec.path;
      if (key.rfind("rl.", 0) == 0 && config.has(key) && config.source_of(key) != "default") {
        fail("{} (from {}) shapes only train.objective grpo, but the objective is {}; drop it or set "
             "train.objective: grpo",
             key, config.source_of(key), config.get_string("train.objective"));
      }
    }
  }
  if (grpo && config.source_of("train.loss_reduction") != "default") {
    fail("train.loss_reduction (from {}) weighs supervised targets; under train.objective grpo the tokens are "
         "weighed by rl.loss_aggregation",
         config.source_of("train.loss_reduction"));
  }
  // The shape itself (fields in range, heads dividing the width): --dump-config and every run
  // see the same verdict. A checkpoint's config.json is checked when it is read
  // (training_model_config).
  if (config.get_string("model.checkpoint").empty()) (void)model_config_from(config);
}

}  // namespace

Config load_trainer_config(const std::string& config_file, const std::vector<std::string>& assignments) {
  Config config(trainer_tunables());
  if (!config_file.empty()) config.load_yaml_file(config_file);
  config.apply_environment();
  for (const auto& assignment : assignments) config.apply_assignment(assignment);
  check_relations(config);
  return config;
}

nlohmann::json yaml_to_json(const YAML::Node& node) {
  switch (node.Type()) {
    case YAML::NodeType::Null:
    case YAML::NodeType::Undefined: return nullptr;
    case YAML::NodeType::Sequence: {
      auto arr = nlohmann::json::array();
      for (const auto& item : node) arr.push_back(yaml_to_json(item));
      return arr;
    }
    case YAML::NodeType::Map: {
      auto obj = nlohmann::json::object();
      for (const auto& kv : node) obj[kv.first.as<std::string>()] = yaml_to_json(kv.second);
      return obj;
    }
    case YAML::NodeType::Scalar: break;
  }
  const std::string text = node.Scalar();
  if (node.Tag() == "!") return text;  // explicitly quoted: a string
  if (text == "true" || text == "True" || text == "TRUE") return true;
  if (text == "false" || text == "False" || text == "FALSE") return false;
  if (text == "null" || text == "~" || text == "Null" || text.empty()) return nullptr;
  const bool looks_integer = !text.empty() && text.find_first_not_of("+-0123456789") == std::string::npos &&
                             std::isdigit(static_cast<unsigned char>(text.back()));
  if (looks_integer) {
    try {
      std::size_t used = 0;
      const long long v = std::stoll(text, &used);
      if (used == text.size()) return v;
    } catch (const std::exception&) {
    }
  }
  try {
    std::size_t used = 0;
    const double v = std::stod(text, &used);
    if (used == text.size()) return v;
  } catch (const std::exception&) {
  }
  return text;
}

model::LlamaConfig model_config_from(const Config& config) {
  return model::LlamaConfig::from_json(yaml_to_json(config.get_map("model.config")), "model.config", true);
}

namespace {

// The checkpoint's config.json defines the model. A model.config field changed from its default
// (in a config file or by --set) that says otherwise would be silently ignored: an error naming
// each such field and both values. Fields equal to the checkpoint's are accepted.
void check_agrees_with_checkpoint(const Config& config, const model::LlamaConfig& model, const std::string& checkpoint) {
  const nlohmann::json given = yaml_to_json(config.get_map("model.config"));
  const nlohmann::json defaults = yaml_to_json(Config(trainer_tunables()).get_map("model.config"));
  const nlohmann::json have = model.to_json();
  std::vector<std::string> conflicts;
  for (const auto& [key, value] : given.items()) {
    if (defaults.contains(key) && defaults.at(key) == value) continue;  // not the user's
    if (!have.contains(key)) {
      conflicts.push_back(fmt::format("{}: {} (not a field of the checkpoint's model)", key, value.dump()));
    } else if (have.at(key) != value) {
      conflicts.push_back(fmt::format("{}: {} (the checkpoint's: {})", key, value.dump(), have.at(key).dump()));
    }
  }
  if (!conflicts.empty()) {
    fail("model.config (from {}) sets {}, but model.checkpoint {} defines the model by its config.json; drop "
         "these from model.config (a new shape: odc-ckpt init --set model.config.*)",
         config.source_of("model.config"), fmt::join(conflicts, ", "), checkpoint);
  }
}

}  // namespace

model::LlamaConfig training_model_config(const Config& config) {
  const std::string checkpoint = config.get_string("model.checkpoint");
  if (checkpoint.empty()) return model_config_from(config);
  const auto path = std::filesystem::path(checkpoint) / "config.json";
  std::ifstream in(path);
  if (!in) fail("model.checkpoint: cannot read '{}' (a Hugging Face checkpoint directory holds config.json)", path.string());
  nlohmann::json json;
  try {
    json = nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    fail("model.checkpoint: '{}' is not valid JSON: {}", path.string(), e.what());
  }
  auto model = io::hf_config_from_json(json, path.string());
  check_agrees_with_checkpoint(config, model, checkpoint);
  return model;
}

}  // namespace odc::train
