// parallel.cp_impl: how attention reaches the keys and values of the other context-parallel ranks
// (model/context_attention.h). Its own header so that the config can name it without the model.
#pragma once
#include <string_view>

#include "core/enum_names.h"

namespace strata {

enum class CpImpl { ring, ulysses };
template <>
struct EnumNames<CpImpl> {
  static constexpr std::string_view names[] = {"ring", "ulysses"};
};

}  // namespace strata
