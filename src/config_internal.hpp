// The config reader's shared pieces (src/config.cpp), for the family readers kept in their own
// files (src/config_moe_families.cpp): typed key reads with bounds, and the parts several
// families share (core sizes, grouped-query attention, DeepSeek's MoE layout).
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <set>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "moemem/model.hpp"

namespace moemem::config_detail {

using Keys = std::set<std::string, std::less<>>;

// Sizes in a config beyond this are refused: 2^31 is larger than any real dimension and keeps
// every product of a few of them far from 64-bit overflow.
constexpr std::int64_t kMaxDim = std::int64_t{1} << 31;
// Counts (layers, experts) beyond this are refused: far above any real model, and small enough
// that the inventory (one entry per tensor per layer) stays a few megabytes.
constexpr std::int64_t kMaxCount = std::int64_t{1} << 16;

[[nodiscard]] std::string source_field(const std::string& source, std::string_view key);

// An integer key from min to max; absent or null: `fallback`, or an InputError when none.
[[nodiscard]] std::int64_t get_int(const nlohmann::json& j, std::string_view key, const std::string& source,
                                   std::optional<std::int64_t> fallback = std::nullopt, std::int64_t min = 1,
                                   std::int64_t max = kMaxDim);
[[nodiscard]] bool get_bool(const nlohmann::json& j, std::string_view key, const std::string& source, bool fallback);

void parse_core_sizes(const nlohmann::json& j, const std::string& source, ModelSpec& m);
// DeepSeek's MoE fields: n_routed_experts, n_shared_experts, first_k_dense_replace, moe_layer_freq.
void parse_deepseek_moe(const nlohmann::json& j, const std::string& source, ModelSpec& m);
// Grouped-query attention sizes (head_dim, or hidden / heads), intermediate_size, all layers dense.
void parse_gqa_common(const nlohmann::json& j, const std::string& source, ModelSpec& m, Keys& used);

// Qwen2-MoE's layer pattern: layer i is sparse unless listed in mlp_only_layers, when
// (i + 1) % decoder_sparse_step == 0 (Qwen2-MoE, Qwen3-MoE, Qwen3-Next).
void set_qwen_moe_layers(const nlohmann::json& j, const std::string& source, ModelSpec& m);

// For families whose attention derives head_dim as hidden_size / num_attention_heads (OLMoE,
// Granite MoE, Phi-3.5-MoE): refuses a head_dim key that says otherwise, naming `attention`.
void require_derived_head_dim(const ModelSpec& m, const std::string& source, std::string_view attention);

// DeepSeek-V2/V3's MLA and MoE keys (src/config.cpp), which DeepSeek-V3.2 extends.
void parse_deepseek(const nlohmann::json& j, const std::string& source, ModelSpec& m, Keys& used);

// Family readers in src/config_moe_families.cpp and src/config_dsa.cpp.
void parse_deepseek_v32(const nlohmann::json& j, const std::string& source, ModelSpec& m, Keys& used);
void parse_olmoe(const nlohmann::json& j, const std::string& source, ModelSpec& m, Keys& used);
void parse_dots1(const nlohmann::json& j, const std::string& source, ModelSpec& m, Keys& used);
void parse_ernie4_5_moe(const nlohmann::json& j, const std::string& source, ModelSpec& m, Keys& used);
void parse_glm4_moe_lite(const nlohmann::json& j, const std::string& source, ModelSpec& m, Keys& used);
void parse_glm_moe_dsa(const nlohmann::json& j, const std::string& source, ModelSpec& m, Keys& used);
// Shared by the MLA readers above: GLM's router and mlp_layer_types (config_moe_families.cpp) and
// DeepSeek sparse attention's indexer keys (config_dsa.cpp), each after parse_deepseek.
void read_glm_moe_keys(const nlohmann::json& j, const std::string& source, ModelSpec& m, Keys& used);
void read_dsa_indexer(const nlohmann::json& j, const std::string& source, ModelSpec& m, Keys& used);
// Gemma-2 and Gemma-3 text-only, in src/config_gemma.cpp.
void parse_gemma2(const nlohmann::json& j, const std::string& source, ModelSpec& m, Keys& used);
void parse_gemma3_text(const nlohmann::json& j, const std::string& source, ModelSpec& m, Keys& used);
// Phi-3.5-MoE, in src/config_phimoe.cpp.
void parse_phimoe(const nlohmann::json& j, const std::string& source, ModelSpec& m, Keys& used);
// Family readers in src/config_moe_families2.cpp.
void parse_granitemoe(const nlohmann::json& j, const std::string& source, ModelSpec& m, Keys& used);
void parse_dbrx(const nlohmann::json& j, const std::string& source, ModelSpec& m, Keys& used);
void parse_minimax_m2(const nlohmann::json& j, const std::string& source, ModelSpec& m, Keys& used);
void parse_hunyuan_v1_moe(const nlohmann::json& j, const std::string& source, ModelSpec& m, Keys& used);
// Qwen3-Next, in src/config_qwen3_next.cpp.
void parse_qwen3_next(const nlohmann::json& j, const std::string& source, ModelSpec& m, Keys& used);
// Qwen3-Next's and Qwen3.5-MoE's Gated DeltaNet sizes and per-layer mixers (layer_types or
// full_attention_interval).
void parse_linear_mixers(const nlohmann::json& j, const std::string& source, ModelSpec& m);
// Qwen3.5-MoE and Qwen3.5, in src/config_qwen3_5.cpp: the text models, and the multimodal
// wrappers' vision tower (the same for both).
void parse_qwen3_5_moe_text(const nlohmann::json& j, const std::string& source, ModelSpec& m, Keys& used);
void parse_qwen3_5_text(const nlohmann::json& j, const std::string& source, ModelSpec& m, Keys& used);
void parse_qwen3_5_vision(const nlohmann::json& wrapper, const std::string& source, ModelSpec& m);
// A multimodal wrapper's last checks, shared by the vision readers (src/config.cpp): the
// vision_config keys neither `read` nor tensor-free are reported as unrecognised, and the
// wrapper's tie_word_embeddings must agree with the text model's, which decides lm_head.
void finish_vision_config(const nlohmann::json& wrapper, const nlohmann::json& vc, const Keys& read, const Keys& no_tensor,
                          const std::string& source, ModelSpec& m);
// Nemotron-H, in src/config_nemotron_h.cpp.
void parse_nemotron_h(const nlohmann::json& j, const std::string& source, ModelSpec& m, Keys& used);
// Llama-4, in src/config_llama4.cpp: the text model, and the multimodal wrapper's vision tower.
void parse_llama4_text(const nlohmann::json& j, const std::string& source, ModelSpec& m, Keys& used);
void parse_llama4_vision(const nlohmann::json& wrapper, const std::string& source, ModelSpec& m);
[[nodiscard]] bool is_llama4_wrapper_key(std::string_view key);
// Gemma-3's multimodal wrapper, in src/config_gemma3.cpp: Gemma3TextConfig's defaults filled into
// text_config, and the SigLIP vision tower.
void fill_gemma3_text_defaults(nlohmann::json& text);
void parse_gemma3_vision(const nlohmann::json& wrapper, const std::string& source, ModelSpec& m);
[[nodiscard]] bool is_gemma3_wrapper_key(std::string_view key);
// Xiaomi MiMo-V2-Flash, in src/config_mimo_v2.cpp.
void parse_mimo_v2_flash(const nlohmann::json& j, const std::string& source, ModelSpec& m, Keys& used);
// NVIDIA Nemotron-NAS (DeciLM), in src/config_nemotron_nas.cpp.
void parse_nemotron_nas(const nlohmann::json& j, const std::string& source, ModelSpec& m, Keys& used);

}  // namespace moemem::config_detail
