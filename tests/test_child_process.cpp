// Children started side by side (sweep points, plan candidates, validation cases) must not
// inherit each other's pipes: a child holding another's write end keeps that one's reader from
// its end of file, so a quick child's result waited for a slow sibling to exit.
#include <catch2/catch.hpp>
#include <chrono>
#include <string>
#include <thread>

#include "workflows/child_process.hpp"

using tpusim::workflows::child_executable;
using tpusim::workflows::run_self;
using tpusim::workflows::set_child_executable;

namespace {
/// The number of file descriptors a child has open (as /bin/sh's `ls` sees them).
int child_fds() {
  const auto r = run_self({"-c", "ls /proc/self/fd | wc -l"});
  REQUIRE(r.exit_code == 0);
  return std::stoi(r.out);
}
}  // namespace

TEST_CASE("a child does not inherit the pipes of a sibling still running", "[child_process]") {
  const std::string saved = child_executable();
  set_child_executable("/bin/sh");
  const int alone = child_fds();
  // A sibling in flight holds its two pipes' read ends in this process while it runs.
  std::thread sibling([] { (void)run_self({"-c", "sleep 2"}); });
  std::this_thread::sleep_for(std::chrono::milliseconds(300));  // let it start (not asserted)
  const int beside = child_fds();
  sibling.join();
  set_child_executable(saved);
  CHECK(beside == alone);
}
