#include "schedules/program_player.hpp"

#include <algorithm>

namespace tpusim {

using sim::MemoryCategory;

ProgramPlayer::ProgramPlayer(const Study& study, StepBuilder& builder, std::vector<int> cores,
                             const std::vector<LayerProgram>& programs, Keep remat)
    : study_(study),
      builder_(builder),
      g_(builder.graph()),
      cores_(std::move(cores)),
      size_(int(cores_.size())),
      programs_(programs),
      remat_(remat),
      last_(std::size_t(size_), -1),
      firsts_(std::size_t(size_), -1),
      waits_(std::size_t(size_)),
      merged_(std::size_t(size_)) {}

double ProgramPlayer::recomputed(int l) const {
  const auto& p = programs_[std::size_t(l)];
  return remat_recomputed_bytes(remat_, p.kept_bytes, p.saved_output_bytes);
}

sim::Task ProgramPlayer::compute_task(int i, Piece& p) const {
  sim::Task t;
  t.kind = sim::TaskKind::Compute;
  t.name = std::string(p.phase) + " " + *p.what +
           (labels_.micro_batch >= 0 ? " mb" + std::to_string(labels_.micro_batch) : "") + " core " +
           std::to_string(cores_[std::size_t(i)]);
  t.phase = p.phase;
  t.core = cores_[std::size_t(i)];
  t.layer = p.layer;
  t.stage = labels_.stage;
  t.micro_batch = labels_.micro_batch;
  t.chunk = std::int16_t(labels_.chunk);  // at most virtual_stages (4096) - 1
  t.seconds = p.seconds;
  t.hbm_s = p.hbm_s;
  t.grid_s = float(p.grid_s);
  t.mxu_saved_s = float(p.saved_s);
  t.model_flops = p.model_flops;
  t.hardware_flops = p.hardware_flops;
  t.memory = p.memory;
  t.host = std::move(p.host);
  return t;
}

void ProgramPlayer::recompute(int l) {
  const auto& p = programs_[std::size_t(l)];
  bool first = true;
  for (const Event& ev : p.forward) {
    if (ev.kind == Event::Halo) {
      play_halo(ev, false);
      continue;
    }
    if (ev.kind != Event::Compute) {
      if (remat_ != Keep::Saved || !ev.kept_by_save_policy) replay_collective(ev, l);
      continue;
    }
    const double seconds = remat_ == Keep::Saved ? ev.partial_seconds : ev.seconds;
    const double hbm = remat_ == Keep::Saved ? ev.partial_hbm_seconds : ev.hbm_seconds;
    const double grid = remat_ == Keep::Saved ? ev.partial_grid_seconds : ev.grid_seconds;
    const double saved = remat_ == Keep::Saved ? ev.partial_saved_seconds : ev.saved_seconds;
    const double flops = remat_ == Keep::Saved ? ev.partial_hardware_flops : ev.hardware_flops;
    for (int i = 0; i < size_; ++i) {
      const int c = cores_[std::size_t(i)];
      Piece& t = piece_;
      t.phase = "recompute";
      t.what = &ev.name;
      t.layer = l;
      t.seconds = seconds;
      t.hbm_s = hbm;
      t.grid_s = grid;
      t.saved_s = saved;
      t.model_flops = 0;
      t.hardware_flops = flops;
      t.memory.clear();
      if (first) t.memory.push_back({c, MemoryCategory::Activations, recomputed(l), When::Start});
      if (p.workspace_bytes > 0) {
        t.memory.push_back({c, MemoryCategory::Workspace, p.workspace_bytes, When::Start});
        t.memory.push_back({c, MemoryCategory::Workspace, -p.workspace_bytes, When::End});
      }
      t.host = first ? recompute_host(i, l) : Closure{};
      hardware_flops_ += flops;
      emit(i, t);
    }
    first = false;
  }
}

sim::Task ProgramPlayer::host_dma(const char* what, int l, int core, double bytes) const {
  sim::Task t;
  t.kind = sim::TaskKind::Transfer;
  t.src_core = t.dst_core = core;
  t.bytes = bytes;
  t.seconds = bytes / study_.hardware.chip.host_link_bandwidth_bytes_per_s;
  t.phase = "host_offload";
  t.layer = l;
  t.micro_batch = labels_.micro_batch;
  t.name =
      std::string(what) + " " + study_.model.layers[std::size_t(l)].name + " core " + std::to_string(core);
  return t;
}

void ProgramPlayer::on_host_link(std::vector<int>& link, int core, int id) {
  if (link.empty()) link.assign(std::size_t(study_.slice.chips()), -1);
  int& last = link[std::size_t(core / study_.hardware.chip.cores)];
  if (last >= 0) g_.depend(last, id);
  last = id;
}

void ProgramPlayer::offload_to_host(int l, double bytes) {
  if (bytes <= 0) return;
  const std::size_t n = programs_.size();
  to_host_.resize(n);
  from_host_.resize(n);
  offloaded_.resize(n, 0.0);
  offloaded_[std::size_t(l)] = bytes;
  auto& ids = to_host_[std::size_t(l)];
  ids.assign(std::size_t(size_), -1);
  for (int i = 0; i < size_; ++i) {
    const int c = cores_[std::size_t(i)];
    sim::Task t = host_dma("offload", l, c, bytes);
    t.memory.push_back({c, MemoryCategory::Activations, -bytes, When::End});
    const int id = g_.add(std::move(t));
    if (last_[std::size_t(i)] >= 0) g_.depend(last_[std::size_t(i)], id);
    on_host_link(link_to_host_, c, id);
    ids[std::size_t(i)] = id;
  }
}

void ProgramPlayer::fetch_from_host(int l) {
  if (l < 0 || std::size_t(l) >= to_host_.size() || to_host_[std::size_t(l)].empty()) return;
  auto& ids = from_host_[std::size_t(l)];
  ids.assign(std::size_t(size_), -1);
  for (int i = 0; i < size_; ++i) {
    const int c = cores_[std::size_t(i)];
    const double bytes = offloaded_[std::size_t(l)];
    sim::Task t = host_dma("fetch", l, c, bytes);
    t.memory.push_back({c, MemoryCategory::Activations, bytes, When::Start});
    const int id = g_.add(std::move(t));
    g_.depend(to_host_[std::size_t(l)][std::size_t(i)], id);
    for (int x : frontier(i)) g_.depend(x, id);
    on_host_link(link_from_host_, c, id);
    ids[std::size_t(i)] = id;
  }
  to_host_[std::size_t(l)].clear();
}

void ProgramPlayer::wait_for_host(int l) {
  if (std::size_t(l) >= from_host_.size() || from_host_[std::size_t(l)].empty()) return;
  for (int i = 0; i < size_; ++i)
    waits_[std::size_t(i)].push_back(from_host_[std::size_t(l)][std::size_t(i)]);
  from_host_[std::size_t(l)].clear();
}

void ProgramPlayer::chain(int i, int id) {
  if (last_[std::size_t(i)] >= 0) g_.depend(last_[std::size_t(i)], id);
  for (int x : waits_[std::size_t(i)]) g_.depend(x, id);
  waits_[std::size_t(i)].clear();
  last_[std::size_t(i)] = id;
  if (firsts_[std::size_t(i)] < 0) firsts_[std::size_t(i)] = id;
}

std::vector<int> ProgramPlayer::frontier(int i) const {
  std::vector<int> ids = waits_[std::size_t(i)];
  if (last_[std::size_t(i)] >= 0) ids.insert(ids.begin(), last_[std::size_t(i)]);
  return ids;
}

std::vector<int> ProgramPlayer::frontier() const {
  std::vector<int> ids;
  for (int i = 0; i < size_; ++i) {
    if (last_[std::size_t(i)] >= 0) ids.push_back(last_[std::size_t(i)]);
    ids.insert(ids.end(), waits_[std::size_t(i)].begin(), waits_[std::size_t(i)].end());
  }
  std::sort(ids.begin(), ids.end());
  ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
  return ids;
}

int ProgramPlayer::after_every_core(sim::Task t) {
  const int id = g_.add(std::move(t));
  for (int x : frontier()) g_.depend(x, id);
  return id;
}

void ProgramPlayer::join_behind(int id) {
  for (int x : behind_) g_.depend(x, id);
  behind_.clear();
}

void ProgramPlayer::every_core_waits(sim::Task t) {
  const int id = after_every_core(std::move(t));
  join_behind(id);
  receive(std::vector<std::vector<int>>(std::size_t(size_), std::vector<int>{id}));
}

void ProgramPlayer::receive(const std::vector<std::vector<int>>& arrivals) {
  for (int i = 0; i < size_; ++i)
    waits_[std::size_t(i)].insert(waits_[std::size_t(i)].end(), arrivals[std::size_t(i)].begin(),
                                  arrivals[std::size_t(i)].end());
}

ProgramPlayer::Closure ProgramPlayer::in_turn(std::vector<Closure> parts) {
  if (parts.empty()) return {};
  return [parts = std::move(parts)] {
    for (const auto& part : parts) part();
  };
}

sim::Task ProgramPlayer::family_collective(sim::CollectiveOp op, const std::string& what,
                                           const std::vector<std::string>& mesh_dims,
                                           std::vector<std::vector<int>> family, const std::string& phase,
                                           int layer, double bytes) {
  sim::Task t;
  t.kind = sim::TaskKind::Collective;
  t.op = op;
  t.name = mesh::collective_task_name(what, mesh_dims, op);
  t.phase = phase;
  t.layer = layer;
  t.bytes = bytes;
  t.groups = std::move(family);
  return t;
}

void ProgramPlayer::play(const std::vector<Event>& events, int l, bool forward) {
  std::size_t first_compute = events.size(), last_compute = 0;
  for (std::size_t e = 0; e < events.size(); ++e)
    if (events[e].kind == Event::Compute) {
      first_compute = std::min(first_compute, e);
      last_compute = e;
    }
  for (std::size_t e = 0; e < events.size();) {
    const Event& ev = events[e];
    if (ev.kind != Event::Compute) {
      if (ev.kind == Event::Halo)
        play_halo(ev, forward);
      else
        play_collective(ev, l, forward);
      ++e;
      continue;
    }
    std::vector<const Event*> run;
    const std::size_t first = e;
    for (; e < events.size() && (events[e].kind == Event::Compute || !played_in_place(events[e], forward));
         ++e)
      if (events[e].kind == Event::Compute)
        run.push_back(&events[e]);
      else
        play_collective(events[e], l, forward);
    play_compute(run, l, forward, first <= first_compute && first_compute < e,
                 first <= last_compute && last_compute < e);
  }
}

void ProgramPlayer::piece_memory(std::vector<sim::MemoryEffect>& memory, int i, int l, bool forward,
                                 bool first_piece, bool last_piece) const {
  const auto& p = programs_[std::size_t(l)];
  const int c = cores_[std::size_t(i)];
  const double kept = kept_in_forward(l);
  // A layer's kept activations live from its first forward piece to its last backward piece
  // (re-materialized: what the forward keeps, and what the recompute rebuilt).
  if (forward && first_piece) memory.push_back({c, MemoryCategory::Activations, kept, When::Start});
  // Re-materialized: what the forward computes beyond that, alive until its last piece ends.
  const double computed = forward ? remat_forward_bytes(remat_, p.kept_bytes, kept) : 0.0;
  if (computed > 0 && first_piece) memory.push_back({c, MemoryCategory::Workspace, computed, When::Start});
  if (computed > 0 && last_piece) memory.push_back({c, MemoryCategory::Workspace, -computed, When::End});
  if (!forward && first_piece && allocate_gradients_)
    memory.push_back({c, MemoryCategory::Gradients, gradients_allocated(l), When::Start});
  // While it computes: the forward's largest transient, or the backward's gradients in flight.
  const double workspace = forward ? p.workspace_bytes : p.backward_workspace_bytes;
  if (!forward || workspace > 0) {
    memory.push_back({c, MemoryCategory::Workspace, workspace, When::Start});
    memory.push_back({c, MemoryCategory::Workspace, -workspace, When::End});
  }
  if (!forward && last_piece)
    memory.push_back({c, MemoryCategory::Activations, -kept - recomputed(l), When::End});
  if (last_piece && std::size_t(l) < extra_.size() && extra_[std::size_t(l)] > 0)  // gathered weights, freed
    memory.push_back({c, MemoryCategory::Weights, -extra_[std::size_t(l)], When::End});
}

void ProgramPlayer::play_compute(const std::vector<const Event*>& run, int l, bool forward, bool first_piece,
                                 bool last_piece) {
  double seconds = 0, hbm = 0, grid = 0, saved = 0, model_flops = 0, hardware_flops = 0;
  std::vector<MeshAction> actions;
  for (const Event* ev : run) {
    seconds += ev->seconds;
    hbm += ev->hbm_seconds;
    grid += ev->grid_seconds;
    saved += ev->saved_seconds;
    model_flops += ev->model_flops;
    hardware_flops += ev->hardware_flops;
    for (int i = 0; i < size_; ++i) hardware_flops_ += ev->hardware_flops;
    if (collects_actions()) actions.insert(actions.end(), ev->actions.begin(), ev->actions.end());
  }
  for (int i = 0; i < size_; ++i) {
    Piece& t = piece_;
    t.phase = forward ? "forward" : "backward";
    t.what = &run.front()->name;
    t.layer = l;
    t.seconds = seconds;
    t.hbm_s = hbm;
    t.grid_s = grid;
    t.saved_s = saved;
    t.model_flops = model_flops;
    t.hardware_flops = hardware_flops;
    t.memory.clear();
    piece_memory(t.memory, i, l, forward, first_piece, last_piece);
    t.host = host(i, l, forward, first_piece, actions);
    emit(i, t);
  }
}

}  // namespace tpusim

