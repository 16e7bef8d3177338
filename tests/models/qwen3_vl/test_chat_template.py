"""The converted tokenizer's Qwen3-VL variant: real special-token ids and the chat format with images."""

import numpy as np
import pytest
from transformers import AutoTokenizer

from rlanything_jax.core.models.qwen3_vl import processor
from rlanything_jax.core.models.qwen_tokenizer_io import convert_qwen_tokenizer

pytestmark = pytest.mark.slow   # converts the Qwen BPE (a few seconds)


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory):
    return AutoTokenizer.from_pretrained(convert_qwen_tokenizer(tmp_path_factory.mktemp("qwen3_vl_tok"), "qwen3-vl"))


def test_vision_tool_and_think_tokens_have_their_real_ids(tokenizer):
    expected = {"<|vision_start|>": 151652, "<|vision_end|>": 151653, "<|image_pad|>": 151655,
                "<|video_pad|>": 151656, "<tool_call>": 151657, "</tool_call>": 151658, "<think>": 151667,
                "</think>": 151668, "<|im_start|>": 151644, "<|im_end|>": 151645}
    assert {token: tokenizer.convert_tokens_to_ids(token) for token in expected} == expected


def test_a_desktop_conversation_with_screenshots(tokenizer):
    image = {"type": "image"}
    messages = [
        {"role": "system", "content": "You operate a desktop."},
        {"role": "user", "content": [image, {"type": "text", "text": "Open the editor."}]},
        {"role": "assistant", "content": "<think>\nThe dock.\n</think>\n\n<tool_call>click</tool_call>"},
        {"role": "user", "content": [{"type": "text", "text": "Result:"}, image]},
    ]
    text = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    vision = "<|vision_start|><|image_pad|><|vision_end|>"
    assert text == ("<|im_start|>system\nYou operate a desktop.<|im_end|>\n"
                    f"<|im_start|>user\n{vision}Open the editor.<|im_end|>\n"
                    "<|im_start|>assistant\n<tool_call>click</tool_call><|im_end|>\n"   # old reasoning dropped
                    f"<|im_start|>user\nResult:{vision}<|im_end|>\n"
                    "<|im_start|>assistant\n<think>\n")
    instruct = tokenizer.apply_chat_template(messages[:2], tokenize=False, add_generation_prompt=True,
                                             enable_thinking=False)
    assert instruct.endswith("Open the editor.<|im_end|>\n<|im_start|>assistant\n")

    grids = np.asarray([[1, 16, 16], [1, 14, 20]])
    ids = tokenizer(processor.expand_image_pads_in_text(text, grids))["input_ids"]
    assert ids.count(151655) == 64 + 70 and ids.count(151652) == 2 and ids.count(151657) == 1
