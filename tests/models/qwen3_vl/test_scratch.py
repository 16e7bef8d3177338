"""The scratch Qwen3-VL directory loads here and in transformers (same logits), with a working tokenizer."""

import numpy as np
import pytest
import torch
from transformers import AutoTokenizer, Qwen3VLForConditionalGeneration

from rlanything_jax.core.models import load_pretrained
from rlanything_jax.core.models.qwen3_vl import processor
from rlanything_jax.core.models.qwen3_vl.model import Qwen3VL
from rlanything_jax.core.models.qwen3_vl.scratch import ScratchVisionArchitecture, build_scratch_vl_model_dir
from rlanything_jax.core.models.scratch import ScratchArchitecture
from tests.models.qwen3_vl import vl_reference

pytestmark = pytest.mark.slow   # trains a BPE, saves, and runs a torch and a JAX forward

CORPUS = ["click(x=120, y=40) on the Files icon", "type('hello world') then press Enter",
          "The screenshot shows a text editor with an open document."] * 20


def test_scratch_vl_model_loads_here_and_in_transformers(tmp_path):
    text = ScratchArchitecture(num_layers=2, hidden_size=64, intermediate_size=128, num_heads=4, num_kv_heads=2,
                               head_dim=16, vocab_size=400)
    out = build_scratch_vl_model_dir(tmp_path, CORPUS, text, ScratchVisionArchitecture(depth=2, hidden_size=32,
                                                                                      intermediate_size=64))
    tokenizer = AutoTokenizer.from_pretrained(out)
    image_pad = tokenizer.convert_tokens_to_ids("<|image_pad|>")
    messages = [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "Open the editor."}]}]
    prompt = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    assert prompt.startswith("<|im_start|>user\n<|vision_start|><|image_pad|><|vision_end|>Open")
    ids, images = processor.prepare_prompt(tokenizer(prompt)["input_ids"], vl_reference.images([(90, 160)]),
                                           image_pad)
    assert ids.count(image_pad) == images[0].pixel_values.shape[0] // 4

    ours = load_pretrained(out)
    assert isinstance(ours, Qwen3VL) and ours.vl_config.image_token_id == image_pad
    reference = Qwen3VLForConditionalGeneration.from_pretrained(out).eval()
    pixel_values = np.concatenate([image.pixel_values for image in images])
    grid = np.asarray([image.grid_thw for image in images])
    input_ids = torch.tensor([ids])
    with torch.no_grad():
        expected = reference(input_ids=input_ids, pixel_values=torch.tensor(pixel_values),
                             image_grid_thw=torch.tensor(grid), mm_token_type_ids=(input_ids == image_pad).int())
    logits = np.asarray(ours(np.asarray([ids]), None, pixel_values, grid))
    np.testing.assert_allclose(logits, expected.logits.numpy(), atol=1e-4, rtol=0)
