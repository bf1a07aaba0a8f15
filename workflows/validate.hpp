// `tpusim validate`: the shipped measured cases (configs/validation/<id>.json), each a study
// with overrides, the quantity compared, the measured value with its source and a tolerance
// set from the measurement's own uncertainty. Every case runs as `tpusim run` or `tpusim fit`
// in a child process, so the predicted value is exactly what those commands report for the
// study; the output is case / measured / predicted / signed relative error, a summary per
// quantity and the hardware figures that are assumptions.
#pragma once

#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "hardware/json_fields.hpp"

namespace tpusim::workflows {

/// What a case can compare: a number of its command's JSON output (`tpusim run --json`, or
/// `tpusim fit --json` for max_fitting) and the unit its measured value is given in.
/// - step_time_s (s), examples_per_s (examples/s), params (parameters), peak_hbm_bytes (bytes,
///   the busiest core), mxu_utilization and bubble_fraction (fraction): the run's own fields
/// - max_fitting: the answer of `tpusim fit` over `fit.maximize` (unit: the field's, any name)
/// - activation_bytes_total: what each core holds at its HBM peak besides parameter memory
///   (weights, gradients, optimizer slots): kept activations and workspace, summed over cores
/// - parameter_bytes_total: the parameter memory (weights, gradients, optimizer slots) summed
///   over the cores
/// A case with `relative_to` compares the ratio of the quantity to the same command's with the
/// baseline's overrides added (unit: ratio), e.g. a pipeline's throughput normalized to K = 2, M = 1.
struct ValidationQuantity {
  std::string name;
  std::string unit;  ///< empty: the fitted field's own unit
};
const std::vector<ValidationQuantity>& validation_quantities();

struct FitSpec {
  std::string maximize;
  double min = 1, max = 1, step = 1;
};

struct ValidationCase {
  std::string id;    ///< the file's stem
  std::string file;  ///< the case file
  std::string description;
  std::string study;              ///< the study file (resolved against the case file's folder)
  std::vector<std::string> sets;  ///< --set overrides, "path=value"
  std::string quantity;
  std::optional<FitSpec> fit;  ///< required for max_fitting
  /// relative_to.set: the baseline's overrides (added after `sets`); the case compares the
  /// quantity's ratio to the baseline's
  std::optional<std::vector<std::string>> baseline_sets;
  double measured = 0;
  std::string unit, source;
  double tolerance = 0;  ///< relative
  /// tolerance.absolute, or tolerance.grid_steps x fit.step: a prediction is also within when it
  /// is at most this far from the measured value, in its unit (a statement's precision such as
  /// "about 0.52", or a searched answer's grid: its resolution, not a percentage)
  double tolerance_absolute = 0;
  std::string tolerance_source;

  /// The tpusim arguments (argv[1...]) that produce the prediction (its numerator when relative).
  std::vector<std::string> command() const;
  /// The arguments of the baseline run (relative cases): command() with the baseline's overrides.
  std::vector<std::string> baseline_command() const;
  /// The quantity as the summary groups it: a ratio to a baseline is a quantity of its own
  /// ("examples_per_s/baseline").
  std::string compared() const;
};

/// Parses one case (schema tpusim.validation_case/1); every problem goes to `problems` with its
/// JSON path. `file` names the case in messages and anchors the study's relative path.
ValidationCase parse_validation_case(const Json& json, const std::filesystem::path& file, Problems& problems);

/// The cases of `dir` (every *.json, by id), or only those named in `ids` (in that order; an
/// unknown id is bad input). Throws ConfigError.
std::vector<ValidationCase> load_validation_cases(const std::filesystem::path& dir,
                                                  const std::vector<std::string>& ids);

/// A quantity of validation_quantities() (max_fitting excepted) from `tpusim run --json`'s
/// output; none when the output's field is null. Throws std::runtime_error naming a missing field.
std::optional<double> output_quantity(const std::string& quantity, const Json& output);

/// The case's quantity from the child's JSON output; none when the output has no answer (a fit
/// where even the minimum does not fit). Throws std::runtime_error naming a field the output lacks.
std::optional<double> predicted_value(const ValidationCase& c, const Json& output);

/// One case's record: id, quantity, unit, measured, predicted, error (predicted / measured - 1),
/// tolerance, within, source, description, command (and error_message when the run failed).
Json validation_record(const ValidationCase& c, std::optional<double> predicted,
                       const std::string& failure = {});

/// Mean and worst |error| per quantity and over every case, cases within tolerance.
Json validation_summary(const Json& cases);

/// Summary of the cases' prediction intervals (records with "interval"): how many contain the
/// measured value (coverage) and their mean width relative to the prediction, overall and per
/// quantity.
Json interval_summary(const Json& cases);
/// --intervals: how many predictions proper lie inside their leave-one-out band (the assumption
/// interval with the model's error from the other cases: model_error.hpp), and its mean width.
Json band_summary(const Json& cases);

struct ValidateOptions {
  std::vector<std::string> ids;
  int jobs = 0;  ///< 0: the number of cores
  bool json = false;
  std::string out;
  std::string dir;  ///< default: configs/validation
  /// Also run every case with each assumed hardware figure of its study moved up by 10 %, and
  /// report how much the prediction moves (cases[].sensitivity: figure -> relative change).
  bool sensitivity = false;
  /// Also each case's prediction interval over its assumptions' ranges (workflows/intervals.hpp), and
  /// whether the measured value lies inside it.
  bool intervals = false;
  /// "figure=value": every case runs on its own hardware with these figures overridden (a what-if
  /// for calibration: the overridden figures are no longer assumptions).
  std::vector<std::string> hardware_overrides;
  /// A regression check: exit 0 when every case is within its tolerance or predicts what was
  /// recorded (`recorded/predictions.json` beside the cases), 1 otherwise.
  bool check = false;
  /// Write this run's predictions as the recorded ones.
  bool record = false;
};

/// Where a cases folder keeps its recorded predictions (a subfolder: not read as a case).
std::filesystem::path recorded_predictions_file(const std::filesystem::path& cases_dir);
/// The recorded predictions of a cases folder, by case id (none recorded: an empty object).
/// Throws ConfigError for a malformed file.
Json recorded_predictions(const std::filesystem::path& cases_dir);

/// A copy of the hardware JSON `hardware` with the figure at `figure` (a dotted path such as
/// core.op_overhead_s, as in HardwareSpec::sources) scaled by `factor`, turned over when it is
/// a flag, or rotated when it is a list of choices in order of preference (the second first, e.g.
/// chip.collective_algorithms); none for a figure that is none of these (or absent).
std::optional<Json> scaled_hardware(const Json& hardware, const std::string& figure, double factor);

/// The tpusim.validation/1 report of `records` (the cases `o` names, in order): the summary, the
/// assumed figures and, with `o.check`, the comparison with the recorded predictions.
Json validation_report(const ValidateOptions& o, Json records);

/// What a validation run gave.
struct ValidationOutcome {
  Json report;  ///< the tpusim.validation/1 JSON
  /// Every case within its tolerance; with `check`, every case as recorded (1e-9 relative).
  bool passed = false;
  std::vector<std::string> moved;  ///< with `check`: the cases whose prediction moved
};

/// Runs the cases (progress on stderr), and writes --out's files and --record's predictions
/// when asked. Throws ConfigError for bad input. The CLI prints the report and exits 0 when it
/// passed, 1 otherwise.
ValidationOutcome validate_cases(const ValidateOptions& options);

}  // namespace tpusim::workflows
