// Writing an output file so that a failure is never silent: the text goes to a temporary file
// beside the target, is flushed and fsync'ed, and only then renamed over the target, so a full
// disk or an unwritable directory leaves any earlier file intact and raises an error naming
// the path.
#pragma once

#include <filesystem>
#include <functional>
#include <string>
#include <string_view>

namespace tpusim::workflows {

/// Creates the output directory `dir` (and its parents). Throws ConfigError naming `option` and
/// the path when the filesystem refuses (not a directory, a name too long, no permission).
void make_output_directory(const std::filesystem::path& dir, const std::string& option = "--out");

/// Writes `text` to `path` atomically. Throws ConfigError (the path is unusable: exit 2)
/// naming `option` (e.g. "--out") and the path when any step fails.
void write_output_file(const std::filesystem::path& path, const std::string& text,
                       const std::string& option = "--out");

/// The same for text produced piece by piece (a file too large to hold in memory): `produce`
/// is called with a function that appends a piece to the temporary file.
void write_output_file(const std::filesystem::path& path,
                       const std::function<void(const std::function<void(std::string_view)>& put)>& produce,
                       const std::string& option = "--out");

}  // namespace tpusim::workflows
