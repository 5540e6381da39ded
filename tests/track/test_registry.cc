// The model registry on hand-made checkpoints (the same files train/checkpoint.cc writes: rank
// safetensors files, index.json with each slice's xxHash64, state.json): push, list, show,
// pull, diff, the content hash, damaged files, parent detection and concurrent pushes.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <set>
#include <thread>
#include <vector>

#include "io/atomic_file.h"
#include "io/checksum.h"
#include "io/safetensors.h"
#include "io/temp_dir.h"
#include "track/checkpoint_digest.h"
#include "track/registry.h"

namespace strata::registry {
namespace {

namespace fs = std::filesystem;

// A run directory with one committed checkpoint at `step` whose two tensors hold `seed`-derived
// values, a metrics.jsonl up to `step` and the config's optim.lr = lr.
struct FakeRun {
  std::string dir, ckpt;
};

FakeRun make_run(const std::string& root, const std::string& name, int64_t step, float seed,
                 double lr = 1e-3, const nlohmann::json& lineage = nullptr) {
  FakeRun r;
  r.dir = (fs::path(root) / name).string();
  r.ckpt = (fs::path(r.dir) / "ckpt" / cat("step_", step)).string();
  io::make_dirs(r.ckpt);
  std::vector<float> a(64), b(24);
  for (size_t i = 0; i < a.size(); ++i) a[i] = seed + 0.25f * static_cast<float>(i);
  for (size_t i = 0; i < b.size(); ++i) b[i] = -seed - static_cast<float>(i);
  const auto hash = [](const std::vector<float>& v) {
    io::XxHash64 h;
    h.update(v.data(), v.size() * sizeof(float));
    return io::hex64(h.finish());
  };
  io::write_safetensors(r.ckpt + "/rank_00000.safetensors",
                        {{"s0", DType::f32, {64}, a.data()}, {"s1", DType::f32, {24}, b.data()}});
  const auto slice = [](const std::string& tensor, std::vector<int64_t> shape,
                        const std::string& key, const std::string& xxh) {
    return nlohmann::json{{"tensor", tensor},
                          {"global_shape", shape},
                          {"block_shape", shape},
                          {"slice_dim", -1},
                          {"slice_begin", 0},
                          {"begin", 0},
                          {"count", shape[0] * (shape.size() > 1 ? shape[1] : 1)},
                          {"file", "rank_00000.safetensors"},
                          {"key", key},
                          {"xxh64", xxh}};
  };
  const nlohmann::json index = {
      {"format", "strata-checkpoint-v2"},
      {"step", step},
      {"files", {"rank_00000.safetensors"}},
      {"tensors", {{"wte", {{"shape", {8, 8}}}}, {"ln.weight", {{"shape", {24}}}}}},
      {"slices", {slice("wte", {8, 8}, "s0", hash(a)), slice("ln.weight", {24}, "s1", hash(b))}}};
  io::write_file_atomic(r.ckpt + "/index.json", index.dump(1));
  io::write_file_atomic(r.ckpt + "/tokenizer.json", R"({"model": {"type": "BPE"}})");
  nlohmann::json state = {
      {"step", step},
      {"format", "strata-checkpoint-v2"},
      {"config",
       {{"optim", {{"lr", lr}}}, {"data", {{"source", "synthetic"}, {"dir", root + "/data"}}}}},
      {"data", {{"position", step * 4}}},
      {"extra", nlohmann::json::object()}};
  if (!lineage.is_null()) state["extra"]["lineage"] = lineage;
  io::write_file_atomic(r.ckpt + "/state.json", state.dump(2));
  io::write_file_atomic(r.dir + "/ckpt/latest", cat("step_", step, "\n"));
  std::string metrics;
  for (int64_t s = 1; s <= step; ++s) {
    nlohmann::json m = {{"step", s}, {"loss", 5.0 - 0.1 * s - seed}, {"lr", lr}};
    if (s == step) m["val_loss"] = 4.5 - seed;
    metrics += m.dump() + "\n";
  }
  metrics += nlohmann::json({{"step", step + 1}, {"loss", 0.0}}).dump() + "\n";  // past it
  io::write_file_atomic(r.dir + "/metrics.jsonl", metrics);
  return r;
}

PushOptions push_of(const std::string& source, const std::string& name) {
  PushOptions o;
  o.source = source;
  o.name = name;
  return o;
}

TEST(Registry, PushListShowPullDiff) {
  io::TempDir tmp;
  const FakeRun a = make_run(tmp.path(), "run_a", 3, 1.0f, 1e-3);
  const FakeRun b = make_run(tmp.path(), "run_b", 5, 2.0f, 5e-4);
  Registry reg(tmp.file("registry"));

  const PushResult r1 = reg.push(push_of(a.dir, "tiny"));  // a run directory
  EXPECT_FALSE(r1.existing);
  EXPECT_EQ(r1.version.ref(), "tiny:v1");
  EXPECT_EQ(r1.version.step, 3);
  ASSERT_TRUE(r1.version.val_loss.has_value());
  EXPECT_DOUBLE_EQ(*r1.version.val_loss, 3.5);
  EXPECT_EQ(r1.version.metrics["step"], 3);  // not the line past the checkpoint
  EXPECT_EQ(r1.version.content_hash, content_hash(a.ckpt));
  EXPECT_EQ(r1.version.content_hash.size(), 32u);
  EXPECT_EQ(r1.version.config["optim"]["lr"], 1e-3);
  EXPECT_EQ(r1.version.lineage["data"]["source"], "synthetic");
  EXPECT_EQ(r1.version.lineage["data_position"]["position"], 12);
  EXPECT_EQ(r1.version.lineage["tokenizer_xxh64"], file_xxh64(a.ckpt + "/tokenizer.json"));
  EXPECT_EQ(r1.version.parent_version, 0);
  EXPECT_TRUE(fs::exists(r1.version.blob + "/rank_00000.safetensors"));

  // The same content again is the same version; other content is the next one.
  const PushResult again = reg.push(push_of(a.ckpt, "tiny"));
  EXPECT_TRUE(again.existing);
  EXPECT_EQ(again.version.version, 1);
  const PushResult r2 = reg.push(push_of(b.dir + "/ckpt", "tiny"));  // a ckpt directory
  EXPECT_EQ(r2.version.version, 2);
  EXPECT_NE(r2.version.content_hash, r1.version.content_hash);

  const std::vector<Version> all = reg.list();
  ASSERT_EQ(all.size(), 2u);
  EXPECT_EQ(reg.get("tiny").version, 2);
  EXPECT_EQ(reg.get("tiny:latest").version, 2);
  EXPECT_EQ(reg.get("tiny:v1").content_hash, r1.version.content_hash);
  EXPECT_EQ(reg.get("tiny:1").version, 1);
  EXPECT_THROW(reg.get("tiny:v9"), Error);
  EXPECT_THROW(reg.get("nope"), Error);
  EXPECT_NE(format_list(all).find("tiny"), std::string::npos);
  EXPECT_NE(format_show(reg.get("tiny:v1")).find("optim.lr"), std::string::npos);

  const std::string out = reg.pull("tiny:v1", tmp.file("pulled"));
  EXPECT_EQ(content_hash(out), r1.version.content_hash);
  EXPECT_EQ(io::read_file(out + "/state.json"), io::read_file(a.ckpt + "/state.json"));
  verify_slices(out);
  EXPECT_THROW(reg.pull("tiny:v1", tmp.file("pulled")), Error);  // not empty any more

  const nlohmann::json d = diff_versions(reg, reg.get("tiny:v1"), reg.get("tiny:v2"));
  ASSERT_EQ(d["config"].size(), 1u);
  EXPECT_EQ(d["config"][0]["key"], "optim.lr");
  bool val_delta = false;
  for (const auto& m : d["metrics"])
    if (m["key"] == "val_loss") val_delta = m["delta"].get<double>() == -1.0;
  EXPECT_TRUE(val_delta) << d.dump(1);
  EXPECT_EQ(d["lineage"]["relation"], "unrelated");
  EXPECT_EQ(d["lineage"]["tokenizer"], "same");
  EXPECT_NE(format_diff(d).find("optim.lr"), std::string::npos);
}

// One bit flipped in the fifth byte from the end of `path` (inside a safetensors file's data).
void flip_byte_near_end(const std::string& path) {
  std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
  f.seekg(-5, std::ios::end);
  char c = 0;
  f.read(&c, 1);
  c = static_cast<char>(c ^ 0x40);
  f.seekp(-5, std::ios::end);
  f.write(&c, 1);
}

TEST(Registry, DamagedFilesAreNamed) {
  io::TempDir tmp;
  const FakeRun a = make_run(tmp.path(), "run", 2, 1.0f);
  Registry reg(tmp.file("registry"));
  PushOptions o = push_of(a.dir, "m");
  o.copy = true;  // the blob's own bytes, so damaging it leaves the run intact
  const Version v = reg.push(o).version;
  reg.verify(v);

  // One byte of the blob's tensor data flipped: verify and pull name the file, and nothing is
  // left at --out.
  const std::string file = v.blob + "/rank_00000.safetensors";
  flip_byte_near_end(file);
  try {
    reg.verify(v);
    FAIL() << "verify accepted a damaged blob";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("rank_00000.safetensors"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("damaged"), std::string::npos) << e.what();
  }
  EXPECT_THROW(reg.pull("m:v1", tmp.file("out")), Error);
  EXPECT_FALSE(fs::exists(tmp.file("out")));

  // A checkpoint whose bytes do not match its own index is never registered.
  const FakeRun b = make_run(tmp.path(), "run_b", 2, 3.0f);
  fs::copy_file(file, b.ckpt + "/rank_00000.safetensors", fs::copy_options::overwrite_existing);
  try {
    reg.push(push_of(b.dir, "m"));
    FAIL() << "push accepted a checkpoint that does not match its index";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("does not match its checksum"), std::string::npos)
        << e.what();
  }
  EXPECT_EQ(reg.list("m").size(), 1u);
}

// The content hash of a format v2 checkpoint (XXH64 slice digests) is the one the registry
// recorded before libxxhash replaced strata's hand-written XXH64: computed by that code.
TEST(Registry, ContentHashOfAV2CheckpointIsUnchanged) {
  io::TempDir tmp;
  const FakeRun a = make_run(tmp.path(), "run_a", 3, 1.0f);
  EXPECT_EQ(content_hash(a.ckpt), "f24fff6bf91fa66487c27e9a50d2a449");
}

// The same checkpoint in format v3 (XXH3 slice digests, as the trainer writes now) is pushed and
// verified alike, has another content hash, and a flipped byte is found by its XXH3.
TEST(Registry, Xxh3CheckpointVerifiesAndDamageIsFound) {
  io::TempDir tmp;
  const FakeRun a = make_run(tmp.path(), "run_a", 3, 1.0f);
  const std::string v2_hash = content_hash(a.ckpt);
  nlohmann::json index = nlohmann::json::parse(io::read_file(a.ckpt + "/index.json"));
  const io::SafetensorsFile file = io::SafetensorsFile::open(a.ckpt + "/rank_00000.safetensors");
  for (nlohmann::json& s : index["slices"]) {
    const std::string key = s["key"].get<std::string>();
    std::string bytes(file.info(key).bytes, '\0');
    file.read_into(key, bytes.data(), bytes.size());
    s.erase("xxh64");
    s["xxh3"] = io::hex64(io::xxh3_64(bytes));
  }
  index["format"] = "strata-checkpoint-v3";
  io::write_file_atomic(a.ckpt + "/index.json", index.dump(1));
  verify_slices(a.ckpt);
  EXPECT_NE(content_hash(a.ckpt), v2_hash);
  Registry reg(tmp.file("registry"));
  EXPECT_EQ(reg.push(push_of(a.dir, "m")).version.content_hash, content_hash(a.ckpt));

  const std::string data = a.ckpt + "/rank_00000.safetensors";
  flip_byte_near_end(data);
  try {
    verify_slices(a.ckpt);
    FAIL() << "verify_slices accepted a damaged slice";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("does not match its checksum in index.json (xxh3"),
              std::string::npos)
        << e.what();
  }
}

