// The one player: puts layers' per-core programs (mesh::LayerProgram, what every core of a group
// runs on its shard) on the task graph. Each core's program is a chain of tasks: a run of a
// layer's compute pieces is one task per core, a collective between runs is one task every core
// of the group waits for, and what a core waits to receive is a dependency of its next task.
// A layer's memory effects ride on its first and last piece. What differs between schedules is
// a named setting or a hook of a subclass: the mesh's player (schedules/mesh.cpp: a whole mesh,
// its combined weight-gradient reductions, fully sharded gathers) and the pipelines' stage
// groups (schedules/pipeline.cpp: the layers of a model chunk for one micro-batch, the chunk's
// input as what re-materialization keeps).
#pragma once

#include <array>
#include <vector>

#include "schedules/functional_runtime.hpp"
#include "schedules/mesh_lowering.hpp"
#include "schedules/step_builder.hpp"

namespace tpusim {

class ProgramPlayer {
 public:
  virtual ~ProgramPlayer() = default;
  ProgramPlayer(const ProgramPlayer&) = delete;
  ProgramPlayer& operator=(const ProgramPlayer&) = delete;

  /// The compute tasks' hardware FLOPs played so far (every core's).
  double hardware_flops() const { return hardware_flops_; }

 protected:
  using Event = mesh::Event;
  using LayerProgram = mesh::LayerProgram;
  using When = sim::MemoryEffect::When;
  using Closure = FunctionalRuntime::Closure;

  /// `cores`: the group's cores (task ids use these; the player indexes them 0 .. size-1);
  /// `programs`: every layer's program, outliving the player; `remat`: what a forward keeps.
  ProgramPlayer(const Study& study, StepBuilder& builder, std::vector<int> cores,
                const std::vector<LayerProgram>& programs, Keep remat);

  /// A layer's forward or backward program: each run of compute pieces (events not played in
  /// place do not break a run) one task per core, then what comes between runs.
  void play(const std::vector<Event>& events, int l, bool forward);
  /// Re-materialization: layer `l`'s forward again just before its backward, on every core: its
  /// compute (all of it, or "save_dots" its ops other than matmuls) and the collectives between
  /// (the activation all-reduces and gathers, halos; "save_dots" runs only those of the ops it
  /// recomputes: a kept matmul's reduced output is not reduced again). Hardware FLOPs, not
  /// model FLOPs.
  void recompute(int l);

  /// Core `i`'s next task `id`: after its last one and what it waits to receive.
  void chain(int i, int id);
  /// Where every core's program stands: each core's last task and what it waits to receive,
  /// each task once.
  std::vector<int> frontier() const;
  /// Core `i`'s part of the frontier.
  std::vector<int> frontier(int i) const;
  /// Adds `t` after every core's program so far (frontier); returns its id.
  int after_every_core(sim::Task t);
  /// A collective every core waits for: after each core's last task and the collectives running
  /// behind the compute (behind_), before its next.
  void every_core_waits(sim::Task t);
  /// Collective `id`, which every core waits for, after those running behind the compute.
  void join_behind(int id);
  /// Each core's next task waits for what arrives (`arrivals`, per core), so its program stays a
  /// chain.
  void receive(const std::vector<std::vector<int>>& arrivals);
  /// A collective over every group of a family at once, named by what it does and over which
  /// mesh dimensions.
  /// Host math run one part after another (empty when there is none).
  static Closure in_turn(std::vector<Closure> parts);
  static sim::Task family_collective(sim::CollectiveOp op, const std::string& what,
                                     const std::vector<std::string>& mesh_dims,
                                     std::vector<std::vector<int>> family, const std::string& phase,
                                     int layer, double bytes);

  // What a subclass decides.
  /// A collective event of a layer's program (not a halo), where the program has it.
  virtual void play_collective(const Event& ev, int l, bool forward) = 0;
  /// A halo exchange between mesh neighbours.
  virtual void play_halo(const Event& ev, bool forward) = 0;
  /// A forward collective again (re-materialization), blocking the recompute's next piece.
  virtual void replay_collective(const Event& ev, int l) = 0;
  /// Whether `ev` (not compute) is played where the program has it, breaking a run of compute.
  virtual bool played_in_place(const Event& ev, bool forward) const = 0;
  /// What layer `l`'s forward keeps on a core for its backward.
  virtual double kept_in_forward(int l) const = 0;
  /// What layer `l`'s first backward piece allocates for weight gradients (when this pass
  /// allocates them: allocate_gradients_).
  virtual double gradients_allocated(int l) const {
    return weight_bytes() * programs_[std::size_t(l)].weight_elements;
  }
  /// Bytes of a weight (and gradient) element as held (Model::weight_bytes).
  double weight_bytes() const { return study_.model.weight_bytes; }
  /// Functional mode: the host math of a run of layer `l`'s pieces on core `i` (`actions`: the
  /// run's); recompute_host: of its recompute. Empty when the schedule runs none.
  virtual Closure host(int i, int l, bool forward, bool first_piece, const std::vector<MeshAction>& actions) {
    (void)i, (void)l, (void)forward, (void)first_piece, (void)actions;
    return {};
  }
  virtual Closure recompute_host(int i, int l) {
    (void)i, (void)l;
    return {};
  }
  /// Whether host() reads the runs' actions (collected only then).
  virtual bool collects_actions() const { return false; }

