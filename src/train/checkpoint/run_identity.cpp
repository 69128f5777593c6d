#include "odc/train/checkpoint/run_identity.h"

#include <chrono>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>

#include <fmt/format.h>

#include "odc/core/error.h"
#include "odc/io/native_checkpoint.h"

namespace odc::train {

namespace fs = std::filesystem;

namespace {

std::string text_field(const nlohmann::json& json, const char* key) {
  const auto it = json.find(key);
  return it != json.end() && it->is_string() ? it->get<std::string>() : std::string();
}

std::string canonical(const std::string& path) {
  std::error_code ec;
  const fs::path p = fs::weakly_canonical(fs::absolute(path), ec);
  return ec ? fs::absolute(path).lexically_normal().string() : p.string();
}

// Who wrote a checkpoint, in words: "run R", "an import of DIR", "a run without a run id".
std::string owner_of(const nlohmann::json& manifest) {
  if (const auto run = text_field(manifest, "run_id"); !run.empty()) return "run " + run;
  if (const auto from = text_field(manifest, "imported_from"); !from.empty()) return "an import of " + from;
  if (!manifest.is_object()) return "an unknown run (its manifest.json does not parse)";
  return "a run without a run id (written before run ids)";
}

std::string name_list(const std::vector<std::string>& paths) {
  std::string out;
  for (std::size_t i = 0; i < paths.size(); ++i) {
    if (i == 4 && paths.size() > 5) return out + fmt::format(", ... ({} in all)", paths.size());
    out += (i ? ", " : "") + fs::path(paths[i]).filename().string();
  }
  return out;
}

// "run A (step-00000050, step-00000060); an import of X (step-00000000)"
std::string describe_owners(const std::map<std::string, std::vector<std::string>>& by_owner) {
  std::string out;
  for (const auto& [owner, paths] : by_owner) out += fmt::format("{}{} ({})", out.empty() ? "" : "; ", owner, name_list(paths));
  return out;
}

}  // namespace

nlohmann::json ResumePoint::to_json() const {
  return {{"run_id", run_id}, {"segment", segment}, {"step", step}, {"path", path}, {"world_size", world_size}};
}

ResumePoint ResumePoint::from_json(const nlohmann::json& json, const std::string& where) {
  if (!json.is_object() || !json.contains("step") || !json["step"].is_number_integer()) {
    fail("checkpoint manifest '{}': a lineage entry without a step ({})", where, json.dump());
  }
  ResumePoint p;
  p.run_id = text_field(json, "run_id");
  p.segment = text_field(json, "segment");
  p.step = json["step"].get<std::int64_t>();
  p.path = text_field(json, "path");
  p.world_size = json.value("world_size", 0);
  return p;
}

nlohmann::json RunIdentity::to_json() const {
  nlohmann::json points = nlohmann::json::array();
  for (const auto& p : lineage) points.push_back(p.to_json());
  return {{"run_id", run_id}, {"segment", segment}, {"lineage", points}};
}

RunIdentity RunIdentity::from_json(const nlohmann::json& json, const std::string& where) {
  RunIdentity id;
  id.run_id = text_field(json, "run_id");
  id.segment = text_field(json, "segment");
  if (const auto it = json.find("lineage"); it != json.end()) {
    if (!it->is_array()) fail("checkpoint manifest '{}': 'lineage' must be an array, found {}", where, it->dump());
    for (const auto& p : *it) id.lineage.push_back(ResumePoint::from_json(p, where));
  }
  return id;
}

std::string new_segment_id() {
  const std::time_t now = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
  std::tm tm{};
  gmtime_r(&now, &tm);
  char time[24];
  std::strftime(time, sizeof time, "%Y%m%dT%H%M%SZ", &tm);
  std::random_device random;
  return fmt::format("{}-{:08x}", time, random());
}

RunIdentity fresh_identity() {
  RunIdentity id;
  id.segment = new_segment_id();
  id.run_id = id.segment;
  return id;
}

RunIdentity resumed_identity(const std::string& checkpoint, const nlohmann::json& manifest) {
  RunIdentity id = RunIdentity::from_json(manifest, checkpoint);
  ResumePoint point;
  point.run_id = id.run_id;
  point.segment = id.segment;
  point.step = manifest.at("step").get<std::int64_t>();
  point.path = canonical(checkpoint);
  point.world_size = manifest.at("world_size").get<int>();
  id.lineage.push_back(point);
  id.segment = new_segment_id();
  if (id.run_id.empty()) id.run_id = id.segment;  // an import or an old checkpoint starts a run
  return id;
}

bool on_lineage(const nlohmann::json& manifest, const RunIdentity& identity) {
  const std::string segment = text_field(manifest, "segment");
  if (segment.empty() || text_field(manifest, "run_id") != identity.run_id) return false;
  const std::int64_t step = manifest.value("step", std::int64_t{-1});
  for (const auto& point : identity.lineage) {
    if (point.segment == segment && step <= point.step) return true;
  }
  return false;
}

DirectoryPlan plan_directory(const std::string& dir, const std::string& resume_setting,
                             const std::string& resume_path, std::int64_t resume_step, const RunIdentity& identity) {
  DirectoryPlan plan;
  const std::string resumed = resume_path.empty() ? std::string() : canonical(resume_path);
  const bool inside = !resumed.empty() && fs::path(resumed).parent_path().string() == canonical(dir);
  std::map<std::string, std::vector<std::string>> all, foreign;
  for (const auto& entry : io::scan_checkpoints(dir)) {
    if (canonical(entry.path) == resumed) continue;
    if (!entry.damage.empty()) {
      all["damaged step directories"].push_back(entry.path);
      if (entry.step > resume_step) {
        plan.damaged.push_back(entry.path);
        plan.damage.push_back(entry.damage);
      } else {
        plan.warnings.push_back(fmt::format("{} is damaged and left where it is (it is no later than the resume "
                                            "point, so no step of this run writes it again): {}", entry.path,
                                            entry.damage));
      }
      continue;
    }
    std::ifstream in(fs::path(entry.path) / "manifest.json");
    const auto manifest = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
    const std::string owner = owner_of(manifest);
    all[owner].push_back(entry.path);
    const std::string run = manifest.is_object() ? text_field(manifest, "run_id") : std::string();
    if (run == identity.run_id && !run.empty()) {
      if (!on_lineage(manifest, identity)) plan.abandoned.push_back(entry.path);
    } else if (run.empty() && inside) {
      // An import or a checkpoint from before run ids, next to the one resumed: part of its past
      // if no later than it, else a branch the resume abandons.
      if (entry.step > resume_step) plan.abandoned.push_back(entry.path);
    } else {
      foreign[owner].push_back(entry.path);
    }
  }
  if (resume_setting == "never" && !all.empty()) {
    plan.error = fmt::format(
        "checkpoint.dir '{}' holds the checkpoints of {}, and checkpoint.resume is never: a new run there would mix "
        "with them (auto-resume and checkpoint.keep would then follow whichever step is newest); use a new "
        "checkpoint.dir for the new run, checkpoint.resume: auto to continue the one there, or move its checkpoints "
        "away",
        dir, describe_owners(all));
  } else if (!foreign.empty()) {
    plan.error = fmt::format(
        "checkpoint.dir '{}' holds the checkpoints of {}, but this job continues run {} (from '{}'): a checkpoint "
        "directory belongs to one run; use another checkpoint.dir, or move those checkpoints away",
        dir, describe_owners(foreign), identity.run_id, resume_path);
  }
  if (!plan.damaged.empty()) plan.damaged_name = fmt::format("damaged-{}", identity.segment);
  if (!plan.abandoned.empty()) plan.retire_name = fmt::format("after-{}-{}", io::checkpoint_name(resume_step), identity.segment);
  return plan;
}

}  // namespace odc::train