TEST(Registry, ParentFromLineageOrExplicit) {
  io::TempDir tmp;
  const FakeRun base = make_run(tmp.path(), "base", 2, 1.0f);
  Registry reg(tmp.file("registry"));
  const Version v1 = reg.push(push_of(base.dir, "m")).version;

  // A run that resumed from the base checkpoint records its lineage; the registry follows it.
  const nlohmann::json lineage = checkpoint_lineage(base.ckpt);
  EXPECT_EQ(lineage["ancestors"][0], v1.content_hash);
  const FakeRun child = make_run(tmp.path(), "child", 4, 2.0f, 1e-3, lineage);
  const Version v2 = reg.push(push_of(child.dir, "m")).version;
  EXPECT_EQ(v2.parent_name, "m");
  EXPECT_EQ(v2.parent_version, 1);
  EXPECT_NE(v2.parent_reason.find("resumed"), std::string::npos);

  // Its own resume carries the chain: the nearest registered ancestor is the parent.
  const FakeRun grandchild =
      make_run(tmp.path(), "grandchild", 6, 3.0f, 1e-3, checkpoint_lineage(child.ckpt));
  EXPECT_EQ(reg.push(push_of(grandchild.dir, "other")).version.parent_version, 2);
  const nlohmann::json d = diff_versions(reg, v1, reg.get("other:v1"));
  EXPECT_EQ(d["lineage"]["relation"], "other:v1 descends from m:v1");

  const FakeRun loose = make_run(tmp.path(), "loose", 3, 4.0f);
  PushOptions o = push_of(loose.dir, "m");
  o.parent = "m:v9";
  EXPECT_THROW(reg.push(o), Error);
  o.parent = "m:v1";
  const Version v3 = reg.push(o).version;
  EXPECT_EQ(v3.parent_version, 1);
  EXPECT_EQ(v3.parent_reason, "explicit (--parent)");
}