namespace tpusim {

void ProgramPlayer::emit(int i, Piece& p) {
  if (!merge_layers_) {
    chain(i, g_.add(compute_task(i, p)));
    return;
  }
  Merged& m = merged_[std::size_t(i)];
  if (m.open && std::string_view(m.piece.phase) != p.phase) flush();
  merge(m, p);
}

void ProgramPlayer::merge(Merged& m, Piece& p) {
  // The pieces' memory effects in order: the core's level by category, relative to the run's start.
  auto apply = [&](const sim::MemoryEffect& e) {
    m.level[std::size_t(e.category)] += e.bytes;
    m.total += e.bytes;
  };
  for (const auto& e : p.memory)
    if (e.when == When::Start) apply(e);
  if (m.total > m.peak) {  // the run's highest point so far (its start: nothing)
    m.peak = m.total;
    m.at_peak = m.level;
  }
  for (const auto& e : p.memory)
    if (e.when == When::End) apply(e);
  if (p.host) m.hosts.push_back(std::move(p.host));
  p.host = {};
  if (!m.open) {
    m.first_layer = p.layer;
    m.piece.phase = p.phase;
    m.piece.what = p.what;
    m.piece.layer = p.layer;
    m.open = true;
  }
  m.piece.seconds += p.seconds;
  m.piece.hbm_s += p.hbm_s;
  m.piece.grid_s += p.grid_s;
  m.piece.saved_s += p.saved_s;
  m.piece.model_flops += p.model_flops;
  m.piece.hardware_flops += p.hardware_flops;
  m.last_layer = p.layer >= 0 ? p.layer : m.last_layer;
}

void ProgramPlayer::flush() {
  for (int i = 0; i < size_; ++i) {
    Merged& m = merged_[std::size_t(i)];
    if (!m.open) continue;
    const int c = cores_[std::size_t(i)];
    for (int k = 0; k < sim::kMemoryCategories; ++k)
      if (m.at_peak[std::size_t(k)] != 0)
        m.piece.memory.push_back({c, sim::MemoryCategory(k), m.at_peak[std::size_t(k)], When::Start});
    for (int k = 0; k < sim::kMemoryCategories; ++k)
      if (const double rest = m.level[std::size_t(k)] - m.at_peak[std::size_t(k)]; rest != 0)
        m.piece.memory.push_back({c, sim::MemoryCategory(k), rest, When::End});
    if (m.hosts.size() == 1) {
      m.piece.host = std::move(m.hosts.front());
    } else if (!m.hosts.empty()) {
      m.piece.host = [hosts = std::move(m.hosts)] {
        for (const auto& h : hosts) h();
      };
    }
    std::string span;  // a backward runs its layers last first
    if (m.first_layer != m.last_layer) {
      const auto [first, last] = std::minmax(m.first_layer, m.last_layer);
      span =
          study_.model.layers[std::size_t(first)].name + ".." + study_.model.layers[std::size_t(last)].name;
      m.piece.what = &span;
      m.piece.layer = -1;
    }
    sim::Task t = compute_task(i, m.piece);
    m = Merged{};
    chain(i, g_.add(std::move(t)));
  }
}

}  // namespace tpusim
