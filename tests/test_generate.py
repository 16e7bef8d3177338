"""The `python -m rlanything_jax.generate` command line."""

import json
import shutil

import pytest

from rlanything_jax import generate
from rlanything_jax.models import load_pretrained
from rlanything_jax.models.tokenizer import Tokenizer
from rlanything_jax.sampling.sampler import Sampler
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


def test_greedy_json_output_matches_the_sampler(model_dir, capsys):
    args = ["--model", str(model_dir), "--prompt", "Hello", "--prompt", "The weather today is", "--chat",
            "--max-new-tokens", "12", "--output", "json"]
    assert generate.main(args) == 0
    rows = _json_lines(capsys)
    assert [r["prompt"] for r in rows] == ["Hello", "The weather today is"]
    tokenizer = Tokenizer.from_dir(model_dir)
    expected = Sampler(load_pretrained(model_dir), tokenizer).generate(["Hello", "The weather today is"], 12, chat=True)
    assert [r["token_ids"] for r in rows] == [c.token_ids for c in expected]
    assert [r["text"] for r in rows] == [c.text for c in expected]
    assert all(len(r["logprobs"]) == len(r["token_ids"]) for r in rows)


def test_seeded_sampling_reproduces(model_dir, capsys):
    args = ["--model", str(model_dir), "--prompt", "Once", "--max-new-tokens", "10", "--temperature", "0.9",
            "--top-p", "0.9", "--top-k", "20", "--seed", "3", "--output", "json"]
    assert generate.main(args) == 0
    first = _json_lines(capsys)
    assert generate.main(args) == 0
    assert _json_lines(capsys) == first
    assert generate.main(args[:-4] + ["--seed", "4", "--output", "json"]) == 0
    assert _json_lines(capsys)[0]["token_ids"] != first[0]["token_ids"]


def test_text_output_and_clear_errors(model_dir, tmp_path, capsys):
    assert generate.main(["--model", str(model_dir), "--prompt", "Hi", "--max-new-tokens", "4"]) == 0
    assert capsys.readouterr().out.startswith("### Hi\n")
    assert generate.main(["--model", str(tmp_path), "--prompt", "Hi"]) == 1
    assert "config.json" in capsys.readouterr().err
    assert generate.main(["--model", str(model_dir), "--prompt", "Hi", "--top-p", "0", "--temperature", "1"]) == 1
    assert "top_p" in capsys.readouterr().err
