#include "workflows/sweep.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <mutex>
#include <sstream>

#include "hardware/hardware_spec.hpp"
#include "reports/sweep_report.hpp"
#include "schedules/study.hpp"
#include "workflows/child_process.hpp"
#include "workflows/interrupt.hpp"
#include "workflows/output_file.hpp"
#include "workflows/sweep_grid.hpp"

namespace fs = std::filesystem;

namespace tpusim::workflows {

namespace {

const char* kMetrics[] = {"step_time_s",
                          "examples_per_s",
                          "bubble_fraction",
                          "bubble_fraction_ideal",
                          "mxu_utilization",
                          "peak_hbm_bytes",
                          "fits"};

std::string csv_field(const Json& v) {
  if (v.is_null()) return "";
  std::string s = v.is_string() ? v.get<std::string>() : v.dump();
  if (s.find_first_of(",\"\n") != std::string::npos) {
    std::string quoted = "\"";
    for (char c : s) quoted += c == '"' ? std::string("\"\"") : std::string(1, c);
    return quoted + "\"";
  }
  return s;
}

/// results.csv's columns: the swept paths, the figures, the days and cost where the points have a
/// target, the plan's label in a sweep that re-plans each point, and the error.
struct Columns {
  std::vector<std::string> paths;
  bool planned = false;
  bool timed = false;
};

std::string csv_header(const Columns& columns) {
  std::string line;
  for (const auto& p : columns.paths) line += csv_field(Json(p)) + ",";
  for (const char* m : kMetrics) line += std::string(m) + ",";
  if (columns.timed)
    for (const char* m : reports::time_to_train_pointers()) {
      std::string name = m + 1;  // "time_to_train.days", as the result's keys are named
      std::replace(name.begin(), name.end(), '/', '.');
      line += csv_field(Json(name)) + ",";
    }
  return line + (columns.planned ? "plan," : "") + "error\n";
}

std::string csv_row(const Columns& columns, const Json& record) {
  std::string line;
  for (const auto& p : columns.paths) line += csv_field(record["point"].value(p, Json(nullptr))) + ",";
  const Json& result = record["result"];
  for (const char* m : kMetrics)
    line += (result.is_null() ? "" : csv_field(result.value(m, Json(nullptr)))) + ",";
  if (columns.timed)
    for (const char* m : reports::time_to_train_pointers()) {
      const Json::json_pointer p(m);
      line += (result.is_object() && result.contains(p) ? csv_field(result[p]) : "") + ",";
    }
  if (columns.planned) line += (result.is_null() ? "" : csv_field(result.value("plan", Json(nullptr)))) + ",";
  return line + csv_field(record["error"]) + "\n";
}

/// Whether a sweep's points have a training target: the study's (with the sweep's --set) or a
/// swept one.
bool timed(const Json& meta) {
  for (const auto& a : meta["axes"])
    if (a["path"].get<std::string>().rfind("target", 0) == 0) return true;
  try {
    return study_json(meta["study"].get<std::string>(), meta["sets"].get<std::vector<std::string>>())
        .contains("target");
  } catch (const ConfigError&) {
    return false;  // the sweep reports its study's problem where it reads it
  }
}

Columns swept_paths(const Json& meta) {
  Columns columns;
  for (const auto& a : meta["axes"]) columns.paths.push_back(a["path"].get<std::string>());
  columns.planned = meta.contains("plan");
  columns.timed = timed(meta);
  return columns;
}

/// A sweep record as the sweep keeps it: its summary (reports::sweep_summary: the point, its
/// error and the figures of its result the CSV and the reports read) and where its full line is
/// in a results.jsonl. A point's full result (per-core figures) can be megabytes on a large
/// slice: the sweep streams it to disk and never holds all of them.
struct StoredRecord {
  Json summary;
  fs::path file;
  std::uint64_t offset = 0, length = 0;
  std::size_t index() const { return summary["index"].get<std::size_t>(); }
  std::string key() const { return summary["key"].get<std::string>(); }
};

/// Records of a results.jsonl. A torn last line (a killed run) is dropped, and said so on
/// stderr; an unreadable line before the last means the file is corrupt: refused (ConfigError)
/// rather than silently recomputed over.
std::vector<StoredRecord> read_records(const fs::path& file) {
  std::vector<StoredRecord> records;
  std::ifstream in(file, std::ios::binary);
  std::string line;
  std::size_t number = 0, bad_line = 0;
  std::uint64_t offset = 0;
  for (; std::getline(in, line); offset += line.size() + 1) {
    ++number;
    if (line.empty()) continue;
    if (bad_line)
      throw ConfigError(file.string(), "line " + std::to_string(bad_line),
                        "a line that is not a sweep record",
                        "one JSON record per line (only the last line may be torn, by a killed run)");
    try {
      const Json j = Json::parse(line);
      if (j.is_object() && j.contains("key") && j.contains("index"))
        records.push_back({reports::sweep_summary(j), file, offset, line.size()});
      else
        bad_line = number;
    } catch (const Json::parse_error&) {
      bad_line = number;
    }
  }
  if (bad_line)
    std::cerr << "tpusim: " << file.string() << ": dropped its torn last line (" << bad_line
              << "), a point that will run again\n";
  return records;
}

/// Writes results.jsonl (each record's full line, copied from where it is) and results.csv for
/// `records` in point order, atomically, plus reports; the records then refer to the new file.
void write_outputs(const fs::path& dir, const Json& meta, std::vector<StoredRecord>& records) {
  std::sort(records.begin(), records.end(),
            [](const StoredRecord& a, const StoredRecord& b) { return a.index() < b.index(); });
  const auto paths = swept_paths(meta);
  // Each file is written beside itself, fsync'ed and renamed over the old one: a full disk
  // leaves the previous results intact and stops the sweep with the path.
  std::vector<std::uint64_t> offsets;
  write_output_file(dir / "results.jsonl", [&](const auto& put) {
    std::map<fs::path, std::ifstream> sources;
    std::string line;
    std::uint64_t offset = 0;
    for (const auto& r : records) {
      auto& in = sources.try_emplace(r.file, r.file, std::ios::binary).first->second;
      line.resize(r.length);
      in.clear();
      in.seekg(std::streamoff(r.offset));
      if (!in.read(line.data(), std::streamsize(r.length)))
        throw ConfigError(r.file.string(), "", "a record that can no longer be read",
                          "the results.jsonl the sweep wrote (was it changed while the sweep ran?)");
      put(line);
      put("\n");
      offsets.push_back(offset);
      offset += r.length + 1;
    }
  });
  std::vector<Json> summaries;
  std::string csv = csv_header(paths);
  for (std::size_t i = 0; i < records.size(); ++i) {
    records[i].file = dir / "results.jsonl";
    records[i].offset = offsets[i];
    csv += csv_row(paths, records[i].summary);
    summaries.push_back(records[i].summary);
  }
  write_output_file(dir / "results.csv", csv);
  // The reports name the study relative to themselves: the folder can be moved with its study.
  Json shown = meta;
  const fs::path study = fs::path(meta["study"].get<std::string>());
  const fs::path relative = study.lexically_relative(fs::absolute(dir).lexically_normal());
  if (!relative.empty()) shown["study"] = relative.string();
  write_output_file(dir / "report.html", reports::sweep_html(shown, summaries));
  write_output_file(dir / "report.md", reports::sweep_markdown(shown, summaries));
  for (const auto& [name, svg] : reports::sweep_charts(meta, summaries))
    write_output_file(dir / ("sweep_" + name + ".svg"), svg);
}

/// An exclusive lock (flock) on `dir`/.lock for the life of a sweep: a second sweep writing into
/// the same directory would rename results under the first. Refused at once (exit 2).
class DirectoryLock {
 public:
  explicit DirectoryLock(const fs::path& dir) {
    const std::string file = (dir / ".lock").string();
    fd_ = ::open(file.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd_ < 0) throw ConfigError("--out", "", dir.string(), "a writable output directory");
    if (::flock(fd_, LOCK_EX | LOCK_NB) != 0) {
      ::close(fd_);
      throw ConfigError("--out", "", dir.string() + " (another sweep is writing into it)",
                        "a directory no other running sweep uses");
    }
  }
  ~DirectoryLock() { ::close(fd_); }
  DirectoryLock(const DirectoryLock&) = delete;
  DirectoryLock& operator=(const DirectoryLock&) = delete;

