// A default-constructed RunSettings is the settings of the default config, field by field: the
// fields take their defaults from the keys' declarations (core/key.h), so no default is written
// twice (tests/structure/check_keys.py refuses a literal there; this checks the values agree).
#include <string>

#include <catch2/catch.hpp>

#include "odc/core/key.h"
#include "odc/data/data_keys.h"
#include "odc/distributed/transport/transport_keys.h"
#include "odc/model/model_keys.h"
#include "odc/train/config/config_schema.h"
#include "odc/train/config/run_settings.h"

using namespace odc;

TEST_CASE("settings defaults: a default RunSettings equals the default config's, field by field",
          "[train][config][settings]") {
  const train::RunSettings d;
  const train::RunSettings r = train::resolve_run_settings(Config(train::trainer_tunables()), false);
  // model
  CHECK(d.model.checkpoint == r.model.checkpoint);
  CHECK(d.model.device == r.model.device);
  CHECK(d.model.dtype == r.model.dtype);
  CHECK(d.model.attention == r.model.attention);
  CHECK(d.model.cudnn_workspace_mib == r.model.cudnn_workspace_mib);
  CHECK(d.model.seed == r.model.seed);
  // objective
  CHECK(d.objective.grpo == r.objective.grpo);
  CHECK(d.objective.policy.clip_low == r.objective.policy.clip_low);
  CHECK(d.objective.policy.clip_high == r.objective.policy.clip_high);
  CHECK(d.objective.policy.kl_beta == r.objective.policy.kl_beta);
  CHECK(d.objective.policy.kl_ratio_weighted == r.objective.policy.kl_ratio_weighted);
  CHECK(d.objective.policy.temperature == r.objective.policy.temperature);
  CHECK(d.objective.aggregation == r.objective.aggregation);
  CHECK(d.objective.max_completion_length == r.objective.max_completion_length);
  CHECK(d.objective.scale_rewards == r.objective.scale_rewards);
  CHECK(d.objective.entropy == r.objective.entropy);
  // rl
  CHECK(d.rl.prompts == r.rl.prompts);
  CHECK(d.rl.iterations == r.rl.iterations);
  CHECK(d.rl.prompts_per_iteration == r.rl.prompts_per_iteration);
  CHECK(d.rl.group_size == r.rl.group_size);
  CHECK(d.rl.epochs == r.rl.epochs);
  CHECK(d.rl.max_new_tokens == r.rl.max_new_tokens);
  CHECK(d.rl.top_p == r.rl.top_p);
  CHECK(d.rl.top_k == r.rl.top_k);
  CHECK(d.rl.stop == r.rl.stop);
  CHECK(d.rl.seed == r.rl.seed);
  CHECK(d.rl.concurrency == r.rl.concurrency);
  CHECK(d.rl.verifier == r.rl.verifier);
  CHECK(d.rl.reward_command == r.rl.reward_command);
  CHECK(d.rl.reward_timeout_s == r.rl.reward_timeout_s);
  CHECK(d.rl.chat == r.rl.chat);
  // train
  CHECK(d.train.threads == r.train.threads);
  CHECK(d.train.sharding == r.train.sharding);
  CHECK(d.train.recompute == r.train.recompute);
  CHECK(d.train.context_parallel == r.train.context_parallel);
  CHECK(d.train.context_degree == r.train.context_degree);
  CHECK(d.train.beta1 == r.train.beta1);
  CHECK(d.train.beta2 == r.train.beta2);
  CHECK(d.train.eps == r.train.eps);
  CHECK(d.train.weight_decay == r.train.weight_decay);
  CHECK(d.train.grad_clip == r.train.grad_clip);
  CHECK(d.train.peak_flops == r.train.peak_flops);
  CHECK(d.train.memory_budget_gib == r.train.memory_budget_gib);
  CHECK(d.train.trace_file == r.train.trace_file);
  CHECK(d.train.trace_steps == r.train.trace_steps);
  CHECK(d.train.stop_at_step == r.train.stop_at_step);
  CHECK(d.train.sequence_loss == r.train.sequence_loss);
  CHECK(d.train.within_epochs == r.train.within_epochs);
  CHECK(d.train.metrics_file == r.train.metrics_file);
  CHECK(d.train.log_every == r.train.log_every);
  CHECK(d.train.eval_every == r.train.eval_every);
  // data
  CHECK(d.data.format == r.data.format);
  CHECK(d.data.tokenizer == r.data.tokenizer);
  CHECK(d.data.auto_token_cap == r.data.auto_token_cap);
  CHECK(d.data.max_tokens_per_microbatch == r.data.max_tokens_per_microbatch);
  CHECK(d.data.train == r.data.train);
  CHECK(d.data.balance == r.data.balance);
  CHECK(d.data.max_length == r.data.max_length);
  CHECK(d.data.over_length == r.data.over_length);
  CHECK(d.data.chat_template == r.data.chat_template);
  CHECK(d.data.ignore_extra_fields == r.data.ignore_extra_fields);
  CHECK(d.data.eval == r.data.eval);
  CHECK(d.data.eval_max_sequences == r.data.eval_max_sequences);
  CHECK(d.data.seed == r.data.seed);
  CHECK(d.data.shuffle == r.data.shuffle);
  // comm
  CHECK(d.comm.kind == r.comm.kind);
  CHECK(d.comm.odc_transport == r.comm.odc_transport);
  CHECK(d.comm.gather_dtype == r.comm.gather_dtype);
  CHECK(d.comm.deterministic == r.comm.deterministic);
  CHECK(d.comm.host_staging == r.comm.host_staging);
  CHECK(d.comm.transport.chunk_bytes == r.comm.transport.chunk_bytes);
  CHECK(d.comm.transport.network_chunk_bytes == r.comm.transport.network_chunk_bytes);
  CHECK(d.comm.transport.max_inflight == r.comm.transport.max_inflight);
  CHECK(d.comm.transport.timeout_s == r.comm.transport.timeout_s);
  CHECK(d.comm.transport.direct_load == r.comm.transport.direct_load);
  CHECK(d.comm.transport.gather_protocol == r.comm.transport.gather_protocol);
  // checkpoint
  CHECK(d.checkpoint.dir == r.checkpoint.dir);
  CHECK(d.checkpoint.resume == r.checkpoint.resume);
  CHECK(d.checkpoint.export_hf == r.checkpoint.export_hf);
  CHECK(d.checkpoint.every == r.checkpoint.every);
  CHECK(d.checkpoint.keep == r.checkpoint.keep);
  CHECK(d.checkpoint.save_best == r.checkpoint.save_best);
  CHECK(d.checkpoint.accept_manifest_without_checksum == r.checkpoint.accept_manifest_without_checksum);
  // debug
  CHECK(d.debug.ranks_per_host == r.debug.ranks_per_host);
  CHECK(d.debug.slow_rank == r.debug.slow_rank);
  CHECK(d.debug.delay_ms == r.debug.delay_ms);
  CHECK(d.debug.checkpoint_delay_ms == r.debug.checkpoint_delay_ms);
  CHECK(d.debug.checkpoint_delay_rank == r.debug.checkpoint_delay_rank);
}

