// Tokenizer::save / Tokenizer::load: Hugging Face tokenizer.json for a byte-level BPE.
// Token strings are GPT-2's byte-to-unicode spelling of the token bytes (" the" -> "Ġthe"); added
// tokens are spelled literally, listed under added_tokens, and in model.vocab too where the file
// has them there (trainers put their special tokens there; Llama 3 does not).
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/json.h"
#include "data/file_util.h"
#include "data/tokenizer.h"
#include "data/unicode.h"

namespace strata::data {

namespace {

// Reads one merge, either "a b" (older files, GPT-2) or ["a", "b"] (tokenizers >= 0.20).
std::pair<std::string, std::string> merge_parts(const nlohmann::json& m, const std::string& path,
                                                size_t index) {
  if (m.is_string()) {
    const std::string s = m.get<std::string>();
    const size_t space = s.find(' ');
    STRATA_CHECK(space != std::string::npos && s.find(' ', space + 1) == std::string::npos, path,
                 ": merge ", index, " \"", s, "\" is not two tokens separated by one space");
    return {s.substr(0, space), s.substr(space + 1)};
  }
  STRATA_CHECK(m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string(), path,
               ": merge ", index, " is neither \"a b\" nor [\"a\", \"b\"]");
  return {m[0].get<std::string>(), m[1].get<std::string>()};
}

// The model options that would change how BPE splits a word: only plain byte-level BPE (with
// ignore_merges, read by the caller) is run, everything else is named.
void check_model(const nlohmann::json& model, const std::string& path) {
  const std::string type = model.value("type", "BPE");
  STRATA_CHECK(type == "BPE", path, ": model.type is \"", type,
               "\"; only BPE tokenizers are supported (byte-level BPE: GPT-2, Llama 3, Qwen2)");
  STRATA_CHECK(!model.value("byte_fallback", false), path,
               ": model.byte_fallback is true (SentencePiece-style <0x..> byte tokens); only "
               "byte-level BPE, whose vocabulary spells bytes the GPT-2 way, is supported");
  const nlohmann::json dropout = model.value("dropout", nlohmann::json());
  STRATA_CHECK(dropout.is_null() || (dropout.is_number() && dropout.get<double>() == 0.0), path,
               ": model.dropout is ", dropout.dump(),
               "; BPE dropout (random merges) is not supported, encoding here is deterministic");
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    const nlohmann::json v = model.value(key, nlohmann::json());
    STRATA_CHECK(v.is_null() || (v.is_string() && v.get<std::string>().empty()), path, ": model.",
                 key, " is ", v.dump(),
                 "; subword prefixes and suffixes (WordPiece-style BPE) are not supported");
  }
}

Normalizer parse_normalizer(const nlohmann::json& n, const std::string& path) {
  if (n.is_null()) return Normalizer::none;
  const std::string type = n.is_object() ? n.value("type", "") : "";
  if (type == "NFC") return Normalizer::nfc;
  if (type == "Sequence" && n.contains("normalizers") && n["normalizers"].is_array()) {
    Normalizer result = Normalizer::none;  // NFC twice is NFC once
    for (const auto& step : n["normalizers"])
      if (parse_normalizer(step, path) == Normalizer::nfc) result = Normalizer::nfc;
    return result;
  }
  fail(path, ": normalizer ", n.dump(),
       " is not supported; strata runs no normalizer or NFC (GPT-2 and Llama 3 have none, Qwen2 "
       "has NFC)");
}

// ByteLevel alone (GPT-2), or a Sequence of Split(Regex, Isolated) steps ending in a ByteLevel
// (Llama 3, Qwen2). See pretokenize_pipeline.h for the steps this becomes.
PreTokenizer parse_pre_tokenizer(const nlohmann::json& p, const std::string& path) {
  const auto unsupported = [&](const std::string& why) {
    fail(path, ": pre_tokenizer ", p.dump(), " is not supported (", why,
         "); strata runs a ByteLevel pre_tokenizer, or a Sequence of Split steps (a Regex "
         "pattern, behavior Isolated, invert false) ending in a ByteLevel");
  };
  STRATA_CHECK(p.is_object(), path, ": pre_tokenizer is ", p.dump(),
               "; a byte-level BPE needs a ByteLevel pre_tokenizer");
  std::vector<nlohmann::json> steps;
  if (p.value("type", "") == "Sequence" && p.contains("pretokenizers") &&
      p["pretokenizers"].is_array())
    steps.assign(p["pretokenizers"].begin(), p["pretokenizers"].end());
  else
    steps.push_back(p);
  PreTokenizer pre;
  for (size_t i = 0; i < steps.size(); ++i) {
    const nlohmann::json& s = steps[i];
    const std::string type = s.is_object() ? s.value("type", "") : "";
    const bool last = i + 1 == steps.size();
    if (type == "ByteLevel" && last) {
      if (s.value("add_prefix_space", false)) pre.add_prefix_space();
      if (s.value("use_regex", true)) pre.add_split(SplitPattern::gpt2);
    } else if (type == "Split" && !last) {
      const nlohmann::json pattern = s.value("pattern", nlohmann::json());
      if (!pattern.is_object() || !pattern.contains("Regex") || !pattern["Regex"].is_string())
        unsupported("a Split pattern that is not {\"Regex\": ...}");
      if (s.value("behavior", "") != "Isolated")
        unsupported("a Split behavior other than Isolated");
      if (s.value("invert", false)) unsupported("an inverted Split");
      const std::string regex = pattern["Regex"].get<std::string>();
      if (const auto known = find_split_pattern(regex))
        pre.add_split(*known);
      else
        pre.add_regex_split(std::make_shared<RegexSplitter>(regex, path));
    } else if (type == "ByteLevel") {
      unsupported("a ByteLevel step that is not the last");
    } else {
      unsupported("a \"" + type + "\" step");
    }
  }
  if (steps.empty() || steps.back().value("type", "") != "ByteLevel")
    unsupported("no ByteLevel step last");
  return pre;
}

void check_decoder(const nlohmann::json& j, const std::string& path) {
  const nlohmann::json d = j.value("decoder", nlohmann::json());
  STRATA_CHECK(d.is_null() || (d.is_object() && d.value("type", "") == "ByteLevel"), path,
               ": decoder is ", d.dump(), "; only a ByteLevel decoder is supported");
}

}  // namespace

