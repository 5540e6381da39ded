// strata diagnose RUN_DIR: the root cause of a failed or troubled run, with the evidence.
#include <cstdio>
#include <memory>

#include "commands.h"
#include "plan/oom_report.h"
#include "train/diagnose.h"

namespace strata::cli {

Command add_diagnose_command(CLI::App& parent) {
  auto dir = std::make_shared<std::string>();
  CLI::App* app = parent.add_subcommand(
      "diagnose", "explain what went wrong in a run (from its logs, heartbeats and events)");
  app->add_option("run_dir", *dir, "the run directory, e.g. runs/tiny")->required();
  return {app, [dir] {
            const std::vector<Finding> findings = diagnose_run(*dir);
            std::fputs(format_diagnosis(*dir, findings).c_str(), stdout);
            // Out of memory: the planner says what overflowed and which layouts fit instead.
            for (const Finding& f : findings) {
              if (f.kind != "oom") continue;
              try {
                std::fputs(plan_failed_run(*dir, load_cluster_profile("cpu-local")).c_str(),
                           stdout);
              } catch (const std::exception& e) {
                std::printf("(the planner could not plan this run: %s)\n", e.what());
              }
              break;
            }
            return 0;
          }};
}

}  // namespace strata::cli
