"""What an accelerator can do and what bench/device_check.py's work costs: each chip's bf16 peak and HBM
bandwidth by its `device_kind`, the model FLOPs of a train step, and the bytes a decode step must read."""

from __future__ import annotations

import dataclasses
import re
from typing import Any

from rlanything_jax.core.models import DecoderConfig


@dataclasses.dataclass(frozen=True)
class Chip:
    name: str
    peak_tflops: float   # dense bfloat16 matmul peak, TFLOP/s (datasheets; NVIDIA's halved from "with sparsity")
    hbm_gbps: float      # HBM bandwidth, GB/s


# TPUs by their exact `device_kind` (v5p reports "TPU v5", v5e "TPU v5 lite", v6e "TPU v6 lite"; "TPU v4 lite",
# the v4i inference chip, is not a v4). One JAX device is one chip on all of these.
TPU_CHIPS = {
    "TPU v4": Chip("TPU v4", 275, 1200),
    "TPU v5 lite": Chip("TPU v5e", 197, 819), "TPU v5e": Chip("TPU v5e", 197, 819),
    "TPU v5": Chip("TPU v5p", 459, 2765), "TPU v5p": Chip("TPU v5p", 459, 2765),
    "TPU v6 lite": Chip("TPU v6e (Trillium)", 918, 1640), "TPU v6e": Chip("TPU v6e (Trillium)", 918, 1640),
}
# GPUs (`device_kind` is CUDA's name, e.g. "NVIDIA H100 80GB HBM3", "NVIDIA A100-SXM4-80GB"): the first entry
# whose words are all words of the kind; the more specific first. "NVIDIA GH200 480GB" matches none (its
# bandwidth depends on the memory variant): pass the flags.
GPU_CHIPS = (
    (("H200", "NVL"), Chip("H200 NVL", 835, 4800)),
    (("H200",), Chip("H200 SXM", 989, 4800)),
    (("H100", "PCIE"), Chip("H100 PCIe", 756, 2000)),
    (("H100", "NVL"), Chip("H100 NVL", 835, 3900)),
    (("H100",), Chip("H100 SXM", 989, 3350)),
    (("A100", "80GB", "PCIE"), Chip("A100 80GB PCIe", 312, 1935)),
    (("A100", "80GB"), Chip("A100 80GB SXM", 312, 2039)),
    (("A100",), Chip("A100 40GB", 312, 1555)),
    (("L4",), Chip("L4", 121, 300)),
)


def chip_for(device_kind: str) -> Chip | None:
    """The table's entry for a `jax.Device.device_kind`; None for a CPU or an unknown chip."""
    if device_kind in TPU_CHIPS:
        return TPU_CHIPS[device_kind]
    words = set(re.split(r"[^A-Z0-9]+", device_kind.upper()))
    return next((chip for keys, chip in GPU_CHIPS if words.issuperset(keys)), None)


def matmul_parameters(cfg: DecoderConfig) -> dict[str, int]:
    """Weights that multiply activations, per decoder layer and in the output layer (biases, norms left out)."""
    e, h, kv, d, f = cfg.hidden_size, cfg.num_heads, cfg.num_kv_heads, cfg.head_dim, cfg.intermediate_size
    return {"kv": 2 * e * kv * d, "q_o_mlp": 2 * e * h * d + 3 * e * f, "output": cfg.vocab_size * e}


def train_step_flops(cfg: DecoderConfig, rows: int, length: int, window: int) -> dict[str, float]:
    """Model FLOPs of one train step (bench/device_check.py's docstring, item 1) and the plain
    6 x parameters x tokens."""
    p = matmul_parameters(cfg)
    layer = p["kv"] + p["q_o_mlp"]
    # The last layer's keys and values cover every position, its queries, output projection and MLP the window.
    weights = 6 * rows * ((cfg.num_layers - 1) * layer * length + p["kv"] * length
                          + (p["q_o_mlp"] + p["output"]) * window)
    full_pairs = length * (length + 1) // 2
    last_pairs = window * length - window * (window - 1) // 2   # queries at length - window .. length - 1
    pairs = (cfg.num_layers - 1) * full_pairs + last_pairs
    attention = 3 * 4 * cfg.head_dim * cfg.num_heads * rows * pairs
    all_params = cfg.num_layers * layer + p["output"]
    return {"model": weights + attention, "weights": weights, "attention": attention,
            "six_n_d": 6 * all_params * rows * length}


def kv_bytes_per_column(cfg: DecoderConfig, itemsize: int) -> int:
    """Bytes of keys and values, all layers, for one cache column of one row."""
    return 2 * cfg.num_layers * cfg.num_kv_heads * cfg.head_dim * itemsize


def roofline(param_bytes: int, cfg: DecoderConfig, cache_itemsize: int, rows: int, prompt: int, new: int,
             hbm_gbps: float | None) -> dict[str, Any]:
    """Bytes a decode step must read (every parameter, each row's live KV cache) and the tokens/s bound."""
    live = prompt + (new + 1) / 2   # step i attends over prompt + i + 1 columns; the mean over i < new
    kv = rows * live * kv_bytes_per_column(cfg, cache_itemsize)
    bound = None if hbm_gbps is None else rows * hbm_gbps * 1e9 / (param_bytes + kv)
    return {"bytes_per_step": param_bytes + kv, "kv_bytes_per_step": kv, "tokens_per_s": bound}