void Tokenizer::save(const std::string& path) const {
  std::vector<bool> added(tokens_.size(), false), in_vocab(tokens_.size(), true);
  for (const AddedToken& t : pipeline_.added_tokens) {
    added[t.id] = true;
    in_vocab[t.id] = t.in_model_vocab;
  }
  nlohmann::ordered_json vocab = nlohmann::ordered_json::object();
  for (int32_t id = 0; id < static_cast<int32_t>(tokens_.size()); ++id) {
    if (!in_vocab[id]) continue;
    const std::string s = added[id] ? tokens_[id] : to_byte_level(tokens_[id]);
    STRATA_CHECK(!vocab.contains(s), "cannot save tokenizer to '", path, "': token ", id,
                 " repeats the string of token ", vocab[s].get<int32_t>());
    vocab[s] = id;
  }
  nlohmann::ordered_json merges = nlohmann::ordered_json::array();
  for (const auto& [a, b] : merge_list_)
    merges.push_back(to_byte_level(tokens_[a]) + " " + to_byte_level(tokens_[b]));
  nlohmann::ordered_json added_tokens = nlohmann::ordered_json::array();
  for (const AddedToken& t : pipeline_.added_tokens)
    added_tokens.push_back(nlohmann::ordered_json{{"id", t.id},
                                                  {"content", t.content},
                                                  {"single_word", t.single_word},
                                                  {"lstrip", t.lstrip},
                                                  {"rstrip", t.rstrip},
                                                  {"normalized", t.normalized},
                                                  {"special", t.special}});
  nlohmann::ordered_json j;
  j["version"] = "1.0";
  j["truncation"] = nullptr;
  j["padding"] = nullptr;
  j["added_tokens"] = std::move(added_tokens);
  j["normalizer"] = nlohmann::ordered_json::parse(pipeline_.normalizer_json);
  j["pre_tokenizer"] = nlohmann::ordered_json::parse(pipeline_.pre_tokenizer_json);
  j["post_processor"] = nullptr;
  j["decoder"] = nlohmann::ordered_json{{"type", "ByteLevel"},
                                        {"add_prefix_space", true},  // what tokenizers writes;
                                        {"trim_offsets", true},      // the decoder ignores it
                                        {"use_regex", true}};
  j["model"] = nlohmann::ordered_json{{"type", "BPE"},
                                      {"dropout", nullptr},
                                      {"unk_token", nullptr},
                                      {"continuing_subword_prefix", nullptr},
                                      {"end_of_word_suffix", nullptr},
                                      {"fuse_unk", false},
                                      {"byte_fallback", false},
                                      {"ignore_merges", pipeline_.ignore_merges},
                                      {"vocab", std::move(vocab)},
                                      {"merges", std::move(merges)}};
  write_file_atomic(path, j.dump(1) + "\n");
}

