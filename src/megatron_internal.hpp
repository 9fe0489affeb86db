// Private to the Megatron script reader (src/megatron_*.cpp): the flags of a script as found,
// before they become typed settings and a model.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "moemem/megatron_args.hpp"

namespace moemem::detail {

// A flag's value as written, and where.
struct RawFlag {
  std::string value;
  Provenance from;
};

// Every flag of a script, by Megatron's spelling.
struct ScriptFlags {
  std::string source;  // the file, for error messages
  std::map<std::string, RawFlag, std::less<>> values;       // flags with one value: the last given
  std::map<std::string, Provenance, std::less<>> switches;  // switches given: the first
  std::vector<std::string> recompute_modules;    // the names every --recompute-modules gives, in order
  std::optional<Provenance> recompute_modules_from;  // the first --recompute-modules
  // --cuda-graph-scope (deprecated) or --cuda-graph-modules: the names, and each flag's first use.
  std::vector<std::string> cuda_graph_modules;
  std::map<std::string, Provenance, std::less<>> cuda_graph_modules_from;
  std::optional<Provenance> fp16;
  std::optional<Provenance> slime;  // a slime launch's rollout or actor flag (train.py's own)
  std::map<std::string, std::int64_t> counts;  // moemem flag -> times a value flag gives it
  std::vector<MegatronSettings::Unmodelled> unmodelled;
  std::vector<std::string> ignored, unrecognised, notes;

  [[nodiscard]] const RawFlag* find(std::string_view flag) const;
  [[nodiscard]] bool has(std::string_view flag) const { return find(flag) != nullptr || switches.contains(flag); }
  // "<source>: <flag>", the field of the reader's error messages.
  [[nodiscard]] std::string field(std::string_view flag) const;
  // The flag's value as an integer from 0 to 2^31, if given.
  [[nodiscard]] std::optional<std::int64_t> get_int(std::string_view flag) const;
};

// An integer from 0 to 2^31; the error names `field` and repeats the text.
[[nodiscard]] std::int64_t to_int(const std::string& text, const std::string& field);

// The model the architecture flags describe (the script gives --num-layers or --hidden-size);
// vocab 0 with `vocab_missing` saying why when neither --vocab-size nor a known tokenizer gives it.
[[nodiscard]] ModelSpec megatron_model(const ScriptFlags& f, std::string& vocab_missing, std::vector<std::string>& notes);

// Why `flag` (with the value after it, if any) changes memory unmodelled; nullopt if it does not.
[[nodiscard]] std::optional<std::string> unmodelled(std::string_view flag, std::string_view value);
// Whether `flag` replaces the GPT layers Megatron builds (a hybrid pattern or a custom spec): such
// a script is refused before its flags are read as a GPT stack.
[[nodiscard]] bool replaces_layers(std::string_view flag);
// Whether Megatron's source shows `flag` changes no GPU memory.
[[nodiscard]] bool ignored_flag(std::string_view flag);
// --cuda-graph-impl (or the deprecated --enable-cuda-graph / --external-cuda-graph) and
// --cuda-graph-scope / --cuda-graph-modules as settings, with Megatron's checks between them.
void read_cuda_graphs(const ScriptFlags& f, MegatronSettings& s);

// One entry of a ModelZoo YAML recipe's MODEL_ARGS: `--flag: value`; true is a switch (value
// empty), false leaves the flag out (not listed), as the ModelZoo's launcher does with yq.
struct RecipeArg {
  std::string flag, value;
  std::int64_t line = 0;
};
// The MODEL_ARGS of a ModelZoo YAML recipe; nullopt when `text` has no top-level MODEL_ARGS:.
// Throws InputError naming `source` when it is not YAML yaml-cpp can read.
[[nodiscard]] std::optional<std::vector<RecipeArg>> modelzoo_recipe(std::string_view text, const std::string& source);
// The recipe as launch-script text, one "--flag "value"" line per entry on the entry's own line,
// its ${VAR}s left for the shell.
[[nodiscard]] std::optional<std::string> modelzoo_yaml_args(std::string_view text, const std::string& source);

}  // namespace moemem::detail
