// strata: the command line. Parses arguments and calls the library; each subcommand lives in its
// own cmd_*.cc file.
#include <cstdio>
#include <exception>
#include <vector>

#include "commands.h"
#include "core/error.h"
#include "kernels/cpu/isa.h"

int main(int argc, char** argv) {
  using namespace strata::cli;
  CLI::App app{"strata: distributed training of transformer language models"};
  app.require_subcommand(1);
  const std::vector<Command> commands = {add_train_command(app),    add_prepare_command(app),
                                         add_generate_command(app), add_launch_command(app),
                                         add_diagnose_command(app), add_plan_command(app),
                                         add_registry_command(app), add_report_command(app),
                                         add_export_command(app),   add_import_command(app)};
  CLI11_PARSE(app, argc, argv);
  try {
    // The CPU kernels' level (src/kernels/cpu/isa.h): a bad STRATA_CPU_ISA fails here, before any
    // work, with what to do.
    (void)strata::kernels::isa::active();
    for (const Command& c : commands)
      if (c.app->parsed()) return c.run();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "\nerror: %s\n", e.what());
    return 1;
  }
  return 0;
}
