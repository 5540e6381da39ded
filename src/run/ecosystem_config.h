// Config sections of the integrations around a run: the post-training hand-off to the model
// registry ([post_train]) and MLflow tracking ([mlflow]).
#pragma once
#include <string>

namespace strata {

// [post_train]: what rank 0 does once the final checkpoint is committed (train/post_train.h).
struct PostTrainConfig {
  // `register = true` in TOML (a C++ keyword, hence the member's name): push the final
  // checkpoint to the model registry as a new version of `name`.
  bool register_model = false;
  std::string name = "";      // model name; "": the run directory's name
  std::string registry = "";  // registry directory; "": $STRATA_REGISTRY, else ./registry
  // A shell command run on the final checkpoint (the registered copy when registering), e.g.
  // "strata generate {checkpoint} --prompt 'And God'"; {checkpoint}, {ref}, {name}, {version}
  // and {run_dir} are replaced (paths shell-quoted). Its exit status and output are recorded
  // in the registry and in RUN_DIR/post_train_eval.log; a failing command is a warning.
  std::string eval_command = "";
};

// [mlflow]: params, metrics and the final artifacts to an MLflow tracking server (rank 0;
// track/mlflow.h). Off while tracking_uri is empty and MLFLOW_TRACKING_URI is unset.
struct MlflowConfig {
  std::string tracking_uri = "";  // http://host:port; "": $MLFLOW_TRACKING_URI (http:// only)
  std::string experiment = "strata";
  std::string run_name = "";    // "": the run directory's name
  bool log_checkpoint = false;  // also upload the final checkpoint's files as artifacts
};

}  // namespace strata
