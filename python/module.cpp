// The Python extension `tpusim._tpusim` (the package tpusim/ re-exports it and adds Dask and
// pandas on top): the library's entry points (workflows/) for notebooks and
// scripts, each returning what the command prints as JSON, as Python objects. SimGrid allows
// one simulation per process, so every call runs in a child process forked for it; its result
// comes back through a pipe as JSON. Bad input raises tpusim.ConfigError, a ValueError (with the JSON path,
// the value and what is expected, as the command says it), a failed simulation RuntimeError. The work that
// runs children (fit, validate, plan, intervals) runs the tpusim command this module was built
// with.
#include <poll.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <csignal>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <functional>
#include <iostream>
#include <mutex>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "hardware/errors.hpp"
#include "hardware/json_fields.hpp"
#include "workflows/child_process.hpp"
#include "workflows/dask_runner.hpp"
#include "workflows/describe.hpp"
#include "workflows/fit.hpp"
#include "workflows/plan.hpp"
#include "workflows/run.hpp"
#include "workflows/sweep.hpp"
#include "workflows/validate.hpp"

#ifndef TPUSIM_CLI
#define TPUSIM_CLI "tpusim"
#endif

namespace py = pybind11;
using tpusim::Json;

namespace {

/// tpusim.ConfigError (a ValueError): bad input, its message naming the JSON path.
PyObject* g_config_error = PyExc_ValueError;

[[noreturn]] void raise_config_error(const std::string& message) {
  PyErr_SetString(g_config_error, message.c_str());
  throw py::error_already_set();
}

std::string repr_of(const py::handle& value) { return py::repr(value).cast<std::string>(); }

/// Python object -> JSON, walked so that a value JSON cannot hold (NaN, an infinity, a string
/// that is not Unicode text, an object of another type) is ConfigError naming where it is.
Json to_json(const py::handle& value, const std::string& path) {
  const auto bad = [&](const std::string& expected) {
    raise_config_error(path + ": found " + repr_of(value) + ", expected " + expected);
  };
  if (value.is_none()) return nullptr;
  if (py::isinstance<py::bool_>(value)) return value.cast<bool>();
  if (py::isinstance<py::int_>(value)) {
    try {
      return value.cast<std::int64_t>();
    } catch (const py::cast_error&) {
      bad("an integer within 64 bits");
    }
  }
  if (py::isinstance<py::float_>(value)) {
    const double x = value.cast<double>();
    if (!std::isfinite(x)) bad("a finite number (JSON has no NaN or infinity)");
    return x;
  }
  if (py::isinstance<py::str>(value)) {
    const py::object bytes = py::reinterpret_steal<py::object>(PyUnicode_AsUTF8String(value.ptr()));
    if (!bytes) {
      PyErr_Clear();
      bad("Unicode text (a lone surrogate cannot be written as UTF-8)");
    }
    return bytes.cast<std::string>();
  }
  if (py::isinstance<py::dict>(value)) {
    Json out = Json::object();
    for (const auto& [k, v] : value.cast<py::dict>()) {
      if (!py::isinstance<py::str>(k))
        bad("a dict whose keys are strings (found the key " + repr_of(k) + ")");
      const std::string key = to_json(k, path).get<std::string>();
      out[key] = to_json(v, path == "(top level)" ? key : path + "." + key);
    }
    return out;
  }
  if (py::isinstance<py::list>(value) || py::isinstance<py::tuple>(value)) {
    Json out = Json::array();
    std::size_t i = 0;
    for (const auto& v : value) out.push_back(to_json(v, path + "[" + std::to_string(i++) + "]"));
    return out;
  }
  bad("a JSON value: a dict, list, str, int, float, bool or None");
  return nullptr;
}

Json to_json(const py::object& value) { return to_json(value, "(top level)"); }

py::object to_python(const Json& value) { return py::module_::import("json").attr("loads")(value.dump()); }

/// `set` as the command's --set: {"schedule.microbatches": 8} -> "schedule.microbatches=8".
std::vector<std::string> sets_of(const py::object& set) {
  std::vector<std::string> out;
  if (set.is_none()) return out;
  if (!py::isinstance<py::dict>(set))
    raise_config_error("set: found " + repr_of(set) + ", expected a dict of dotted paths to values");
  const Json pairs = to_json(set, "set");
  for (const auto& [key, value] : pairs.items()) out.push_back(key + "=" + value.dump());
  return out;
}

void write_all(int fd, const std::string& text) {
  std::size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;
    done += std::size_t(n);
  }
}

