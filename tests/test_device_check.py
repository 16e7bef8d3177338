"""bench/device_check.py, the accelerator check, in its CPU smoke mode: it runs end to end and its closing JSON
line holds finite, positive timings, FLOPs and fractions; its chip table reads the kinds JAX reports."""

import functools
import importlib.util
import json
import math
import os
import subprocess
import sys
import time

import pytest

from rlanything_jax.system.config import ROOT

SCRIPT = ROOT / "bench" / "device_check.py"
POSITIVE = ("params", "train_step_s", "train_compile_s", "model_flops", "flops_6nd", "achieved_tflops", "mfu",
            "decode_b1_tokens_per_s", "decode_b1_step_ms", "prefill_b1_s", "b1_roofline_tokens_per_s",
            "b1_roofline_fraction", "decode_batched_tokens_per_s", "batched_roofline_fraction", "total_s")


@functools.cache
def _module():
    spec = importlib.util.spec_from_file_location("device_check", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module   # its dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def test_chip_table_reads_the_device_kinds_jax_reports():
    chip_for = _module().chip_for
    expected = {"NVIDIA H100 80GB HBM3": (989, 3350), "NVIDIA H100 PCIe": (756, 2000), "NVIDIA H200": (989, 4800),
                "NVIDIA A100-SXM4-80GB": (312, 2039), "NVIDIA A100-SXM4-40GB": (312, 1555), "NVIDIA L4": (121, 300),
                "TPU v4": (275, 1200), "TPU v5 lite": (197, 819), "TPU v5": (459, 2765), "TPU v5p": (459, 2765),
                "TPU v6 lite": (918, 1640)}
    for kind, (peak, bandwidth) in expected.items():
        chip = chip_for(kind)
        assert (chip.peak_tflops, chip.hbm_gbps) == (peak, bandwidth), kind
    # A CPU has no peak (the JSON's mfu and roofline fractions are then null); nor has a chip the table does
    # not name, even when a listed name is part of its own (the v4i inference chip, GH200).
    for kind in ("cpu", "TPU v4 lite", "NVIDIA GH200 480GB", "NVIDIA GeForce RTX 4090"):
        assert chip_for(kind) is None, kind


def test_train_step_flops_count_the_loss_window():
    module = _module()
    cfg = module.decoder_config(module.SMOKE_SHAPE)
    whole = module.train_step_flops(cfg, rows=2, length=64, window=63)
    half = module.train_step_flops(cfg, rows=2, length=64, window=32)
    # A smaller window drops output-layer and last-layer work, never more than the plain 6 x params x tokens.
    assert half["model"] < whole["model"] < whole["six_n_d"] + whole["attention"]
    assert whole["six_n_d"] == half["six_n_d"]


def test_bash_wrapper_parses():
    subprocess.run(["bash", "-n", str(ROOT / "bench" / "device_check.sh")], check=True)


@pytest.mark.slow   # 25-40 s on a 2-core CPU
def test_smoke_run_ends_with_a_complete_json_line():
    env = dict(os.environ, JAX_PLATFORMS="cpu", HF_HUB_OFFLINE="1")
    env.pop("XLA_FLAGS", None)   # one CPU device is what the check uses
    # A CPU is not in the table: the peak and bandwidth given here exercise the MFU and roofline arithmetic.
    started = time.perf_counter()
    out = subprocess.run([sys.executable, str(SCRIPT), "--smoke", "--peak_tflops=1", "--hbm_gbps=10"],
                         capture_output=True, text=True, env=env, cwd=ROOT, timeout=240)
    seconds = time.perf_counter() - started
    assert out.returncode == 0, out.stderr[-4000:]
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert result["bench"] == "device_check" and result["device_kind"] == "cpu" and result["smoke"] is True
    assert result["peak_tflops"] == 1 and result["hbm_gbps"] == 10
    for key in POSITIVE:
        value = result[key]
        assert isinstance(value, (int, float)) and math.isfinite(value) and value > 0, (key, value)
    assert math.isfinite(result["train_loss"])
    assert result["model_flops"] < result["flops_6nd"]   # the output layer runs over the loss window only
    memory = result["train_memory_bytes"]
    assert memory["argument"] > 0 and memory["peak_estimate"] >= memory["argument"]
    kernels = result["attention_kernels"]
    if kernels:   # the attention switch is there: xla and chunked run on a CPU, cudnn and splash say why not
        for name in ("xla", "chunked"):
            assert kernels[name]["train_step_s"] > 0 and kernels[name]["prefill_s"] > 0, kernels[name]
        for name in ("cudnn", "splash"):
            assert "cpu" in kernels[name]["skipped"], kernels[name]
    assert seconds < 120, f"the smoke run took {seconds:.0f} s"
