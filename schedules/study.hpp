// A study: which hardware, which slice, which model, how many examples per step, which
// optimizer and which schedule. Loaded from JSON (with `--set path=value` overrides applied
// first), validated in one pass that reports every problem with its JSON path.
#pragma once

#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "hardware/hardware_spec.hpp"
#include "hardware/network_state.hpp"
#include "models/model.hpp"
#include "models/save_policies/save_policy.hpp"
#include "schedules/optimizer.hpp"
#include "sim/memory_tracker.hpp"
#include "sim/task_graph.hpp"

namespace tpusim {

struct Study;
class FunctionalRuntime;
class LayerCostCache;

/// What a schedule hands the engine and the reports.
struct BuiltStep {
  sim::TaskGraph graph{0};
  double model_flops = 0;     ///< the math of one step over all cores
  double hardware_flops = 0;  ///< what the MXUs execute (padding, recomputation)
  Json details;               ///< schedule-specific facts for result.json (buckets, stages, ...)
  /// For a representative step (Schedule::representative_step): how many identical replicas its
  /// busy cores stand for (1: the graph is the whole step).
  int replicas_represented = 1;
};

/// What plan needs of a candidate schedule before simulating it: no step is shorter than
/// `seconds`, and no core's peak HBM is lower than `floor_bytes` (Schedule::bound).
struct StepBound {
  double seconds = 0;  ///< the longest chain of dependent work, or the busiest core's
  int cores_used = 0;
  double resident_bytes = 0;           ///< the most any core holds all step
  sim::MemoryBreakdown resident_by{};  ///< that core's resident state per memory category
  /// The busiest core's resident state plus the activations and workspace its own program must
  /// hold at once.
  double floor_bytes = 0;
};

/// The examples one core reads from its host per step (its infeed).
struct CoreInput {
  int shard = -1;       ///< which examples: cores with the same shard read the same ones (-1: none)
  double examples = 0;  ///< how many
  double part = 1;      ///< the fraction of each example's input it reads (a spatially split image)
};

/// A way of running a training step on a slice. Implementations register under their JSON
/// "kind" (schedule_registry()); a new schedule never touches the engine.
class Schedule {
 public:
  virtual ~Schedule() = default;
  /// Builds the task graph of one training step. Called only on a validated study. With a
  /// `functional` runtime, tasks carry the host closures that do the step's math.
  virtual BuiltStep build(const Study& study, FunctionalRuntime* functional = nullptr) const = 0;
  /// A step whose longest chain of work and per-core memory floors are the whole step's, cheaper
  /// to build: schedules of identical replicas build one replica with its collectives over every
  /// replica (plan bounds candidates with it). The default: the whole step.
  virtual BuiltStep representative_step(const Study& study) const { return build(study); }
  /// The schedule's settings with defaults filled in (echoed in result.json).
  virtual Json resolved() const = 0;
  /// Examples one layer processes at once on a core (the per-core batch, or the micro-batch).
  virtual std::int64_t layer_batch(const Study& study) const = 0;
  /// What each core reads from its host's infeed per step, by core.
  virtual std::vector<CoreInput> input(const Study& study) const = 0;
  /// The step's bound without the engine (plan ranks and prunes candidates with it). The
  /// default: the representative step's task graph, each task at its floor (schedules/step_bound).
  virtual StepBound bound(const Study& study) const;
  /// Replicas whose batch-norm statistics are combined (cross-replica batch norm); 1: each its own.
  virtual int batch_norm_group() const { return 1; }
  /// Hardware figures (dotted paths of the hardware file) this schedule never reads, with why: a
  /// what-if on one of them changes nothing here, and the run says so.
  virtual std::vector<std::pair<std::string, std::string>> ignored_hardware_figures() const { return {}; }
  /// The save policy its partial re-materialization keeps by (a "remat" policy name; layers are
  /// lowered with it): "save_dots" unless it names another.
  virtual const SavePolicy& save_policy() const { return save_dots_policy(); }
  /// What a user should know about a hardware what-if on this schedule besides the figures it
  /// never reads: `on_base` gives the study on the what-if's base hardware (parsed when asked;
  /// null when that hardware cannot run it). The default: nothing.
  virtual std::vector<std::string> what_if_notes(const Study& study,
                                                 const std::function<const Study*()>& on_base) const {
    (void)study, (void)on_base;
    return {};
  }
};

/// Parses a schedule's fields (the "kind" key is already read) and checks them against the
/// rest of the study (batch divisibility, core counts); records problems.
using ScheduleFactory =
    std::function<std::unique_ptr<Schedule>(Fields& fields, const Study& study, Problems& problems)>;
const std::map<std::string, ScheduleFactory>& schedule_registry();

/// A value the study assumes where nothing published gives it (study key "assumptions": {"key":
/// dotted path, "range": [low, high], "source"}), e.g. GPipe Table 1's micro-batch count.
/// Prediction intervals run the study at both ends; a `--set` of the key makes it a choice, not
/// an assumption (study_json drops it).
struct StudyAssumption {
  std::string key;
  Json value, low, high;
  std::string source;
  /// The validation cases (ids) its value was inferred from: for them the prediction is an
  /// explanation, not a test (`validate` counts them apart).
  std::vector<std::string> inferred_from;
};

struct Study {
  std::string file;  ///< where it came from ("" if built in memory)
  Json json;         ///< the study after overrides, as given
  /// The hardware as the study's devices see it (device_view): a core is a device, a TensorCore
  /// or, under megacore, a whole chip.
  HardwareSpec hardware;
  /// Study key "megacore": a device is a whole chip (its TensorCores as one). Defaults to what
  /// the hardware's chips allow (chip.megacore).
  bool megacore = false;
  /// Study key "compiler_remat" (default true): a step over HBM is answered as the compiler
  /// answers it, by re-materializing until it fits (workflows/compiler_remat.hpp); false asks
  /// whether the study's own policy fits.
  bool compiler_remat = true;
  /// Study key "hbm_margin": HBM a plan must leave free on every device (bytes, or "N%" of the
  /// device's usable HBM), added to the runtime's reserve so that every verdict (run, fit, plan,
  /// the compiler's re-materialization) leaves it; 0 by default.
  double hbm_margin_bytes = 0;
  /// Study key "perturbations": slow chips and links (schedules/perturbations.hpp); uniform when absent.
  NetworkState network;
  /// The hardware file's JSON that `hardware` was parsed from, the study's in-place overrides
  /// applied (what a changed copy of the study's hardware starts from).
  Json hardware_json;
  SliceSpec slice;
  Model model;
  /// Examples per step on each slice: the study's "batch" (the global batch) over `slices`.
  std::int64_t batch = 0;
  /// Study key "slices" (default 1): identical slices joined by the data-center network, data
  /// parallelism across them the outermost dimension of every schedule. The schedule plays one
  /// slice with `batch` examples; its reductions over data-parallel replicas continue across the
  /// slices (sim::Task::across_slices).
  int slices = 1;
  /// The examples of one step over every slice (the study's "batch").
  std::int64_t global_batch() const { return batch * slices; }
  /// Whether a hardware figure (its dotted path) can matter to this study: the data-center
  /// network's only to a study of several slices, the quantization's only to one in 8 bits.
  bool reads_figure(const std::string& path) const {
    if (path == "core.quantize_vpu_ops_per_element" || path == "core.int8_peak_ratio_to_bf16" ||
        path == "core.fp8_peak_ratio_to_bf16")
      return hardware.core.matmul_precision != MatmulPrecision::Bf16;
    return slices > 1 || path.rfind("dcn.", 0) != 0;
  }
  /// Study key "target": how much training the run is for, in one unit (tokens, examples or
  /// steps; none: no target), and key "price_per_chip_hour" (USD; 0: no price): what
  /// time_to_train and cost in the result answer (workflows/time_to_train.hpp).
  struct Target {
    std::string unit;  ///< "tokens", "examples", "steps" or "" (none)
    double amount = 0;
  } target;
  double price_per_chip_hour = 0;
  /// What a long run loses besides its steps (configs/training-run.json, each figure with its
  /// range; study key "training_run" sets any of them, which drops its range): interruptions per
  /// chip-hour and per host-hour, checkpoint write and read rates per host, the restart after an
  /// interruption; and the run's own choices: steps between checkpoints (0: Young's optimum) and
  /// an evaluation of `evaluation_steps` forward passes every `evaluation_every_steps` (0: none).
  struct TrainingRun {
    struct Figure {
      double value = 0, low = 0, high = 0;
      std::string source;
    };
    Figure failures_per_chip_hour, failures_per_host_hour, write_bytes_per_s, read_bytes_per_s, restart_s;
    std::int64_t checkpoint_every_steps = 0, evaluation_every_steps = 0, evaluation_steps = 0;
  } training_run;
  Optimizer optimizer;
  /// What-if (study key input_pipeline.examples_per_s_per_host): how many examples a host's input
  /// pipeline prepares per second; 0: not given, the hosts keep up.
  double host_examples_per_s = 0;
  /// What-if (study key input_pipeline.seconds_per_step_per_host): a host's work per step whatever
  /// its examples (its loop's iteration, the infeed enqueue of each of its cores); 0: none.
  double host_seconds_per_step = 0;
  /// Whether the study gives the hosts' preparation a cost (a rate, a cost per step, or both).
  bool host_preparation_given() const { return host_examples_per_s > 0 || host_seconds_per_step > 0; }
  /// What-if (study key training_loop): the host's work between two device loops of
  /// `steps_per_loop` steps (TPUEstimator's iterations_per_loop), during which the TPUs wait;
  /// 0 s: none.
  double host_seconds_per_loop = 0;
  std::int64_t steps_per_loop = 1;
  std::shared_ptr<const Schedule> schedule;
  std::vector<StudyAssumption> assumptions;
  /// Layer costs shared with other studies of the same model and hardware (plan's candidates);
  /// null: each step builder computes its own.
  std::shared_ptr<LayerCostCache> layer_costs;

