// Tokenizer::save / Tokenizer::load: Hugging Face tokenizer.json for a byte-level BPE.
// Token strings are GPT-2's byte-to-unicode spelling of the token bytes (" the" -> "Ġthe"); the
// special token is spelled literally and listed under added_tokens as well as in the vocab.
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "data/file_util.h"
#include "data/tokenizer.h"
#include "data/unicode.h"

namespace strata::data {

namespace {

std::string to_unicode(const std::string& bytes) {
  std::string s;
  for (char c : bytes) s += byte_to_unicode()[static_cast<uint8_t>(c)];
  return s;
}

// Inverse of to_unicode; false when a character does not stand for a byte.
bool from_unicode(const std::string& s, std::string* bytes) {
  bytes->clear();
  for (size_t pos = 0; pos < s.size();) {
    uint32_t cp;
    bool valid;
    pos += decode_utf8(s, pos, &cp, &valid);
    const int b = valid ? unicode_to_byte(cp) : -1;
    if (b < 0) return false;
    *bytes += static_cast<char>(b);
  }
  return true;
}

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

// Encoding here is GPT-2's: a ByteLevel pre-tokenizer with its regex and no prefix space.
void check_pre_tokenizer(const nlohmann::json& j, const std::string& path) {
  const nlohmann::json p = j.value("pre_tokenizer", nlohmann::json());
  STRATA_CHECK(p.is_object() && p.value("type", "") == "ByteLevel", path, ": pre_tokenizer is ",
               p.dump(), "; only a ByteLevel pre_tokenizer (GPT-2 style) is supported");
  STRATA_CHECK(!p.value("add_prefix_space", false) && p.value("use_regex", true), path,
               ": pre_tokenizer needs add_prefix_space = false and use_regex = true");
}

void check_decoder(const nlohmann::json& j, const std::string& path) {
  const nlohmann::json d = j.value("decoder", nlohmann::json());
  STRATA_CHECK(d.is_null() || (d.is_object() && d.value("type", "") == "ByteLevel"), path,
               ": decoder is ", d.dump(), "; only a ByteLevel decoder is supported");
}

}  // namespace

void Tokenizer::save(const std::string& path) const {
  nlohmann::ordered_json vocab = nlohmann::ordered_json::object();
  for (int32_t id = 0; id < static_cast<int32_t>(tokens_.size()); ++id) {
    const std::string s = id == eot_id_ ? tokens_[id] : to_unicode(tokens_[id]);
    STRATA_CHECK(!vocab.contains(s), "cannot save tokenizer to '", path, "': token ", id,
                 " repeats the string of token ", vocab[s].get<int32_t>());
    vocab[s] = id;
  }
  nlohmann::ordered_json merges = nlohmann::ordered_json::array();
  for (const auto& [a, b] : merge_list_)
    merges.push_back(to_unicode(tokens_[a]) + " " + to_unicode(tokens_[b]));
  const auto byte_level = [](bool add_prefix_space) {
    return nlohmann::ordered_json{{"type", "ByteLevel"},
                                  {"add_prefix_space", add_prefix_space},
                                  {"trim_offsets", true},
                                  {"use_regex", true}};
  };
  nlohmann::ordered_json j;
  j["version"] = "1.0";
  j["truncation"] = nullptr;
  j["padding"] = nullptr;
  j["added_tokens"] =
      nlohmann::ordered_json::array({nlohmann::ordered_json{{"id", eot_id_},
                                                            {"content", tokens_[eot_id_]},
                                                            {"single_word", false},
                                                            {"lstrip", false},
                                                            {"rstrip", false},
                                                            {"normalized", false},
                                                            {"special", true}}});
  j["normalizer"] = nullptr;
  j["pre_tokenizer"] = byte_level(false);
  j["post_processor"] = nullptr;
  j["decoder"] = byte_level(true);  // what tokenizers writes; the decoder ignores it
  j["model"] = nlohmann::ordered_json{{"type", "BPE"},
                                      {"dropout", nullptr},
                                      {"unk_token", nullptr},
                                      {"continuing_subword_prefix", nullptr},
                                      {"end_of_word_suffix", nullptr},
                                      {"fuse_unk", false},
                                      {"byte_fallback", false},
                                      {"ignore_merges", false},
                                      {"vocab", std::move(vocab)},
                                      {"merges", std::move(merges)}};
  write_file_atomic(path, j.dump(1) + "\n");
}

Tokenizer Tokenizer::load(const std::string& path) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(read_file(path));
  } catch (const nlohmann::json::exception& e) {
    fail(path, ": not valid JSON (", e.what(), "); expected a Hugging Face tokenizer.json");
  }
  STRATA_CHECK(j.is_object() && j.contains("model") && j["model"].is_object(), path,
               ": no \"model\" object; expected a Hugging Face tokenizer.json");
  const nlohmann::json& model = j["model"];
  STRATA_CHECK(model.value("type", "BPE") == "BPE", path, ": model.type is \"",
               model.value("type", ""), "\"; only BPE tokenizers are supported");
  STRATA_CHECK(!j.contains("normalizer") || j["normalizer"].is_null(), path,
               ": has a normalizer; only GPT-2 style byte-level BPE (no normalizer) is supported");
  check_pre_tokenizer(j, path);
  check_decoder(j, path);
  STRATA_CHECK(model.contains("vocab") && model["vocab"].is_object(), path,
               ": model.vocab is missing or not an object");
  STRATA_CHECK(model.contains("merges") && model["merges"].is_array(), path,
               ": model.merges is missing or not an array");

  // Special tokens keep their literal spelling; every other token is byte-level text.
  std::unordered_map<int64_t, std::string> special;
  if (j.contains("added_tokens") && j["added_tokens"].is_array()) {
    for (const auto& t : j["added_tokens"])
      special[t.at("id").get<int64_t>()] = t.at("content").get<std::string>();
  }
  const auto& vocab = model["vocab"];
  int64_t n = static_cast<int64_t>(vocab.size());
  for (const auto& [id, content] : special) n = std::max(n, id + 1);
  std::vector<std::string> tokens(n);
  std::vector<bool> seen(n, false);
  std::unordered_map<std::string, int32_t> id_of;
  for (const auto& [s, id_json] : vocab.items()) {
    const int64_t id = id_json.get<int64_t>();
    STRATA_CHECK(id >= 0 && id < n && !seen[id], path, ": token \"", s, "\" has id ", id,
                 ", which is repeated or outside [0, ", n, ")");
    seen[id] = true;
    id_of[s] = static_cast<int32_t>(id);
    if (special.count(id)) {
      tokens[id] = special[id];
    } else {
      STRATA_CHECK(from_unicode(s, &tokens[id]), path, ": token \"", s, "\" (id ", id,
                   ") is not byte-level text; is this a GPT-2 style tokenizer?");
    }
  }
  for (const auto& [id, content] : special) {
    STRATA_CHECK(id >= 0, path, ": added token \"", content, "\" has negative id ", id);
    if (!seen[id]) tokens[id] = content, seen[id] = true;
  }
  for (int64_t id = 0; id < n; ++id)
    STRATA_CHECK(seen[id], path, ": no token has id ", id, "; ids must be 0..", n - 1);

  int32_t eot = -1;
  for (const auto& [id, content] : special)
    if (content == kEndOfText) eot = static_cast<int32_t>(id);
  if (eot < 0 && id_of.count(kEndOfText)) eot = id_of[kEndOfText];
  STRATA_CHECK(eot >= 0, path, ": no ", kEndOfText,
               " token; strata separates documents with it, so the vocabulary needs one");

  const auto& merge_json = model["merges"];
  std::vector<std::pair<int32_t, int32_t>> merges;
  merges.reserve(merge_json.size());
  for (size_t i = 0; i < merge_json.size(); ++i) {
    const auto [left, right] = merge_parts(merge_json[i], path, i);
    const auto a = id_of.find(left), b = id_of.find(right);
    STRATA_CHECK(a != id_of.end() && b != id_of.end(), path, ": merge ", i, " (\"", left, "\", \"",
                 right, "\") names a token that is not in model.vocab");
    merges.emplace_back(a->second, b->second);
  }
  return Tokenizer(std::move(tokens), std::move(merges), eot, path);
}

}  // namespace strata::data
