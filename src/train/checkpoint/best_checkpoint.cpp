#include "odc/train/checkpoint/best_checkpoint.h"

#include <filesystem>
#include <fstream>
#include <sstream>

#include "odc/core/atomic_file.h"
#include "odc/core/error.h"
#include "odc/io/native_checkpoint.h"

namespace odc::train {

namespace fs = std::filesystem;

nlohmann::json BestCheckpoint::to_json() const {
  return {{"run_id", run_id},
          {"step", step},
          {"checkpoint", io::checkpoint_name(step)},
          {"eval_loss", eval_loss},
          {"eval_perplexity", eval_perplexity},
          {"eval_tokens", eval_tokens}};
}

BestCheckpoint BestCheckpoint::from_json(const nlohmann::json& json, const std::string& where) {
  if (!json.is_object()) fail("{}: expected a JSON object, found {}", where, json.dump());
  BestCheckpoint best;
  try {
    best.run_id = json.at("run_id").get<std::string>();
    best.step = json.at("step").get<std::int64_t>();
    best.eval_loss = json.at("eval_loss").get<double>();
    best.eval_perplexity = json.at("eval_perplexity").get<double>();
    best.eval_tokens = json.value("eval_tokens", 0.0);
  } catch (const nlohmann::json::exception& e) {
    fail("{}: a best-checkpoint record needs run_id, step, eval_loss and eval_perplexity: {}", where, e.what());
  }
  return best;
}

std::string best_record_path(const std::string& dir) { return (fs::path(dir) / "best.json").string(); }

std::optional<BestCheckpoint> read_best_checkpoint(const std::string& dir, const std::string& run_id,
                                                   std::int64_t through_step) {
  const std::string path = best_record_path(dir);
  std::ifstream in(path);
  if (!in) return std::nullopt;
  std::stringstream text;
  text << in.rdbuf();
  nlohmann::json json;
  try {
    json = nlohmann::json::parse(text.str());
  } catch (const nlohmann::json::exception& e) {
    fail("'{}' is not valid JSON: {} (delete it to start the best-checkpoint record over)", path, e.what());
  }
  const BestCheckpoint best = BestCheckpoint::from_json(json, path);
  if (best.run_id != run_id || best.step > through_step) return std::nullopt;
  if (!fs::exists(fs::path(dir) / io::checkpoint_name(best.step) / "manifest.json")) return std::nullopt;
  return best;
}

void write_best_checkpoint(const std::string& dir, const BestCheckpoint& best) {
  write_file_atomically(best_record_path(dir), best.to_json().dump(2) + "\n");
}

}  // namespace odc::train
