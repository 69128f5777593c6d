#include "odc/io/native_checkpoint.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <fmt/format.h>

#include <spdlog/spdlog.h>

#include "odc/core/atomic_file.h"
#include "odc/core/error.h"
#include "odc/core/hash.h"
#include "odc/io/safetensors.h"
#include "odc/io/safetensors_writer.h"

namespace odc::io {

namespace fs = std::filesystem;

namespace {

constexpr const char* kStepPrefix = "step-";
constexpr const char* kPartialPrefix = ".partial-step-";
constexpr const auto& kTensorNames = kRankTensorNames;

// At most kExcerptChars of `text` (cut at a UTF-8 character boundary): a JSON parser's message
// quotes what it read last, which for a manifest cut inside its config is thousands of characters.
constexpr std::size_t kExcerptChars = 200;
std::string excerpt(const std::string& text) {
  if (text.size() <= kExcerptChars) return text;
  std::size_t cut = kExcerptChars;
  while (cut > 0 && (static_cast<unsigned char>(text[cut]) & 0xC0) == 0x80) --cut;
  return fmt::format("{}... ({} more characters)", text.substr(0, cut), text.size() - cut);
}

std::string rank_file(int rank) { return fmt::format("rank-{:05}.safetensors", rank); }
std::string rank_sidecar(int rank) { return fmt::format("rank-{:05}.json", rank); }

// The content checksum of a rank's state: FNV-1a over the three tensors' bytes, in order.
std::uint64_t checksum(std::span<const float> a, std::span<const float> b, std::span<const float> c) {
  Fnv1a h;
  for (const auto s : {a, b, c}) h.add(s.data(), s.size_bytes());
  return h.value();
}

std::string read_text(const fs::path& path) {
  std::ifstream in(path);
  if (!in) fail("cannot read '{}'", path.string());
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

std::int64_t step_of(const std::string& name) {
  if (name.rfind(kStepPrefix, 0) != 0) return -1;
  const std::string_view digits = std::string_view(name).substr(std::string_view(kStepPrefix).size());
  std::int64_t step = -1;
  const auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), step);
  if (ec != std::errc() || end != digits.data() + digits.size() || digits.empty()) return -1;
  return step;
}

std::vector<std::pair<std::int64_t, fs::path>> complete_checkpoints(const std::string& dir) {
  std::vector<std::pair<std::int64_t, fs::path>> found;
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return found;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    const std::int64_t step = step_of(entry.path().filename().string());
    if (step >= 0 && entry.is_directory() && fs::exists(entry.path() / "manifest.json")) {
      found.emplace_back(step, entry.path());
    }
  }
  std::sort(found.begin(), found.end());
  return found;
}

}  // namespace

std::string checkpoint_name(std::int64_t step) { return fmt::format("{}{:08}", kStepPrefix, step); }

std::int64_t checkpoint_step(const std::string& name) { return step_of(name); }

std::string staging_path(const std::string& dir, std::int64_t step) {
  return (fs::path(dir) / fmt::format("{}{:08}", kPartialPrefix, step)).string();
}

void write_rank_shards(const std::string& staging, int rank, const RankShards& shards) {
  ODC_CHECK(shards.masters.size() == shards.exp_avg.size() && shards.masters.size() == shards.exp_avg_sq.size(),
            "rank shard buffers differ in length");
  std::error_code ec;
  fs::create_directories(staging, ec);
  if (ec) fail("checkpoint: cannot create '{}': {}", staging, ec.message());
  const Shape shape{static_cast<std::int64_t>(shards.masters.size())};
  write_safetensors((fs::path(staging) / rank_file(rank)).string(),
                    {{kTensorNames[0], DType::f32, shape, shards.masters.data()},
                     {kTensorNames[1], DType::f32, shape, shards.exp_avg.data()},
                     {kTensorNames[2], DType::f32, shape, shards.exp_avg_sq.data()}});
  const nlohmann::json sidecar = {
      {"rank", rank},
      {"file", rank_file(rank)},
      {"elements", shards.masters.size()},
      {"checksum", fmt::format("{:016x}", checksum(shards.masters, shards.exp_avg, shards.exp_avg_sq))}};
  write_file_atomically((fs::path(staging) / rank_sidecar(rank)).string(), sidecar.dump());
}

