"""The GGUF tokenizer built with `tokenizers` alone, on a small GGUF file written here.

The reference is transformers reading the same GGUF file (which needs torch);
one check runs the conversion in a Python that cannot import torch at all.
"""

import json
import logging
import subprocess
import sys
import sysconfig
from pathlib import Path

import gguf
import numpy as np
import pytest
from transformers import AutoTokenizer
from transformers.convert_slow_tokenizer import bytes_to_unicode

from rlanything_jax.core.models.gguf_io import ConversionError, write_gguf_tokenizer
from rlanything_jax.core.models.tokenizer import Tokenizer

REPO_ROOT = Path(__file__).resolve().parents[2]
CONTROL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
USER_DEFINED = ["<think>"]
# Each merge joins two tokens already in the vocabulary; "Ġ" is the byte-level space.
MERGES = [("Ġ", "t"), ("h", "e"), ("Ġt", "he"), ("i", "n"), ("Ġ", "a"), ("l", "l"), ("e", "ll"), ("h", "ell"),
          ("o", "r"), ("Ġ", "w"), ("Ġw", "or"), ("Ġ", "Ġ"), ("Ġ", "1"), ("1", "2"), ("Ċ", "Ċ")]
CHATML = (
    "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
    "{{ '<|im_start|>system\nYou are a tiny test model<|im_end|>\n' }}{% endif %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>\n' }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)
TEXTS = ["hello world", "the thin hell", "  12 121 x12y 3.50", "in\n\nthe\tend  ", "Ünïcødé 🤖 多语言",
         "<|im_start|>user\nhi<|im_end|>", "<think>in</think>", "<|endoftext|>tail", ""]
CHATS = [
    [{"role": "user", "content": "hello"}],
    [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "the 12"},
     {"role": "assistant", "content": "in"}, {"role": "user", "content": "world?"}],
]


def _vocabulary() -> tuple[list[str], list[int]]:
    alphabet = list(bytes_to_unicode().values())
    merged = ["".join(pair) for pair in MERGES]
    tokens = CONTROL + alphabet + merged + USER_DEFINED
    types = [3] * len(CONTROL) + [1] * (len(alphabet) + len(merged)) + [4] * len(USER_DEFINED)
    return tokens, types


