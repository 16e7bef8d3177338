"""Suite-wide settings: offline hub, 8 fake CPU devices, float32 matmuls on CPU."""

import os

# Must be set before jax or transformers are imported anywhere in the test session.
os.environ["HF_HUB_OFFLINE"] = "1"
os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=8")
os.environ.setdefault("JAX_PLATFORMS", "cpu")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
