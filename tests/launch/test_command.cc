// build_command for every launch situation: mpirun on one host, with a hostfile, as root or not,
// oversubscribed or not, and srun inside a SLURM allocation; plus the environment it forwards.
#include <gtest/gtest.h>

#include <algorithm>

#include "core/error.h"
#include "launch/command.h"

namespace strata::launch {
namespace {

using Argv = std::vector<std::string>;

LaunchOptions train_options(int ranks) {
  LaunchOptions o;
  o.ranks = ranks;
  o.args = {"train", "configs/tiny.toml", "--set", "train.steps=3"};
  return o;
}

LaunchEnv laptop(int cores) {
  LaunchEnv env;
  env.cores = cores;
  env.self_exe = "/opt/strata/strata";
  return env;
}

TEST(BuildCommand, MpirunOnOneHost) {
  const Argv cmd = build_command(train_options(2), laptop(8));
  EXPECT_EQ(cmd,
            (Argv{"mpirun", "-np", "2", "--oversubscribe", "--bind-to", "none", "-x",
                  "GLIBC_TUNABLES=glibc.malloc.hugetlb=1", "-x", "OMP_NUM_THREADS=4",
                  "/opt/strata/strata", "train", "configs/tiny.toml", "--set", "train.steps=3"}));
}

TEST(BuildCommand, MpirunAsRoot) {
  LaunchEnv env = laptop(2);
  env.is_root = true;
  const Argv cmd = build_command(train_options(4), env);
  ASSERT_GE(cmd.size(), 5u);
  EXPECT_EQ(Argv(cmd.begin(), cmd.begin() + 5),
            (Argv{"mpirun", "-np", "4", "--allow-run-as-root", "--oversubscribe"}));
  // 4 ranks on 2 cores: one thread each, never zero.
  EXPECT_NE(std::find(cmd.begin(), cmd.end(), "OMP_NUM_THREADS=1"), cmd.end());
}

TEST(BuildCommand, MpirunWithHostfile) {
  LaunchOptions o = train_options(8);
  o.hostfile = "hosts.txt";
  LaunchEnv env = laptop(16);
  env.hosts = 2;
  const Argv cmd = build_command(o, env);
  EXPECT_EQ(Argv(cmd.begin(), cmd.begin() + 7),
            (Argv{"mpirun", "-np", "8", "--hostfile", "hosts.txt", "--bind-to", "none"}));
  // 4 ranks per host fit in 16 cores: no oversubscription, 4 threads per rank.
  EXPECT_EQ(std::find(cmd.begin(), cmd.end(), "--oversubscribe"), cmd.end());
  EXPECT_NE(std::find(cmd.begin(), cmd.end(), "OMP_NUM_THREADS=4"), cmd.end());
}

TEST(BuildCommand, MpirunOversubscribesWhenRanksExceedCores) {
  LaunchOptions o = train_options(8);
  o.hostfile = "hosts.txt";
  LaunchEnv env = laptop(2);
  env.hosts = 2;  // 4 ranks per host on 2 cores
  const Argv cmd = build_command(o, env);
  EXPECT_NE(std::find(cmd.begin(), cmd.end(), "--oversubscribe"), cmd.end());
  EXPECT_NE(std::find(cmd.begin(), cmd.end(), "OMP_NUM_THREADS=1"), cmd.end());
}

TEST(BuildCommand, MpirunForwardsTheEnvironmentByName) {
  LaunchEnv env = laptop(8);
  env.vars = {{"GLIBC_TUNABLES", "glibc.malloc.arena_max=2"},
              {"OMP_NUM_THREADS", "3"},
              {"STRATA_LOG", "debug"}};
  const Argv cmd = build_command(train_options(2), env);
  const Argv expected_tail = {
      "-x",           "GLIBC_TUNABLES",     "-x",    "OMP_NUM_THREADS",   "-x",
      "STRATA_LOG",   "/opt/strata/strata", "train", "configs/tiny.toml", "--set",
      "train.steps=3"};
  ASSERT_GE(cmd.size(), expected_tail.size());
  EXPECT_EQ(Argv(cmd.end() - expected_tail.size(), cmd.end()), expected_tail);
}

TEST(BuildCommand, SrunInsideSlurm) {
  LaunchEnv env = laptop(4);
  env.in_slurm = true;
  env.is_root = true;  // srun needs no root flag
  const Argv cmd = build_command(train_options(2), env);
  EXPECT_EQ(cmd,
            (Argv{"srun", "--mpi=pmix", "-n", "2", "--kill-on-bad-exit=1",
                  "--export=ALL,OMP_NUM_THREADS=2,GLIBC_TUNABLES=glibc.malloc.hugetlb=1",
                  "/opt/strata/strata", "train", "configs/tiny.toml", "--set", "train.steps=3"}));
}

TEST(BuildCommand, SrunExportsNothingExtraWhenTheEnvironmentSetsIt) {
  LaunchEnv env = laptop(4);
  env.in_slurm = true;
  env.hosts = 2;
  env.vars = {{"GLIBC_TUNABLES", "x"}, {"OMP_NUM_THREADS", "1"}};
  LaunchOptions o = train_options(4);
  o.program = "/bin/fake";
  o.args = {"a"};
  EXPECT_EQ(build_command(o, env),
            (Argv{"srun", "--mpi=pmix", "-n", "4", "--kill-on-bad-exit=1", "/bin/fake", "a"}));
}

TEST(BuildCommand, ProgramReplacesStrata) {
  LaunchOptions o;
  o.ranks = 1;
  o.program = "/tmp/fake_rank";
  o.args = {"/tmp/run"};
  const Argv cmd = build_command(o, laptop(2));
  EXPECT_EQ(Argv(cmd.end() - 2, cmd.end()), (Argv{"/tmp/fake_rank", "/tmp/run"}));
}

TEST(BuildCommand, RejectsNoRanks) {
  EXPECT_THROW(build_command(train_options(0), laptop(2)), Error);
}

TEST(FormatCommand, QuotesForTheShell) {
  EXPECT_EQ(format_command({"mpirun", "-np", "2", "a b", "it's", "", "x=1,y=2"}),
            "mpirun -np 2 'a b' 'it'\\''s' '' x=1,y=2");
}

TEST(Hostfile, CountsHosts) {
  EXPECT_EQ(count_hostfile_hosts("# cluster\nnode1 slots=4\n\n  node2 slots=4 # spare\n   \n"), 2);
  EXPECT_EQ(count_hostfile_hosts(""), 0);
}

TEST(DetectLaunchEnv, ReadsThisMachine) {
  LaunchOptions o;
  const LaunchEnv env = detect_launch_env(o);
  EXPECT_GE(env.cores, 1);
  EXPECT_EQ(env.hosts, 1);
  EXPECT_FALSE(env.self_exe.empty());
  EXPECT_TRUE(std::is_sorted(env.vars.begin(), env.vars.end()));
}

}  // namespace
}  // namespace strata::launch
