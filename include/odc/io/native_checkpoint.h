#pragma once
// Native training checkpoints: everything needed to continue a run exactly, per rank its shards.
//
//   DIR/step-00000120/manifest.json        step, world size, comm, sampler position, the config,
//                                          model config and data fingerprint, and per rank the
//                                          file, its size and checksum
//   DIR/step-00000120/rank-00000.safetensors   this rank's fp32 master shards and AdamW moments
//                                          ("masters", "exp_avg", "exp_avg_sq": the owned
//                                          elements of every unit, back to back)
//
// Commit protocol: every rank writes its file (and a small sidecar with its checksum) into
// DIR/.partial-step-N/, each file fsynced; after a barrier rank 0 writes the manifest, fsyncs the
// directory and renames it to DIR/step-N, then fsyncs DIR. A crash at any point leaves either no
// step-N or a complete one, and every older checkpoint untouched; partial directories are
// ignored by the search and removed by the next commit. Rank 0 then prunes to the newest K of the
// same run (manifests with the same "run_id"): checkpoints of other runs are never touched.
//
//   DIR/retired/<name>/step-N/             checkpoints moved out of the way (an abandoned branch
//                                          after a rollback, a damaged checkpoint the user chose to
//                                          resume past, a step directory a commit would replace),
//                                          never searched, never pruned
//
// The manifest checks itself: "manifest_checksum" is FNV-1a over its canonical JSON without that
// field, so an edit of any value (a sampler position, a step, a shard's checksum) is detected
// when it is read. A manifest written before it had one reads with has_manifest_checksum false.
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

