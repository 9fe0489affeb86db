#include "targets.hpp"

#include <stdlib.h>  // mkdtemp (POSIX)

#include <array>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>

#include "cli/commands.hpp"
#include "moemem/analyze.hpp"
#include "moemem/config.hpp"
#include "moemem/errors.hpp"
#include "moemem/megatron_args.hpp"
#include "moemem/scenario.hpp"
#include "moemem/validate.hpp"

namespace moemem::fuzz {

void config_json(std::string_view input) {
  try {
    const ModelSpec m = parse_hf_config(input, "fuzz.config.json");
    (void)build_inventory(m).total();
    // Analyzing takes time in the layers; the parser and inventory are what is fuzzed here.
    if (m.num_layers > 64) return;
    Request r;
    r.model.spec = m;
    const Scenario s = make_scenario(r);
    (void)analyze(s.model, s.inventory, *s.profile, s.layout, s.training);
  } catch (const InputError&) {
    // refused with a named error: fine
  }
}

void validation_line(std::string_view input) {
  try {
    const RequestBuilder build = [](const RecordSpec& spec) { return cli::record_request_of(spec, ""); };
    (void)validate_records(input, "fuzz.jsonl", Confidence::low, build);
  } catch (const InputError&) {
    // refused with a named error: fine
  }
}

namespace {

// layout_string's choices. Byte 0: the model (low three bits: kLayoutModels) and the schedule
// ((byte / 8) % 6: kSchedules). Byte 1: pp (low three bits: kPipelineDegrees, 0 included as a
// degree to refuse), vpp (bits 3-4: 1 to 4) and a global batch of 64 (bit 6) or none.
struct LayoutModel {
  const char* preset;
  std::optional<std::int64_t> mtp;  // unset: the preset's (kept by the megatron profile)
};
constexpr std::array<LayoutModel, 8> kLayoutModels = {{{"deepseek-v3", 1},  // 61 layers, 1 MTP depth
                                                       {"deepseek-v3", 0},
                                                       {"deepseek-v3", 2},
                                                       {"deepseek-v2-lite", std::nullopt},  // 27 layers
                                                       {"llama-3.1-8b", std::nullopt},      // 32, dense
                                                       {"qwen3-30b-a3b", std::nullopt},     // 48
                                                       {"mixtral-8x7b", std::nullopt},      // 32
                                                       {"qwen3-235b-a22b", std::nullopt}}};  // 94
constexpr std::array<Schedule, 6> kSchedules = {Schedule::one_f_one_b, Schedule::interleaved, Schedule::dualpipe,
                                                Schedule::dualpipev,   Schedule::gpipe,       Schedule::zb_h1};
constexpr std::array<std::int64_t, 8> kPipelineDegrees = {1, 2, 4, 8, 16, 3, 0, 61};

const ModelSpec& layout_model(std::size_t k) {
  static std::array<std::optional<ModelSpec>, kLayoutModels.size()> loaded;
  if (!loaded[k]) loaded[k] = load_model(kLayoutModels[k].preset);
  return *loaded[k];
}

// A private directory for launch_script's file, made once per process and removed at its exit.
class ScriptDir {
 public:
  ScriptDir() {
    std::string name = (std::filesystem::temp_directory_path() / "moemem-fuzz-XXXXXX").string();
    if (mkdtemp(name.data()) == nullptr) throw std::runtime_error("fuzz: cannot make a temporary directory");
    dir_ = name;
  }
  ~ScriptDir() {
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }
  ScriptDir(const ScriptDir&) = delete;
  ScriptDir& operator=(const ScriptDir&) = delete;
  [[nodiscard]] std::string script() const { return (dir_ / "launch.sh").string(); }

 private:
  std::filesystem::path dir_;
};

}  // namespace

void layout_string(std::string_view input) {
  if (input.size() < 2) return;
  const auto b0 = static_cast<unsigned char>(input[0]), b1 = static_cast<unsigned char>(input[1]);
  const std::size_t model = b0 % kLayoutModels.size();
  Request r;
  r.model.spec = layout_model(model);
  r.model.mtp = kLayoutModels[model].mtp;
  r.parallel.schedule = kSchedules[(b0 / 8U) % kSchedules.size()];
  r.parallel.pp = kPipelineDegrees[b1 % kPipelineDegrees.size()];
  r.parallel.vpp = 1 + ((b1 / 8U) % 4U);
  if ((b1 & 0x40U) != 0) r.training.global_batch = 64;
  r.parallel.pipeline_layout = std::string(input.substr(2));
  try {
    (void)check_layout(*r.model.spec, r.parallel);
    const Scenario s = make_scenario(r);
    (void)analyze(s.model, s.inventory, *s.profile, s.layout, s.training);
  } catch (const InputError&) {
    // refused with a named error: fine
  }
}

void launch_script(std::string_view input) {
  static const ScriptDir dir;
  const std::string path = dir.script();
  {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out.write(input.data(), static_cast<std::streamsize>(input.size()));
    if (!out) throw std::runtime_error("fuzz: cannot write " + path);
  }
  try {
    // As --megatron-args reads a script (src/cli/cli.cpp: read_megatron_script), then as analyze
    // puts its settings onto the request.
    const MegatronSettings s = parse_megatron_args(cli::read_text_file(path, "--megatron-args"), path);
    if (s.model) {
      static const ModelSpec named = load_model("deepseek-v3");
      (void)model_disagreement(*s.model, named);
    }
    Request r;
    apply_megatron_settings(s, r, {});
    if (!r.model.spec || r.model.spec->num_layers > 64) return;  // analyzing a large model takes time
    const Scenario sc = make_scenario(r);
    (void)analyze(sc.model, sc.inventory, *sc.profile, sc.layout, sc.training);
  } catch (const InputError&) {
    // refused with a named error: fine
  }
}

const std::vector<Target>& targets() {
  static const std::vector<Target> all = {{"config", config_json},
                                          {"validation_line", validation_line},
                                          {"layout_string", layout_string},
                                          {"launch_script", launch_script}};
  return all;
}

}  // namespace moemem::fuzz
