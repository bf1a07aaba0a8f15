#include "workflows/child_process.hpp"

#include <fcntl.h>
#include <poll.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <stdexcept>
#include <thread>
#include <utility>

#include "hardware/errors.hpp"
#include "workflows/interrupt.hpp"

extern char** environ;

namespace tpusim::workflows {

namespace {

/// Starts the tpusim executable (child_executable()) with `args`, its stdout and stderr on pipes; returns its
/// pid and the pipes' read ends.
pid_t spawn_self(const std::vector<std::string>& args, int& out_fd, int& err_fd) {
  // Close-on-exec: a child started by another thread at the same time must not inherit these
  // (holding a write end, it would keep this child's reader from its end of file until it exits).
  int out_pipe[2], err_pipe[2];
  if (pipe2(out_pipe, O_CLOEXEC) != 0) throw std::runtime_error(std::string("pipe: ") + std::strerror(errno));
  if (pipe2(err_pipe, O_CLOEXEC) != 0) {
    const int e = errno;
    close(out_pipe[0]);
    close(out_pipe[1]);
    throw std::runtime_error(std::string("pipe: ") + std::strerror(e));
  }
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, out_pipe[1], STDOUT_FILENO);  // dup2 clears close-on-exec
  posix_spawn_file_actions_adddup2(&actions, err_pipe[1], STDERR_FILENO);

  const std::string exe = child_executable();
  std::vector<std::string> argv_storage = {exe};
  argv_storage.insert(argv_storage.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (auto& a : argv_storage) argv.push_back(a.data());
  argv.push_back(nullptr);

  // The child's environment: this one, and this process's pid so that it dies with it.
  const std::string parent = std::string(kParentPidVariable) + "=" + std::to_string(::getpid());
  std::vector<char*> env;
  for (char** e = environ; *e; ++e)
    if (std::strncmp(*e, parent.c_str(), std::strlen(kParentPidVariable) + 1) != 0) env.push_back(*e);
  env.push_back(const_cast<char*>(parent.c_str()));
  env.push_back(nullptr);

  pid_t pid = 0;
  const int rc = posix_spawn(&pid, exe.c_str(), &actions, nullptr, argv.data(), env.data());
  posix_spawn_file_actions_destroy(&actions);
  close(out_pipe[1]);
  close(err_pipe[1]);
  if (rc != 0) {
    close(out_pipe[0]);
    close(err_pipe[0]);
    throw std::runtime_error(std::string("cannot start tpusim: ") + std::strerror(rc));
  }
  out_fd = out_pipe[0];
  err_fd = err_pipe[0];
  return pid;
}

/// Reads the child's stdout and stderr into `result` until both close; past `timeout_s` (when
/// positive) kills the child and marks the result timed out. Closes the pipes.
void collect_output(pid_t pid, int out_fd, int err_fd, double timeout_s, const std::function<bool()>& cancel,
                    ChildResult& result) {
  if (!(timeout_s <= kLongestTimeoutS)) timeout_s = 0;  // never reached: no limit (and no overflow)
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  std::array<pollfd, 2> fds = {pollfd{out_fd, POLLIN, 0}, pollfd{err_fd, POLLIN, 0}};
  std::string* sinks[2] = {&result.out, &result.err};
  int open_fds = 2;
  char buf[65536];
  while (open_fds > 0) {
    int wait_ms = -1;
    if (timeout_s > 0) {
      const auto left =
          std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now())
              .count();
      if (left <= 0) {
        kill(pid, SIGKILL);
        result.timed_out = true;
        break;
      }
      wait_ms = int(std::min<long long>(left, 1000));
    }
    if (stop_signal() || (cancel && cancel())) {  // asked to stop: by `cancel`, or a stop signal
      kill(pid, SIGKILL);
      result.cancelled = true;
      break;
    }
    wait_ms = wait_ms < 0 ? 200 : std::min(wait_ms, 200);
    const int ready = poll(fds.data(), fds.size(), wait_ms);
    if (ready < 0 && errno == EINTR) continue;
    if (ready < 0) break;
    for (int i = 0; i < 2 && ready > 0; ++i) {
      if (fds[i].fd < 0 || !(fds[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
      const ssize_t n = read(fds[i].fd, buf, sizeof buf);
      if (n > 0) {
        sinks[i]->append(buf, std::size_t(n));
        continue;
      }
      close(fds[i].fd);
      fds[i].fd = -1;
      --open_fds;
    }
  }
  for (auto& fd : fds)
    if (fd.fd >= 0) close(fd.fd);
}

ChildRunner& child_runner() {
  static ChildRunner runner;
  return runner;
}

std::string& executable_path() {
  static std::string path = "/proc/self/exe";
  return path;
}

}  // namespace

void set_child_executable(const std::string& path) { executable_path() = path; }
ChildRunner set_child_runner(ChildRunner runner) { return std::exchange(child_runner(), std::move(runner)); }
const std::string& child_executable() { return executable_path(); }

void check_timeout(const std::string& option, double seconds) {
  if (!(seconds >= 0 && seconds <= kLongestTimeoutS)) {
    char found[64];
    std::snprintf(found, sizeof found, "%g", seconds);
    throw ConfigError(option, "", found, "seconds in [0, 1e9] (0: no limit)");
  }
}

ChildResult run_self(const std::vector<std::string>& args, double timeout_s,
                     const std::function<bool()>& cancel) {
  if (child_runner())
    return child_runner()(args, timeout_s, [&cancel] { return stop_signal() || (cancel && cancel()); });
  int out_fd = -1, err_fd = -1;
  const pid_t pid = spawn_self(args, out_fd, err_fd);
  ChildResult result;
  collect_output(pid, out_fd, err_fd, timeout_s, cancel, result);
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  if (result.cancelled) result.err = "stopped before it finished";
  if (result.timed_out) {
    char text[96];
    std::snprintf(text, sizeof text, "timed out after %g s (killed)", timeout_s);
    result.err = text;
  }
  return result;
}

int job_count(int requested) {
  return requested > 0 ? requested : int(std::max(1u, std::thread::hardware_concurrency()));
}

void parallel_for(std::size_t count, int jobs, const std::function<void(std::size_t)>& body) {
  std::atomic<std::size_t> next{0};
  auto worker = [&] {
    for (std::size_t i = next++; i < count; i = next++) body(i);
  };
  std::vector<std::thread> threads;
  for (std::size_t t = 0; t < std::min(std::size_t(std::max(jobs, 1)), count); ++t)
    threads.emplace_back(worker);
  for (auto& t : threads) t.join();
}

std::string failure_text(const ChildResult& child) {
  std::string why = child.err.empty() ? "exit code " + std::to_string(child.exit_code) : child.err;
  while (!why.empty() && why.back() == '\n') why.pop_back();
  return why;
}

}  // namespace tpusim::workflows
