#include <algorithm>
#include <charconv>
#include <fstream>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "comm/mpi_runtime.h"
#include "commands.h"
#include "core/error.h"
#include "data/prepare.h"
#include "launch/prepare_job.h"

namespace strata::cli {

namespace {

std::string exact(double v) {  // the shortest text that reads back as v
  char buf[40];
  const auto r = std::to_chars(buf, buf + sizeof buf, v);
  return std::string(buf, r.ptr);
}

// The options of `o` as `strata prepare` arguments (what the emitted SLURM jobs run), every one
// spelled out so the jobs do not depend on this build's defaults.
std::vector<std::string> prepare_args(const data::PrepareOptions& o) {
  std::vector<std::string> a;
  for (const std::string& in : o.inputs) a.insert(a.end(), {"--input", in});
  const auto& f = o.filters;
  a.insert(a.end(), {"--out",
                     o.out_dir,
                     "--format",
                     std::string(enum_name(o.corpus.format)),
                     "--field",
                     o.corpus.field,
                     "--separator",
                     o.corpus.document_separator,
                     "--max-bad-fraction",
                     exact(o.corpus.max_bad_fraction),
                     "--vocab",
                     std::to_string(o.vocab_size),
                     "--tokenizer-sample-bytes",
                     std::to_string(o.tokenizer_sample_bytes),
                     "--val-fraction",
                     exact(o.val_fraction),
                     "--seed",
                     std::to_string(o.seed),
                     "--max-shard-tokens",
                     std::to_string(o.max_shard_tokens),
                     "--range-bytes",
                     std::to_string(o.range_bytes),
                     "--dedup",
                     std::string(enum_name(o.dedup)),
                     "--minhash-bands",
                     std::to_string(o.minhash.bands),
                     "--minhash-rows",
                     std::to_string(o.minhash.rows),
                     "--minhash-ngram",
                     std::to_string(o.minhash.ngram),
                     "--min-doc-chars",
                     std::to_string(f.min_doc_chars),
                     "--max-doc-chars",
                     std::to_string(f.max_doc_chars),
                     "--max-repeat-fraction",
                     exact(f.max_repeat_fraction)});
  if (!o.tokenizer.empty()) a.insert(a.end(), {"--tokenizer", o.tokenizer});
  if (!o.eot_token.empty()) a.insert(a.end(), {"--eot-token", o.eot_token});
  return a;
}

}  // namespace

Command add_prepare_command(CLI::App& parent) {
  auto o = std::make_shared<data::PrepareOptions>();
  auto format = std::make_shared<std::string>("auto");
  auto stage = std::make_shared<std::string>("all");
  auto job = std::make_shared<launch::PrepareJobSpec>();
  auto emit = std::make_shared<std::string>();
  auto job_file = std::make_shared<std::string>();
  // Under mpirun or srun each rank is a worker; a SLURM array task says which one it is.
  const RankEnv env = detect_rank_env();
  o->workers = std::max(1, env.world_size);
  o->worker = env.rank;
  CLI::App* app = parent.add_subcommand(
      "prepare",
      "read a corpus (text, JSON Lines, .gz/.zst), train or load a BPE tokenizer, "
      "write token shards and their manifest");
  app->add_option("--input,--text", o->inputs,
                  "corpus files, directories or glob patterns (quote globs), in this order")
      ->required();
  app->add_option("--out", o->out_dir, "output directory")->required();
  app->add_option("--format", *format,
                  "auto (by name: .jsonl/.json/.ndjson, optionally .gz or .zst, are JSON Lines; "
                  "anything else is text), text or jsonl")
      ->check(CLI::IsMember({"auto", "text", "jsonl"}))
      ->capture_default_str();
  app->add_option("--field", o->corpus.field,
                  "JSON Lines: the field holding the text (a dotted path such as meta.content)")
      ->capture_default_str();
  app->add_option("--max-bad-fraction", o->corpus.max_bad_fraction,
                  "bad records (malformed JSON, a missing field) skipped and reported while "
                  "their fraction stays below this; 0: the first one stops the prepare")
      ->check(CLI::Range(0.0, 1.0))
      ->capture_default_str();
  app->add_option("--tokenizer", o->tokenizer,
                  "encode with this tokenizer.json (any byte-level BPE: GPT-2, Llama 3, Qwen2, "
                  "...) instead of training one");
  app->add_option("--eot-token", o->eot_token,
                  "with --tokenizer: the token appended to each document (default: the first of "
                  "<|endoftext|>, <|end_of_text|>, </s>)");
  app->add_option("--vocab", o->vocab_size, "vocabulary size of a trained tokenizer")
      ->capture_default_str();
  app->add_option("--tokenizer-sample-bytes", o->tokenizer_sample_bytes,
                  "train the tokenizer on at most this much training text (e.g. 512MB), chosen "
                  "by a hash of each document")
      ->transform(CLI::AsSizeValue(false))
      ->capture_default_str();
  app->add_option("--val-fraction", o->val_fraction, "documents held out for validation")
      ->capture_default_str();
  app->add_option("--seed", o->seed, "seed of the train/validation split and the sample")
      ->capture_default_str();
  app->add_option("--separator", o->corpus.document_separator,
                  "text: the string that separates documents (default: a blank line)");
  app->add_option("--max-shard-tokens", o->max_shard_tokens, "tokens per shard at most")
      ->check(CLI::Range(int64_t{1}, int64_t{INT32_MAX}))
      ->capture_default_str();
  app->add_option_function<std::string>(
         "--dedup", [o](const std::string& v) { o->dedup = parse_enum<DedupMode>("--dedup", v); },
         "none; exact: drop documents whose text (lower-cased, whitespace collapsed) repeats "
         "an earlier one's; minhash: also those whose word 5-grams mostly do (MinHash LSH)")
      ->check(CLI::IsMember({"none", "exact", "minhash"}));
  app->add_option("--minhash-bands", o->minhash.bands, "MinHash: band keys per document")
      ->capture_default_str();
  app->add_option("--minhash-rows", o->minhash.rows, "MinHash: minima per band")
      ->capture_default_str();
  app->add_option("--minhash-ngram", o->minhash.ngram, "MinHash: words per shingle")
      ->capture_default_str();
  app->add_option("--workers", o->workers,
                  "processes sharing the work (default: the ranks of mpirun or srun, else 1); "
                  "threads within each come from OMP_NUM_THREADS")
      ->check(CLI::PositiveNumber);
  app->add_option("--worker", o->worker,
                  "this process's index in [0, --workers) (default: its rank; in a SLURM array "
                  "job, $SLURM_ARRAY_TASK_ID)")
      ->check(CLI::NonNegativeNumber);
  app->add_option("--stage", *stage,
                  "all; or one stage, for tasks that need not run at once (a SLURM array job): "
                  "scan and encode (any number of workers), then plan and assemble (one)")
      ->check(CLI::IsMember({"all", "scan", "plan", "encode", "assemble"}))
      ->capture_default_str();
  app->add_option("--range-bytes", o->range_bytes,
                  "uncompressed JSON Lines files larger than this are shared out in ranges of "
                  "about this size")
      ->transform(CLI::AsSizeValue(false))
      ->capture_default_str();
  const std::string g = "SLURM jobs (--emit slurm)";
  app->add_option("--emit", *emit,
                  "slurm: write a bash script that submits this prepare as SLURM jobs (scan and "
                  "encode as arrays of --workers tasks, plan and assembly as one task each) "
                  "instead of running it")
      ->check(CLI::IsMember({"slurm"}))
      ->group(g);
  app->add_option("--job-file", *job_file, "file to write the script to (default: standard output)")
      ->group(g);
  app->add_option("--job-name", job->name, "SLURM job name")->capture_default_str()->group(g);
  app->add_option("--cpus-per-task", job->cpus_per_task, "threads per task")
      ->check(CLI::PositiveNumber)
      ->capture_default_str()
      ->group(g);
  app->add_option("--time", job->time, "time limit of each job (sbatch --time)")
      ->capture_default_str()
      ->group(g);
  app->add_option("--partition", job->partition, "SLURM partition")->group(g);
  app->add_option("--mem", job->memory, "memory per task (sbatch --mem)")->group(g);
  app->add_option("--workdir", job->workdir, "working directory of the tasks (default: here)")
      ->group(g);
  app->add_option("--strata", job->strata, "the strata binary as the tasks see it")
      ->capture_default_str()
      ->group(g);
  app->add_option("--min-doc-chars", o->filters.min_doc_chars, "drop shorter documents");
  app->add_option("--max-doc-chars", o->filters.max_doc_chars, "drop longer documents");
  app->add_option("--max-repeat-fraction", o->filters.max_repeat_fraction,
                  "drop documents with more repeated text than this fraction");
  return {app, [o, format, stage, job, emit, job_file, app] {
            o->corpus.format = parse_enum<data::CorpusFormat>("--format", *format);
            o->stage = parse_enum<data::PrepareStage>("--stage", *stage);
            if (!emit->empty()) {
              STRATA_CHECK(app->count("--stage") == 0 && app->count("--worker") == 0,
                           "strata prepare --emit slurm writes every stage's jobs; it takes "
                           "--workers (the array size), not --stage or --worker");
              job->workers = o->workers;
              job->args = prepare_args(*o);
              const std::string script = launch::emit_prepare_sbatch(*job);
              if (job_file->empty()) {
                std::cout << script;
              } else {
                std::ofstream out(*job_file);
                out << script;
                STRATA_CHECK(out.good(), "cannot write '", *job_file, "'");
              }
              return 0;
            }
            const data::PrepareReport report = data::prepare(*o);
            std::cout << report.summary() << "\n";
            return 0;
          }};
}

}  // namespace strata::cli