Tokenizer Tokenizer::load(const std::string& path, const std::string& separator) {
  nlohmann::json j;
  try {
    j = parse_json(read_file(path), path);
  } catch (const nlohmann::json::exception& e) {
    fail(path, ": not valid JSON (", e.what(), "); expected a Hugging Face tokenizer.json");
  }
  // Values of the wrong JSON type that the checks below do not name (a "type" that is a number,
  // a flag that is a string) surface as nlohmann's type_error: one strata error naming the file.
  try {
    STRATA_CHECK(j.is_object() && j.contains("model") && j["model"].is_object(), path,
                 ": no \"model\" object; expected a Hugging Face tokenizer.json");
    const nlohmann::json& model = j["model"];
    check_model(model, path);
    Pipeline pipeline;
    const nlohmann::json normalizer = j.value("normalizer", nlohmann::json());
    pipeline.normalizer = parse_normalizer(normalizer, path);
    pipeline.normalizer_json = normalizer.dump();
    const nlohmann::json pre_tokenizer = j.value("pre_tokenizer", nlohmann::json());
    pipeline.pre_tokenizer = parse_pre_tokenizer(pre_tokenizer, path);
    pipeline.pre_tokenizer_json = pre_tokenizer.dump();
    pipeline.ignore_merges = model.value("ignore_merges", false);
    check_decoder(j, path);
    STRATA_CHECK(model.contains("vocab") && model["vocab"].is_object(), path,
                 ": model.vocab is missing or not an object");
    STRATA_CHECK(model.contains("merges") && model["merges"].is_array(), path,
                 ": model.merges is missing or not an array");

    // model.vocab: ids 0..n-1. Added tokens listed there keep its id (as `tokenizers` does) and
    // their literal spelling; the others follow it, numbered as `tokenizers` numbers them.
    const auto& vocab = model["vocab"];
    const auto n_vocab = static_cast<int64_t>(vocab.size());
    std::unordered_map<std::string, int32_t> id_of;  // model.vocab's keys
    std::vector<std::string> spelled(n_vocab);
    for (const auto& [s, id_json] : vocab.items()) {
      STRATA_CHECK(id_json.is_number_integer(), path, ": token \"", s, "\" has id ", id_json.dump(),
                   "; model.vocab maps each token to an integer id");
      const int64_t id = id_json.get<int64_t>();
      STRATA_CHECK(id >= 0 && id < n_vocab && spelled[id].empty() && !s.empty(), path, ": token \"",
                   s, "\" has id ", id, ", which is repeated or outside [0, ", n_vocab,
                   "); model.vocab must number its tokens 0..", n_vocab - 1);
      spelled[id] = s;
      id_of[s] = static_cast<int32_t>(id);
    }
    int64_t next_id = n_vocab;  // the id `tokenizers` gives the next token not in model.vocab
    std::vector<bool> is_added(n_vocab, false);
    std::vector<std::string> tokens(n_vocab);
    if (j.contains("added_tokens") && j["added_tokens"].is_array()) {
      for (const auto& t : j["added_tokens"]) {
        STRATA_CHECK(t.is_object() && t.contains("content") && t["content"].is_string() &&
                         t.contains("id") && t["id"].is_number_integer(),
                     path, ": added token ", t.dump(),
                     " is not an object with a string \"content\" and an integer \"id\"");
        AddedToken a;
        a.content = t.at("content").get<std::string>();
        a.special = t.value("special", false);
        a.lstrip = t.value("lstrip", false);
        a.rstrip = t.value("rstrip", false);
        a.single_word = t.value("single_word", false);
        a.normalized = t.value("normalized", !a.special);
        const int64_t file_id = t.at("id").get<int64_t>();
        if (a.content.empty()) continue;  // `tokenizers` ignores it too
        bool repeated = false;
        for (const AddedToken& b : pipeline.added_tokens) repeated |= b.content == a.content;
        if (repeated) continue;
        const auto in_vocab = id_of.find(a.content);
        a.in_model_vocab = in_vocab != id_of.end();
        a.id = a.in_model_vocab ? in_vocab->second : static_cast<int32_t>(next_id);
        // `tokenizers` ignores the file's id and warns; a tokenizer whose ids differ from the
        // file's would train a model on other ids than the file's users expect.
        STRATA_CHECK(file_id == a.id, path, ": added token \"", a.content, "\" has id ", file_id,
                     " but `tokenizers` gives it id ", a.id,
                     " (its model.vocab id, or the next id after model.vocab and the added tokens "
                     "before it)");
        if (!a.in_model_vocab) {
          ++next_id;
          tokens.push_back(a.content);
          is_added.push_back(true);
        } else {
          tokens[a.id] = a.content;
          is_added[a.id] = true;
        }
        pipeline.added_tokens.push_back(std::move(a));
      }
    }
    for (int64_t id = 0; id < n_vocab; ++id) {
      if (is_added[id]) continue;
      STRATA_CHECK(from_byte_level(spelled[id], &tokens[id]), path, ": token \"", spelled[id],
                   "\" (id ", id, ") is not byte-level text; is this a byte-level BPE tokenizer?");
    }

    const auto& merge_json = model["merges"];
    std::vector<std::pair<int32_t, int32_t>> merges;
    merges.reserve(merge_json.size());
    for (size_t i = 0; i < merge_json.size(); ++i) {
      const auto [left, right] = merge_parts(merge_json[i], path, i);
      const auto a = id_of.find(left), b = id_of.find(right);
      STRATA_CHECK(a != id_of.end() && b != id_of.end(), path, ": merge ", i, " (\"", left,
                   "\", \"", right, "\") names a token that is not in model.vocab");
      merges.emplace_back(a->second, b->second);
    }

    // The document separator: named, or the first of the usual names the file has.
    int32_t eot = -1;
    const auto find = [&](const std::string& name) {
      for (const AddedToken& t : pipeline.added_tokens)
        if (t.content == name) return t.id;
      const auto it = id_of.find(name);
      return it == id_of.end() ? -1 : it->second;
    };
    if (!separator.empty()) {
      eot = find(separator);
      STRATA_CHECK(eot >= 0, path, ": no token \"", separator,
                   "\" to separate documents with (the separator named); name one of its "
                   "added_tokens or model.vocab tokens");
    } else {
      for (const char* name : {kEndOfText, "<|end_of_text|>", "</s>"})
        if (eot < 0) eot = find(name);
      STRATA_CHECK(eot >= 0, path, ": none of <|endoftext|>, <|end_of_text|>, </s> is a token; ",
                   "strata separates documents with one, so name the token to use (the separator ",
                   "argument of Tokenizer::load, e.g. \"<|eot_id|>\")");
    }

    // strata's own pipeline keeps invalid bytes (tokenizer.h); the rest replace them.
    const bool own = pipeline.normalizer == Normalizer::none &&
                     pipeline.pre_tokenizer.single_pattern() == SplitPattern::gpt2;
    pipeline.invalid_utf8 = own ? InvalidUtf8::keep_bytes : InvalidUtf8::replace;
    return Tokenizer(std::move(tokens), std::move(merges), eot, path, std::move(pipeline));
  } catch (const nlohmann::json::exception& e) {
    fail(path, ": malformed tokenizer.json (", e.what(),
         "); expected a Hugging Face tokenizer.json");
  }
}

}  // namespace strata::data
