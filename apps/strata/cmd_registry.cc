// `strata registry push|list|show|pull|diff|verify`: the model registry (track/registry.h).
#include <filesystem>
#include <iostream>
#include <memory>
#include <string>

#include "commands.h"
#include "core/error.h"
#include "track/registry.h"

namespace strata::cli {

namespace {

struct RegistryArgs {
  std::string registry, source, name, parent, run_dir, ref, ref_b, out, filter;
  bool copy = false, json = false;
};

void add_registry_option(CLI::App* app, RegistryArgs& a) {
  app->add_option("--registry", a.registry,
                  "registry directory (default: $STRATA_REGISTRY, else ./registry)");
}

std::string registry_dir(const RegistryArgs& a) {
  return a.registry.empty() ? registry::Registry::default_dir() : a.registry;
}

}  // namespace

Command add_registry_command(CLI::App& parent) {
  auto a = std::make_shared<RegistryArgs>();
  CLI::App* app = parent.add_subcommand(
      "registry",
      "the model registry: versions of checkpoints with their config, metrics, data lineage, "
      "parent and evaluations (an SQLite index and the files, in --registry DIR)");
  app->require_subcommand(1);

  CLI::App* push = app->add_subcommand(
      "push", "record a checkpoint (a checkpoint, ckpt or run directory) as NAME's next version");
  push->add_option("checkpoint", a->source, "checkpoint, ckpt directory or run directory")
      ->required();
  push->add_option("--name", a->name, "model name")->required();
  push->add_option("--parent", a->parent,
                   "parent version NAME:vN (default: the registered checkpoint the run resumed "
                   "from, if any)");
  push->add_option("--run-dir", a->run_dir,
                   "run directory whose metrics.jsonl holds the final metrics (default: the "
                   "checkpoint's run)");
  push->add_flag("--copy", a->copy, "copy the files even where a hard link would do");
  push->add_flag("--json", a->json, "print the version as JSON");
  add_registry_option(push, *a);

  CLI::App* list = app->add_subcommand("list", "every version: name, date, hash, val_loss");
  list->add_option("name", a->filter, "only this model");
  list->add_flag("--json", a->json, "JSON array");
  add_registry_option(list, *a);

  CLI::App* show = app->add_subcommand("show", "everything recorded about NAME[:vN]");
  show->add_option("ref", a->ref, "NAME, NAME:vN or NAME:latest")->required();
  show->add_flag("--json", a->json, "JSON object");
  add_registry_option(show, *a);

  CLI::App* pull = app->add_subcommand("pull", "copy NAME[:vN]'s checkpoint out, verified");
  pull->add_option("ref", a->ref, "NAME, NAME:vN or NAME:latest")->required();
  pull->add_option("--out", a->out, "directory to create (must not exist, or be empty)")
      ->required();
  add_registry_option(pull, *a);

  CLI::App* diff = app->add_subcommand(
      "diff", "what differs between two versions: config keys, final metrics, lineage");
  diff->add_option("a", a->ref, "NAME:vA")->required();
  diff->add_option("b", a->ref_b, "NAME:vB")->required();
  diff->add_flag("--json", a->json, "JSON object");
  add_registry_option(diff, *a);

  CLI::App* verify = app->add_subcommand(
      "verify", "check NAME[:vN]'s files in the registry against their recorded hashes");
  verify->add_option("ref", a->ref, "NAME, NAME:vN or NAME:latest")->required();
  add_registry_option(verify, *a);

  return {app, [a, push, list, show, pull, diff, verify] {
            const std::string dir = registry_dir(*a);
            STRATA_CHECK(push->parsed() || std::filesystem::exists(dir + "/registry.db"),
                         "no model registry at '", dir,
                         "' (a push creates one; --registry DIR or STRATA_REGISTRY names another)");
            registry::Registry reg(dir);
            if (push->parsed()) {
              registry::PushOptions o;
              o.source = a->source;
              o.name = a->name;
              o.parent = a->parent;
              o.run_dir = a->run_dir;
              o.copy = a->copy;
              const registry::PushResult r = reg.push(o);
              if (a->json) {
                std::cout << r.version.to_json().dump(2) << "\n";
              } else {
                const registry::Version& v = r.version;
                std::cout << (r.existing ? "already registered: " : "registered ") << v.ref()
                          << " (step " << v.step << ", content " << v.content_hash.substr(0, 12)
                          << (v.parent_version > 0
                                  ? cat(", parent ", v.parent_name, ":v", v.parent_version)
                                  : "")
                          << ") in " << reg.dir() << "\n";
              }
            } else if (list->parsed()) {
              const auto versions = reg.list(a->filter);
              if (a->json) {
                nlohmann::json j = nlohmann::json::array();
                for (const auto& v : versions) j.push_back(v.to_json());
                std::cout << j.dump(2) << "\n";
              } else {
                std::cout << registry::format_list(versions);
              }
            } else if (show->parsed()) {
              const registry::Version v = reg.get(a->ref);
              std::cout << (a->json ? v.to_json().dump(2) + "\n" : registry::format_show(v));
            } else if (pull->parsed()) {
              const std::string out = reg.pull(a->ref, a->out);
              std::cout << "pulled " << reg.get(a->ref).ref() << " to " << out << " (verified)\n";
            } else if (diff->parsed()) {
              const nlohmann::json d =
                  registry::diff_versions(reg, reg.get(a->ref), reg.get(a->ref_b));
              std::cout << (a->json ? d.dump(2) + "\n" : registry::format_diff(d));
            } else if (verify->parsed()) {
              const registry::Version v = reg.get(a->ref);
              reg.verify(v);
              std::cout << v.ref() << ": " << v.manifest["files"].size()
                        << " files match their recorded hashes; content " << v.content_hash << "\n";
            }
            return 0;
          }};
}

}  // namespace strata::cli
