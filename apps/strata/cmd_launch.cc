// Placeholder registration replaced by the launcher implementation.
#include "commands.h"

namespace strata::cli {

Command add_launch_command(CLI::App& parent) {
  CLI::App* app = parent.add_subcommand("launch", "supervise N ranks of `strata train`");
  return {app, [] { return 2; }};
}

}  // namespace strata::cli