  /// What the recompute before layer `l`'s backward rebuilds: the rest of what the backward reads.
  double recomputed(int l) const;

  /// Host offload (schedules/offload.hpp): `bytes` of what layer `l`'s forward kept leave each
  /// core for its host once the forward's last piece is done, over its chip's host link, one DMA
  /// after another on a link; its HBM is freed as each ends. The core goes on meanwhile.
  void offload_to_host(int l, double bytes);
  /// They come back from where each core's program stands (one layer ahead of the backward that
  /// reads them), after they left and one after another on a link, HBM taken as each starts.
  void fetch_from_host(int l);
  /// Each core's next task waits for layer `l`'s fetch (nothing when nothing was offloaded).
  void wait_for_host(int l);

  const Study& study_;
  StepBuilder& builder_;
  sim::TaskGraph& g_;
  std::vector<int> cores_;  ///< the group's cores
  int size_;
  const std::vector<LayerProgram>& programs_;
  Keep remat_;
  /// The labels of the tasks played now (a pipeline's stage and micro-batch).
  Labels labels_;
  /// Whether this pass's backward allocates the weight gradients (the first micro-batch's).
  bool allocate_gradients_ = true;
  /// Per layer: weights held while it runs beyond its resident shards (fully sharded gathers),
  /// freed after its last piece; empty: none.
  std::vector<double> extra_;
  std::vector<int> last_;  ///< each core's last compute task
  /// Each core's first compute task since the last take_firsts() (-1: none yet).
  std::vector<int> firsts_;
  std::vector<int> take_firsts() {
    std::vector<int> f(std::size_t(size_), -1);
    std::swap(f, firsts_);
    return f;
  }
  std::vector<std::vector<int>> waits_;  ///< each core: what its next task waits to receive
  /// Collectives running behind the compute (Event::behind) that the next blocking one follows.
  std::vector<int> behind_;
  double hardware_flops_ = 0;
  /// Whether a run of compute pieces spanning several layers, nothing played between them, is
  /// one task per core (a pipeline's model chunk for one micro-batch): named after its first and
  /// last layer, its memory effects walked piece by piece, the task allocating at its start what
  /// the core holds at the run's highest point and settling the rest at its end, so that its
  /// peak is the pieces' peak. flush() ends the run.
  bool merge_layers_ = false;
  void flush();
  /// A compute piece of core `i`, before it becomes a task (or part of a merged one).
  struct Piece {
    const char* phase = "";
    const std::string* what = nullptr;  ///< what the task is named after
    int layer = -1;
    double seconds = 0, hbm_s = 0, grid_s = 0, saved_s = 0, model_flops = 0, hardware_flops = 0;
    std::vector<sim::MemoryEffect> memory;
    Closure host;
  };
  /// The run being merged on a core.
  struct Merged {
    Piece piece;  ///< the first piece, its times and FLOPs the run's
    int first_layer = -1, last_layer = -1;
    std::array<double, sim::kMemoryCategories> level{}, at_peak{};
    double total = 0, peak = 0;
    std::vector<Closure> hosts;
    bool open = false;
  };
  /// Core `i`'s run being merged, before flush(): to replay it on another group (its memory
  /// levels relative to the run's start, no core in them) instead of walking its pieces again.
  const Merged& run(int i) const { return merged_[std::size_t(i)]; }
  void set_run(int i, const Merged& m) { merged_[std::size_t(i)] = m; }

 private:
  /// The compute task of core `i` for `p` (its labels_ set, its name "PHASE WHAT[ mbM] core C").
  sim::Task compute_task(int i, Piece& p) const;
  std::vector<Merged> merged_;
  /// Host offload: per layer, each core's DMA to and from its host (empty: none); per chip, the
  /// last DMA on its host link each way.
  std::vector<std::vector<int>> to_host_, from_host_;
  std::vector<int> link_to_host_, link_from_host_;
  std::vector<double> offloaded_;
  sim::Task host_dma(const char* what, int l, int core, double bytes) const;
  void on_host_link(std::vector<int>& link, int core, int id);
  /// Core `i`'s next compute task (merged into the run when merge_layers_).
  void emit(int i, Piece& p);
  void merge(Merged& m, Piece& p);
  Piece piece_;  ///< reused: its effects' buffer
  /// The memory effects of a layer's compute piece on core `i`.
  void piece_memory(std::vector<sim::MemoryEffect>& memory, int i, int l, bool forward, bool first_piece,
                    bool last_piece) const;
  /// A run of compute pieces, one task per core: their times and FLOPs summed, their host math in
  /// order, the layer's memory effects on its first and last piece.
  void play_compute(const std::vector<const Event*>& run, int l, bool forward, bool first_piece,
                    bool last_piece);
};

}  // namespace tpusim
