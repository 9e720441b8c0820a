// A cache of schedules keyed by the structure of the tensor graph, with its inputs abstracted: realizing
// the same computation again on other data (a training step, a loop that rebuilds the same expression)
// reuses the schedule and its kernel ASTs instead of scheduling anew.
//
//   ScheduleCache cache;
//   Schedule s = cache.get(outputs, make_buffer, realized, [&](const BufferMaker& make) {
//     return create_schedule(outputs, make, realized);         // only on a miss
//   });                                                         // a hit: the cached kernels over new buffers
//
// The key is the graph above its inputs, where an input is a BUFFER or a node realized earlier (the
// scheduler's leaves). Each node is compared in full (op, dtype, arg and which nodes its sources are);
// each input by dtype, shape and device, and by identity within the graph: the same input read twice
// is one slot, so a graph that aliases two inputs never matches one that does not. A hash only picks
// the bucket: a hit is a graph equal to the cached one, never a collision.
//
// This holds because what create_schedule decides depends on the graph above its leaves and on the
// leaves' dtypes, shapes and devices alone; ASTs name buffers only by slot, never by identity.
#pragma once
#include <functional>
#include <list>
#include <memory>
#include <mutex>
#include <optional>
#include <unordered_map>
#include <vector>

#include "schedule/schedule.h"

namespace kiln {

class ScheduleCache {
 public:
  explicit ScheduleCache(size_t capacity = 256);  // entries kept, least recently used dropped first
  ~ScheduleCache();

  // The schedule of `outputs`: the cached one instantiated over new buffers on a hit, else create()'s,
  // remembered for next time.
  // create(make) must make its buffers with `make`, so that they are told apart from the inputs.
  Schedule get(const std::vector<UOpPtr>& outputs, const BufferMaker& make_buffer, const RealizedLookup& realized,
               const std::function<Schedule(const BufferMaker&)>& create);

  size_t hits() const;
  size_t misses() const;

  struct Signature;  // the graph's structure, inputs abstracted (schedule_cache.cpp)
  struct Template;   // a schedule with its buffers replaced by slots

 private:
  struct Entry;
  mutable std::mutex mu_;
  size_t capacity_;
  size_t hits_ = 0, misses_ = 0;
  std::list<Entry> lru_;  // most recently used first
  std::unordered_multimap<uint64_t, std::list<Entry>::iterator> by_hash_;
};

}  // namespace kiln
