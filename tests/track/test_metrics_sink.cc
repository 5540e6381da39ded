// The metrics sink fans each record out to every output in order, finishes each once, and a
// sink without outputs (ranks other than 0) writes nothing.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "track/metrics.h"

namespace strata {
namespace {

namespace fs = std::filesystem;

struct Recorder final : MetricsOutput {
  Recorder(std::vector<std::string>* into, std::string called)
      : log(into), name(std::move(called)) {}
  void write(const nlohmann::json& record) override {
    log->push_back(name + ":" + std::to_string(record.at("step").get<int>()));
  }
  void finish() override { log->push_back(name + ":finish"); }
  std::vector<std::string>* log;
  std::string name;
};

TEST(MetricsSink, EveryOutputGetsEveryRecordInOrderAndOneFinish) {
  std::vector<std::string> log;
  MetricsSink sink;
  sink.add(std::make_unique<Recorder>(&log, "a"));
  sink.add(nullptr);  // an output the config left off ([mlflow] unset)
  sink.add(std::make_unique<Recorder>(&log, "b"));
  EXPECT_EQ(sink.outputs(), 2u);
  sink.write({{"step", 1}});
  sink.write({{"step", 2}});
  sink.finish();
  EXPECT_EQ(log, (std::vector<std::string>{"a:1", "b:1", "a:2", "b:2", "a:finish", "b:finish"}));
}

TEST(MetricsSink, JsonlAppendsOneLinePerRecord) {
  const fs::path dir = fs::temp_directory_path() / "strata_test_metrics_jsonl";
  fs::remove_all(dir);
  fs::create_directories(dir);
  for (int run = 0; run < 2; ++run) {  // a resumed run continues the file
    MetricsSink sink;
    add_run_dir_outputs(sink, dir.string(), /*tensorboard=*/false);
    sink.write({{"step", run + 1}, {"loss", 2.5}});
  }
  std::ifstream in(dir / "metrics.jsonl");
  std::vector<nlohmann::json> lines;
  for (std::string l; std::getline(in, l);) lines.push_back(nlohmann::json::parse(l));
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_EQ(lines[0]["step"], 1);
  EXPECT_EQ(lines[1]["step"], 2);
  EXPECT_EQ(lines[1]["loss"], 2.5);
  fs::remove_all(dir);
}

TEST(MetricsSink, WithoutOutputsWritesNothing) {
  MetricsSink sink;
  EXPECT_EQ(sink.outputs(), 0u);
  sink.write({{"step", 1}});
  sink.finish();
}

}  // namespace
}  // namespace strata
