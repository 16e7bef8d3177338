"""Suite-wide settings (offline hub, 8 fake CPU devices) and session-wide converted models/tokenizers."""

import os
import tempfile

# Must be set before jax or transformers are imported anywhere in the test session.
os.environ["HF_HUB_OFFLINE"] = "1"
os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=8")
os.environ.setdefault("JAX_PLATFORMS", "cpu")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
# One XLA compilation cache for the session, both workers and every run the tests start in a subprocess: those
# runs compile the same programs (configs/default.py:smoke for 2 steps: 87 s cold, 36 s from the cache, the
# same metrics). No size limit: with one, every write lists and sizes the whole cache under a lock, which made
# the suite over twice as slow (tests/rl/test_remat.py 73 -> 652 s); without, a read that races a write of the
# same entry fails to decompress, and JAX warns and compiles (tests/rl/test_remat.py: 60 s uncached, 56 s cold).
os.environ.setdefault("JAX_COMPILATION_CACHE_DIR", os.path.join(tempfile.gettempdir(), "rlanything_jax_xla_cache"))
os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0")

import pytest  # noqa: E402

from rlanything_jax.core.models.gguf_io import ensure_smollm2_hf_dir  # noqa: E402
from rlanything_jax.core.models.qwen_tokenizer_io import convert_qwen_tokenizer  # noqa: E402
from rlanything_jax.core.models.tokenizer import Tokenizer  # noqa: E402


@pytest.fixture(scope="session")
def qwen25_tokenizer_dir(tmp_path_factory):
    return convert_qwen_tokenizer(tmp_path_factory.mktemp("qwen25_tokenizer"), "qwen2.5")


@pytest.fixture(scope="session")
def qwen3_tokenizer_dir(tmp_path_factory):
    return convert_qwen_tokenizer(tmp_path_factory.mktemp("qwen3_tokenizer"), "qwen3")


@pytest.fixture(scope="session")
def qwen25_tokenizer(qwen25_tokenizer_dir):
    """The wrapper over the converted Qwen2.5 tokenizer (loading takes ~1.5 s)."""
    return Tokenizer.from_dir(qwen25_tokenizer_dir)


@pytest.fixture(scope="session")
def qwen3_tokenizer(qwen3_tokenizer_dir):
    return Tokenizer.from_dir(qwen3_tokenizer_dir)


@pytest.fixture(scope="session")
def smollm2_dir(tmp_path_factory):
    """Converted into a fresh cache root, so the test checks today's converter."""
    return ensure_smollm2_hf_dir(tmp_path_factory.mktemp("rlanything_cache"))
