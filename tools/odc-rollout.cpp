// odc-rollout --model DIR --prompts FILE --out FILE [options]: GRPO's sampling and scoring step.
// Samples G completions of every prompt with the model (batched: many sequences decode at once),
// scores each against the prompt's answer with a verifier, and writes rollout records
// (data.format rollouts) that odc-train's train.objective grpo trains on.
// Exit codes: 0 ok, 1 bad input (odc::Error), 2 usage error.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <nlohmann/json.hpp>

#include "cli/command_line.h"
#include "cli/compute_threads.h"
#include "cli/tool_main.h"
#include "odc/core/atomic_file.h"
#include "odc/core/error.h"
#include "odc/core/logging.h"
#include "odc/data/attention_window.h"
#include "odc/data/prompts.h"
#include "odc/data/tokenizer.h"
#include "odc/train/rollout/inference.h"
#include "odc/train/run/minibatch_source.h"
#include "odc/train/rollout/rewards.h"
#include "odc/train/rollout/rollout_pipeline.h"
#include "odc/train/rollout/rollout_sampling.h"
#include "odc/train/run/stop_signals.h"

namespace {

constexpr const char* kUsage = R"(usage: odc-rollout --model DIR --prompts FILE --out FILE [options]

Reads prompts (JSONL, one {"prompt": TEXT, "answer": TEXT} per line), samples --group completions
of each with the model in DIR (its tokenizer.json; --concurrency sequences decode at once over
KV caches), scores every completion against its prompt's answer, and writes one rollout record
per completion to FILE: {"prompt_ids", "completion_ids", "logprobs", "reward", "group"}, the
format odc-train reads with data.format: rollouts and train.objective: grpo, plus the sampling
"temperature". logprobs are the sampling policy's: log softmax(logits / T) of each drawn token over
the whole vocabulary (as TRL records them: --top-k and --top-p shape the draws, not these numbers). Prints a JSON line of statistics
(reward mean, accuracy, completion lengths, tokens/s).

options:
  --model DIR            Hugging Face checkpoint directory with tokenizer.json (required)
  --tokenizer PATH       tokenizer.json to use instead of DIR/tokenizer.json
  --prompts FILE         prompts JSONL (required)
  --out FILE             rollout records JSONL to write (required; replaced atomically)
  --group G              completions per prompt (default rl.group_size's: GRPO compares each completion with the
                         others of its prompt; --group 1 measures accuracy, but a lone completion has
                         advantage 0, so odc-train's grpo refuses such records)
  --concurrency N        sequences decoded at once (default 16)
  --max-new-tokens N     >= 1, default 64
  --temperature T        > 0, default 1.0: the softmax temperature of the draws and of the records'
                         logprobs (train them with rl.temperature T; the records say it)
  --top-p P              nucleus mass in (0, 1] (default 1.0)
  --top-k K              sample among the K most likely tokens (default 0 = off)
  --stop STRING          a completion also ends once its text contains STRING (repeatable; the token
                         that completes it is kept, as an eos token is)
  --seed N               sampling seed (>= 0, default 0); each completion's draws depend only on it,
                         its prompt and its sample index
  --verifier V           exact (default: the completion up to its end-of-turn marker, stripped,
                         equals the answer) or number (the completion's last number equals the
                         answer's)
  --ref-model DIR        a frozen reference policy (a Hugging Face checkpoint of the same tokenizer:
                         its tokenizer.json is compared with the policy's): each record gets its
                         log-probabilities of the completion, "ref_logprobs", for the grpo objective's
                         KL penalty (rl.kl_beta)
  --reward-command CMD   score with an external command instead: it reads JSONL {"prompt",
                         "completion", "answer"} on stdin and writes one reward (a number) per line
  --reward-timeout S     the reward command's time limit in seconds (> 0, default 300): past it, it
                         and every process it started are killed and nothing is written
  --chat                 render each prompt as a user turn of the model's chat template
  --chat-template T      auto (default), llama3 or chatml (with --chat)
  --threads N            compute threads (default 1; at most 4 x the machine's hardware threads)
  -h, --help             this text
)";

odc::cli::Command command() {
  using odc::cli::Takes;
  return {"odc-rollout", kUsage,
          {{"--model"}, {"--tokenizer"}, {"--prompts"}, {"--out"}, {"--group"}, {"--concurrency"}, {"--max-new-tokens"},
           {"--temperature"}, {"--top-p"}, {"--top-k"}, {"--stop", Takes::values}, {"--seed"}, {"--verifier"}, {"--reward-command"}, {"--reward-timeout"}, {"--ref-model"},
           {"--chat", Takes::nothing}, {"--chat-template", Takes::value, "--chat"}, {"--threads"}}};
}

// The reference scores the policy's token ids: it must read them as the same text.
void check_reference(const odc::train::LoadedModel& reference, const odc::train::LoadedModel& model,
                     const std::string& tokenizer_path) {
  if (reference.config().vocab_size != model.config().vocab_size) {
    odc::fail("--ref-model {} has a vocabulary of {}, the model {} one of {}", reference.dir(),
              reference.config().vocab_size, model.dir(), model.config().vocab_size);
  }
  const auto ref_tokenizer = (std::filesystem::path(reference.dir()) / "tokenizer.json").string();
  if (!std::filesystem::exists(ref_tokenizer)) {
    spdlog::warn("--ref-model {} has no tokenizer.json: whether it reads the policy's token ids as the same text "
                 "({}) cannot be checked", reference.dir(), tokenizer_path);
    return;
  }
  if (const auto difference = odc::data::tokenizer_difference(tokenizer_path, ref_tokenizer)) {
    odc::fail("--ref-model {}: its tokenizer {} is not the policy's {} (first difference: {}): it would score the "
              "policy's token ids as other text; give a reference with the policy's tokenizer",
              reference.dir(), ref_tokenizer, tokenizer_path, *difference);
  }
}

int run(const odc::cli::Arguments& args, const odc::train::StopSignals& signals) {
  const std::string model_dir = args.required("--model", "DIR");
  const std::string prompts_path = args.required("--prompts", "FILE");
  const std::string out_path = args.required("--out", "FILE");
  odc::train::RolloutOptions options;
  options.group_size = args.integer("--group", odc::train::RlLoopSettings{}.group_size, odc::Range::at_least(1));
  if (options.group_size == 1) {
    std::fprintf(stderr, "odc-rollout: warning: --group 1: every completion stands alone, so these records measure "
                         "accuracy but cannot train grpo (a lone completion's advantage is 0; odc-train refuses them)\n");
  }
  options.concurrency = args.integer("--concurrency", 16, odc::Range::at_least(1));
  options.sampling.max_new_tokens = args.integer("--max-new-tokens", 64, odc::Range::at_least(1));
  options.sampling.temperature = args.number("--temperature", 1.0, odc::Range::above(0));
  options.sampling.top_p = args.number("--top-p", 1.0, odc::Range::above(0).and_at_most(1));
  options.sampling.top_k = args.integer("--top-k", 0, odc::Range::at_least(0));
  options.sampling.seed = args.integer<std::uint64_t>("--seed", 0);
  const std::string verifier_name = args.choice("--verifier", {"exact", "number"}, "exact");
  const auto reward_command = args.value("--reward-command");
  if (reward_command && args.value("--verifier")) throw args.usage_error("give --verifier or --reward-command, not both");
  if (reward_command && reward_command->find_first_not_of(" \t\r\n") == std::string::npos) {
    throw args.usage_error(fmt::format("--reward-command expects a command line, got '{}'", *reward_command));
  }
  const double reward_timeout = args.number("--reward-timeout", 300.0, odc::Range::above(0));
  if (!reward_command && args.value("--reward-timeout")) throw args.usage_error("--reward-timeout limits --reward-command, which is not given");
  const bool chat = args.flag("--chat");
  const std::string chat_template = args.choice("--chat-template", {"auto", "llama3", "chatml"}, "auto");
  const int threads = odc::cli::compute_threads(args);

  std::string tokenizer_path = args.value_or("--tokenizer", "");
  if (tokenizer_path.empty()) {
    tokenizer_path = (std::filesystem::path(model_dir) / "tokenizer.json").string();
    if (!std::filesystem::exists(tokenizer_path)) {
      odc::fail("{} has no tokenizer.json: pass --tokenizer PATH, or copy the tokenizer files into it", model_dir);
    }
  }
  const odc::data::PromptSet prompt_set(prompts_path, tokenizer_path,
                                         chat ? chat_template : std::string());
  const auto& prompts = prompt_set.prompts();
  const auto& tokenizer = prompt_set.tokenizer();
  odc::train::LoadedModel model(model_dir, threads);
  options.eos = model.eos_token_ids();
  for (const auto id : prompt_set.end_of_turn()) options.eos.push_back(id);
  options.stop = args.values("--stop");
  for (const auto& stop : options.stop) {
    if (stop.empty()) throw args.usage_error("--stop expects a non-empty string, got ''");
  }
  options.decode = [&tokenizer](std::span<const std::int32_t> ids) { return tokenizer.decode(ids, false); };
  options.model_name = fmt::format("the model in {}", model_dir);
  options.max_new_tokens_key = "--max-new-tokens";
  options.window_origin = odc::data::attention_window_origin(model_dir, "");
  options.stop_requested = [&signals] { return signals.requested(); };
  std::vector<std::vector<std::int32_t>> prompt_ids;
  for (const auto& p : prompts) {
    prompt_ids.push_back(p.ids);
    options.prompt_names.push_back(p.where);
  }

  // The reference (loaded first, so that a mismatch fails before any sampling): the policy's
  // tokenizer, and every sequence within its attention window too.
  std::optional<odc::train::LoadedModel> reference;
  if (const auto ref_dir = args.value("--ref-model")) {
    reference.emplace(*ref_dir, threads);
    check_reference(*reference, model, tokenizer_path);
    for (const auto& p : prompts) {
      odc::train::check_rollout_window(reference->config(), static_cast<std::int64_t>(p.ids.size()),
                                       options.sampling.max_new_tokens, p.where, "--max-new-tokens",
                                       odc::data::attention_window_origin(*ref_dir, ""));
    }
  }

  const auto start = std::chrono::steady_clock::now();
  const auto completions = odc::train::sample_rollouts(model.model(), model.params(), prompt_ids, options);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();

  // The reference policy's log-probabilities of every completion token: one forward per completion
  // over prompt + completion (its logits [tokens, vocab] on the host, one sequence at a time).
  std::vector<std::vector<float>> ref_logprobs;
  if (reference) {
    odc::train::ReferenceOptions ref;
    ref.temperature = options.sampling.temperature;
    ref.model_name = fmt::format("the reference model in {}", reference->dir());
    ref.overflow_note = ": its activations overflow or its weights are damaged; nothing written";
    ref.before_forward = [&signals] {
      if (signals.requested()) odc::fail("stopped by {} while the reference scored the completions: nothing written", signals.describe());
    };
    ref_logprobs = odc::train::reference_logprobs(reference->model(), reference->params(), completions, prompt_ids,
                                                  options.prompt_names, ref);
  }

  std::vector<std::string> texts;
  std::vector<const odc::data::Prompt*> scored_prompts;
  for (const auto& c : completions) {
    texts.push_back(tokenizer.decode(c.ids, false));
    scored_prompts.push_back(&prompts[static_cast<std::size_t>(c.prompt)]);
  }
  odc::train::Scorer scorer;
  if (reward_command) {
    const auto out_dir = std::filesystem::path(out_path).parent_path();
    scorer.command = odc::train::RewardCommand{*reward_command, reward_timeout, "--reward-timeout",
                                               out_dir.empty() ? std::filesystem::path(".") : out_dir,
                                               [&signals] { return signals.requested(); }};
  } else {
    scorer.verifier = odc::train::parse_verifier(verifier_name);
  }
  const auto rewards = odc::train::score_completions(scorer, texts, scored_prompts);
  if (!rewards) {
    odc::fail("stopped by {} while the reward command ran: it was killed with every process it started; nothing "
              "written", signals.describe());
  }
  std::vector<odc::data::RolloutRecord> kept;
  for (std::size_t i = 0; i < completions.size(); ++i) {
    const auto& c = completions[i];
    kept.push_back(odc::train::rollout_record(
        prompt_ids[static_cast<std::size_t>(c.prompt)], c.ids, c.logprobs, (*rewards)[i], c.prompt,
        options.sampling.temperature,
        ref_logprobs.empty() ? std::nullopt : std::optional<std::vector<float>>(ref_logprobs[i])));
  }
  const std::string records = odc::data::rollout_records_jsonl(kept);
  const auto summary = odc::train::rollout_stats(kept, {}, {});
  odc::write_file_atomically(out_path, records);
  const auto n = static_cast<double>(completions.size());
  const double tokens = summary.tokens;
  const nlohmann::json stats = {{"prompts", prompts.size()},      {"completions", completions.size()},
                                {"reward_mean", summary.reward_sum / n},  {"accuracy", summary.accuracy},
                                {"completion_tokens_mean", tokens / n}, {"seconds", seconds},
                                {"tokens_per_s", tokens / seconds}, {"out", out_path}};
  std::puts(stats.dump().c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  // SIGINT/SIGTERM stop the sampling, the reference's scoring or the reward command (killed with
  // what it started) at once, and exit 1 with nothing written; a second one ends the process.
  const odc::train::StopSignals signals;
  return odc::cli::run_tool("odc-rollout", [&] {
    odc::setup_logging(0, 1, "warn");
    return run(odc::cli::parse(command(), argc, argv), signals);
  });
}
