// The plan stage (prepare_stages.h): the corpus-wide decisions, made in corpus order from the
// units' scans, so that they are the same whatever the workers that scanned.
#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>

#include "core/log.h"
#include "data/file_util.h"
#include "data/minhash.h"
#include "data/prepare_record.h"
#include "data/prepare_stages.h"
#include "data/tokenizer.h"

namespace strata::data {

namespace fs = std::filesystem;

namespace {

DocStats& removed_by(PrepareReport& r, Verdict v) {
  switch (v) {
    case Verdict::invalid_utf8:
      return r.invalid_utf8;
    case Verdict::too_short:
      return r.too_short;
    case Verdict::too_long:
      return r.too_long;
    case Verdict::repetitive:
      return r.repetitive;
    case Verdict::nonprint:
      return r.nonprint;
    case Verdict::duplicate:
      return r.duplicate;
    case Verdict::near_duplicate:
      return r.near_duplicate;
    case Verdict::kept:
      break;
  }
  return r.kept;
}

// The texts of the unit's documents at `indices` (ascending; indices among all its documents),
// read from the unit itself: for a sample document the unit's own sample did not keep.
std::map<int64_t, std::string> read_documents(const PrepareOptions& o, const CorpusFile& unit,
                                              const std::vector<int64_t>& indices) {
  std::map<int64_t, std::string> out;
  BadRecords bad(1.0);  // the scan judged the records already
  int64_t i = 0;
  size_t next = 0;
  read_batches(unit, o.corpus, o.batch_bytes, bad, [&](const DocBatch& batch) {
    for (const DocBatch::Doc& d : batch.docs) {
      if (next < indices.size() && indices[next] == i) {
        out[i] = std::string(batch.view(d));
        ++next;
      }
      ++i;
    }
  });
  STRATA_CHECK(next == indices.size(), "prepare: '", unit.path,
               "' changed while it was prepared (it has fewer documents than its scan saw)");
  return out;
}

// A kept document's place: its corpus-wide ordinal, its unit and index among the unit's documents.
struct Place {
  int64_t ordinal = -1, unit = -1, doc = -1;
  double draw = 0;
};

}  // namespace

void Plan::save(const std::string& path) const {
  RecordWriter w;
  w.put<uint64_t>(units.size());
  for (const UnitPlan& u : units) {
    w.put(u.first_ordinal);
    w.put_vector(u.removed);
  }
  w.put(kept);
  w.put(forced_val);
  w.put(forced_train);
  w.put_string(report.to_json().dump());
  write_file_atomic(path, w.bytes());
}

Plan Plan::load(const std::string& path) {
  RecordReader r(read_file(path), path);
  Plan p;
  p.units.resize(r.get<uint64_t>());
  for (UnitPlan& u : p.units) {
    u.first_ordinal = r.get<int64_t>();
    u.removed = r.get_vector<UnitPlan::Removed>();
  }
  p.kept = r.get<int64_t>();
  p.forced_val = r.get<int64_t>();
  p.forced_train = r.get<int64_t>();
  p.report = PrepareReport::from_json(nlohmann::json::parse(r.get_string()));
  return p;
}

Plan make_plan(const PrepareOptions& o, const std::vector<CorpusFile>& units,
               const std::vector<std::string>& scans, const std::vector<std::string>& samples) {
  Plan plan;
  PrepareReport& r = plan.report;
  const bool dedup = o.dedup != DedupMode::none, minhash = o.dedup == DedupMode::minhash;
  const bool train_tokenizer = o.tokenizer.empty();
  const auto n_bands = static_cast<size_t>(o.minhash.bands);
  ExactDedup exact;
  NearDedup near;
  BadRecords bad(o.corpus.max_bad_fraction);
  Sample sample(o.tokenizer_sample_bytes);
  std::vector<std::vector<SampleEntry>> candidates(units.size());  // each unit's own sample
  int64_t n_val = 0;
  Place lowest, highest;  // the kept documents with the extreme draws
  lowest.draw = 2;
  highest.draw = -1;
  std::vector<uint64_t> doc_bands;
  for (size_t u = 0; u < units.size(); ++u) {
    const UnitScan s = UnitScan::load(scans[u]);
    bad.merge(s.bad, s.records, s.bad_examples);
    UnitPlan& up = plan.units.emplace_back();
    up.first_ordinal = plan.kept;
    int64_t j = 0;  // the index among the unit's documents the filters kept
    for (size_t i = 0; i < s.verdicts.size(); ++i) {
      const int64_t bytes = s.bytes[i];
      r.seen.add(bytes);
      if (s.verdicts[i] != Verdict::kept) {
        removed_by(r, s.verdicts[i]).add(bytes);
        continue;
      }
      const auto k = static_cast<size_t>(j++);
      Verdict v = Verdict::kept;
      if (dedup && exact.seen(s.keys[k])) v = Verdict::duplicate;
      // Every document's bands are recorded, so a chain of near copies goes with its first.
      if (minhash && s.has_bands[k]) {
        doc_bands.assign(s.bands.begin() + static_cast<ptrdiff_t>(k * n_bands),
                         s.bands.begin() + static_cast<ptrdiff_t>((k + 1) * n_bands));
        if (near.seen(doc_bands) && v == Verdict::kept) v = Verdict::near_duplicate;
      }
      if (v != Verdict::kept) {
        up.removed.push_back({static_cast<int64_t>(i), v});
        removed_by(r, v).add(bytes);
        continue;
      }
      r.kept.add(bytes);
      const Place place{plan.kept++, static_cast<int64_t>(u), static_cast<int64_t>(i), s.draws[k]};
      n_val += place.draw < o.val_fraction;
      if (place.draw < lowest.draw) lowest = place;
      if (place.draw > highest.draw) highest = place;
      if (train_tokenizer && place.draw >= o.val_fraction) {
        SampleEntry e;
        e.hash = s.hashes[k];
        e.ordinal = place.ordinal;
        e.bytes = bytes;
        e.unit = static_cast<int64_t>(u);
        e.index = static_cast<int64_t>(k);
        sample.offer(e, {});
      }
    }
    candidates[u] = s.sample;
  }
  bad.check();
  r.bad_records = bad.count();
  r.records = bad.records();
  r.bad_examples = bad.examples();
  STRATA_CHECK(plan.kept > 0, "prepare: all ", r.seen.documents, " documents of ", units.size(),
               " unit(s) were removed (invalid_utf8 ", r.invalid_utf8.documents, ", too_short ",
               r.too_short.documents, ", too_long ", r.too_long.documents, ", repetitive ",
               r.repetitive.documents, ", nonprint ", r.nonprint.documents, ", duplicate ",
               r.duplicate.documents, ", near_duplicate ", r.near_duplicate.documents,
               "); check the separator (now ", nlohmann::json(o.corpus.document_separator).dump(),
               "), the JSON field (now '", o.corpus.field, "') and the filters");
  // With two or more documents and a non-zero fraction, both splits get at least one.
  if (plan.kept >= 2 && o.val_fraction > 0) {
    if (n_val == 0) plan.forced_val = lowest.ordinal;
    if (n_val == plan.kept) plan.forced_train = highest.ordinal;
  }

  // ---- the tokenizer ---------------------------------------------------------------------------
  const auto t0 = std::chrono::steady_clock::now();
  const std::string tokenizer_file = (fs::path(o.out_dir) / "tokenizer.json").string();
  std::optional<Tokenizer> tok;
  if (train_tokenizer) {
    std::vector<std::string> docs;
    if (plan.forced_train >= 0) {  // every document went to validation: train on the one moved
      docs.push_back(std::move(
          read_documents(o, units[static_cast<size_t>(highest.unit)], {highest.doc})[highest.doc]));
    } else {
      std::vector<std::pair<SampleEntry, std::string>> chosen = sample.take();
      // The texts: from each unit's own sample, or, for a unit whose sample lacks one of them,
      // from the unit itself.
      size_t a = 0;
      while (a < chosen.size()) {
        const int64_t u = chosen[a].first.unit;
        size_t b = a;
        while (b < chosen.size() && chosen[b].first.unit == u) ++b;
        const std::vector<SampleEntry>& own = candidates[static_cast<size_t>(u)];
        std::ifstream texts;           // the unit's sample texts, read at the offsets wanted
        std::vector<int64_t> missing;  // indices among the kept documents
        for (size_t c = a; c < b; ++c) {
          auto it = std::lower_bound(
              own.begin(), own.end(), chosen[c].first.index,
              [](const SampleEntry& e, int64_t index) { return e.ordinal < index; });
          if (it == own.end() || it->ordinal != chosen[c].first.index) {
            missing.push_back(chosen[c].first.index);
            continue;
          }
          if (!texts.is_open()) texts.open(samples[static_cast<size_t>(u)], std::ios::binary);
          std::string& text = chosen[c].second;
          text.resize(static_cast<size_t>(it->bytes));
          texts.seekg(it->offset);
          texts.read(text.data(), it->bytes);
          STRATA_CHECK(texts.good(), "prepare: '", samples[static_cast<size_t>(u)],
                       "' is shorter than its scan says; remove the folder's .prepare subfolder "
                       "and run again");
        }
        if (!missing.empty()) {
          ++r.tokenizer_sample_rereads;
          // Kept indices to document indices: the scan's verdicts say which documents were kept.
          const UnitScan s = UnitScan::load(scans[static_cast<size_t>(u)]);
          std::vector<int64_t> docs_of_kept;
          for (size_t i = 0; i < s.verdicts.size(); ++i)
            if (s.verdicts[i] == Verdict::kept) docs_of_kept.push_back(static_cast<int64_t>(i));
          std::vector<int64_t> wanted;
          for (int64_t k : missing) wanted.push_back(docs_of_kept[static_cast<size_t>(k)]);
          std::map<int64_t, std::string> read =
              read_documents(o, units[static_cast<size_t>(u)], wanted);
          for (size_t c = a; c < b; ++c)
            if (chosen[c].second.empty() && chosen[c].first.bytes > 0)
              chosen[c].second =
                  std::move(read[docs_of_kept[static_cast<size_t>(chosen[c].first.index)]]);
        }
        a = b;
      }
      for (auto& [entry, text] : chosen)
        if (entry.ordinal != plan.forced_val) docs.push_back(std::move(text));
    }
    for (const std::string& d : docs) r.tokenizer_sample.add(static_cast<int64_t>(d.size()));
    tok = Tokenizer::train(docs, o.vocab_size);
    tok->save(tokenizer_file);
  } else {
    tok = Tokenizer::load(o.tokenizer, o.eot_token);
    r.tokenizer = o.tokenizer;
    // The file itself, byte for byte (the loader and transformers read it as it was).
    if (!fs::exists(tokenizer_file) || !fs::equivalent(o.tokenizer, tokenizer_file))
      write_file_atomic(tokenizer_file, read_file(o.tokenizer));
  }
  r.tokenizer_seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  r.vocab_size = tok->vocab_size();
  return plan;
}

}  // namespace strata::data
