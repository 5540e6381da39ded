#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "commands.h"
#include "data/prepare.h"

namespace strata::cli {

Command add_prepare_command(CLI::App& parent) {
  struct Args {
    std::vector<std::string> text;
    std::string out;
    int64_t vocab = 8192;
    double val_fraction = 0.05;
    uint64_t seed = 1337;
    DataConfig defaults;
  };
  auto a = std::make_shared<Args>();
  CLI::App* app = parent.add_subcommand("prepare", "train a BPE tokenizer and write token shards");
  app->add_option("--text", a->text, "text files")->required();
  app->add_option("--out", a->out, "output directory")->required();
  app->add_option("--vocab", a->vocab, "vocabulary size (default 8192)");
  app->add_option("--val-fraction", a->val_fraction, "documents held out for validation");
  app->add_option("--seed", a->seed, "seed of the train/validation split");
  app->add_option("--separator", a->defaults.document_separator,
                  "string that separates documents (default: a blank line)");
  app->add_option("--min-doc-chars", a->defaults.filters.min_doc_chars, "drop shorter documents");
  app->add_option("--max-doc-chars", a->defaults.filters.max_doc_chars, "drop longer documents");
  app->add_option("--max-repeat-fraction", a->defaults.filters.max_repeat_fraction,
                  "drop documents with more repeated text than this fraction");
  return {app, [a] {
            const data::PrepareReport report =
                data::prepare_text(a->text, a->out, a->vocab, a->val_fraction, a->seed,
                                   a->defaults.document_separator, a->defaults.filters);
            std::cout << report.summary() << "\n";
            return 0;
          }};
}

}  // namespace strata::cli
