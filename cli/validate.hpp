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

namespace tpusim::cli {

/// What a case compares, read from the run's (or fit's) JSON output.
/// - step_time_s: result.json's step_time_s
/// - max_fitting: the answer of `tpusim fit` over `fit.maximize`
/// - activation_bytes_total: what each core holds at its HBM peak besides parameter memory
///   (weights, gradients, optimizer slots): kept activations and workspace, summed over cores
const std::vector<std::string>& validation_quantities();

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
  double measured = 0;
  std::string unit, source;
  double tolerance = 0;  ///< relative
  std::string tolerance_source;

  /// The tpusim arguments (argv[1...]) that produce the prediction.
  std::vector<std::string> command() const;
};

/// Parses one case (schema tpusim.validation_case/1); every problem goes to `problems` with its
/// JSON path. `file` names the case in messages and anchors the study's relative path.
ValidationCase parse_validation_case(const Json& json, const std::filesystem::path& file, Problems& problems);

/// The cases of `dir` (every *.json, by id), or only those named in `ids` (in that order; an
/// unknown id is bad input). Throws ConfigError.
std::vector<ValidationCase> load_validation_cases(const std::filesystem::path& dir,
                                                  const std::vector<std::string>& ids);

/// The predicted value from the child's JSON output; none when the output has no answer (a fit
/// where even the minimum does not fit).
std::optional<double> predicted_value(const ValidationCase& c, const Json& output);

/// One case's record: id, quantity, unit, measured, predicted, error (predicted / measured - 1),
/// tolerance, within, source, description, command (and error_message when the run failed).
Json validation_record(const ValidationCase& c, std::optional<double> predicted,
                       const std::string& failure = {});

/// Mean and worst |error| per quantity and over every case, cases within tolerance.
Json validation_summary(const Json& cases);

struct ValidateOptions {
  std::vector<std::string> ids;
  int jobs = 0;  ///< 0: the number of cores
  bool json = false;
  std::string out;
  std::string dir;  ///< default: configs/validation
  /// Also run every case with each assumed hardware figure of its study moved up by 10 %, and
  /// report how much the prediction moves (cases[].sensitivity: figure -> relative change).
  bool sensitivity = false;
};

/// A copy of the hardware JSON `hardware` with the figure at `figure` (a dotted path such as
/// core.op_overhead_s, as in HardwareSpec::sources) scaled by `factor`, or turned over when it is
/// a flag; none for a figure that is neither (or absent).
std::optional<Json> scaled_hardware(const Json& hardware, const std::string& figure, double factor);

/// `tpusim validate` as a command: 0 when every case is within its tolerance, 1 otherwise.
int cmd_validate(const ValidateOptions& options);

}  // namespace tpusim::cli