  /// The model's state: every weight and optimizer slot once, each in its dtype (what a
  /// checkpoint writes; what the devices hold between them at the least).
  double state_bytes() const {
    double bytes = 0;
    for (const auto& layer : model.layers)
      bytes +=
          model.weight_bytes * double(layer.params()) + model.slot_bytes * optimizer.slot_elements(layer);
    return bytes;
  }
  /// Devices of the slice: chips x devices per chip.
  int cores() const { return slice.chips() * hardware.chip.cores; }
};

/// Applies one `dotted.path=value` override to a study's JSON. The value is read as JSON when
/// it parses (numbers, true, [1,2], {"a":1}), else as a string. Array elements are addressed
/// as `path.0`. Throws ConfigError on a malformed assignment.
void apply_override(Json& study, const std::string& assignment);

/// Validates and resolves a study. `base_dir` resolves a relative hardware path.
Study parse_study(const Json& json, const std::string& context, const std::filesystem::path& base_dir = {});

/// `base` with another schedule, validated as parse_study would (ConfigError otherwise), without
/// reading or checking the rest again (the plan's candidates differ only in their schedule).
Study with_schedule(const Study& base, const Json& schedule);

/// Reads and overrides, without validating; an assumption whose key an override sets is dropped
/// (the value is then the user's choice). Throws ConfigError.
Json study_json(const std::filesystem::path& file, const std::vector<std::string>& overrides = {});
/// A study's JSON with `--set` overrides applied, each dropping the assumptions about what it sets.
Json with_overrides(Json json, const std::vector<std::string>& overrides);

/// Reads, overrides, validates. Throws ConfigError.
Study load_study(const std::filesystem::path& file, const std::vector<std::string>& overrides = {});

}  // namespace tpusim
