// Every schedule kind a study can name. A new schedule is one file plus one line here.
#include "schedules/data_parallel.hpp"
#include "schedules/mesh.hpp"
#include "schedules/pipeline.hpp"

namespace tpusim {

const std::map<std::string, ScheduleFactory>& schedule_registry() {
  static const std::map<std::string, ScheduleFactory> registry = {
      {"data_parallel",
       [](Fields& f, const Study& s, Problems& p) -> std::unique_ptr<Schedule> {
         return std::make_unique<DataParallel>(f, s, p);
       }},
      {"gpipe",
       [](Fields& f, const Study& s, Problems& p) -> std::unique_ptr<Schedule> {
         return std::make_unique<Pipeline>(Pipeline::Order::GPipe, f, s, p);
       }},
      {"mesh",
       [](Fields& f, const Study& s, Problems& p) -> std::unique_ptr<Schedule> {
         return std::make_unique<MeshSchedule>(f, s, p);
       }},
      {"one_f_one_b",
       [](Fields& f, const Study& s, Problems& p) -> std::unique_ptr<Schedule> {
         return std::make_unique<Pipeline>(Pipeline::Order::OneFOneB, f, s, p);
       }},
  };
  return registry;
}

}  // namespace tpusim