/// Everything the child `pid` writes to `fd` until it closes, then the child reaped. Python's
/// signals are looked at a few times a second: on Ctrl-C (KeyboardInterrupt) the child and its
/// process group are killed and the exception raised.
std::string answer_of(pid_t pid, int fd) {
  std::string text;
  char buf[65536];
  for (;;) {
    pollfd p{fd, POLLIN, 0};
    int ready = 0;
    {
      py::gil_scoped_release release;
      ready = ::poll(&p, 1, 100);
    }
    if (PyErr_CheckSignals() != 0) {
      ::kill(-pid, SIGKILL);
      ::kill(pid, SIGKILL);
      ::close(fd);
      while (::waitpid(pid, nullptr, 0) < 0 && errno == EINTR) {
      }
      throw py::error_already_set();
    }
    if (ready == 0 || (ready < 0 && errno == EINTR)) continue;
    const ssize_t n = ready < 0 ? -1 : ::read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    text.append(buf, std::size_t(n));
  }
  ::close(fd);
  py::gil_scoped_release release;
  while (::waitpid(pid, nullptr, 0) < 0 && errno == EINTR) {
  }
  return text;
}

/// Runs `work` in a forked child (a fresh SimGrid each time) and returns its JSON as Python
/// objects, or raises what it threw.
py::object in_child(const std::function<Json()>& work) {
  int fds[2];
  if (::pipe(fds) != 0) throw std::runtime_error(std::string("pipe: ") + std::strerror(errno));
  const pid_t pid = ::fork();
  if (pid < 0) throw std::runtime_error(std::string("fork: ") + std::strerror(errno));
  if (pid == 0) {
    // Python's handlers only set a flag this child never reads: the parent stops it instead, with
    // its whole process group (the children it starts).
    ::signal(SIGINT, SIG_DFL);
    ::signal(SIGTERM, SIG_DFL);
    ::setpgid(0, 0);
    ::close(fds[0]);
    Json answer;
    try {
      answer = Json{{"value", work()}};
    } catch (const tpusim::ConfigError& e) {
      answer = Json{{"error", "bad input"}, {"message", e.what()}};
    } catch (const tpusim::ResourceError& e) {
      answer = Json{{"error", "too large to simulate on this machine"}, {"message", e.what()}};
    } catch (const std::exception& e) {
      answer = Json{{"error", "failed"}, {"message", e.what()}};
    }
    write_all(fds[1], answer.dump());
    ::close(fds[1]);
    ::_exit(0);
  }
  ::close(fds[1]);
  const std::string text = answer_of(pid, fds[0]);
  if (text.empty()) throw std::runtime_error("tpusim: the child process died without an answer");
  const Json answer = Json::parse(text);
  if (answer.contains("error")) {
    const std::string message =
        answer["error"].get<std::string>() + ": " + answer["message"].get<std::string>();
    if (answer["error"] == "failed") throw std::runtime_error(message);
    raise_config_error(message);
  }
  return to_python(answer["value"]);
}

py::object run(const py::object& study, const py::object& set) {
  tpusim::workflows::RunOptions o;
  if (py::isinstance<py::str>(study))  // a pathlib.Path is made a str by tpusim.run
    o.study = study.cast<std::string>();
  else if (py::isinstance<py::dict>(study))
    o.study_json = to_json(study, "study");
  else
    raise_config_error("study: found " + repr_of(study) +
                       ", expected a study file's path or a study as a dict");
  o.sets = sets_of(set);
  o.json = true;
  return in_child([o] {
    const auto run = tpusim::workflows::run_study(o);
    return run.result;
  });
}

py::object check(const std::string& study, const py::object& set) {
  const auto sets = sets_of(set);
  return in_child([study, sets] { return Json(tpusim::workflows::check_study(study, sets)); });
}

