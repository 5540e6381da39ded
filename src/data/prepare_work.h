// The work folder of a prepare (out_dir/.prepare): what each stage finished, one file per unit of
// work, so that the stages can run in different processes (mpirun, srun, a SLURM array job) and a
// killed prepare resumes from what was done. Every record is written whole through a temporary
// file and a rename: it exists complete or not at all, and its existence is the completion record.
//
//   job.json             what is being prepared (inputs, their sizes and times, every option that
//                        changes the output): a folder left by another job is cleared, not reused
//   scan/UNIT.rec        the scan of one unit (prepare_stages.h); UNIT.docs its documents' rows
//                        (doc_rows.h), UNIT.sample its sample texts
//   plan.rec             the plan: duplicates, the split, the tokenizer (tokenizer.json beside);
//                        plan/UNIT.removed the duplicates in each unit; plan/sort the
//                        deduplication's sort runs while it runs
//   encode/UNIT.rec      one unit's token counts; UNIT.train and UNIT.val its tokens
//   shards/SPLIT_K.rec   one assembled shard's manifest entry
//   shards/worker_W.done worker W is done with the folder
//
// A finished prepare removes the folder after writing the manifest.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace strata::data {

class PrepareWork {
 public:
  // Opens out_dir/.prepare for the job described by `job` (a JSON text). When the folder holds
  // another job's records, worker 0 clears it; other workers wait until it holds this job. Worker
  // 0 also removes the output's manifest: until the new one, the folder must not read as complete.
  PrepareWork(const std::string& out_dir, const std::string& job, int worker);

  std::string scan(int64_t unit) const;
  std::string sample(int64_t unit) const;
  std::string docs(int64_t unit) const;
  std::string plan() const;
  std::string removed(int64_t unit) const;
  std::string sort_dir() const;
  std::string encode(int64_t unit) const;
  std::string tokens(int64_t unit, const std::string& split) const;
  std::string shard(const std::string& split, int64_t index) const;
  // Written by a worker as its last act on the folder (with the number of records it found done
  // and reused): worker 0 removes the folder only after every worker's.
  std::string finished(int worker) const;

  static bool done(const std::string& record);
  // Blocks until every record exists (records that another process writes), logging what it waits
  // for now and then.
  static void wait_for(const std::vector<std::string>& records, const std::string& what);
  // Throws, naming the first missing record, unless all exist (a stage run on its own needs the
  // stages before it finished).
  static void require(const std::vector<std::string>& records, const std::string& stage);

  void remove() const;  // the finished job's folder
  const std::string& dir() const { return dir_; }

 private:
  std::string dir_;
};

}  // namespace strata::data
