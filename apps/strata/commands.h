// Each subcommand registers its options on the CLI11 app and returns what to run when parsed.
// One file per subcommand keeps main.cc a list.
#pragma once
#include <CLI/CLI.hpp>
#include <functional>

namespace strata::cli {

struct Command {
  CLI::App* app = nullptr;
  std::function<int()> run;  // returns the process exit status
};

Command add_train_command(CLI::App& parent);
Command add_prepare_command(CLI::App& parent);
Command add_generate_command(CLI::App& parent);
Command add_launch_command(CLI::App& parent);
Command add_diagnose_command(CLI::App& parent);
Command add_plan_command(CLI::App& parent);
Command add_export_command(CLI::App& parent);
Command add_import_command(CLI::App& parent);
Command add_report_command(CLI::App& parent);
Command add_registry_command(CLI::App& parent);

}  // namespace strata::cli
