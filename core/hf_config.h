// Model geometry from a Hugging Face `config.json` (docs/cli.md#job-files), so a job can name the
// config a simulator author already has instead of typing sizes.
#pragma once

#include <string>

#include "core/geometry.h"

namespace moe {

// Qwen3-MoE and Qwen2-MoE (`qwen3_moe`, `qwen2_moe`), DeepSeek-V2/V3 (`deepseek_v2`,
// `deepseek_v3`) and Mixtral (`mixtral`) configs. The MoE layer count excludes DeepSeek's leading
// dense layers; the router runs in fp32 for DeepSeek (as its preset), in the weights' dtype
// otherwise. Throws std::invalid_argument naming `source` and the missing or malformed field, or
// the unsupported model_type.
[[nodiscard]] ModelGeometry geometry_from_hf_config(const std::string& json_text,
                                                    const std::string& source);

// The same from the file at `path`; std::invalid_argument "cannot read 'PATH'" where it cannot be
// read.
[[nodiscard]] ModelGeometry geometry_from_hf_config_file(const std::string& path);

}  // namespace moe
