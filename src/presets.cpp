#include "moemem/presets.hpp"

#include <algorithm>
#include <cctype>

#include "moemem/config.hpp"

namespace moemem {

namespace {

bool same_ignoring_case(std::string_view a, std::string_view b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
           return std::tolower(static_cast<unsigned char>(x)) == std::tolower(static_cast<unsigned char>(y));
         });
}

// `prefix` begins `name` (ignoring case) and is followed there by '-'.
bool begins_before_dash(std::string_view name, std::string_view prefix) {
  return name.size() > prefix.size() && name[prefix.size()] == '-' && same_ignoring_case(name.substr(0, prefix.size()), prefix);
}

}  // namespace

const std::vector<PresetSource>& preset_sources() {
  // data/models/SOURCES.md: the repository each preset's config.json was taken from.
  static const std::vector<PresetSource> sources = {
      {"dbrx-base", "databricks/dbrx-base"},
      {"deepseek-moe-16b", "deepseek-ai/deepseek-moe-16b-chat"},
      {"deepseek-v2", "deepseek-ai/DeepSeek-V2"},
      {"deepseek-v2-lite", "deepseek-ai/DeepSeek-V2-Lite"},
      {"deepseek-v3", "deepseek-ai/DeepSeek-V3"},
      {"deepseek-v3.2", "deepseek-ai/DeepSeek-V3.2"},
      {"dots-llm1", "rednote-hilab/dots.llm1.base"},
      {"ernie-4.5-21b-a3b", "baidu/ERNIE-4.5-21B-A3B-PT"},
      {"gemma-2-27b", "google/gemma-2-27b"},
      {"gemma-2-2b", "google/gemma-2-2b"},
      {"gemma-2-9b", "google/gemma-2-9b"},
      {"gemma-3-12b-it", "google/gemma-3-12b-it"},
      {"gemma-3-1b", "google/gemma-3-1b-pt"},
      {"gemma-3-27b-it", "google/gemma-3-27b-it"},
      {"gemma-3-4b-it", "google/gemma-3-4b-it"},
      {"glm-4.5", "zai-org/GLM-4.5"},
      {"glm-4.5-air", "zai-org/GLM-4.5-Air"},
      {"glm-4.7-flash", "zai-org/GLM-4.7-Flash"},
      {"glm-5", "zai-org/GLM-5"},
      {"gpt-oss-120b", "openai/gpt-oss-120b"},
      {"gpt-oss-20b", "openai/gpt-oss-20b"},
      {"granite-3.1-1b-a400m", "ibm-granite/granite-3.1-1b-a400m-instruct"},
      {"hunyuan-a13b", "tencent/Hunyuan-A13B-Instruct"},
      {"llama-3.1-405b", "meta-llama/Llama-3.1-405B"},
      {"llama-3.1-70b", "meta-llama/Llama-3.1-70B"},
      {"llama-3.1-8b", "meta-llama/Llama-3.1-8B"},
      {"llama-3.3-nemotron-super-49b", "nvidia/Llama-3_3-Nemotron-Super-49B-v1"},
      {"llama-4-maverick", "meta-llama/Llama-4-Maverick-17B-128E"},
      {"llama-4-scout", "meta-llama/Llama-4-Scout-17B-16E"},
      {"minimax-m2", "MiniMaxAI/MiniMax-M2"},
      {"mimo-v2-flash", "XiaomiMiMo/MiMo-V2-Flash"},
      {"mistral-7b", "mistralai/Mistral-7B-v0.1"},
      {"mixtral-8x22b", "mistral-community/Mixtral-8x22B-v0.1"},
      {"mixtral-8x7b", "mistralai/Mixtral-8x7B-v0.1"},
      {"moonlight-16b", "moonshotai/Moonlight-16B-A3B-Instruct"},
      {"nemotron-3-nano-30b-a3b", "nvidia/NVIDIA-Nemotron-3-Nano-30B-A3B-BF16"},
      {"nemotron-nano-9b-v2", "nvidia/NVIDIA-Nemotron-Nano-9B-v2"},
      {"olmoe-1b-7b", "allenai/OLMoE-1B-7B-0924"},
      {"phi-3.5-moe", "microsoft/Phi-3.5-MoE-instruct"},
      {"qwen2-57b-a14b", "Qwen/Qwen2-57B-A14B"},
      {"qwen2-7b", "Qwen/Qwen2-7B"},
      {"qwen3-235b-a22b", "Qwen/Qwen3-235B-A22B"},
      {"qwen3-30b-a3b", "Qwen/Qwen3-30B-A3B"},
      {"qwen3-8b", "Qwen/Qwen3-8B"},
      {"qwen3-next-80b-a3b", "Qwen/Qwen3-Next-80B-A3B-Instruct"},
      {"qwen3.5-0.8b", "Qwen/Qwen3.5-0.8B"},
      {"qwen3.5-122b-a10b", "Qwen/Qwen3.5-122B-A10B"},
      {"qwen3.5-27b", "Qwen/Qwen3.5-27B"},
      {"qwen3.5-397b-a17b", "Qwen/Qwen3.5-397B-A17B"},
      {"qwen3.5-9b", "Qwen/Qwen3.5-9B"},
      {"qwen3.6-35b-a3b", "Qwen/Qwen3.6-35B-A3B"},
  };
  return sources;
}

std::optional<std::string> match_preset(std::string_view name) {
  for (const auto& p : preset_texts()) {
    if (same_ignoring_case(name, p.name)) return std::string(p.name);
  }
  for (const auto& s : preset_sources()) {
    if (same_ignoring_case(name, s.repo)) return std::string(s.preset);
  }
  return std::nullopt;
}

std::optional<std::string> nearest_preset(std::string_view name) {
  const std::string_view last = name.substr(name.find_last_of('/') == std::string_view::npos ? 0 : name.find_last_of('/') + 1);
  std::optional<std::string> best;
  std::size_t best_len = 0;
  const auto consider = [&](std::string_view candidate, std::string_view within, std::string_view preset) {
    if (candidate.size() > best_len && begins_before_dash(within, candidate)) {
      best = std::string(preset);
      best_len = candidate.size();
    }
  };
  for (const auto& s : preset_sources()) {
    consider(s.repo, name, s.preset);
    consider(s.preset, last, s.preset);
  }
  return best;
}

}  // namespace moemem