TEST(Registry, EvaluationsAreRecorded) {
  io::TempDir tmp;
  const FakeRun a = make_run(tmp.path(), "run", 2, 1.0f);
  Registry reg(tmp.file("registry"));
  const Version v = reg.push(push_of(a.dir, "m")).version;
  Eval e;
  e.command = "echo ok";
  e.exit_status = 3;
  e.seconds = 0.5;
  e.output = "ok\n";
  reg.record_eval(v, e);
  const Version back = reg.get("m:v1");
  ASSERT_EQ(back.evals.size(), 1u);
  EXPECT_EQ(back.evals[0].exit_status, 3);
  EXPECT_EQ(back.evals[0].output, "ok\n");
  EXPECT_EQ(back.to_json()["evals"][0]["command"], "echo ok");
}

TEST(Registry, NamesAndRefs) {
  EXPECT_NO_THROW(check_name("tiny-kjv_2.1"));
  EXPECT_THROW(check_name(""), Error);
  EXPECT_THROW(check_name(".hidden"), Error);
  EXPECT_THROW(check_name("a/b"), Error);
  EXPECT_EQ(parse_ref("m:v3").version, 3);
  EXPECT_EQ(parse_ref("m:7").version, 7);
  EXPECT_EQ(parse_ref("m").version, 0);
  EXPECT_THROW(parse_ref("m:v0"), Error);
  EXPECT_THROW(parse_ref("m:vx"), Error);
}

