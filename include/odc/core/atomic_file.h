#pragma once
// Crash-safe file updates: write to a temporary name, fsync, rename, fsync the directory, so a
// crash leaves either the old content or the new one under the final name, never a torn file.
#include <string>
#include <string_view>

namespace odc {

// Writes `content` to `path` atomically (path + ".tmp" first). odc::Error naming the path.
void write_file_atomically(const std::string& path, std::string_view content);

// fsyncs a directory so that renames and creations inside it survive a crash.
void fsync_directory(const std::string& path);

}  // namespace odc
