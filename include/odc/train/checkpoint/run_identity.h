#pragma once
// Which run a checkpoint belongs to, and where it descends from.
//
// A run is everything trained from one fresh start, over however many jobs (preemptions, resumes,
// a rollback, a change of world size). Its id is made at the fresh start and inherited by every
// job that resumes one of its checkpoints. Each job is a segment with an id of its own; a
// checkpoint records its run, its segment and the run's lineage: the checkpoints the run's jobs
// resumed from, oldest first. A checkpoint of the run is on a job's lineage when its segment is
// one the job descends from and its step is no later than where the job resumed that segment:
// the others belong to an abandoned branch (a rollback).
//
// The checkpoint directory belongs to one run: plan_directory decides, before a job trains, what
// the directory's other checkpoints mean for it — another run's are an error (the job would mix
// two runs, and auto-resume and pruning would follow the wrong one), an abandoned branch of this
// run is moved aside into DIR/retired/.
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace odc::train {

// A checkpoint a job resumed from.
struct ResumePoint {
  std::string run_id;   // its run ("" for an import or a checkpoint written before run ids)
  std::string segment;  // the job that wrote it ("" likewise)
  std::int64_t step = 0;
  std::string path;
  int world_size = 0;
  nlohmann::json to_json() const;
  static ResumePoint from_json(const nlohmann::json& json, const std::string& where);
};

struct RunIdentity {
  std::string run_id;
  std::string segment;               // this job's
  std::vector<ResumePoint> lineage;  // oldest first; empty for a fresh start
  nlohmann::json to_json() const;
  static RunIdentity from_json(const nlohmann::json& json, const std::string& where);
};

// "20250301T101502Z-3f9a0c21": the UTC time and 32 random bits (a run's id is its first
// segment's).
std::string new_segment_id();

// A fresh run.
RunIdentity fresh_identity();
// A job resuming `checkpoint` (its manifest): the checkpoint's run — or a fresh one for an import
// or a checkpoint without a run id — with the checkpoint appended to its lineage.
RunIdentity resumed_identity(const std::string& checkpoint, const nlohmann::json& manifest);

// Whether the checkpoint with `manifest` is on `identity`'s lineage (see above).
bool on_lineage(const nlohmann::json& manifest, const RunIdentity& identity);

// What the other checkpoints of `dir` mean for a job of `identity` resuming from `resume_path`
// (empty: a fresh start, which checkpoint.resume `never` or an empty directory gives).
//
// A damaged step-N directory (no manifest.json, or one that does not read or verify:
// io::scan_checkpoints) is no run's: after the resume point it is moved aside into
// DIR/retired/<damaged_name>/ (its step would be written again, and its shards are all that is left
// of it); at or before it, it stays where it is, with a warning. `never` counts it as a checkpoint
// the directory holds.
struct DirectoryPlan {
  std::string error;                  // non-empty: the job must not run in this directory
  std::vector<std::string> abandoned;  // this run's checkpoints off the lineage (to retire)
  std::string retire_name;            // DIR/retired/<retire_name>/
  std::vector<std::string> damaged;   // damaged step directories after the resume point (to retire)
  std::vector<std::string> damage;    // what is wrong with each of `damaged`
  std::string damaged_name;           // DIR/retired/<damaged_name>/
  std::vector<std::string> warnings;  // damaged step directories left in place, with what is wrong
};
DirectoryPlan plan_directory(const std::string& dir, const std::string& resume_setting,
                             const std::string& resume_path, std::int64_t resume_step, const RunIdentity& identity);

}  // namespace odc::train