py::object fit(const std::string& study, const std::string& maximize, const py::object& set,
               std::optional<double> min, std::optional<double> max, std::optional<double> step) {
  tpusim::workflows::FitOptions o;
  o.study = study;
  o.path = maximize;
  o.sets = sets_of(set);
  o.min = min;
  o.max = max;
  o.step = step;
  return in_child([o] {
    const auto r = tpusim::workflows::fit_study(o);
    if (!r.failure.empty())
      throw std::runtime_error("a probe failed, so the search has no answer: " + r.failure);
    return tpusim::workflows::fit_json(o, r);
  });
}

py::object validate(const std::vector<std::string>& cases, int jobs, bool intervals, bool sensitivity,
                    const std::vector<std::string>& hardware_override, const std::string& cases_dir,
                    const std::string& dask) {
  tpusim::workflows::ValidateOptions o;
  o.ids = cases;
  o.jobs = jobs;
  o.intervals = intervals;
  o.sensitivity = sensitivity;
  o.hardware_overrides = hardware_override;
  o.dir = cases_dir;
  return in_child([o, dask]() mutable {  // the cases' simulations on the cluster's workers, if any
    return tpusim::workflows::with_cluster(dask, o.jobs,
                                           [&] { return tpusim::workflows::validate_cases(o).report; });
  });
}

/// The sweep's options for `study`, `grid` and `set`, as sweep() builds them.
tpusim::workflows::SweepOptions sweep_options(const std::string& study, const py::object& grid,
                                              const py::object& set) {
  tpusim::workflows::SweepOptions o;
  o.study = study;
  o.sets = sets_of(set);
  const Json axes = py::isinstance<py::dict>(grid) ? to_json(grid, "grid") : Json();
  if (!axes.is_object() || axes.empty())
    raise_config_error("grid: found " + repr_of(grid) +
                       ", expected a dict of dotted paths to lists of values, e.g. {\"batch\": [8, 16]}");
  for (const auto& [path, values] : axes.items()) {
    if (values.is_array() && values.empty())
      raise_config_error("grid." + path + ": found [], expected at least one value");
    o.grids.push_back(path + "=" + (values.is_array() ? values : Json::array({values})).dump());
  }
  return o;
}

py::object sweep(const std::string& study, const py::object& grid, const py::object& set, int jobs,
                 const py::object& out) {
  tpusim::workflows::SweepOptions o = sweep_options(study, grid, set);
  o.jobs = jobs;
  char temporary[] = "/tmp/tpusim-sweep-XXXXXX";
  const bool own = out.is_none();
  if (own && !::mkdtemp(temporary)) throw std::runtime_error(std::string("mkdtemp: ") + std::strerror(errno));
  o.out = own ? std::string(temporary) : out.cast<std::string>();
  py::object points = in_child([o] { return Json(tpusim::workflows::sweep_study(o).points); });
  std::error_code ec;
  if (own) std::filesystem::remove_all(o.out, ec);
  return points;
}

/// Every point of a sweep, as a spec a worker runs with sweep_point (no simulation here).
py::object sweep_points(const std::string& study, const py::object& grid, const py::object& set) {
  const auto o = sweep_options(study, grid, set);
  return in_child([o] { return Json(tpusim::workflows::sweep_point_specs(o)); });
}

/// The sweeps (by token) whose points this process was asked to stop (tpusim.sweep with a Dask
/// client, interrupted, asks every worker through Client.run).
std::mutex g_cancelled_lock;
std::set<std::string> g_cancelled;

void cancel_points(const std::string& token) {
  const std::lock_guard<std::mutex> guard(g_cancelled_lock);
  g_cancelled.insert(token);
}

bool points_cancelled(const std::string& token) {
  const std::lock_guard<std::mutex> guard(g_cancelled_lock);
  return !token.empty() && g_cancelled.count(token) > 0;
}

/// One point's record (results.jsonl's line), run as a `tpusim run` child: no SimGrid here. A
/// point of a sweep whose `token` is cancelled here stops its child.
py::object sweep_point(const std::string& study, const py::object& set, const py::object& spec,
                       const std::string& token) {
  tpusim::workflows::SweepOptions o;
  o.study = study;
  o.sets = sets_of(set);
  const Json point = to_json(spec);
  Json record;
  {
    py::gil_scoped_release release;
    record = tpusim::workflows::sweep_point_record(o, point, [token] { return points_cancelled(token); });
  }
  return to_python(record);
}

