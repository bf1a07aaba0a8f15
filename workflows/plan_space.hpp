// The space `tpusim plan` searches: every schedule of the registered kinds that could run a
// study's model, batch and slice (data parallelism with its update and gradient settings,
// pipelines over stages x replicas x micro-batches, mesh layouts over the named dimensions the
// model's ops have; each with every re-materialization policy). A pure function of the study, so
// it is tested without the engine; `--space FILE` narrows it.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "schedules/study.hpp"

namespace tpusim::workflows {

/// What `--space FILE` may restrict (absent: everything). Parsed strictly (ConfigError).
struct PlanSpace {
  std::optional<std::vector<std::string>> kinds;  ///< schedule kinds
  std::optional<std::vector<std::int64_t>> stages, replicas, microbatches, model_axis;
  /// Cores per pipeline stage (tensor parallelism); absent, for a model with d_ff or heads
  /// dimensions (1 otherwise): 1, 2 and 4 (a group of at most two chips).
  std::optional<std::vector<std::int64_t>> tensor_parallel;
  /// Model chunks per one_f_one_b stage (Megatron's interleaving); absent: 1, 2 and 4 where the
  /// micro-batches are a multiple of the stages and the layers suffice.
  std::optional<std::vector<std::int64_t>> virtual_stages;
  /// Data parallelism's micro-batches per replica whose gradients are accumulated; absent: 1, 2,
  /// 4 and 8 where they divide the examples each replica takes (not with fully sharded weights).
  std::optional<std::vector<std::int64_t>> accumulation_steps;
  /// Data parallelism's groups of replicas its sharded and fully sharded pieces are cut over
  /// (schedule.shard_group; label word "group G"); absent: every replica (one group).
  std::optional<std::vector<std::int64_t>> shard_group;
  /// Re-materialization policies (false, true, "save_dots").
  std::optional<std::vector<Json>> remat;
  std::optional<std::vector<std::string>> weight_update, gradient_dtype;
  /// The model's attention ("standard", "flash"); absent: both where the model has flash
  /// attention (a transformer without attention dropout), the study's own otherwise.
  std::optional<std::vector<std::string>> attention;
  /// Pipeline partitions; absent: "memory_aware" alone (the cost-balanced cut whenever that
  /// fits, so it loses nothing to "balanced" and fits where "balanced" overflows).
  std::optional<std::vector<std::string>> partition;
  /// Pipeline placements ("auto", "by_stage"); absent: "auto" alone (on a 2D torus with two
  /// cores per chip, a stage's replicas spread one per chip all-reduce over more links than
  /// packed side by side: by_stage was slower on every case tried, see the README).
  std::optional<std::vector<std::string>> placement;
  /// The tensor dimensions a mesh puts on its model axis, one set per layout; absent: for a
  /// transformer, Megatron's {d_ff, heads, vocab}, {d_model} and {seq} (sequence parallelism);
  /// for a convolutional net, {height}.
  std::optional<std::vector<std::vector<std::string>>> model_axis_dims;
  /// Meshes keeping each layer's input split over the model axis under re-materialization
  /// (schedule.layer_input_split): true, false; absent: false alone (a gather per layer that
  /// only pays where memory is short, so a space asks for it).
  std::optional<std::vector<bool>> layer_input_split;
  /// Data parallelism and meshes re-materializing whole layers with each layer's input offloaded
  /// to host memory (schedule.offload ["layer_input"]): true, false; absent: false alone (the
  /// hosts' memory and links spent only where HBM is short, so a space asks for it). Only on
  /// hardware whose file gives its hosts' memory.
  std::optional<std::vector<bool>> offload;
  std::int64_t max_microbatches = 64;  ///< M never above this (or the examples per replica)
  /// Three-dimensional meshes (batch x model2 x model) too; on by default (a space file may turn
  /// them off: on a large slice they add a fifth to the candidates to bound).
  bool meshes_3d = true;
};

/// Reads a `--space` file (schema tpusim.plan_space/1).
PlanSpace read_plan_space(const std::string& file);

/// The candidate schedules for `study` (its own schedule is ignored), in a fixed order.
std::vector<Json> plan_candidates(const Study& study, const PlanSpace& space);

/// A short, unique name of a candidate schedule ("gpipe K=2 R=16 M=16 remat").
std::string plan_label(const Json& schedule);

/// What a label names: the schedule (every setting the candidate had: plan_label's inverse) and
/// the model's attention when the label ends in one ("flash", "standard"; "" otherwise).
struct LabeledPlan {
  Json schedule;
  std::string attention;
};
/// A plan's label read back (as `tpusim plan` prints it, with or without the attention word).
/// ConfigError naming --plan-label when it is not one.
LabeledPlan schedule_of_plan_label(const std::string& label);

/// The --set assignments that run a plan's label on `study` (a file, with `sets` applied): its
/// schedule in place of the study's, the study's batch_norm_group kept (a training setting plan
/// keeps in every candidate), and the model's attention when the label names one.
std::vector<std::string> plan_label_sets(const std::string& label, const std::string& study,
                                         const std::vector<std::string>& sets);

}  // namespace tpusim::workflows
