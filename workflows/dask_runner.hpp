// Children as tasks on a Dask cluster (`--dask ADDRESS`, and the Python module's `client=`): a
// helper process (python3 -m tpusim._dask_runner ADDRESS, from the Python module built beside
// the command) connects to the scheduler and runs each child there as a task; the task runs the
// tpusim command of the worker's own Python module in the caller's working directory (so the
// study must be readable at the same path on the workers, as for the Python sweep). Dask
// reschedules the tasks of a worker that dies. The results are a child's (exit code, stdout,
// stderr), so sweep, plan and validate give what they give without a cluster.
#pragma once

#include <sys/types.h>

#include <condition_variable>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "workflows/child_process.hpp"

namespace tpusim::workflows {

class DaskRunner {
 public:
  /// Connects to the scheduler at `address` (e.g. tcp://host:8786) and makes run_self hand every
  /// child to the cluster until destroyed. ConfigError naming --dask when it cannot connect or
  /// this build has no Python module.
  explicit DaskRunner(const std::string& address);
  ~DaskRunner();
  DaskRunner(const DaskRunner&) = delete;
  DaskRunner& operator=(const DaskRunner&) = delete;

  /// The cluster's worker threads when it connected: how many children may run at once.
  int threads() const { return threads_; }

 private:
  ChildResult run(const std::vector<std::string>& args, double timeout_s,
                  const std::function<bool()>& cancel);
  void send(const std::string& line);
  void read_results();

  pid_t pid_ = -1;
  int to_fd_ = -1, from_fd_ = -1;
  int threads_ = 1;
  std::string buffer_;  ///< the helper's answers not yet taken as lines
  std::thread reader_;
  std::mutex mutex_;        ///< guards pending_ and gone_
  std::mutex write_mutex_;  ///< one request written at a time
  std::condition_variable done_;
  long next_id_ = 0;
  std::map<long, std::optional<ChildResult>> pending_;
  std::string gone_;  ///< why the helper stopped answering (empty while it answers)
  ChildRunner previous_;
};

/// Runs `work` with every child it starts on the Dask cluster at `address` (empty: here); `jobs`
/// 0 becomes the cluster's worker threads.
template <class Work>
auto with_cluster(const std::string& address, int& jobs, Work&& work) {
  std::optional<DaskRunner> cluster;
  if (!address.empty()) {
    cluster.emplace(address);
    if (jobs == 0) jobs = cluster->threads();
  }
  return work();
}

}  // namespace tpusim::workflows
