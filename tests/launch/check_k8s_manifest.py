#!/usr/bin/env python3
"""`strata launch --emit k8s|slurm` end to end: the YAML parses (PyYAML) into a ConfigMap and a
gang-scheduled MPIJob or Volcano Job whose replicas, slots, minAvailable, environment,
resources and mpirun command match the layout; the sbatch script passes `bash -n`; a layout
whose tensor-parallel groups would span nodes is refused.

Usage: check_k8s_manifest.py STRATA SOURCE_DIR   (exit 77: PyYAML is not installed; 1 under CI)
"""
import os
import subprocess
import sys
import tempfile

def skip(reason):
    """A missing dependency: skipped outside CI (exit 77, the reason printed), failed under CI."""
    if os.environ.get("CI"):
        print("FAILED (CI is set, so this is not a skip): " + reason)
        sys.exit(1)
    print("SKIP: " + reason)
    sys.exit(77)


try:
    import yaml
except ImportError:
    skip("PyYAML is not installed (pip install pyyaml, or Debian python3-yaml)")

strata, src = sys.argv[1], sys.argv[2]
config = os.path.join(src, "configs", "tiny.toml")
sets = ["--set", "parallel.tp=2", "--set", "run.dir=runs/tiny"]


def launch(*args, ok=True):
    p = subprocess.run([strata, "launch", *args], capture_output=True, text=True)
    if ok and p.returncode != 0:
        sys.exit(f"FAILED: strata launch {' '.join(args)}: {p.stderr}")
    return p


def env_of(container):
    return {e["name"]: e["value"] for e in container["env"]}


# 1. MPIJob (the default): 8 ranks, tp 2, on 2 nodes of 4 GPUs.
out = launch("-n", "8", "--emit", "k8s", "--image", "example/strata:1", "--gpus-per-node", "4",
             "--cpus-per-task", "2", "--mem", "32Gi", "--max-restarts", "2", "--", config, *sets)
docs = list(yaml.safe_load_all(out.stdout))
assert [d["kind"] for d in docs] == ["ConfigMap", "MPIJob"], [d["kind"] for d in docs]
cm, job = docs
assert cm["data"]["tiny.toml"] == open(config).read(), "the config travels in the ConfigMap"
assert job["apiVersion"] == "kubeflow.org/v2beta1"
spec = job["spec"]
workers = spec["mpiReplicaSpecs"]["Worker"]
launcher = spec["mpiReplicaSpecs"]["Launcher"]
assert workers["replicas"] == 2 and spec["slotsPerWorker"] == 4, spec
assert workers["replicas"] * spec["slotsPerWorker"] == 8, "world size = workers x slots"
assert spec["runPolicy"]["schedulingPolicy"]["minAvailable"] == 3, "gang: launcher + workers"
assert spec["runPolicy"]["backoffLimit"] == 2
assert launcher["replicas"] == 1
w = workers["template"]["spec"]["containers"][0]
assert w["image"] == "example/strata:1"
assert w["resources"]["limits"] == {"cpu": "8", "memory": "32Gi", "nvidia.com/gpu": 4}, w
assert env_of(w)["OMP_NUM_THREADS"] == "2" and "GLIBC_TUNABLES" in env_of(w)
mounts = {m["name"]: m["mountPath"] for m in w["volumeMounts"]}
assert mounts["strata-config"] == "/etc/strata"
cmd = launcher["template"]["spec"]["containers"][0]["command"]
assert cmd[:3] == ["mpirun", "-np", "8"], cmd
i = cmd.index("strata")
assert cmd[i:i + 3] == ["strata", "train", "/etc/strata/tiny.toml"] and cmd[i + 3:] == sets, cmd
assert ["-x", "OMP_NUM_THREADS"] == cmd[cmd.index("-x"):cmd.index("-x") + 2]
assert job["metadata"]["labels"]["strata/world-size"] == "8"
assert job["metadata"]["name"] == "strata-tiny" and cm["metadata"]["name"] == "strata-tiny-config"

# 2. Volcano Job to a file, CPU ranks.
with tempfile.TemporaryDirectory() as tmp:
    path = os.path.join(tmp, "job.yaml")
    launch("-n", "4", "--emit", "k8s", "--k8s-kind", "volcano", "--image", "example/strata:1",
           "--nodes", "2", "--cpus-per-task", "3", "--namespace", "ml", "--pvc", "runs",
           "--out", path, "--", config, *sets)
    cm, job = yaml.safe_load_all(open(path))
assert job["apiVersion"] == "batch.volcano.sh/v1alpha1" and job["kind"] == "Job"
spec = job["spec"]
assert spec["schedulerName"] == "volcano"
tasks = {t["name"]: t for t in spec["tasks"]}
pods = sum(t["replicas"] for t in spec["tasks"])
assert spec["minAvailable"] == pods == 3, "gang: every pod of the job at once"
assert tasks["worker"]["replicas"] == 2
wc = tasks["worker"]["template"]["spec"]["containers"][0]
assert wc["resources"]["requests"]["cpu"] == "6" and "nvidia.com/gpu" not in wc["resources"]["limits"]
sh = tasks["launcher"]["template"]["spec"]["containers"][0]["command"][2]
assert "s/$/:2/" in sh and '--host "$HOSTS" -np 4' in sh, sh
assert job["metadata"]["namespace"] == "ml"
vols = tasks["worker"]["template"]["spec"]["volumes"]
assert {"name": "workspace", "persistentVolumeClaim": {"claimName": "runs"}} in vols, vols

# 3. Topology: tp 2 cannot span nodes of 1 rank each.
p = launch("-n", "2", "--emit", "k8s", "--image", "x", "--nodes", "2", "--", config, *sets, ok=False)
assert p.returncode != 0 and "parallel.tp = 2 does not divide the 1 ranks per node" in p.stderr, p.stderr
p = launch("-n", "2", "--emit", "k8s", "--", config, *sets, ok=False)
assert p.returncode != 0 and "--image" in p.stderr, p.stderr

# 4. The sbatch script: #SBATCH lines, and valid bash.
out = launch("-n", "4", "--emit", "slurm", "--nodes", "2", "--cpus-per-task", "1", "--", config, *sets)
script = out.stdout
for line in ("#SBATCH --nodes=2", "#SBATCH --ntasks-per-node=2", "#SBATCH --cpus-per-task=1",
             "srun --mpi=pmix --distribution=block:block"):
    assert line in script, (line, script)
subprocess.run(["bash", "-n"], input=script, text=True, check=True)
print("k8s and slurm jobs: all checks passed")