std::string commit_checkpoint(const std::string& dir, std::int64_t step, int world_size, nlohmann::json manifest,
                              int keep, std::optional<std::int64_t> protect_step) {
  const fs::path staging = staging_path(dir, step);
  nlohmann::json ranks = nlohmann::json::array();
  for (int r = 0; r < world_size; ++r) {
    const fs::path sidecar = staging / rank_sidecar(r);
    if (!fs::exists(sidecar)) fail("checkpoint step {}: rank {} did not write its shards into '{}'", step, r, staging.string());
    ranks.push_back(nlohmann::json::parse(read_text(sidecar)));
  }
  manifest["format_version"] = kNativeCheckpointVersion;
  manifest["step"] = step;
  manifest["world_size"] = world_size;
  manifest["ranks"] = std::move(ranks);
  manifest[kManifestChecksumKey] = manifest_checksum(manifest);
  write_file_atomically((staging / "manifest.json").string(), manifest.dump(2));
  for (int r = 0; r < world_size; ++r) fs::remove(staging / rank_sidecar(r));
  fsync_directory(staging.string());

  const fs::path final_path = fs::path(dir) / checkpoint_name(step);
  std::error_code ec;
  if (fs::exists(final_path)) {
    // Never overwritten: a step-N directory here is one the run start did not account for (its
    // manifest deleted, a directory copied in), and its shards may be all that is left of it.
    const bool complete = fs::exists(final_path / "manifest.json");
    const std::string where = retire_checkpoints(dir, {final_path.string()}, "replaced-" + checkpoint_name(step));
    spdlog::warn("checkpoint: {} already existed ({}); moved to {} instead of being overwritten by the new step {}",
                 final_path.string(), complete ? "a complete checkpoint" : "no manifest.json: shards without their record",
                 where, step);
  }
  fs::rename(staging, final_path, ec);
  if (ec) fail("checkpoint: cannot rename '{}' to '{}': {}", staging.string(), final_path.string(), ec.message());
  fsync_directory(dir);

  // Prune: this run's older checkpoints beyond `keep` (another run's, or one whose manifest does
  // not read, is not ours to delete), and partial directories of crashed writes.
  const std::string run_id = manifest.value("run_id", std::string());
  std::vector<std::pair<std::int64_t, fs::path>> ours;
  for (const auto& [s, path] : complete_checkpoints(dir)) {
    std::ifstream in(path / "manifest.json");
    const auto other = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
    if (other.is_object() && other.value("run_id", std::string()) == run_id) ours.emplace_back(s, path);
  }
  if (keep > 0 && static_cast<int>(ours.size()) > keep) {
    for (std::size_t i = 0; i + static_cast<std::size_t>(keep) < ours.size(); ++i) {
      if (protect_step && ours[i].first == *protect_step) continue;  // the best checkpoint stays
      fs::remove_all(ours[i].second, ec);
    }
  }
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind(kPartialPrefix, 0) == 0 && entry.path() != staging) fs::remove_all(entry.path(), ec);
  }
  return final_path.string();
}

std::vector<CheckpointEntry> list_checkpoints(const std::string& dir) {
  std::vector<CheckpointEntry> out;
  for (const auto& [step, path] : complete_checkpoints(dir)) out.push_back({step, path.string()});
  return out;
}

std::string retire_checkpoints(const std::string& dir, const std::vector<std::string>& checkpoints,
                               const std::string& name) {
  const fs::path retired = fs::path(dir) / "retired";
  fs::path target = retired / name;
  for (int n = 2; fs::exists(target); ++n) target = retired / fmt::format("{}-{}", name, n);
  std::error_code ec;
  fs::create_directories(target, ec);
  if (ec) fail("checkpoint: cannot create '{}': {}", target.string(), ec.message());
  for (const auto& checkpoint : checkpoints) {
    const fs::path from(checkpoint);
    fs::rename(from, target / from.filename(), ec);
    if (ec) fail("checkpoint: cannot move '{}' to '{}': {}", checkpoint, target.string(), ec.message());
  }
  fsync_directory(target.string());
  fsync_directory(dir);
  return target.string();
}

