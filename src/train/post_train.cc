#include "train/post_train.h"

#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <memory>
#include <optional>

#include "core/clock.h"
#include "core/log.h"
#include "io/atomic_file.h"
#include "track/events.h"
#include "track/registry.h"
#include "train/checkpoint.h"

extern char** environ;

namespace strata {

namespace fs = std::filesystem;

namespace {

std::string shell_quote(const std::string& s) {
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

void replace_all(std::string& s, const std::string& from, const std::string& to) {
  for (size_t at = s.find(from); at != std::string::npos; at = s.find(from, at + to.size()))
    s.replace(at, from.size(), to);
}

std::string model_name(const RunConfig& config) {
  if (!config.post_train.name.empty()) return config.post_train.name;
  fs::path dir = fs::path(config.run.dir).lexically_normal();
  if (dir.filename().empty()) dir = dir.parent_path();  // "runs/x/"
  return fs::absolute(dir).filename().string();
}

}  // namespace

std::string expand_eval_command(const std::string& command, const std::string& checkpoint,
                                const std::string& name, int64_t version,
                                const std::string& run_dir) {
  std::string out = command;
  replace_all(out, "{checkpoint}", shell_quote(checkpoint));
  replace_all(out, "{run_dir}", shell_quote(run_dir));
  replace_all(out, "{name}", name);
  replace_all(out, "{version}", version > 0 ? cat(version) : "");
  replace_all(out, "{ref}", version > 0 ? cat(name, ":v", version) : "");
  return out;
}

CommandResult run_shell_command(const std::string& command,
                                const std::vector<std::pair<std::string, std::string>>& env,
                                size_t max_output) {
  // Everything the child needs is built before fork: only async-signal-safe calls after it.
  std::vector<std::string> vars;
  for (char** e = environ; *e; ++e) {
    const std::string v(*e);
    if (v.rfind("OMPI_", 0) == 0 || v.rfind("PMIX_", 0) == 0 || v.rfind("PMI_", 0) == 0) continue;
    bool replaced = false;
    for (const auto& [k, val] : env) replaced = replaced || v.rfind(k + "=", 0) == 0;
    if (!replaced) vars.push_back(v);
  }
  for (const auto& [k, val] : env) vars.push_back(k + "=" + val);
  std::vector<char*> envp;
  for (std::string& v : vars) envp.push_back(v.data());
  envp.push_back(nullptr);
  std::string sh = "/bin/sh", dash_c = "-c", cmd = command;
  char* argv[] = {sh.data(), dash_c.data(), cmd.data(), nullptr};

  int fds[2];
  STRATA_CHECK(pipe(fds) == 0, "cannot run '", command, "': pipe: ", std::strerror(errno));
  const auto t0 = Clock::now();
  const pid_t pid = fork();
  if (pid < 0) {
    close(fds[0]);
    close(fds[1]);
    fail("cannot run '", command, "': fork: ", std::strerror(errno));
  }
  if (pid == 0) {
    const int devnull = open("/dev/null", O_RDONLY);
    if (devnull >= 0) dup2(devnull, 0);
    dup2(fds[1], 1);
    dup2(fds[1], 2);
    close(fds[0]);
    close(fds[1]);
    execve(argv[0], argv, envp.data());
    _exit(127);
  }
  close(fds[1]);
  CommandResult r;
  char buf[8192];
  for (;;) {
    const ssize_t n = read(fds[0], buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    r.output.append(buf, static_cast<size_t>(n));
    if (r.output.size() > 2 * max_output) r.output.erase(0, r.output.size() - max_output);
  }
  close(fds[0]);
  if (r.output.size() > max_output) r.output.erase(0, r.output.size() - max_output);
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  r.exit_status = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  r.seconds = seconds_since(t0);
  return r;
}

void run_post_train(const RunConfig& config, int64_t final_step) {
  const PostTrainConfig& pt = config.post_train;
  if (!pt.register_model && pt.eval_command.empty()) return;
  const std::string ckpt_root = (fs::path(config.run.dir) / "ckpt").string();
  const std::optional<std::string> latest = latest_checkpoint(ckpt_root);
  STRATA_CHECK(latest.has_value(), "post_train: no committed checkpoint under ", ckpt_root,
               " to register or evaluate");
  const int64_t step = read_checkpoint_state(*latest).step;
  STRATA_CHECK(step == final_step, "post_train: the final checkpoint (step ", final_step,
               ") was not committed (the newest is ", *latest,
               "); not registering an older one: see the errors above");

  std::string checkpoint = *latest, name;
  int64_t version = 0;
  std::unique_ptr<registry::Registry> reg;
  std::optional<registry::Version> registered;
  if (pt.register_model) {
    name = model_name(config);
    const std::string dir = pt.registry.empty() ? registry::Registry::default_dir() : pt.registry;
    try {
      reg = std::make_unique<registry::Registry>(dir);
      registry::PushOptions push;
      push.source = *latest;
      push.name = name;
      push.run_dir = config.run.dir;
      const registry::PushResult r = reg->push(push);
      registered = r.version;
      log::info("post_train: ", r.existing ? "already registered as " : "registered ",
                r.version.ref(), " in ", reg->dir(), " (content ",
                r.version.content_hash.substr(0, 12),
                r.version.parent_version > 0
                    ? cat(", parent ", r.version.parent_name, ":v", r.version.parent_version)
                    : "",
                ")");
    } catch (const std::exception& e) {
      fail("post_train: training finished and ", *latest,
           " is committed, but registering it failed: ", e.what(),
           ". Register it by hand: strata registry push ", *latest, " --name ", name,
           " --registry ", dir);
    }
    checkpoint = registered->blob;
    version = registered->version;
    append_event(config.run.dir, 0, "registered", final_step,
                 {{"ref", registered->ref()}, {"registry", reg->dir()}});
  }
  if (pt.eval_command.empty()) return;

  const std::string command =
      expand_eval_command(pt.eval_command, checkpoint, name, version, config.run.dir);
  log::info("post_train: evaluating: ", command);
  const CommandResult r = run_shell_command(
      command, {{"STRATA_EVAL_CHECKPOINT", checkpoint},
                {"STRATA_EVAL_REF", version > 0 ? cat(name, ":v", version) : ""}});
  const std::string log_path = (fs::path(config.run.dir) / "post_train_eval.log").string();
  io::write_file_atomic(log_path, cat("$ ", command, "\n", r.output, "\n[exit ", r.exit_status,
                                      " after ", r.seconds, " s]\n"));
  if (r.exit_status == 0)
    log::info("post_train: evaluation finished in ", r.seconds, " s (output in ", log_path, ")");
  else
    log::warn("post_train: the evaluation command exited with status ", r.exit_status,
              " (output in ", log_path, ")");
  if (registered) {
    registry::Eval e;
    e.command = command;
    e.exit_status = r.exit_status;
    e.seconds = r.seconds;
    e.output = r.output;
    reg->record_eval(*registered, e);
  }
}

}  // namespace strata