def write_tiny_gguf(path: Path, tokenizer_model: str = "gpt2", pre: str = "gpt2") -> Path:
    tokens, types = _vocabulary()
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_block_count(1)
    writer.add_context_length(64)
    writer.add_embedding_length(8)
    writer.add_feed_forward_length(16)
    writer.add_head_count(2)
    writer.add_head_count_kv(2)
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_rope_freq_base(10000.0)
    writer.add_tokenizer_model(tokenizer_model)
    writer.add_tokenizer_pre(pre)
    writer.add_token_list(tokens)
    writer.add_token_types(types)
    writer.add_token_merges([" ".join(pair) for pair in MERGES])
    writer.add_bos_token_id(1)
    writer.add_eos_token_id(2)
    writer.add_unk_token_id(0)
    writer.add_pad_token_id(2)
    writer.add_add_bos_token(False)
    writer.add_chat_template(CHATML)
    writer.add_tensor("token_embd.weight", np.zeros((len(tokens), 8), np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


@pytest.fixture(scope="module")
def tiny_gguf(tmp_path_factory) -> Path:
    return write_tiny_gguf(tmp_path_factory.mktemp("gguf") / "tiny.gguf")


@pytest.fixture(scope="module")
def converted(tiny_gguf, tmp_path_factory) -> Tokenizer:
    return Tokenizer.from_dir(write_gguf_tokenizer(tiny_gguf, tmp_path_factory.mktemp("tiny_tokenizer")))


@pytest.fixture(scope="module")
def reference(tiny_gguf):
    return AutoTokenizer.from_pretrained(str(tiny_gguf.parent), gguf_file=tiny_gguf.name, local_files_only=True)


def _rendered(tok: Tokenizer) -> dict:
    """What the conversion gives, as JSON (also printed by the torch-free subprocess)."""
    return {
        "encodings": [tok.encode(text) for text in TEXTS],
        "with_specials": [tok.hf.encode(text) for text in TEXTS],
        "chats": [tok.apply_chat_template(chat) for chat in CHATS],
        "ids": [tok.eos_id, tok.pad_id, tok.bos_id, tok.vocab_size],
    }


def test_encode_matches_transformers_gguf_reading(converted, reference):
    for text in TEXTS:
        ids = converted.encode(text)
        assert ids == reference.encode(text, add_special_tokens=False), text
        assert converted.hf.encode(text) == reference.encode(text), text  # nothing added around the text
        assert converted.decode(ids) == text
    # The cases have teeth: merges apply, special and user-defined tokens stay whole.
    assert converted.encode(" the") == [converted.token_to_id("Ġthe")]
    assert converted.encode("<|im_end|><think>") == [2, converted.token_to_id("<think>")]
    assert converted.encode(" 12") == [converted.token_to_id(t) for t in ("Ġ1", "2")]  # "Ġ 1" ranks first


def test_smollm_pre_tokenizer_cuts_digits_one_by_one(tmp_path):
    # llama.cpp's "smollm" split (and SmolLM2's own tokenizer.json) isolate each digit
    # before byte-level BPE, so no merge can join a digit. transformers' GGUF reading
    # ignores this name; SmolLM2's real merges join no digit, so both agree there.
    tok = Tokenizer.from_dir(write_gguf_tokenizer(write_tiny_gguf(tmp_path / "s.gguf", pre="smollm"), tmp_path / "out"))
    assert tok.encode(" 12 the") == [tok.token_to_id(t) for t in ("Ġ", "1", "2", "Ġthe")]
    assert tok.decode(tok.encode(" 12 the")) == " 12 the"


def test_decode_matches_transformers_gguf_reading(converted, reference):
    rng = np.random.default_rng(0)
    for _ in range(20):
        ids = rng.integers(0, converted.vocab_size, size=12).tolist() + [0, 1, 2]
        for skip in (False, True):
            expected = reference.decode(ids, skip_special_tokens=skip, clean_up_tokenization_spaces=False)
            assert converted.decode(ids, skip_special_tokens=skip) == expected


def test_chat_template_and_special_ids_match(converted, reference):
    for chat in CHATS:
        expected = reference.apply_chat_template(chat, tokenize=False, add_generation_prompt=True)
        assert converted.apply_chat_template(chat) == expected
    assert converted.apply_chat_template(CHATS[0]).startswith("<|im_start|>system\nYou are a tiny test model")
    assert (converted.eos_id, converted.pad_id, converted.bos_id) == (2, 2, 1)
    assert (reference.eos_token_id, reference.pad_token_id, reference.bos_token_id) == (2, 2, 1)
    assert converted.vocab_size == len(reference) == len(_vocabulary()[0])
    assert converted.stop_token_ids == [2, 0]


def _site_packages_without_torch(view: Path) -> Path:
    """A directory of links to every installed package except torch's."""
    view.mkdir()
    hidden = ("torch", "torchgen", "functorch")
    for entry in Path(sysconfig.get_paths()["purelib"]).iterdir():
        if entry.name.split("-")[0] not in hidden and entry.name != "__pycache__":
            (view / entry.name).symlink_to(entry)
    return view


def test_conversion_needs_no_torch(tiny_gguf, converted, tmp_path):
    view = _site_packages_without_torch(tmp_path / "site")
    script = f"""
import importlib.util, json, site, sys
site.addsitedir({str(view)!r})
assert importlib.util.find_spec("torch") is None, "torch is still importable"
sys.path.insert(0, {str(REPO_ROOT)!r})
from rlanything_jax.core.models.gguf_io import write_gguf_tokenizer
from rlanything_jax.core.models.tokenizer import Tokenizer
sys.path.insert(0, {str(Path(__file__).parent)!r})
from test_gguf_tokenizer import _rendered
tok = Tokenizer.from_dir(write_gguf_tokenizer({str(tiny_gguf)!r}, {str(tmp_path / "out")!r}))
print(json.dumps(_rendered(tok)))
print(json.dumps(sorted(m for m in sys.modules if m.split(".")[0] == "torch")))
"""
    # -S: no site-packages but the view (and no .pth from the real one).
    env = {"HF_HUB_OFFLINE": "1", "JAX_PLATFORMS": "cpu", "PATH": "/usr/bin:/bin"}
    result = subprocess.run([sys.executable, "-S", "-c", script], check=False, capture_output=True, text=True,
                            timeout=300, env=env)
    assert result.returncode == 0, result.stderr
    rendered, torch_modules = (json.loads(line) for line in result.stdout.strip().splitlines()[-2:])
    assert rendered == json.loads(json.dumps(_rendered(converted)))
    assert torch_modules == []
    assert "PyTorch was not found" not in result.stderr


class _Records(logging.Handler):
    def __init__(self):
        super().__init__()
        self.messages = []

    def emit(self, record):
        self.messages.append(record.getMessage())


def test_only_the_no_torch_advisory_is_dropped():
    # The filter sits on transformers' root logger, where transformers logs the advisory. An own handler on that
    # logger sees each record once, whether or not another test has turned transformers' propagation on.
    transformers_logger = logging.getLogger("transformers")
    records = _Records()
    transformers_logger.addHandler(records)
    try:
        transformers_logger.warning("PyTorch was not found. Models won't be available and only tokenizers, ...")
        transformers_logger.warning("a real warning")
        transformers_logger.error("a real error")
    finally:
        transformers_logger.removeHandler(records)
    assert records.messages == ["a real warning", "a real error"]


@pytest.mark.parametrize("model,pre", [("llama", "default"), ("gpt2", "qwen2")])
def test_unsupported_tokenizers_are_refused(tmp_path, model, pre):
    path = write_tiny_gguf(tmp_path / "other.gguf", tokenizer_model=model, pre=pre)
    with pytest.raises(ConversionError, match=f"tokenizer '{model}' with pre-tokenizer '{pre}' is not supported"):
        write_gguf_tokenizer(path, tmp_path / "out")