 private:
  int fd_ = -1;
};

std::string one_line(std::string s) {
  const std::string prefix = "tpusim: bad input\n";
  if (s.rfind(prefix, 0) == 0) s = s.substr(prefix.size());
  while (!s.empty() && s.back() == '\n') s.pop_back();
  for (auto& c : s)
    if (c == '\n') c = ';';
  return s;
}

}  // namespace

namespace {

void check_options(const SweepOptions& o) {
  check_timeout("--point-timeout", o.point_timeout_s);
  if (o.jobs < 0)
    throw ConfigError("-j", "", std::to_string(o.jobs),
                      "a number of parallel points >= 1 (0: the number of cores)");
}

/// This run's shard of the points: --shard i/n, or a SLURM array task's, or all of them.
std::pair<int, int> shard_of(const SweepOptions& o) {
  if (!o.shard.empty()) return parse_shard(o.shard);
  if (const char* id = std::getenv("SLURM_ARRAY_TASK_ID"); id && std::getenv("SLURM_ARRAY_TASK_COUNT")) {
    const int min = std::getenv("SLURM_ARRAY_TASK_MIN") ? std::atoi(std::getenv("SLURM_ARRAY_TASK_MIN")) : 0;
    return parse_shard(std::to_string(std::atoi(id) - min) + "/" + std::getenv("SLURM_ARRAY_TASK_COUNT"));
  }
  return {0, 1};
}

/// The records of `points` a previous run of the same sweep left in `dir` (--resume), each once;
/// none when `dir` holds no results. Refuses another sweep's results.
std::vector<StoredRecord> resumed_records(const SweepOptions& o, const fs::path& dir, const Json& meta,
                                          const std::vector<Point>& points) {
  std::vector<StoredRecord> records;
  if (!fs::exists(dir / "results.jsonl")) return records;
  if (!o.resume) {
    throw ConfigError("--out", "", dir.string() + " already holds results.jsonl",
                      "--resume to continue that sweep, or another --out directory");
  }
  Json old;
  try {
    old = read_json_file(dir / "sweep.json");
  } catch (const ConfigError&) {
    throw ConfigError("--resume", "", "no readable sweep.json in " + dir.string(),
                      "the sweep.json of the sweep being resumed (without it, its results could belong to "
                      "another sweep)");
  }
  if (!old.is_object() || old["study"] != meta["study"] || old["axes"] != meta["axes"] ||
      old["sets"] != meta["sets"] || old.value("plan", Json()) != meta.value("plan", Json())) {
    throw ConfigError("--resume", "", "a different sweep in " + dir.string(),
                      "the same study, --set, axes and --plan options as the sweep being resumed");
  }
  if (old["shard"] != meta["shard"]) {
    throw ConfigError("--shard", "",
                      meta["shard"].dump() + " (this run) vs " + old["shard"].dump() + " in " + dir.string(),
                      "the shard of the sweep being resumed (resuming another shard would drop its points)");
  }
  std::map<std::string, std::size_t> wanted;
  for (const auto& p : points) wanted[p.key()] = p.index;
  std::map<std::string, bool> seen;
  for (auto& r : read_records(dir / "results.jsonl"))
    if (wanted.count(r.key()) && !seen[r.key()]) {
      seen[r.key()] = true;
      records.push_back(std::move(r));
    }
  return records;
}

/// The child's arguments for point `p`: `tpusim run`, or with --plan `tpusim plan` (one job: the
/// sweep runs its points side by side).
std::vector<std::string> point_arguments(const SweepOptions& o, const Point& p) {
  std::vector<std::string> args =
      o.plan.on ? o.plan.arguments(o.study, 1) : std::vector<std::string>{"run", o.study, "--json"};
  for (const auto& s : o.sets) args.insert(args.end(), {"--set", s});
  for (auto& a : p.set_arguments()) args.push_back(a);
  return args;
}

/// A `tpusim plan` child's answer as a point's result: the best plan's run, with its label
/// ("plan") and whether the search finished ("plan_complete"); none fits: the point's error.
void take_plan(const ChildResult& child, Json& record) {
  const Json plan = Json::parse(child.out);
  Json result = best_plan_run(plan);
  if (result.is_null()) {
    record["error"] = one_line(child.err.empty() ? "no plan fits" : child.err);
    return;
  }
  result["plan_complete"] = plan.value("complete", true);
  record["result"] = std::move(result);
}

/// One point as a `tpusim run` child (with --plan, a `tpusim plan` child): its record, with the
/// result or the error. Whatever goes wrong with it (the child, its output, its text) is that
/// point's error: the sweep goes on.
Json run_point(const SweepOptions& o, const Point& p, const std::function<bool()>& cancel = {}) {
  Json record{{"index", p.index},
              {"key", p.key()},
              {"point", Json::object()},
              {"result", nullptr},
              {"error", nullptr}};
  for (const auto& [path, value] : p.settings) record["point"][path] = value;
  try {
    const ChildResult child = run_self(point_arguments(o, p), o.point_timeout_s, cancel);
    if (o.plan.on && (child.exit_code == 0 || child.exit_code == 1) && !child.out.empty())
      take_plan(child, record);
    else if (child.exit_code == 0)
      record["result"] = Json::parse(child.out);
    else
      record["error"] =
          one_line(child.err.empty() ? "exit code " + std::to_string(child.exit_code) : child.err);
  } catch (const std::exception& e) {
    record["result"] = nullptr;
    record["error"] = std::string("could not run the point: ") + e.what();
  }
  return record;
}

/// Runs the points not yet recorded, `-j` at a time, appending each record to results.jsonl and
/// results.csv as it completes (and to `records`).
void run_pending(const SweepOptions& o, const fs::path& dir, const Json& meta,
                 const std::vector<Point>& points, std::vector<StoredRecord>& records) {
  std::map<std::string, bool> recorded;
  for (const auto& r : records) recorded[r.key()] = true;
  std::vector<Point> pending;
  for (const auto& p : points)
    if (!recorded.count(p.key())) pending.push_back(p);

  std::uint64_t jsonl_end = fs::file_size(dir / "results.jsonl");
  std::ofstream jsonl(dir / "results.jsonl", std::ios::app | std::ios::binary);
  std::ofstream csv(dir / "results.csv", std::ios::app | std::ios::binary);
  const auto paths = swept_paths(meta);
  std::mutex lock;
  std::atomic<bool> write_failed{false};
  if (o.started) o.started(points.size(), points.size() - pending.size());
  parallel_for(pending.size(), job_count(o.jobs), [&](std::size_t i) {
    if (stop_signal()) return;  // interrupted: no more points
    const Json record = run_point(o, pending[i]);
    // A point the interrupt stopped is not recorded: --resume runs it again.
    if (stop_signal() && !record["error"].is_null()) return;
    const std::string line = record.dump(-1, ' ', false, Json::error_handler_t::replace);
    std::lock_guard<std::mutex> guard(lock);
    jsonl << line << "\n" << std::flush;
    csv << csv_row(paths, record) << std::flush;
    if (!jsonl || !csv) write_failed = true;
    if (o.point_done)
      o.point_done(pending[i].key(),
                   record["error"].is_null() ? std::string() : record["error"].get<std::string>());
    records.push_back({reports::sweep_summary(record), dir / "results.jsonl", jsonl_end, line.size()});
    jsonl_end += line.size() + 1;
  });
  jsonl.close();
  csv.close();
  if (write_failed || jsonl.fail() || csv.fail())
    throw ConfigError("--out", "", (dir / "results.jsonl").string(),
                      "a writable output directory (writing the results failed)");
}

}  // namespace

namespace {

/// The outcome of a sweep's records written under `dir`.
SweepOutcome outcome_of(const std::string& dir, const std::vector<StoredRecord>& records) {
  SweepOutcome outcome;
  outcome.dir = dir;
  for (const auto& r : records) {
    outcome.failed += r.summary["error"].is_null() ? 0 : 1;
    outcome.points.push_back(r.summary);
  }
  return outcome;
}

}  // namespace

namespace {

/// The axes of a sweep, checked.
std::pair<std::vector<Axis>, std::vector<Axis>> sweep_axes(const SweepOptions& o) {
  std::vector<Axis> grid, zip;
  for (const auto& g : o.grids) grid.push_back(parse_axis("--grid", g));
  for (const auto& z : o.zips) zip.push_back(parse_axis("--zip", z));
  if (grid.empty() && zip.empty())
    throw ConfigError("sweep", "", "no --grid or --zip", "at least one axis to sweep");
  check_options(o);
  return {grid, zip};
}

/// The study must be valid with the sweep's --set, or failing that with some point's settings
/// too (a sweep over `slice` whose --set changes the hardware: the study's own slice is of the
/// other generation, every point's is right; a sweep over seeds whose first seeds cut chips off).
/// When no point makes it valid, its error is the sweep's (exit 2); otherwise the points that are
/// invalid fail on their own.
void check_study(const SweepOptions& o, const std::vector<Point>& points) {
  std::exception_ptr study_error;
  try {
    load_study(o.study, o.sets);
    return;
  } catch (const ConfigError&) {
    if (points.empty()) throw;
    study_error = std::current_exception();
  }
  for (const auto& p : points) {
    std::vector<std::string> sets = o.sets;
    const auto args = p.set_arguments();
    for (std::size_t i = 1; i < args.size(); i += 2) sets.push_back(args[i]);
    try {
      load_study(o.study, sets);
      return;
    } catch (const ConfigError&) {
    }
  }
  std::rethrow_exception(study_error);  // the study's own error, not a point's
}

}  // namespace

std::vector<Json> sweep_point_specs(const SweepOptions& o) {
  const auto [grid, zip] = sweep_axes(o);
  const auto all = enumerate_points(grid, zip);
  check_study(o, all);
  std::vector<Json> specs;
  for (const auto& p : all) {
    Json spec{{"index", p.index}, {"key", p.key()}, {"point", Json::object()}, {"settings", Json::array()}};
    for (const auto& [path, value] : p.settings) {
      spec["point"][path] = value;
      spec["settings"].push_back(Json::array({path, value}));  // in axis order, as the child sets them
    }
    specs.push_back(std::move(spec));
  }
  return specs;
}

Json sweep_point_record(const SweepOptions& o, const Json& spec, const std::function<bool()>& cancel) {
  Point p;
  p.index = spec.at("index").get<std::size_t>();
  for (const auto& setting : spec.at("settings")) p.settings.emplace_back(setting.at(0), setting.at(1));
  return run_point(o, p, cancel);
}

Json sweep_record_summary(const Json& record) { return reports::sweep_summary(record); }

SweepOutcome sweep_study(const SweepOptions& o) {
  o.plan.check();
  const auto [grid, zip] = sweep_axes(o);
  const auto all = enumerate_points(grid, zip);
  check_study(o, all);
  const std::pair<int, int> shard = shard_of(o);
  const auto points = shard_points(all, shard.first, shard.second);

  Json meta{{"schema", "tpusim.sweep/1"},
            {"study", fs::absolute(o.study).lexically_normal().string()},
            {"sets", o.sets},
            {"axes", Json::array()},
            {"points", all.size()},
            {"shard", {shard.first, shard.second}}};
  for (const auto* axes : {&grid, &zip})
    for (const auto& a : *axes)
      meta["axes"].push_back(Json{{"path", a.path}, {"values", a.values}, {"zip", axes == &zip}});
  if (o.plan.on)
    meta["plan"] = Json{{"time_limit_s", o.plan.time_limit_s},
                        {"space", o.plan.space.empty() ? Json(nullptr) : Json(o.plan.space)}};

  const fs::path dir = o.out.empty() ? fs::path("out/sweep") : fs::path(o.out);
  make_output_directory(dir);
  const DirectoryLock lock_out(dir);
  std::vector<StoredRecord> records = resumed_records(o, dir, meta, points);
  write_output_file(dir / "sweep.json", meta.dump(2) + "\n");
  write_outputs(dir, meta, records);  // a clean start: no torn line, CSV matching the record
  catch_stop_signals();               // from here an interrupt keeps the points recorded
  run_pending(o, dir, meta, points, records);
  write_outputs(dir, meta, records);
  throw_if_stopped(std::to_string(records.size()) + " of " + std::to_string(points.size()) +
                   " points recorded in " + dir.string() +
                   " (results.jsonl, reports); --resume runs the rest");

  return outcome_of(dir.string(), records);
}

SweepOutcome merge_sweeps(const std::vector<std::string>& dirs, const std::string& out) {
  Json meta;
  std::vector<StoredRecord> records;
  std::map<std::string, bool> seen;
  for (const auto& d : dirs) {
    Json m = read_json_file(fs::path(d) / "sweep.json");
    if (meta.is_null()) {
      meta = m;
    } else if (m["study"] != meta["study"] || m["axes"] != meta["axes"] || m["sets"] != meta["sets"] ||
               m.value("plan", Json()) != meta.value("plan", Json())) {
      throw ConfigError("merge", "", d,
                        "a shard of the same sweep as " + dirs.front() + " (same study, --set and axes)");
    }
    for (auto& r : read_records(fs::path(d) / "results.jsonl"))
      if (!seen[r.key()]) {
        seen[r.key()] = true;
        records.push_back(std::move(r));
      }
  }
  meta["shard"] = Json::array({0, 1});
  make_output_directory(out);
  write_output_file(fs::path(out) / "sweep.json", meta.dump(2) + "\n");
  write_outputs(out, meta, records);
  SweepOutcome outcome = outcome_of(out, records);
  outcome.points_in_sweep = meta["points"].get<std::size_t>();
  return outcome;
}

}  // namespace tpusim::workflows