namespace odc::io {

inline constexpr int kNativeCheckpointVersion = 1;
// The tensors of a rank's file, in file order (its checksum runs over their bytes in this order).
inline constexpr const char* kRankTensorNames[3] = {"masters", "exp_avg", "exp_avg_sq"};

// "step-00000120"
std::string checkpoint_name(std::int64_t step);
// The step a directory name stands for: "step-00000120" -> 120; any other name -> -1.
std::int64_t checkpoint_step(const std::string& name);
// DIR/.partial-step-00000120 (created by every rank before writing).
std::string staging_path(const std::string& dir, std::int64_t step);

// The state a rank saves: spans over its contiguous shard buffers (all the same length).
struct RankShards {
  std::span<const float> masters;
  std::span<const float> exp_avg;
  std::span<const float> exp_avg_sq;
};

// Writes rank `rank`'s file and checksum sidecar into the staging directory (creating it).
void write_rank_shards(const std::string& staging, int rank, const RankShards& shards);

// Rank 0, after every rank wrote: completes `manifest` with the per-rank files (read from the
// sidecars; odc::Error naming a missing rank) and its checksum, writes it, commits (rename; a
// step-N directory already there is moved to DIR/retired/replaced-step-N, with a warning, never
// overwritten) and prunes the
// directory to the newest `keep` checkpoints whose "run_id" is the manifest's (keep <= 0 keeps
// all), never removing the checkpoint of `protect_step` (the run's best one, which then stays as
// one more). Returns the final path.
std::string commit_checkpoint(const std::string& dir, std::int64_t step, int world_size, nlohmann::json manifest,
                              int keep, std::optional<std::int64_t> protect_step = std::nullopt);

// The complete checkpoints under `dir` (step-N directories holding a manifest.json), oldest first.
struct CheckpointEntry {
  std::int64_t step = 0;
  std::string path;
};
std::vector<CheckpointEntry> list_checkpoints(const std::string& dir);

// Moves `checkpoints` (paths of step-N directories inside `dir`) into `dir`/retired/`name`/
// (a fresh name: "-2", "-3", ... appended if taken), fsyncing both directories. Returns the
// directory they are in now.
std::string retire_checkpoints(const std::string& dir, const std::vector<std::string>& checkpoints,
                               const std::string& name);

// The newest complete checkpoint under `dir` (a step-N directory with a readable manifest), if any.
std::optional<std::string> latest_checkpoint(const std::string& dir);

// Every step-N directory under `dir`, oldest first, and what is wrong with it: `damage` is empty
// for a checkpoint whose manifest reads and verifies, else the reason (no manifest.json, not
// JSON, a checksum or field that does not match). Shards are not read.
struct CheckpointStatus {
  std::int64_t step = 0;
  std::string path;
  std::string damage;
};
std::vector<CheckpointStatus> scan_checkpoints(const std::string& dir);

// The newest checkpoint next to `checkpoint` (same directory) with an earlier step whose manifest
// reads and verifies, if any: what to suggest resuming from when `checkpoint` is damaged.
std::optional<std::string> previous_checkpoint(const std::string& checkpoint);
// "; to resume from the previous good checkpoint instead: --set checkpoint.resume=PATH" (or that
// there is none): appended to the errors of a damaged checkpoint.
std::string previous_checkpoint_hint(const std::string& checkpoint);

// The manifest's own checksum ("fnv1a64:" and 16 hex digits) over its canonical JSON (keys
// sorted, no spaces) without the "manifest_checksum" field; commit_checkpoint stores it there.
inline constexpr const char* kManifestChecksumKey = "manifest_checksum";
std::string manifest_checksum(const nlohmann::json& manifest);
bool has_manifest_checksum(const nlohmann::json& manifest);

// Every reader's check of a manifest without "manifest_checksum" (written before manifests carried
// one, or the field deleted along with an edit, which then goes undetected; a reader that signs
// what it writes would hide the edit for good): refused unless the user opted in, then read with a
// warning (when `warn`: the caller's rank 0). A manifest with its checksum passes silently.
struct ManifestChecksumOptIn {
  bool accept = false;          // the user opted in
  std::string_view name;        // the key or option that opts in: "--accept-manifest-without-checksum"
  std::string_view how;         // what to type: "--set checkpoint.accept_manifest_without_checksum=true"
  std::string_view use;         // what the reader does with it: "resume", "reshard"
  std::string_view note;        // what follows: "the next checkpoint will have one"
  std::string hint;             // appended to the refusal: where else to go (previous_checkpoint_hint)
  bool warn = true;
};
void check_manifest_checksum_present(const std::string& checkpoint, const nlohmann::json& manifest,
                                     const ManifestChecksumOptIn& opt_in);

// Reads and validates a checkpoint's manifest (version, fields and their consistency: the rank
// list against world_size, the step against the directory's name, the manifest's checksum);
// odc::Error naming the path and saying that it is damaged.
nlohmann::json read_manifest(const std::string& checkpoint);

// Reads rank `rank`'s shards into the given buffers, checking the file's size and checksum
// against the manifest and each tensor's length against the buffers. A damaged file is an error
// naming it and the previous good checkpoint to resume from (previous_checkpoint_hint).
struct RankShardsOut {
  std::span<float> masters;
  std::span<float> exp_avg;
  std::span<float> exp_avg_sq;
};
void read_rank_shards(const std::string& checkpoint, const nlohmann::json& manifest, int rank,
                      const RankShardsOut& out);

// Elements [from, from + count) of each of a rank file's three tensors, copied to [to, to + count)
// of the same kind's target.
struct ShardCopy {
  std::int64_t from = 0;
  std::int64_t to = 0;
  std::int64_t count = 0;
};
// Reads the pieces `copies` (disjoint in the file) of rank `rank`'s file, whose tensors hold
// `file_elements` each, into `out`, checking the whole file as read_rank_shards does (the
// checksum over every byte, every value finite). The file streams through in bounded pieces: the
// elements no copy needs are checked, never held (resharding reads only its windows of an old
// rank's state).
void read_rank_shard_pieces(const std::string& checkpoint, const nlohmann::json& manifest, int rank,
                            std::int64_t file_elements, const std::vector<ShardCopy>& copies, const RankShardsOut& out);

}  // namespace odc::io