// Concurrent pushes under one name, from threads (separate connections) and from processes:
// every push gets its own version number, none is lost, the index stays whole.
TEST(Registry, ConcurrentPushesGetDistinctVersions) {
  io::TempDir tmp;
  const int per_worker = 3;
  std::vector<FakeRun> runs;
  for (int i = 0; i < 4 * per_worker; ++i)
    runs.push_back(make_run(tmp.path(), cat("run", i), 2, static_cast<float>(i)));
  const std::string dir = tmp.file("registry");
  { const Registry init(dir); }  // created once; the workers open their own connections

  std::vector<std::thread> threads;
  for (int t = 0; t < 2; ++t)
    threads.emplace_back([&, t] {
      Registry reg(dir);
      for (int k = 0; k < per_worker; ++k) reg.push(push_of(runs[t * per_worker + k].dir, "m"));
    });
  for (std::thread& t : threads) t.join();
  std::vector<pid_t> children;
  for (int p = 2; p < 4; ++p) {
    const pid_t pid = fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      int rc = 0;
      try {
        Registry reg(dir);
        for (int k = 0; k < per_worker; ++k) reg.push(push_of(runs[p * per_worker + k].dir, "m"));
      } catch (const std::exception& e) {
        std::fprintf(stderr, "child: %s\n", e.what());
        rc = 1;
      }
      _exit(rc);
    }
    children.push_back(pid);
  }
  for (pid_t pid : children) {
    int status = 0;
    ASSERT_EQ(waitpid(pid, &status, 0), pid);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  }
  Registry reg(dir);
  const std::vector<Version> all = reg.list("m");
  ASSERT_EQ(all.size(), runs.size());
  std::set<std::string> hashes;
  for (size_t i = 0; i < all.size(); ++i) {
    EXPECT_EQ(all[i].version, static_cast<int64_t>(i + 1));
    hashes.insert(all[i].content_hash);
    reg.verify(all[i]);
  }
  EXPECT_EQ(hashes.size(), runs.size());
  for (const auto& e : fs::directory_iterator(dir + "/blobs/m"))  // no staging left behind
    EXPECT_EQ(e.path().filename().string().rfind(".staging", 0), std::string::npos);
}

}  // namespace
}  // namespace strata::registry