std::optional<std::string> latest_checkpoint(const std::string& dir) {
  auto complete = complete_checkpoints(dir);
  // Newest first; a manifest that does not read is skipped (the trainer's resume: auto looks at
  // scan_checkpoints instead and refuses to pass over a damaged newest one).
  for (auto it = complete.rbegin(); it != complete.rend(); ++it) {
    try {
      read_manifest(it->second.string());
      return it->second.string();
    } catch (const Error&) {
    }
  }
  return std::nullopt;
}

std::vector<CheckpointStatus> scan_checkpoints(const std::string& dir) {
  std::vector<CheckpointStatus> out;
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return out;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    const std::int64_t step = step_of(entry.path().filename().string());
    if (step < 0 || !entry.is_directory()) continue;
    // The path as `dir` spells it, so that a suggested checkpoint.resume reads like checkpoint.dir.
    CheckpointStatus status{step, (fs::path(dir) / entry.path().filename()).string(), ""};
    try {
      read_manifest(status.path);
    } catch (const Error& e) {
      status.damage = e.what();
    }
    out.push_back(std::move(status));
  }
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.step < b.step; });
  return out;
}

std::optional<std::string> previous_checkpoint(const std::string& checkpoint) {
  fs::path path = fs::path(checkpoint).lexically_normal();
  if (path.filename().empty()) path = path.parent_path();  // "ckpt/step-00000004/"
  const std::int64_t step = step_of(path.filename().string());
  if (step < 0) return std::nullopt;
  const auto all = scan_checkpoints(path.parent_path().empty() ? "." : path.parent_path().string());
  for (auto it = all.rbegin(); it != all.rend(); ++it) {
    if (it->step < step && it->damage.empty()) {
      return path.parent_path().empty() ? path.parent_path().string() + fs::path(it->path).filename().string()
                                        : it->path;
    }
  }
  return std::nullopt;
}

std::string previous_checkpoint_hint(const std::string& checkpoint) {
  if (const auto previous = previous_checkpoint(checkpoint)) {
    return fmt::format("; to resume from the previous good checkpoint instead: --set checkpoint.resume={} (or "
                       "checkpoint.resume: {} in the config)", *previous, *previous);
  }
  return "; there is no earlier good checkpoint next to it to resume from";
}

std::string manifest_checksum(const nlohmann::json& manifest) {
  nlohmann::json content = manifest;
  if (content.is_object()) content.erase(kManifestChecksumKey);
  // nlohmann's objects keep their keys sorted, and dump() without indent has no spaces: canonical.
  return fmt::format("fnv1a64:{:016x}", fnv1a64(content.dump()));
}

bool has_manifest_checksum(const nlohmann::json& manifest) {
  return manifest.is_object() && manifest.contains(kManifestChecksumKey);
}

void check_manifest_checksum_present(const std::string& checkpoint, const nlohmann::json& manifest,
                                     const ManifestChecksumOptIn& opt_in) {
  if (has_manifest_checksum(manifest)) return;
  if (!opt_in.accept) {
    fail("checkpoint '{}': its manifest has no {}, so an edit of its values (a step, a sampler position, a "
         "shard's checksum) would go undetected; it was written before manifests carried one, or the field "
         "was deleted\n  to {} it anyway: {} ({}){}",
         checkpoint, kManifestChecksumKey, opt_in.use, opt_in.how, opt_in.note, opt_in.hint);
  }
  if (opt_in.warn) {
    spdlog::warn("checkpoint '{}': its manifest has no {} (accepted: {}): an edit of it cannot be detected; {}",
                 checkpoint, kManifestChecksumKey, opt_in.name, opt_in.note);
  }
}

