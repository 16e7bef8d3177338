"""The released `config.json` fields of the models the paper configs name, for planning runs whose weights are
not on this machine (`system/planning/architectures`)."""

from __future__ import annotations

_QWEN3_8B_TEXT = {"model_type": "qwen3", "vocab_size": 151936, "hidden_size": 4096, "intermediate_size": 12288,
                  "num_hidden_layers": 36, "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 128,
                  "rms_norm_eps": 1e-6, "tie_word_embeddings": False}
_QWEN3_VL_8B = {
    "model_type": "qwen3_vl", "tie_word_embeddings": False, "image_token_id": 151655, "video_token_id": 151656,
    "vision_start_token_id": 151652, "vision_end_token_id": 151653,
    "text_config": dict(_QWEN3_8B_TEXT, max_position_embeddings=262144, rope_theta=5_000_000.0,
                        rope_scaling={"rope_type": "default", "mrope_section": [24, 20, 20],
                                      "mrope_interleaved": True}),
    "vision_config": {"depth": 27, "hidden_size": 1152, "intermediate_size": 4304, "num_heads": 16,
                      "out_hidden_size": 4096, "num_position_embeddings": 2304, "deepstack_visual_indexes": [8, 16, 24],
                      "patch_size": 16, "temporal_patch_size": 2, "spatial_merge_size": 2, "in_channels": 3,
                      "hidden_act": "gelu_pytorch_tanh"},
}
# Released config.json fields (docs: Qwen2.5, Qwen3 and SmolLM2 model cards; QWEN3_VL.md section 1), keyed by the
# lower-cased name of the model's directory or package.
KNOWN_ARCHITECTURES: dict[str, dict] = {
    "qwen2.5-7b-instruct": {"model_type": "qwen2", "vocab_size": 152064, "hidden_size": 3584,
                            "intermediate_size": 18944, "num_hidden_layers": 28, "num_attention_heads": 28,
                            "num_key_value_heads": 4, "rms_norm_eps": 1e-6, "rope_theta": 1_000_000.0,
                            "max_position_embeddings": 32768, "tie_word_embeddings": False},
    "qwen3-8b": dict(_QWEN3_8B_TEXT, rope_theta=1_000_000.0, max_position_embeddings=40960),
    "qwen3-vl-8b-thinking": _QWEN3_VL_8B,
    "qwen3-vl-8b-instruct": _QWEN3_VL_8B,
    "smollm2-135m-instruct": {"model_type": "llama", "vocab_size": 49152, "hidden_size": 576,
                              "intermediate_size": 1536, "num_hidden_layers": 30, "num_attention_heads": 9,
                              "num_key_value_heads": 3, "rms_norm_eps": 1e-5, "rope_theta": 100_000.0,
                              "max_position_embeddings": 8192, "tie_word_embeddings": True},
}
