// LowpWeights: the 16-bit working copy of a model's weights under mixed precision (bf16 / f16).
// Each group is converted from its f32 masters on first use after they change (the ParamStore's
// version, or the buffer a sharding strategy bound the group to), or written by the optimizer as
// it updates them (bf16: one pass over the parameters instead of two).
//
// Resident parameters: the whole flat layout, one cache entry per group. Sharded parameters
// (ZeRO-3): one group's worth, holding the last group converted from its gathered buffer, so that
// the 16-bit copy is as transient as the gathered f32 one.
#pragma once
#include <algorithm>
#include <cstdint>
#include <vector>

#include "core/arena.h"
#include "core/dtype.h"
#include "kernels/backend.h"
#include "model/params.h"

namespace strata {

// Elements of the 16-bit copy: the whole flat layout when the parameters are resident, one
// group's worth (the largest) when a strategy gathers each group on use (ZeRO-3).
inline int64_t lowp_weight_elements(bool resident_params, int64_t flat_size,
                                    const std::vector<int64_t>& group_sizes) {
  if (resident_params) return flat_size;
  int64_t largest = 0;
  for (int64_t g : group_sizes) largest = std::max(largest, g);
  return largest;
}

class LowpWeights {
 public:
  LowpWeights() = default;  // f32 training: holds nothing
  // After params.allocate(): no resident f32 parameters means a strategy gathers each group on
  // use (ZeRO-3).
  LowpWeights(ParamStore& params, Arena& arena, Backend& backend, DType precision);

  // The 16-bit copy of parameter idx, refreshed from the f32 master when stale.
  const uint16_t* get(int idx);
  // Where the bf16 copy of the value at `param` (inside the resident flat parameters) lives; null
  // when there is no such copy (f32 or f16 training, ZeRO-3's transient slot).
  uint16_t* bf16_copy_of(const float* param) const;
  // After an update that wrote every parameter's copy and bumped the version.
  void written();

 private:
  ParamStore* params_ = nullptr;
  Backend* backend_ = nullptr;
  DType precision_ = DType::f32;
  uint16_t* data_ = nullptr;
  bool single_slot_ = false;
  std::vector<int64_t> version_;      // per entry: ParamStore version converted
  std::vector<const float*> source_;  // per entry: the f32 buffer converted from
  int slot_group_ = -1;               // single slot: the group it holds
};

}  // namespace strata