nlohmann::json read_manifest(const std::string& checkpoint) {
  const fs::path path = fs::path(checkpoint) / "manifest.json";
  std::error_code ec;
  if (!fs::is_directory(checkpoint, ec)) fail("checkpoint '{}' does not exist (or is not a directory)", checkpoint);
  if (!fs::exists(path, ec)) {
    fail("checkpoint '{}' is damaged or incomplete: it has no manifest.json (shards without the manifest that "
         "describes them cannot be resumed)", checkpoint);
  }
  nlohmann::json manifest;
  try {
    manifest = nlohmann::json::parse(read_text(path));
  } catch (const nlohmann::json::exception& e) {
    fail("checkpoint manifest '{}' is not valid JSON (it is damaged: truncated or edited): {}", path.string(),
         excerpt(e.what()));
  }
  const auto damaged = [&](const std::string& what) {
    fail("checkpoint manifest '{}' is damaged: {}", path.string(), what);
  };
  if (!manifest.is_object()) damaged("not a JSON object");
  if (manifest.value("format_version", nlohmann::json()) != kNativeCheckpointVersion) {
    fail("checkpoint manifest '{}': format_version {} expected", path.string(), kNativeCheckpointVersion);
  }
  for (const char* key : {"step", "world_size", "ranks"}) {
    if (!manifest.contains(key)) fail("checkpoint manifest '{}': missing '{}'", path.string(), key);
  }
  if (!manifest["step"].is_number_integer() || manifest["step"].get<std::int64_t>() < 0) {
    damaged(fmt::format("'step' must be an integer >= 0, found {}", excerpt(manifest["step"].dump())));
  }
  if (!manifest["world_size"].is_number_integer() || manifest["world_size"].get<std::int64_t>() < 1) {
    damaged(fmt::format("'world_size' must be an integer >= 1, found {}", excerpt(manifest["world_size"].dump())));
  }
  const auto world = manifest["world_size"].get<std::int64_t>();
  if (!manifest["ranks"].is_array() || static_cast<std::int64_t>(manifest["ranks"].size()) != world) {
    damaged(fmt::format("'ranks' must list every one of the {} ranks of 'world_size', found {}", world,
                        manifest["ranks"].is_array() ? fmt::format("{} entries", manifest["ranks"].size())
                                                     : excerpt(manifest["ranks"].dump())));
  }
  for (std::int64_t r = 0; r < world; ++r) {
    const auto& entry = manifest["ranks"][static_cast<std::size_t>(r)];
    if (!entry.is_object() || entry.value("rank", nlohmann::json()) != r || !entry.contains("file") ||
        !entry["file"].is_string() || !entry.contains("checksum") || !entry["checksum"].is_string()) {
      damaged(fmt::format("'ranks' entry {} must be rank {} with its file and checksum, found {}", r, r,
                          excerpt(entry.dump())));
    }
  }
  const std::int64_t named = step_of(fs::path(checkpoint).lexically_normal().filename().string());
  if (named >= 0 && named != manifest["step"].get<std::int64_t>()) {
    damaged(fmt::format("it records step {}, its directory is named for step {}", manifest["step"].dump(), named));
  }
  if (has_manifest_checksum(manifest)) {
    const auto& recorded = manifest[kManifestChecksumKey];
    const std::string actual = manifest_checksum(manifest);
    if (!recorded.is_string() || recorded.get<std::string>() != actual) {
      damaged(fmt::format("its content's checksum is {}, the manifest records {}: it was edited or corrupted after it "
                          "was written", actual, excerpt(recorded.dump())));
    }
  }
  return manifest;
}

