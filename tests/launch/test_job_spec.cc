// Jobs for schedulers: placement rules (whole nodes, tp inside a node, GPUs), the sbatch script
// and the Kubernetes documents (MPIJob and Volcano Job), and the YAML writer's quoting.
// tests/launch/check_k8s_manifest.py parses the YAML `strata launch --emit k8s` writes, and
// test_slurm.sh (mode emit) runs the sbatch script under a real SLURM.
#include <gtest/gtest.h>

#include "core/error.h"
#include "launch/job_spec.h"
#include "launch/prepare_job.h"

namespace strata::launch {
namespace {

JobSpec spec_of(int ranks, int tp, int pp, int dp) {
  JobSpec s;
  s.name = "strata-tiny";
  s.ranks = ranks;
  s.tp = tp;
  s.pp = pp;
  s.dp = dp;
  s.cpus_per_task = 4;
  s.strata = "/opt/strata/strata";
  s.config = "/work/configs/tiny.toml";
  s.args = {"--set", "train.steps=3"};
  s.workdir = "/work";
  s.image = "registry.example/strata:1";
  s.files = {{"tiny.toml", "[train]\nsteps = 3\n"}};
  return s;
}

std::string error_of(const JobSpec& s) {
  try {
    place(s);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(JobSpec, Placement) {
  JobSpec s = spec_of(8, 2, 2, 2);
  s.nodes = 2;
  Placement p = place(s);
  EXPECT_EQ(p.nodes, 2);
  EXPECT_EQ(p.ranks_per_node, 4);
  s.nodes = 0;
  s.gpus_per_node = 4;  // one rank per GPU: 2 nodes
  EXPECT_EQ(place(s).nodes, 2);
  s.gpus_per_node = 0;
  EXPECT_EQ(place(s).nodes, 1);

  s.nodes = 8;  // 1 rank per node cannot hold a tp group of 2
  EXPECT_NE(error_of(s).find("parallel.tp = 2 does not divide the 1 ranks per node"),
            std::string::npos)
      << error_of(s);
  s.nodes = 3;
  EXPECT_NE(error_of(s).find("do not split evenly over 3 nodes"), std::string::npos);
  s.nodes = 1;
  s.gpus_per_node = 4;
  EXPECT_NE(error_of(s).find("--gpus-per-node is 4"), std::string::npos);
  JobSpec bad = spec_of(6, 2, 1, 2);
  EXPECT_NE(error_of(bad).find("but -n asks for 6"), std::string::npos);
}

TEST(JobSpec, SbatchScript) {
  JobSpec s = spec_of(4, 2, 1, 2);
  s.nodes = 2;
  s.env = {{"STRATA_FAULT_CRASH_STEP", "5"}, {"OMP_NUM_THREADS", "9"}};
  const std::string text = emit_sbatch(s);
  for (const char* line :
       {"#SBATCH --job-name=strata-tiny\n", "#SBATCH --nodes=2\n", "#SBATCH --ntasks=4\n",
        "#SBATCH --ntasks-per-node=2\n", "#SBATCH --cpus-per-task=4\n", "#SBATCH --time=24:00:00\n",
        "#SBATCH --chdir=/work\n", "#SBATCH --output=strata-tiny-%j.out\n",
        "export OMP_NUM_THREADS=${SLURM_CPUS_PER_TASK:-4}\n", "export STRATA_FAULT_CRASH_STEP=5\n",
        "export GLIBC_TUNABLES=glibc.malloc.hugetlb=1\n",
        "exec srun --mpi=pmix --distribution=block:block --kill-on-bad-exit=1 --ntasks=4 "
        "--ntasks-per-node=2 --cpus-per-task=4 /opt/strata/strata train /work/configs/tiny.toml "
        "--set train.steps=3\n"})
    EXPECT_NE(text.find(line), std::string::npos) << line << "\nin:\n" << text;
  EXPECT_EQ(text.rfind("#!/bin/bash\n", 0), 0u);
  EXPECT_EQ(text.find("--gpus-per-node"), std::string::npos);

  s.gpus_per_node = 2;
  s.max_restarts = 3;
  s.partition = "gpu";
  const std::string gpu = emit_sbatch(s);
  EXPECT_NE(gpu.find("#SBATCH --gpus-per-node=2\n"), std::string::npos);
  EXPECT_NE(gpu.find("#SBATCH --partition=gpu\n"), std::string::npos);
  EXPECT_NE(gpu.find("exec /opt/strata/strata launch -n 4 --max-restarts 3 -- "
                     "/work/configs/tiny.toml --set train.steps=3\n"),
            std::string::npos)
      << gpu;
}

TEST(JobSpec, PrepareArrayJobs) {
  PrepareJobSpec spec;
  spec.name = "prep";
  spec.workers = 4;
  spec.cpus_per_task = 2;
  spec.partition = "cpu";
  spec.args = {"--input", "data/*.jsonl.zst", "--out", "out dir"};
  const std::string s = emit_prepare_sbatch(spec);
  // Scan and encode are arrays of one task per worker, each told its index; plan and assemble
  // are single tasks; each job waits for the one before.
  EXPECT_NE(
      s.find(R"(prepare='strata prepare --input '\''data/*.jsonl.zst'\'' --out '\''out dir'\''')"),
      std::string::npos)
      << s;
  EXPECT_NE(
      s.find(
          R"(scan=$(submit --array=0-3 --wrap "$prepare --stage scan --workers 4 --worker \$SLURM_ARRAY_TASK_ID"))"),
      std::string::npos)
      << s;
  EXPECT_NE(
      s.find(
          R"(plan=$(submit --dependency=afterok:$scan --wrap "$prepare --stage plan --workers 1 --worker 0"))"),
      std::string::npos);
  EXPECT_NE(s.find("encode=$(submit --array=0-3 --dependency=afterok:$plan"), std::string::npos);
  EXPECT_NE(s.find("assemble=$(submit --dependency=afterok:$encode"), std::string::npos);
  EXPECT_NE(s.find("--cpus-per-task=2 "), std::string::npos);
  EXPECT_NE(s.find("OMP_NUM_THREADS=2"), std::string::npos);
  EXPECT_NE(s.find("--partition=cpu"), std::string::npos);
  spec.workers = 0;
  EXPECT_THROW(emit_prepare_sbatch(spec), Error);
}

TEST(JobSpec, MpiJob) {
  JobSpec s = spec_of(8, 2, 2, 2);
  s.nodes = 2;
  s.gpus_per_node = 4;
  s.memory = "64Gi";
  s.max_restarts = 2;
  const auto docs = k8s_documents(s);
  ASSERT_EQ(docs.size(), 2u);
  EXPECT_EQ(docs[0]["kind"], "ConfigMap");
  EXPECT_EQ(docs[0]["data"]["tiny.toml"], "[train]\nsteps = 3\n");
  const auto& job = docs[1];
  EXPECT_EQ(job["apiVersion"], "kubeflow.org/v2beta1");
  EXPECT_EQ(job["kind"], "MPIJob");
  EXPECT_EQ(job["spec"]["slotsPerWorker"], 4);
  EXPECT_EQ(job["spec"]["runPolicy"]["schedulingPolicy"]["minAvailable"], 3);
  EXPECT_EQ(job["spec"]["runPolicy"]["backoffLimit"], 2);
  const auto& worker = job["spec"]["mpiReplicaSpecs"]["Worker"];
  EXPECT_EQ(worker["replicas"], 2);
  const auto& wc = worker["template"]["spec"]["containers"][0];
  EXPECT_EQ(wc["resources"]["limits"]["nvidia.com/gpu"], 4);
  EXPECT_EQ(wc["resources"]["limits"]["cpu"], "16");
  EXPECT_EQ(wc["resources"]["limits"]["memory"], "64Gi");
  EXPECT_EQ(wc["env"][0]["name"], "OMP_NUM_THREADS");
  EXPECT_EQ(wc["env"][0]["value"], "4");
  const auto& launcher = job["spec"]["mpiReplicaSpecs"]["Launcher"];
  EXPECT_EQ(launcher["replicas"], 1);
  const auto cmd =
      launcher["template"]["spec"]["containers"][0]["command"].get<std::vector<std::string>>();
  ASSERT_GE(cmd.size(), 3u);
  EXPECT_EQ(cmd[0], "mpirun");
  EXPECT_EQ(cmd[2], "8");
  EXPECT_NE(std::find(cmd.begin(), cmd.end(), "/work/configs/tiny.toml"), cmd.end());
}

TEST(JobSpec, VolcanoJob) {
  JobSpec s = spec_of(4, 2, 1, 2);
  s.nodes = 2;
  s.k8s_kind = K8sKind::volcano;
  s.k8s_namespace = "ml";
  s.pvc = "runs";
  const auto docs = k8s_documents(s);
  const auto& job = docs[1];
  EXPECT_EQ(job["apiVersion"], "batch.volcano.sh/v1alpha1");
  EXPECT_EQ(job["kind"], "Job");
  EXPECT_EQ(job["metadata"]["namespace"], "ml");
  EXPECT_EQ(job["spec"]["schedulerName"], "volcano");
  EXPECT_EQ(job["spec"]["minAvailable"], 3);  // every pod: the launcher and 2 workers
  ASSERT_EQ(job["spec"]["tasks"].size(), 2u);
  EXPECT_EQ(job["spec"]["tasks"][1]["replicas"], 2);
  const std::string sh = job["spec"]["tasks"][0]["template"]["spec"]["containers"][0]["command"][2];
  EXPECT_NE(sh.find("s/$/:2/"), std::string::npos) << sh;  // 2 slots per worker host
  EXPECT_NE(sh.find("--host \"$HOSTS\" -np 4"), std::string::npos) << sh;
  EXPECT_EQ(job["spec"]["tasks"][1]["template"]["spec"]["volumes"][1]["persistentVolumeClaim"]
               ["claimName"],
            "runs");
  JobSpec no_image = s;
  no_image.image.clear();
  EXPECT_THROW(k8s_documents(no_image), Error);
}

TEST(JobSpec, YamlQuotesWhatYamlWouldMisread) {
  nlohmann::ordered_json doc = {{"a", "plain-text"},
                                {"b", "true"},
                                {"c", "8"},
                                {"d", "-np"},
                                {"e", "x: y"},
                                {"f", "tab\there"},
                                {"g", 3},
                                {"h", nlohmann::ordered_json::array()},
                                {"list", {"x", "1.5"}},
                                {"obj", {{"k", {{"z", false}}}}}};
  const std::string y = to_yaml(doc);
  EXPECT_EQ(y,
            "a: plain-text\nb: \"true\"\nc: \"8\"\nd: \"-np\"\ne: \"x: y\"\nf: \"tab\\there\"\n"
            "g: 3\nh: []\nlist:\n- x\n- \"1.5\"\nobj:\n  k:\n    z: false\n");
  nlohmann::ordered_json items = {{"items", {{{"name", "a"}, {"value", "1"}}, {{"name", "b"}}}}};
  EXPECT_EQ(to_yaml(items), "items:\n- name: a\n  value: \"1\"\n- name: b\n");
  // Multi-line text (a config file) as a literal block, kept byte for byte.
  nlohmann::ordered_json text = {
      {"f.toml", "[a]\nb = 1\n\n# c\n"}, {"g", "x\ny"}, {"h", " lead\n"}};
  EXPECT_EQ(to_yaml(text),
            "f.toml: |\n  [a]\n  b = 1\n\n  # c\ng: |-\n  x\n  y\nh: \" lead\\n\"\n");
}

}  // namespace
}  // namespace strata::launch
