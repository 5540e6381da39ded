// strata report RUN_DIR: one self-contained HTML page with the run's curves, memory, step-time
// breakdown, a MoE run's expert load, config and environment (RUN_DIR/report.html, or -o FILE).
#include <cstdio>
#include <filesystem>
#include <memory>

#include "commands.h"
#include "track/report.h"
#include "train/profiler.h"

namespace strata::cli {

Command add_report_command(CLI::App& parent) {
  struct Options {
    std::string dir, output;
  };
  auto o = std::make_shared<Options>();
  CLI::App* app = parent.add_subcommand(
      "report",
      "write an HTML report of a run: loss, lr, grad norm, throughput, MFU, memory, "
      "step-time breakdown, expert load (MoE), config and environment");
  app->add_option("run_dir", o->dir, "the run directory, e.g. runs/tiny")->required();
  app->add_option("-o,--output", o->output, "the HTML file (default RUN_DIR/report.html)");
  return {app, [o] {
            // A profiled run that ended before its ranks' traces were merged: merge them now.
            namespace fs = std::filesystem;
            const fs::path trace = fs::path(o->dir) / "trace";
            if (fs::exists(trace / "rank_0.json") && !fs::exists(trace / "trace.json"))
              merge_run_trace(o->dir);
            const std::string path = write_report(o->dir, o->output);
            std::printf("report: %s\n", path.c_str());
            return 0;
          }};
}

}  // namespace strata::cli