void read_rank_shard_pieces(const std::string& checkpoint, const nlohmann::json& manifest, int rank,
                            std::int64_t file_elements, const std::vector<ShardCopy>& copies, const RankShardsOut& out) {
  const auto& entry = manifest["ranks"].at(static_cast<std::size_t>(rank));
  const std::string path = (fs::path(checkpoint) / entry.at("file").get<std::string>()).string();
  // A missing or truncated file is damage too: the error says which checkpoint to go back to.
  std::optional<SafetensorsFile> opened;
  try {
    opened.emplace(path);
  } catch (const Error& e) {
    fail("{}{}", e.what(), previous_checkpoint_hint(checkpoint));
  }
  const SafetensorsFile& file = *opened;
  const std::span<float> targets[3] = {out.masters, out.exp_avg, out.exp_avg_sq};
  for (int i = 0; i < 3; ++i) {
    const auto& info = file.info(kTensorNames[i]);
    if (info.dtype != DType::f32 || info.numel() != file_elements) {
      fail("checkpoint '{}': tensor '{}' holds {} elements, this rank's shards need {} (a different model or "
           "world size?)", path, kTensorNames[i], info.numel(), file_elements);
    }
    for (const ShardCopy& c : copies) {
      ODC_CHECK(c.from >= 0 && c.count >= 0 && c.from + c.count <= file_elements && c.to >= 0 &&
                    c.to + c.count <= static_cast<std::int64_t>(targets[i].size()),
                "checkpoint '{}': piece [{}, +{}) -> {} outside the file's {} or the target's {} elements", path,
                c.from, c.count, c.to, file_elements, targets[i].size());
    }
  }
  // The file in pieces, in order: the checksum covers every byte, the pieces the copies need go
  // to their targets (straight there when one copy holds the whole piece), and no more than a
  // piece of the file is held at a time (read_f32_range releases the file's pages it has read).
  constexpr std::int64_t kPiece = std::int64_t{1} << 20;
  std::vector<float> scratch;
  Fnv1a hash;
  struct NonFinite {
    int tensor = 0;
    std::int64_t element = 0;
    float value = 0.0f;
  };
  std::optional<NonFinite> bad;
  for (int i = 0; i < 3; ++i) {
    for (std::int64_t begin = 0; begin < file_elements; begin += kPiece) {
      const std::int64_t count = std::min(kPiece, file_elements - begin);
      const auto whole = std::find_if(copies.begin(), copies.end(), [&](const ShardCopy& c) {
        return c.from <= begin && begin + count <= c.from + c.count;
      });
      float* values = nullptr;
      if (whole != copies.end()) {
        values = targets[i].data() + whole->to + (begin - whole->from);
      } else {
        scratch.resize(static_cast<std::size_t>(count));
        values = scratch.data();
      }
      file.read_f32_range(kTensorNames[i], begin, count, values);
      hash.add(values, static_cast<std::size_t>(count) * sizeof(float));
      if (!bad) {
        const float* found = std::find_if(values, values + count, [](float v) { return !std::isfinite(v); });
        if (found != values + count) bad = NonFinite{i, begin + (found - values), *found};
      }
      if (whole != copies.end()) continue;
      for (const ShardCopy& c : copies) {
        const std::int64_t lo = std::max(begin, c.from);
        const std::int64_t hi = std::min(begin + count, c.from + c.count);
        if (lo < hi) std::copy_n(values + (lo - begin), hi - lo, targets[i].data() + c.to + (lo - c.from));
      }
    }
  }
  const std::string expected = entry.at("checksum").get<std::string>();
  const std::string actual = fmt::format("{:016x}", hash.value());
  if (actual != expected) {
    fail("checkpoint '{}': checksum {} does not match the manifest's {} (the file is damaged){}", path, actual, expected,
         previous_checkpoint_hint(checkpoint));
  }
  // A NaN or inf saved by a run that diverged would only show as a NaN loss after resuming.
  if (bad) {
    fail("checkpoint '{}': tensor '{}' holds a non-finite value ({} at element {}): the run that saved it had "
         "diverged; resume from an earlier checkpoint (checkpoint.resume=DIR/step-N){}", path, kTensorNames[bad->tensor],
         bad->value, bad->element, previous_checkpoint_hint(checkpoint));
  }
}

void read_rank_shards(const std::string& checkpoint, const nlohmann::json& manifest, int rank, const RankShardsOut& out) {
  const auto elements = static_cast<std::int64_t>(out.masters.size());
  ODC_CHECK(out.exp_avg.size() == out.masters.size() && out.exp_avg_sq.size() == out.masters.size(),
            "rank shards of {}, {} and {} elements", out.masters.size(), out.exp_avg.size(), out.exp_avg_sq.size());
  read_rank_shard_pieces(checkpoint, manifest, rank, elements, {{0, 0, elements}}, out);
}

}  // namespace odc::io