py::object sweep_summary(const py::object& record) {
  return to_python(tpusim::workflows::sweep_record_summary(to_json(record)));
}

py::object plan(const std::string& study, const py::object& set, const std::string& space, int jobs, int top,
                double time_limit, const std::string& dask) {
  tpusim::workflows::PlanOptions o;
  o.study = study;
  o.sets = sets_of(set);
  o.space = space;
  o.jobs = jobs;
  o.top = top;
  o.time_limit_s = time_limit;
  o.search_log = [](const std::string& line) { std::cerr << line << "\n" << std::flush; };
  return in_child([o, dask]() mutable {  // the candidates' simulations on the cluster's workers, if any
    return tpusim::workflows::with_cluster(dask, o.jobs,
                                           [&] { return tpusim::workflows::plan_study(o).plan; });
  });
}

py::object describe_hardware(const std::string& name) {
  return in_child([name] { return tpusim::workflows::hardware_json(tpusim::load_hardware(name)); });
}

}  // namespace

PYBIND11_MODULE(_tpusim, m) {
  m.doc() = "tpusim: a discrete-event simulator of TPU pods and their training schedules";
  static py::exception<tpusim::ConfigError> config_error(m, "ConfigError", PyExc_ValueError);
  g_config_error = config_error.ptr();
  tpusim::workflows::set_child_executable(TPUSIM_CLI);
  m.def("run", &run, py::arg("study"), py::arg("set") = py::none(),
        "Simulates one training step: the dict `tpusim run --json` prints. `study` is a path or a dict; "
        "`set` a dict of dotted paths to values (as --set).");
  m.def("check", &check, py::arg("study"), py::arg("set") = py::none(),
        "Validates a study file: what `tpusim check` prints after 'ok', or ValueError naming the problem.");
  m.def("fit", &fit, py::arg("study"), py::arg("maximize"), py::arg("set") = py::none(),
        py::arg("min") = py::none(), py::arg("max") = py::none(), py::arg("step") = py::none(),
        "The largest value of a numeric field that fits: the dict `tpusim fit --json` prints.");
  m.def("validate", &validate, py::arg("cases") = std::vector<std::string>{}, py::arg("jobs") = 1,
        py::arg("intervals") = false, py::arg("sensitivity") = false,
        py::arg("hardware_override") = std::vector<std::string>{}, py::arg("cases_dir") = "",
        py::arg("dask") = "",
        "Predictions against the measured TPU runs: the dict `tpusim validate --json` prints (the options "
        "as validate's); `dask` a scheduler's address runs its simulations as tasks there.");
  m.def("sweep", &sweep, py::arg("study"), py::arg("grid"), py::arg("set") = py::none(), py::arg("jobs") = 1,
        py::arg("out") = py::none(),
        "Runs a study over the cartesian product of `grid` ({dotted path: [values]}), each point in its own "
        "process: every point's record summary ({index, key, point, result, error}), in point order; `out` "
        "keeps sweep's files (results.jsonl, results.csv, reports).");
  m.def("_sweep_points", &sweep_points, py::arg("study"), py::arg("grid"), py::arg("set") = py::none());
  m.def("_sweep_point", &sweep_point, py::arg("study"), py::arg("set"), py::arg("spec"),
        py::arg("token") = "");
  m.def("_cancel_points", &cancel_points, py::arg("token"),
        "Stops this process's running points of the sweep `token` (and every later one).");
  m.def("_sweep_summary", &sweep_summary, py::arg("record"));
  m.def("plan", &plan, py::arg("study"), py::arg("set") = py::none(), py::arg("space") = "",
        py::arg("jobs") = 1, py::arg("top") = 5, py::arg("time_limit") = 0.0, py::arg("dask") = "",
        "The fastest schedule that fits: the dict `tpusim plan --json` prints (`best` None: none fits); "
        "`dask` a scheduler's address runs its simulations as tasks there.");
  m.def(
      "_command", [] { return std::string(TPUSIM_CLI); },
      "The tpusim command this module runs children with.");
  m.def("describe_hardware", &describe_hardware, py::arg("name"),
        "A hardware generation's figures: the dict `tpusim describe hardware NAME --json` prints.");
}
