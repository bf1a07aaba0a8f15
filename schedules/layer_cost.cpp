#include "schedules/layer_cost.hpp"

namespace tpusim {

Keep read_remat(Fields& f, Keep fallback) {
  const Json* v = f.optional("remat");
  if (!v) return fallback;
  if (v->is_boolean()) return v->get<bool>() ? Keep::Input : Keep::All;
  if (v->is_string() && v->get<std::string>() == "save_dots") return Keep::Dots;
  f.problems().add(f.path_of("remat"), *v,
                   "false, true (keep each layer's input, recompute its forward) or \"save_dots\" (keep the "
                   "matmuls' outputs too, recompute the other ops)");
  return fallback;
}

Json remat_json(Keep keep) {
  return keep == Keep::All ? Json(false) : keep == Keep::Input ? Json(true) : Json("save_dots");
}

}  // namespace tpusim
