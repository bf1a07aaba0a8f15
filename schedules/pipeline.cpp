#include "schedules/pipeline.hpp"

#include <set>

#include "hardware/torus.hpp"
#include "schedules/partitioner.hpp"

namespace tpusim {

namespace {

const char* kind_name(Pipeline::Order o) { return o == Pipeline::Order::GPipe ? "gpipe" : "one_f_one_b"; }

/// One compute step of a stage's program.
struct Item {
  enum Kind { Forward, Recompute, Backward } kind;
  int micro_batch;
};

/// The order a stage runs its work in.
std::vector<Item> stage_program(Pipeline::Order order, int stage, int stages, int micro_batches, bool remat) {
  std::vector<Item> items;
  auto backward = [&](int m) {
    if (remat) items.push_back({Item::Recompute, m});
    items.push_back({Item::Backward, m});
  };
  if (order == Pipeline::Order::GPipe) {
    for (int m = 0; m < micro_batches; ++m) items.push_back({Item::Forward, m});
    for (int m = micro_batches - 1; m >= 0; --m) backward(m);
    return items;
  }
  const int warmup = std::min(stages - stage - 1, micro_batches);
  for (int m = 0; m < warmup; ++m) items.push_back({Item::Forward, m});
  for (int i = 0; i < micro_batches - warmup; ++i) {
    items.push_back({Item::Forward, warmup + i});
    backward(i);
  }
  for (int m = micro_batches - warmup; m < micro_batches; ++m) backward(m);
  return items;
}

}  // namespace

std::vector<int> pipeline_core_order(const SliceSpec& slice, int cores_per_chip, int chips_per_pipeline) {
  const Torus torus(slice);
  const int X = slice.chips_x, Y = slice.chips_y;
  int px = 0, py = 0;
  for (int w = std::min(X, chips_per_pipeline); w >= 1 && px == 0; --w) {
    if (X % w == 0 && chips_per_pipeline % w == 0 && Y % (chips_per_pipeline / w) == 0) {
      px = w;
      py = chips_per_pipeline / w;
    }
  }
  if (px == 0) {  // no tiling: one snake over the whole slice
    px = X;
    py = Y;
  }
  std::vector<int> order;
  for (int by = 0; by < Y / py; ++by)
    for (int bx = 0; bx < X / px; ++bx)
      for (int y = 0; y < py; ++y)
        for (int i = 0; i < px; ++i) {
          const int x = (y % 2 == 0) ? i : px - 1 - i;
          const int chip = torus.rank(Coord{bx * px + x, by * py + y});
          for (int c = 0; c < cores_per_chip; ++c) order.push_back(chip * cores_per_chip + c);
        }
  return order;
}

Pipeline::Pipeline(Order order, Fields& f, const Study& study, Problems& problems) : order_(order) {
  const int layers = int(study.model.layers.size());
  stages_ = int(f.integer("stages", 1, 4096));
  microbatches_ = int(f.integer("microbatches", 1, 1 << 20));
  remat_ = f.boolean_or("remat", true);
  replicas_ = int(f.integer_or("replicas", 1, 1, 1 << 20));
  if (!problems.empty()) return;
  if (stages_ > layers) {
    problems.add(f.path_of("stages"), Json(stages_),
                 "at most the model's " + std::to_string(layers) + " layers (every stage needs one)");
  }
  if (std::int64_t(stages_) * replicas_ > study.cores()) {
    problems.add(f.path_of("stages"), Json(stages_),
                 "stages x replicas (" + std::to_string(std::int64_t(stages_) * replicas_) +
                     ") at most the " + std::to_string(study.cores()) + " cores of slice " +
                     study.slice.name);
  }
  if (study.batch % (std::int64_t(replicas_) * microbatches_) != 0) {
    problems.add(
        "batch", Json(study.batch),
        "a multiple of replicas x microbatches = " + std::to_string(std::int64_t(replicas_) * microbatches_) +
            " (equal micro-batches on every replica)");
  }
  if (const Json* p = f.optional("partition")) {
    if (p->is_string() && (p->get<std::string>() == "balanced" || p->get<std::string>() == "memory_aware")) {
      memory_aware_ = p->get<std::string>() == "memory_aware";  // computed at build time
    } else if (p->is_array() && int(p->size()) == stages_) {
      int total = 0;
      for (std::size_t i = 0; i < p->size(); ++i) {
        const Json& n = (*p)[i];
        if (!n.is_number_integer() || n.get<std::int64_t>() < 1 || n.get<std::int64_t>() > layers) {
          problems.add(index_path(f.path_of("partition"), i), n, "a layer count >= 1");
          continue;
        }
        partition_.push_back(int(n.get<std::int64_t>()));
        total += partition_.back();
      }
      if (problems.empty() && total != layers) {
        problems.add(f.path_of("partition"), *p,
                     "layer counts summing to the model's " + std::to_string(layers) + " layers");
      }
    } else {
      problems.add(f.path_of("partition"), *p,
                   "\"balanced\", \"memory_aware\" or an array of " + std::to_string(stages_) +
                       " layer counts (one per stage)");
    }
  }
  if (const Json* p = f.optional("placement")) {
    if (p->is_string() && p->get<std::string>() == "auto") {
      // computed at build time
    } else if (p->is_array() && int(p->size()) == replicas_) {
      std::set<int> used;
      for (std::size_t r = 0; r < p->size(); ++r) {
        const Json& row = (*p)[r];
        const std::string path = index_path(f.path_of("placement"), r);
        if (!row.is_array() || int(row.size()) != stages_) {
          problems.add(path, row, "an array of " + std::to_string(stages_) + " core ids (one per stage)");
          continue;
        }
        placement_.emplace_back();
        for (std::size_t s = 0; s < row.size(); ++s) {
          const Json& c = row[s];
          if (!c.is_number_integer() || c.get<std::int64_t>() < 0 || c.get<std::int64_t>() >= study.cores()) {
            problems.add(index_path(path, s), c,
                         "a core id in [0, " + std::to_string(study.cores() - 1) + "]");
          } else if (!used.insert(int(c.get<std::int64_t>())).second) {
            problems.add(index_path(path, s), c, "a core not used by another stage or replica");
          } else {
            placement_.back().push_back(int(c.get<std::int64_t>()));
          }
        }
      }
    } else {
      problems.add(
          f.path_of("placement"), *p,
          "\"auto\" or an array of " + std::to_string(replicas_) + " arrays of core ids (one per replica)");
    }
  }
}

Json Pipeline::resolved() const {
  Json j{{"kind", kind_name(order_)},
         {"stages", stages_},
         {"microbatches", microbatches_},
         {"remat", remat_},
         {"replicas", replicas_}};
  j["partition"] = !partition_.empty() ? Json(partition_) : Json(memory_aware_ ? "memory_aware" : "balanced");
  j["placement"] = placement_.empty() ? Json("auto") : Json(placement_);
  return j;
}

Pipeline::Partition Pipeline::partition(const Study& study) const {
  if (!partition_.empty()) return {partition_, "explicit"};
  StepBuilder builder(study, 1);
  const std::int64_t b = layer_batch(study);
  std::vector<double> costs;
  for (int l = 0; l < int(study.model.layers.size()); ++l) {
    const LayerCost& c = builder.cost(l, b);
    costs.push_back(c.forward_s * (remat_ ? 2 : 1) + c.backward_s);
  }
  const auto by_cost = balanced_partition(costs, stages_);
  if (!memory_aware_) return {by_cost, "cost"};
  const double usable = study.hardware.core.usable_hbm_bytes();
  auto fits = [&](int stage, int first, int last) {
    return stage_peak_bytes(builder, study, {first, last}, stage) <= usable;
  };
  bool cost_cut_fits = true;
  for (int s = 0, first = 0; s < stages_; first += by_cost[s], ++s)
    cost_cut_fits = cost_cut_fits && fits(s, first, first + by_cost[s]);
  if (cost_cut_fits) return {by_cost, "cost"};
  const auto by_memory = balanced_partition(costs, stages_, fits);
  if (by_memory.empty()) return {by_cost, "cost (no partition fits)"};
  return {by_memory, "memory"};
}

double Pipeline::stage_peak_bytes(StepBuilder& builder, const Study& study, LayerRange range,
                                  int stage) const {
  const std::int64_t b = layer_batch(study);
  const LayerCost c = builder.cost(range, b);
  double held = 0;  // weights and optimizer slots, resident all step
  for (int l = range.first; l < range.last; ++l) {
    const Layer& layer = study.model.layers[l];
    held += kWeightBytes * (double(layer.params()) + study.optimizer.slot_elements(layer));
  }
  const double kept = remat_ ? c.input_bytes : c.stash_bytes;
  double forward_transient = c.workspace_bytes;
  if (remat_)
    for (int l = range.first; l < range.last; ++l)
      forward_transient =
          std::max(forward_transient, builder.cost(l, b).stash_bytes + builder.cost(l, b).workspace_bytes);
  double peak = held;
  bool first_backward = true;
  for (const Item& it : stage_program(order_, stage, stages_, microbatches_, remat_)) {
    switch (it.kind) {
      case Item::Forward:
        held += kept;
        peak = std::max(peak, held + forward_transient);
        break;
      case Item::Recompute:
        held += c.stash_bytes;
        peak = std::max(peak, held + c.workspace_bytes);
        break;
      case Item::Backward:
        if (first_backward) held += builder.gradient_bytes(range);
        first_backward = false;
        peak = std::max(peak, held + c.backward_workspace_bytes);
        held -= c.stash_bytes + (remat_ ? c.input_bytes : 0.0);
        break;
    }
  }
  return peak;
}

std::vector<std::vector<int>> Pipeline::placement(const Study& study) const {
  if (!placement_.empty()) return placement_;
  const int cpc = study.hardware.chip.cores;
  const int chips_per_pipeline = std::max(1, (stages_ + cpc - 1) / cpc);
  const auto order = pipeline_core_order(study.slice, cpc, chips_per_pipeline);
  std::vector<std::vector<int>> cores(replicas_, std::vector<int>(stages_));
  for (int r = 0; r < replicas_; ++r)
    for (int s = 0; s < stages_; ++s) cores[r][s] = order[std::size_t(r) * stages_ + s];
  return cores;
}

BuiltStep Pipeline::build(const Study& study, FunctionalRuntime* functional) const {
  const int K = stages_, M = microbatches_, R = replicas_;
  const std::int64_t b = layer_batch(study);
  const Partition cut = partition(study);
  const auto& sizes = cut.sizes;
  const auto cores = placement(study);
  std::vector<LayerRange> ranges;
  for (int s = 0, first = 0; s < K; first += sizes[s], ++s) ranges.push_back({first, first + sizes[s]});
  const Keep keep = remat_ ? Keep::Input : Keep::All;

  StepBuilder builder(study, study.cores(), functional);
  // Every compute task first, in each stage's program order (a core's program is the order its
  // tasks are added); dependencies afterwards.
  std::vector<std::vector<std::vector<int>>> F(R, std::vector<std::vector<int>>(K, std::vector<int>(M))),
      Rc = F, B = F;
  std::vector<std::vector<int>> last_backward(R, std::vector<int>(K, -1));
  for (int r = 0; r < R; ++r)
    for (int s = 0; s < K; ++s) {
      const int core = cores[r][s];
      builder.resident_weights(core, ranges[s], 1.0);
      bool first_backward = true;
      for (const Item& it : stage_program(order_, s, K, M, remat_)) {
        const Labels labels{s, it.micro_batch, (std::int64_t(r) * M + it.micro_batch) * b};
        switch (it.kind) {
          case Item::Forward:
            F[r][s][it.micro_batch] = builder.forward(core, ranges[s], b, -1, keep, labels);
            break;
          case Item::Recompute:
            Rc[r][s][it.micro_batch] = builder.recompute(core, ranges[s], b, -1, labels);
            break;
          case Item::Backward:
            B[r][s][it.micro_batch] = last_backward[r][s] =
                builder.backward(core, ranges[s], b, -1, keep, first_backward, labels);
            first_backward = false;
            break;
        }
      }
    }
  auto& g = builder.graph();
  for (int r = 0; r < R; ++r)
    for (int m = 0; m < M; ++m)
      for (int s = 0; s < K; ++s) {
        const Labels labels{s, m, (std::int64_t(r) * M + m) * b};
        if (s > 0) {
          const double bytes = builder.cost(ranges[s - 1], b).output_bytes;
          g.depend(builder.transfer(cores[r][s - 1], cores[r][s], bytes, F[r][s - 1][m],
                                    "activation_transfer", labels, ranges[s].first, false),
                   F[r][s][m]);
        }
        if (s < K - 1) {
          const double bytes = builder.cost(ranges[s], b).output_bytes;
          g.depend(builder.transfer(cores[r][s + 1], cores[r][s], bytes, B[r][s + 1][m], "gradient_transfer",
                                    labels, ranges[s].last, true),
                   B[r][s][m]);
        } else {
          g.depend(F[r][s][m], B[r][s][m]);
        }
        if (remat_) {
          g.depend(F[r][s][m], Rc[r][s][m]);
          g.depend(Rc[r][s][m], B[r][s][m]);
        }
      }

  // Gradients of each stage all-reduced across the replicas, then the update.
  Json stages_json = Json::array();
  for (int s = 0; s < K; ++s) {
    int allreduce = -1;
    if (R > 1) {
      std::vector<int> group;
      for (int r = 0; r < R; ++r) group.push_back(cores[r][s]);
      allreduce = builder.collective(sim::CollectiveOp::AllReduce, "gradient_allreduce",
                                     "allreduce stage " + std::to_string(s), group,
                                     builder.gradient_bytes(ranges[s]), ranges[s]);
      g.task(allreduce).stage = s;
      for (int r = 0; r < R; ++r) g.depend(last_backward[r][s], allreduce);
    }
    for (int r = 0; r < R; ++r) {
      const int upd = builder.update(cores[r][s], ranges[s], 1.0, Labels{s, -1});
      g.depend(allreduce >= 0 ? allreduce : last_backward[r][s], upd);
    }
    const LayerCost c = builder.cost(ranges[s], b);
    std::int64_t params = 0;
    for (int l = ranges[s].first; l < ranges[s].last; ++l) params += study.model.layers[l].params();
    Json stage_cores = Json::array();
    for (int r = 0; r < R; ++r) stage_cores.push_back(cores[r][s]);
    stages_json.push_back(Json{{"stage", s},
                               {"layers", {ranges[s].first, ranges[s].last - 1}},
                               {"first_layer", study.model.layers[ranges[s].first].name},
                               {"last_layer", study.model.layers[ranges[s].last - 1].name},
                               {"params", params},
                               {"forward_s", c.forward_s},
                               {"backward_s", c.backward_s},
                               {"cost_s", c.forward_s * (remat_ ? 2 : 1) + c.backward_s},
                               {"boundary_bytes", c.output_bytes},
                               {"cores", stage_cores}});
  }
  std::vector<double> stage_costs;
  for (const auto& st : stages_json) stage_costs.push_back(st["cost_s"].get<double>());
  double largest = 0, total = 0;
  for (double c : stage_costs) {
    largest = std::max(largest, c);
    total += c;
  }

  BuiltStep step = builder.finish();
  step.details = Json{{"micro_batch_size", b},
                      {"bubble_fraction_ideal", double(K - 1) / double(M + K - 1)},
                      {"stage_imbalance", total > 0 ? largest / (total / K) - 1.0 : 0.0},
                      {"partition_set_by", cut.set_by},
                      {"stages", stages_json},
                      {"placement", cores}};
  return step;
}

}  // namespace tpusim
