#include "workflows/output_file.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "hardware/errors.hpp"

namespace tpusim::workflows {

void make_output_directory(const std::filesystem::path& dir, const std::string& option) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec || !std::filesystem::is_directory(dir, ec))
    throw ConfigError(option, "", dir.string(),
                      "a directory that can be created or written (" +
                          (ec ? ec.message() : std::string("a file of that name is in the way")) + ")");
}

void write_output_file(const std::filesystem::path& path, const std::string& text,
                       const std::string& option) {
  write_output_file(
      path, [&](const auto& put) { put(text); }, option);
}

void write_output_file(const std::filesystem::path& path,
                       const std::function<void(const std::function<void(std::string_view)>& put)>& produce,
                       const std::string& option) {
  const std::string tmp = path.string() + ".tmp";
  auto fail = [&](const char* step) {
    const std::string why = std::strerror(errno);
    std::remove(tmp.c_str());
    throw ConfigError(option, "", path.string(),
                      std::string("a writable output path (") + step + " failed: " + why + ")");
  };
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) fail("open");
  try {
    produce([&](std::string_view text) {
      std::size_t done = 0;
      while (done < text.size()) {
        const ssize_t n = ::write(fd, text.data() + done, text.size() - done);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) fail("write");
        done += std::size_t(n);
      }
    });
  } catch (...) {  // a failed write, or `produce` failing: no partial file is left behind
    ::close(fd);
    std::remove(tmp.c_str());
    throw;
  }
  if (::fsync(fd) != 0) {
    ::close(fd);
    fail("fsync");
  }
  if (::close(fd) != 0) fail("close");
  if (std::rename(tmp.c_str(), path.c_str()) != 0) fail("rename");
}

}  // namespace tpusim::workflows
