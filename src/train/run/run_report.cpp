#include "odc/train/run/run_report.h"

#include <algorithm>
#include <array>
#include <vector>

#include <fmt/format.h>

#include <spdlog/spdlog.h>

#include "odc/core/peak_cache.h"
#include "odc/core/process_stats.h"

namespace odc::train {

namespace {
double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

constexpr std::size_t kSummaryFields = 8;

// The summary table rank 0 prints at the end: one row per rank and a total row.
std::string format_rank_table(const std::vector<RankTotals>& ranks) {
  std::string out = fmt::format("{:>6} {:>9} {:>10} {:>10} {:>10} {:>10} {:>10} {:>9} {:>8}\n", "rank", "microbat.",
                                "compute s", "gather s", "push s", "barrier s", "optim. s", "busy %", "GFLOP/s");
  RankTotals total;
  auto row = [&](const std::string& label, const RankTotals& r) {
    const double minibatch = r.compute_s + r.gather_s + r.push_s + r.barrier_s;
    out += fmt::format("{:>6} {:>9.0f} {:>10.2f} {:>10.2f} {:>10.2f} {:>10.2f} {:>10.2f} {:>8.1f}% {:>8.2f}\n", label,
                       r.microbatches, r.compute_s, r.gather_s, r.push_s, r.barrier_s, r.optimizer_s,
                       minibatch > 0 ? 100.0 * r.compute_s / minibatch : 0.0,
                       r.compute_s > 0 ? r.flops / r.compute_s / 1e9 : 0.0);
  };
  for (std::size_t i = 0; i < ranks.size(); ++i) {
    row(std::to_string(i), ranks[i]);
    total.compute_s += ranks[i].compute_s;
    total.gather_s += ranks[i].gather_s;
    total.push_s += ranks[i].push_s;
    total.barrier_s += ranks[i].barrier_s;
    total.optimizer_s += ranks[i].optimizer_s;
    total.microbatches += ranks[i].microbatches;
    total.tokens += ranks[i].tokens;
    total.flops += ranks[i].flops;
  }
  if (ranks.size() > 1) row("all", total);
  return out;
}
}  // namespace

std::string mfu_above_peak_warning(double mfu, double peak_flops, bool from_config) {
  if (!(mfu > 1.0)) return "";
  if (from_config) {
    return fmt::format("MFU {:.1f}% is above 100%: train.peak_flops = {:.4g} FLOP/s per rank is below what this run "
                       "achieves; set train.peak_flops to the device's peak FLOP/s per rank",
                       100.0 * mfu, peak_flops);
  }
  const std::string cache = peak_cache_path();
  return fmt::format("MFU {:.1f}% is above 100%: the measured peak of {:.1f} GFLOP/s per rank was underestimated (the "
                     "start-up measurement lost time to other load on the machine); set train.peak_flops to the "
                     "device's peak FLOP/s per rank, or run again: {}",
                     100.0 * mfu, peak_flops / 1e9,
                     cache.empty() ? std::string("a peak cache (ODC_PEAK_CACHE, else ~/.cache/odc/cpu-peak.json) "
                                                 "keeps the best measurement")
                                   : fmt::format("the best measurement in {} only rises", cache));
}

RunReport::RunReport(const TrainSettings& train, distributed::HostGroup& group, double peak_flops, double gemm_flops,
                     std::int64_t resumed_step, const std::vector<std::string>& unwritten_metrics)
    : group_(group),
      metrics_(rank_output_path(train.metrics_file, group.rank()), resumed_step, unwritten_metrics),
      // rank 0 writes the one trace: "tr-{rank}.json" is tr-0.json, as the metrics file would be
      trace_path_(rank_output_path(train.trace_file, 0)),
      peak_flops_(peak_flops),
      gemm_flops_(gemm_flops),
      peak_from_config_(train.peak_flops > 0),
      log_every_(train.log_every) {}

std::map<int, std::vector<std::string>> RunReport::gather_unwritten_metrics() const {
  std::string mine;
  for (const auto& line : metrics_.unwritten()) mine += line + '\n';  // a JSON line holds no newline
  const auto all = group_.gather_text(mine, "the metrics lines that could not be written");
  std::map<int, std::vector<std::string>> out;
  for (std::size_t r = 0; r < all.size(); ++r) {
    for (std::size_t at = 0, end; (end = all[r].find('\n', at)) != std::string::npos; at = end + 1) {
      out[static_cast<int>(r)].push_back(all[r].substr(at, end - at));
    }
  }
  return out;
}

void RunReport::check_mfu(double mfu) const {
  if (warned_mfu_ || !group_.is_root()) return;
  const std::string warning = mfu_above_peak_warning(mfu, peak_flops_, peak_from_config_);
  if (warning.empty()) return;
  spdlog::warn("{}", warning);
  warned_mfu_ = true;
}

void RunReport::begin_run(std::int64_t first_step, std::int64_t last_step, std::int64_t total_steps) {
  first_ = first_step;
  last_ = last_step;
  total_ = total_steps;
  start_ = std::chrono::steady_clock::now();
}

void RunReport::record_eval(const EvalSummary& eval, double seconds) {
  if (group_.is_root()) {
    spdlog::info("eval after step {}: loss {:.6f}, perplexity {:.4f}, {} tokens ({} sequences, {:.2f} s)", eval.step,
                 eval.loss, eval.perplexity, static_cast<std::int64_t>(eval.tokens), eval.sequences, seconds);
  }
  if (!metrics_.enabled()) return;
  metrics_.write({{"step", eval.step},
                  {"eval_loss", eval.loss},
                  {"eval_perplexity", eval.perplexity},
                  {"eval_tokens", eval.tokens},
                  {"eval_sequences", eval.sequences},
                  {"eval_s", seconds},
                  {"rank", group_.rank()},
                  {"world_size", group_.size()}});
}

void RunReport::record_rollouts(const nlohmann::json& stats) {
  if (group_.is_root()) {
    // Two spreads: over all rewards, and within each prompt's group, which is all that advantages see
    // (groups of equal rewards give advantage 0 whatever the spread over all).
    spdlog::info("iteration {}: {} rollouts, reward {:.4f} (std {:.4f} over all rewards, {:.4f} within groups; {} of {} "
                 "groups with equal rewards, advantage 0), accuracy {:.4f}, completions {:.1f} tokens "
                 "({}-{}, {:.0f}% ended), sampled in {:.2f} s ({:.0f} tokens/s)",
                 stats.at("iteration").get<std::int64_t>(), stats.at("rollouts").get<std::int64_t>(),
                 stats.at("reward_mean").get<double>(), stats.at("reward_std").get<double>(),
                 stats.value("reward_std_within_groups", 0.0), stats.value("groups_equal_rewards", 0),
                 stats.at("prompts").get<std::int64_t>(),
                 stats.at("accuracy").get<double>(), stats.at("completion_tokens_mean").get<double>(),
                 stats.at("completion_tokens_min").get<std::int64_t>(),
                 stats.at("completion_tokens_max").get<std::int64_t>(), 100.0 * (stats.at("eos_fraction").get<double>() + stats.value("stop_fraction", 0.0)),
                 stats.at("rollout_s").get<double>(), stats.at("completion_tokens_per_s").get<double>());
  }
  if (!metrics_.enabled()) return;
  nlohmann::json line = stats;
  line["rank"] = group_.rank();
  line["world_size"] = group_.size();
  metrics_.write(line);
}

void RunReport::record(const StepResult& r, const StepContext& context) {
  if (steps_ == 0) first_loss_ = r.loss;
  last_loss_ = r.loss;
  bubble_planned_sum_ += r.bubble_planned;
  ++steps_;
  sequences_ += r.sequences;
  totals_.compute_s += r.compute_s;
  totals_.gather_s += r.wait_gather_s;
  totals_.push_s += r.wait_push_s;
  totals_.barrier_s += r.wait_barrier_s;
  totals_.optimizer_s += r.optimizer_s;
  totals_.microbatches += r.microbatches;
  totals_.tokens += r.local_tokens;
  totals_.flops += r.flops;
  if (!metrics_.enabled()) return;
  const ProcessStats process = read_process_stats();
  nlohmann::json line = {{"step", r.step + 1},
                  {"loss", r.loss},
                  {"lr", r.lr},
                  {"grad_norm", r.grad_norm},
                  {"sequences", r.sequences},
                  {"tokens", r.tokens},
                  {"target_tokens", r.target_tokens},
                  {"tokens_per_s", r.tokens / r.seconds},
                  {"samples_per_s_per_rank", static_cast<double>(r.sequences) / group_.size() / r.seconds},
                  {"mfu", r.mfu},
                  {"gemm_fraction", r.gemm_fraction},
                  {"flops", r.flops},
                  {"microbatches", r.microbatches},
                  {"bubble_planned", r.bubble_planned},
                  {"planned_cost", r.planned_cost},
                  {"planned_cost_max", r.planned_cost_max},
                  {"planned_makespan", r.planned_makespan},
                  {"bubble_measured", r.bubble_measured},
                  {"padded_microbatches", r.padded_microbatches},
                  {"split_microbatches", r.split_microbatches},
                  {"context_exchange_s", r.context_exchange_s},
                  {"rank", group_.rank()},
                  {"world_size", group_.size()},
                  {"param_state_bytes", context.param_state_bytes},
                  {"compute_s", r.compute_s},
                  {"wait_gather_s", r.wait_gather_s},
                  {"wait_push_s", r.wait_push_s},
                  {"wait_barrier_s", r.wait_barrier_s},
                  {"wait_in_loop_s", r.wait_in_loop_s},
                  {"wait_end_s", r.wait_end_s},
                  {"optimizer_s", r.optimizer_s},
                  {"comm_thread_cpu_s", r.comm_thread_cpu_s},
                  {"peak_rss_bytes", process.peak_rss_bytes},
                  {"rss_bytes", process.rss_bytes},
                  {"pinned_bytes", process.pinned_bytes},
                  {"open_fds", process.open_fds},
                  {"threads", process.threads},
                  {"registered_bytes", context.comm.registered_bytes},
                  {"ucx_endpoints", context.comm.endpoints},
                  {"minibatch_time_s", r.minibatch_s},
                  {"step_time_s", r.seconds},
                  {"epoch", context.epoch}};
  if (r.policy.on) {
    line["policy"] = {{"nll", r.policy.nll},           {"entropy", r.policy.entropy},
                      {"kl", r.policy.kl},             {"ratio_mean", r.policy.ratio_mean},
                      {"ratio_min", r.policy.ratio_min}, {"ratio_max", r.policy.ratio_max},
                      {"clip_low", r.policy.clip_low}, {"clip_high", r.policy.clip_high}};
  }
  metrics_.write(line);
}

void RunReport::progress(const StepResult& r) {
  const std::int64_t done = r.step + 1;
  if (done % log_every_ != 0 && done != last_) return;
  const double elapsed = seconds_since(start_);
  const double eta = elapsed / static_cast<double>(done - first_) * static_cast<double>(last_ - done);
  check_mfu(r.mfu);
  spdlog::info("step {:>5}/{} | loss {:.4f} | lr {:.2e} | grad norm {:.3f} | batch {} seq {:.0f} tok | {:.0f} tok/s | "
               "MFU {:.1f}% | bubble {:.1f}% (planned {:.1f}%) | ETA {}{}",
               done, total_, r.loss, r.lr, r.grad_norm, r.sequences, r.tokens, r.tokens / r.seconds, 100.0 * r.mfu,
               100.0 * r.bubble_measured, 100.0 * r.bubble_planned, format_duration(eta),
               r.padded_microbatches_global > 0 ? fmt::format(" | {} padding microbatch(es)", r.padded_microbatches_global)
                                                : std::string());
  if (r.policy.on) {
    spdlog::info("step {:>5}/{} | policy: nll {:.4f} | entropy {:.3f} | kl {:.2e} | ratio {:.3f} [{:.3f}, {:.3f}] | "
                 "clipped {:.1f}% low, {:.1f}% high",
                 done, total_, r.policy.nll, r.policy.entropy, r.policy.kl, r.policy.ratio_mean, r.policy.ratio_min,
                 r.policy.ratio_max, 100.0 * r.policy.clip_low, 100.0 * r.policy.clip_high);
  }
}

void RunReport::summary(double param_state_bytes) const {
  if (steps_ == 0) return;
  const double elapsed = seconds_since(start_);
  const std::array<double, kSummaryFields> mine{totals_.compute_s, totals_.gather_s, totals_.push_s,
                                                totals_.barrier_s, totals_.optimizer_s, totals_.microbatches,
                                                totals_.tokens, totals_.flops};
  std::vector<double> all(group_.is_root() ? kSummaryFields * static_cast<std::size_t>(group_.size()) : 0);
  group_.gather_values<double>(mine, all, "the end-of-run summary");
  if (!group_.is_root()) return;
  std::vector<RankTotals> ranks(static_cast<std::size_t>(group_.size()));
  double flops = 0.0, tokens = 0.0, waits = 0.0, minibatch = 0.0;
  for (std::size_t r = 0; r < ranks.size(); ++r) {
    const double* v = all.data() + r * kSummaryFields;
    ranks[r] = RankTotals{v[0], v[1], v[2], v[3], v[4], v[5], v[6], v[7]};
    flops += v[7];
    tokens += v[6];
    waits += v[1] + v[2] + v[3];
    minibatch += v[0] + v[1] + v[2] + v[3];
  }
  const double steps = static_cast<double>(steps_);
  const double achieved = flops / (static_cast<double>(group_.size()) * elapsed);  // per rank
  if (peak_flops_ > 0) check_mfu(achieved / peak_flops_);
  spdlog::info("done: {} steps in {}, {:.0f} tokens/s, {:.3f} samples/s per rank, MFU {:.1f}% (of {:.1f} GFLOP/s "
               "per rank){}, bubble {:.1f}% measured / {:.1f}% planned, loss {:.4f} -> {:.4f}; this rank holds {:.1f} MiB "
               "of parameter + optimizer shards, peak RSS {:.1f} MiB\n{}",
               steps_, format_duration(elapsed), tokens / elapsed, static_cast<double>(sequences_) / group_.size() / elapsed,
               100.0 * achieved / peak_flops_, peak_flops_ / 1e9,
               gemm_flops_ > 0 ? fmt::format(", {:.1f}% of the measured GEMM rate ({:.1f} GFLOP/s)",
                                             100.0 * achieved / gemm_flops_, gemm_flops_ / 1e9)
                               : std::string(),
               minibatch > 0 ? 100.0 * waits / minibatch : 0.0, 100.0 * bubble_planned_sum_ / steps, first_loss_,
               last_loss_, param_state_bytes / 1048576.0,
               static_cast<double>(read_process_stats().peak_rss_bytes) / 1048576.0, format_rank_table(ranks));
}

void RunReport::write_trace(const Tracer& tracer, const nlohmann::json& other) const {
  const auto parts = group_.gather_text(tracer.events().dump(), "the trace gather");
  if (!group_.is_root()) return;
  nlohmann::json events = nlohmann::json::array();
  for (const auto& part : parts) {
    for (auto& event : nlohmann::json::parse(part)) events.push_back(std::move(event));
  }
  write_chrome_trace(trace_path_, events, other);
  spdlog::info("trace: {} events from {} rank(s) written to {} (open in https://ui.perfetto.dev)", events.size(),
               group_.size(), trace_path_);
}

StepResult::Policy reduce_policy_metrics(distributed::HostGroup& group, const kernels::PolicyLossSums& local, double nll) {
  const auto world = static_cast<std::size_t>(group.size());
  const auto rank = static_cast<std::size_t>(group.rank());
  std::vector<double> sums(7 + 3 * world, 0.0);
  sums[0] = local.tokens;
  sums[1] = nll;
  sums[2] = local.entropy;
  sums[3] = local.kl;
  sums[4] = local.ratio;
  sums[5] = local.clipped_low;
  sums[6] = local.clipped_high;
  sums[7 + 3 * rank] = local.tokens > 0 ? 1.0 : 0.0;
  sums[8 + 3 * rank] = local.tokens > 0 ? local.ratio_min : 0.0;
  sums[9 + 3 * rank] = local.tokens > 0 ? local.ratio_max : 0.0;
  group.all_reduce_sum(sums, "the minibatch-end policy statistics");
  StepResult::Policy p;
  p.on = true;
  const double tokens = sums[0];
  if (tokens == 0) return p;
  p.nll = sums[1] / tokens;
  p.entropy = sums[2] / tokens;
  p.kl = sums[3] / tokens;
  p.ratio_mean = sums[4] / tokens;
  p.clip_low = sums[5] / tokens;
  p.clip_high = sums[6] / tokens;
  bool first = true;
  for (std::size_t r = 0; r < world; ++r) {
    if (sums[7 + 3 * r] == 0) continue;
    p.ratio_min = first ? sums[8 + 3 * r] : std::min(p.ratio_min, sums[8 + 3 * r]);
    p.ratio_max = first ? sums[9 + 3 * r] : std::max(p.ratio_max, sums[9 + 3 * r]);
    first = false;
  }
  return p;
}

}  // namespace odc::train