TEST_CASE("settings defaults: a key's typed default is what its YAML text reads as", "[train][config][settings]") {
  // Numbers are declared as text (number("3.0e-3")); the dump keeps the text, the settings the value.
  const Config config(train::trainer_tunables());
  CHECK(config.get_double("train.lr") == keys::train_lr.default_value());
  CHECK(config.get_double("train.eps") == keys::train_eps.default_value());
  CHECK(config.get_double("data.packing_ratio") == keys::data_packing_ratio.default_value());
  CHECK(keys::train_lr.spec().default_value == "3.0e-3");
  CHECK(keys::data_eval.spec().default_value == "\"\"");
  CHECK_FALSE(keys::train_steps.has_default());
  CHECK(keys::train_steps.spec().default_value.empty());
  CHECK_THROWS_WITH(keys::train_steps.default_value(), Catch::Matchers::Contains("'train.steps' has no default"));
  // A second tool's default is written beside the first, same path: odc-sim's data.max_length.
  CHECK(keys::data_max_length_sim.path() == keys::data_max_length.path());
  CHECK(keys::data_max_length_sim.default_value() != keys::data_max_length.default_value());
}

TEST_CASE("settings defaults: comm.chunk_bytes is checked once, with the key's bound", "[train][config][settings]") {
  CHECK(keys::comm_chunk_bytes.spec().range.text() == ">= 4096");
  distributed::TransportOptions options;
  CHECK_NOTHROW(options.validate());
  options.chunk_bytes = distributed::kMinChunkBytes - 1;
  CHECK_THROWS_WITH(options.validate(), Catch::Matchers::Contains("comm.chunk_bytes must be at least 4096, found 4095"));
  CHECK_NOTHROW(options.validate(4));  // the ipc transport takes messages of a float (code, not config)
}

TEST_CASE("settings defaults: a variant's default leaves its key's alone (YAML maps share trees)", "[train][config][settings]") {
  // model_config_sim is a variant of model_config: odc-sim's model, the trainer's demo model.
  CHECK(keys::model_config.default_value()["hidden_size"].as<int>() == 256);
  CHECK(keys::model_config_sim.default_value()["hidden_size"].as<int>() == 1536);
}
