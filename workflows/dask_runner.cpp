#include "workflows/dask_runner.hpp"

#include <fcntl.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>

#include "hardware/errors.hpp"
#include "hardware/json_fields.hpp"

extern char** environ;

namespace tpusim::workflows {

namespace {

#ifdef TPUSIM_PYTHON_DIR
constexpr const char* kPythonDir = TPUSIM_PYTHON_DIR;
#else
constexpr const char* kPythonDir = "";
#endif
constexpr const char* kPython = "/usr/bin/python3";

[[noreturn]] void refuse(const std::string& address, const std::string& why) {
  throw ConfigError("--dask", "", address, why);
}

/// This process's environment with the Python module's folder first on PYTHONPATH.
std::vector<std::string> helper_environment() {
  std::vector<std::string> env;
  std::string path = std::string("PYTHONPATH=") + kPythonDir;
  for (char** e = environ; *e; ++e) {
    const std::string entry = *e;
    if (entry.rfind("PYTHONPATH=", 0) == 0)
      path += ":" + entry.substr(11);
    else
      env.push_back(entry);
  }
  env.push_back(path);
  return env;
}

/// Starts the helper with `requests` (a socket, so a write to a helper that died fails instead of
/// raising SIGPIPE) as its stdin and `answers` as its stdout; its stderr (Dask's logging) is dropped.
pid_t start_helper(const std::string& address, int requests, int answers) {
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, requests, STDIN_FILENO);
  posix_spawn_file_actions_adddup2(&actions, answers, STDOUT_FILENO);
  posix_spawn_file_actions_addopen(&actions, STDERR_FILENO, "/dev/null", O_WRONLY, 0);
  std::vector<std::string> argv_storage = {kPython, "-m", "tpusim._dask_runner", address};
  std::vector<std::string> env_storage = helper_environment();
  std::vector<char*> argv, env;
  for (auto& a : argv_storage) argv.push_back(a.data());
  for (auto& e : env_storage) env.push_back(e.data());
  argv.push_back(nullptr);
  env.push_back(nullptr);
  pid_t pid = -1;
  const int rc = posix_spawn(&pid, kPython, &actions, nullptr, argv.data(), env.data());
  posix_spawn_file_actions_destroy(&actions);
  if (rc != 0) refuse(address, std::string("cannot start ") + kPython + ": " + std::strerror(rc));
  return pid;
}

/// One line from `fd` (without its newline); false at end of file.
bool read_line(int fd, std::string& buffer, std::string& line) {
  for (;;) {
    const auto end = buffer.find('\n');
    if (end != std::string::npos) {
      line = buffer.substr(0, end);
      buffer.erase(0, end + 1);
      return true;
    }
    char chunk[65536];
    const ssize_t n = ::read(fd, chunk, sizeof chunk);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    buffer.append(chunk, std::size_t(n));
  }
}

ChildResult failed_child(const std::string& why) {
  ChildResult r;
  r.exit_code = 1;
  r.err = why;
  return r;
}

}  // namespace

DaskRunner::DaskRunner(const std::string& address) {
  if (std::string(kPythonDir).empty())
    refuse(address, "a build with the Python module (not built under sanitizers)");
  int requests[2], answers[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, requests) != 0 || pipe2(answers, O_CLOEXEC) != 0)
    throw std::runtime_error(std::string("socketpair/pipe: ") + std::strerror(errno));
  pid_ = start_helper(address, requests[1], answers[1]);
  close(requests[1]);
  close(answers[1]);
  to_fd_ = requests[0];
  from_fd_ = answers[0];
  buffer_.clear();
  std::string line;
  Json hello;
  if (read_line(from_fd_, buffer_, line)) hello = Json::parse(line, nullptr, false);
  if (!hello.is_object() || !hello.contains("threads")) {
    const std::string why = hello.is_object() && hello.contains("error")
                                ? hello["error"].get<std::string>()
                                : "the helper (python3 -m tpusim._dask_runner) did not start: is Dask's "
                                  "distributed installed (scripts/setup.sh installs python3-distributed)?";
    close(to_fd_);
    close(from_fd_);
    int status = 0;
    waitpid(pid_, &status, 0);
    refuse(address, "a running Dask scheduler: " + why);
  }
  threads_ = std::max(1, hello["threads"].get<int>());
  reader_ = std::thread([this] { read_results(); });
  previous_ =
      set_child_runner([this](const std::vector<std::string>& args, double timeout_s,
                              const std::function<bool()>& cancel) { return run(args, timeout_s, cancel); });
}

DaskRunner::~DaskRunner() {
  set_child_runner(std::move(previous_));
  shutdown(to_fd_, SHUT_WR);  // the helper cancels what is left and exits
  if (reader_.joinable()) reader_.join();
  close(to_fd_);
  close(from_fd_);
  int status = 0;
  while (waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
  }
}

void DaskRunner::send(const std::string& line) {
  std::lock_guard<std::mutex> lock(write_mutex_);
  std::size_t done = 0;
  while (done < line.size()) {
    const ssize_t n = ::send(to_fd_, line.data() + done, line.size() - done, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;  // the helper is gone: the reader says so to every waiting child
    done += std::size_t(n);
  }
}

void DaskRunner::read_results() {
  std::string line;
  while (read_line(from_fd_, buffer_, line)) {
    const Json answer = Json::parse(line, nullptr, false);
    if (!answer.is_object() || !answer.contains("id")) continue;
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = pending_.find(answer["id"].get<long>());
    if (it == pending_.end()) continue;  // cancelled meanwhile
    ChildResult r;
    r.exit_code = answer.value("exit_code", 1);
    r.out = answer.value("out", "");
    r.err = answer.value("err", "");
    r.timed_out = answer.value("timed_out", false);
    it->second = std::move(r);
    done_.notify_all();
  }
  std::lock_guard<std::mutex> lock(mutex_);
  gone_ = "the Dask helper stopped answering (scheduler or connection lost)";
  done_.notify_all();
}

ChildResult DaskRunner::run(const std::vector<std::string>& args, double timeout_s,
                            const std::function<bool()>& cancel) {
  long id = 0;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!gone_.empty()) return failed_child(gone_);
    id = next_id_++;
    pending_[id];
  }
  std::error_code ec;
  const std::string cwd = std::filesystem::current_path(ec).string();
  send(Json{{"id", id}, {"args", args}, {"cwd", cwd}, {"timeout_s", timeout_s}}.dump() + "\n");
  std::unique_lock<std::mutex> lock(mutex_);
  for (;;) {
    auto& slot = pending_.at(id);
    if (slot) {
      ChildResult r = std::move(*slot);
      pending_.erase(id);
      return r;
    }
    if (!gone_.empty()) {
      pending_.erase(id);
      return failed_child(gone_);
    }
    if (cancel && cancel()) {
      pending_.erase(id);
      lock.unlock();
      send(Json{{"cancel", id}}.dump() + "\n");
      ChildResult r;
      r.exit_code = 128 + 9;
      r.cancelled = true;
      r.err = "stopped before it finished";
      return r;
    }
    done_.wait_for(lock, std::chrono::milliseconds(200));
  }
}

}  // namespace tpusim::workflows
