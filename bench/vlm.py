"""An agent-like desktop conversation on a tiny real-vocabulary Qwen3-VL: ours against transformers' `generate`.

    .venv/bin/python bench/vlm.py [--turns 3] [--new-tokens 64] [--width 1920 --height 1080]

Each turn appends a user message with a new screenshot (1920x1080 -> 1920x1088, 8160 patches,
2040 image tokens) and generates `--new-tokens` tokens greedily. Ours keeps the conversation's
KV cache on device (`Sampler.extend`: only the new turn is prefilled, each screenshot goes
through the vision tower once); transformers' `generate` re-reads the whole history, images
included, every turn. The model: transformers' tiny Qwen3-VL shape (text hidden 64, 2 layers,
4 / 2 heads; vision hidden 32, depth 3, DeepStack after blocks 0 and 1) with the real vocabulary
(151936), random weights, float32. Images are preprocessed outside the timings (the same numpy
code serves both). Ours runs the conversation once to compile, then is timed; transformers is
timed from its first call. Prints one JSON line per turn and a summary with the ratio.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import numpy as np  # noqa: E402
import torch  # noqa: E402
from transformers import Qwen3VLConfig, Qwen3VLForConditionalGeneration  # noqa: E402

from rlanything_jax.models import load_pretrained  # noqa: E402
from rlanything_jax.models.qwen3_vl import processor  # noqa: E402
from rlanything_jax.sampling.sampler import Sampler, SamplerConfig, bucket_length  # noqa: E402

IM_START, IM_END, NEWLINE, USER, ASSISTANT = 151644, 151645, 198, 872, 77091
VISION_START, IMAGE_PAD, VISION_END = 151652, 151655, 151653


def tiny_real_vocab_model(out_dir: str) -> Qwen3VLForConditionalGeneration:
    cfg = Qwen3VLConfig(
        text_config=dict(vocab_size=151936, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, head_dim=16, max_position_embeddings=32768,
                         rope_parameters={"rope_type": "default", "rope_theta": 5e6, "mrope_section": [4, 2, 2],
                                          "mrope_interleaved": True}),
        vision_config=dict(depth=3, hidden_size=32, intermediate_size=64, num_heads=2, patch_size=16,
                           temporal_patch_size=2, spatial_merge_size=2, out_hidden_size=64,
                           num_position_embeddings=64, deepstack_visual_indexes=[0, 1]),
        tie_word_embeddings=False)
    torch.manual_seed(0)
    model = Qwen3VLForConditionalGeneration(cfg).eval()
    model.save_pretrained(out_dir)
    return model


def turn_tokens(turn: int, rng: np.random.Generator) -> list[int]:
    """A user turn with one screenshot placeholder and a short instruction, then the assistant header."""
    opening = [] if turn == 0 else [IM_END, NEWLINE]
    text = list(rng.integers(1000, 100000, 12))
    return opening + [IM_START, USER, NEWLINE, VISION_START, IMAGE_PAD, VISION_END] + text + [
        IM_END, NEWLINE, IM_START, ASSISTANT, NEWLINE]


def cache_length_for(turns: list[tuple[list[int], list]], new_tokens: int) -> int:
    """The columns the conversation fills (each turn's bucketed prompt + its new tokens), rounded up to 1024:
    attention windows double from 128 up to the cache length, so a tight cache keeps the last window small
    (three screenshot turns: 9408 columns, a 10240 window rather than 16384)."""
    columns = sum(bucket_length(len(ids), 16) + new_tokens for ids, _ in turns)
    return -(-columns // 1024) * 1024


def ours(sampler: Sampler, turns: list[tuple[list[int], list]], new_tokens: int) -> tuple[list[float], list]:
    times, outputs, conversation = [], [], None
    for index, (ids, images) in enumerate(turns):
        started = time.perf_counter()
        if index == 0:
            conversation = sampler.start([ids], new_tokens, cache_length=sampler.config.max_cache_length,
                                         images=[images])
        else:
            sampler.extend(conversation, [ids], images=[images])
        [completion] = sampler.decode(conversation, new_tokens, stop_token_ids=())
        times.append(time.perf_counter() - started)
        outputs.append(completion.token_ids)
    return times, outputs


def transformers_generate(model, turns: list[tuple[list[int], list]], new_tokens: int) -> tuple[list[float], list]:
    times, outputs, history, images = [], [], [], []
    for ids, turn_images in turns:
        history += ids
        images += turn_images
        pixel_values = torch.tensor(np.concatenate([image.pixel_values for image in images]))
        grid = torch.tensor([image.grid_thw for image in images])
        input_ids = torch.tensor([history])
        started = time.perf_counter()
        with torch.no_grad():
            out = model.generate(input_ids=input_ids, attention_mask=torch.ones_like(input_ids),
                                 pixel_values=pixel_values, image_grid_thw=grid,
                                 mm_token_type_ids=(input_ids == IMAGE_PAD).int(), do_sample=False,
                                 max_new_tokens=new_tokens, min_new_tokens=new_tokens, pad_token_id=0)
        times.append(time.perf_counter() - started)
        generated = out[0, len(history):].tolist()
        outputs.append(generated)
        history += generated
    return times, outputs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--turns", type=int, default=3)
    parser.add_argument("--new-tokens", type=int, default=64)
    parser.add_argument("--width", type=int, default=1920)
    parser.add_argument("--height", type=int, default=1080)
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    turns = []
    for turn in range(args.turns):
        screenshot = rng.integers(0, 256, (args.height, args.width, 3), dtype=np.uint8)
        turns.append(processor.prepare_prompt(turn_tokens(turn, rng), [screenshot], IMAGE_PAD))
    with tempfile.TemporaryDirectory() as directory:
        reference = tiny_real_vocab_model(directory)
        config = SamplerConfig(max_cache_length=cache_length_for(turns, args.new_tokens))
        sampler = Sampler(load_pretrained(directory), config=config)
    started = time.perf_counter()
    ours(sampler, turns, args.new_tokens)   # compiles the vision, prefill and decode programs
    compile_s = time.perf_counter() - started
    our_times, our_tokens = ours(sampler, turns, args.new_tokens)
    their_times, their_tokens = transformers_generate(reference, turns, args.new_tokens)
    for turn, (a, b) in enumerate(zip(our_times, their_times)):
        print(json.dumps({"turn": turn + 1, "image_tokens": turns[turn][0].count(IMAGE_PAD), "ours_s": round(a, 3),
                          "transformers_s": round(b, 3), "ours_tokens_per_s": round(args.new_tokens / a, 1),
                          "transformers_tokens_per_s": round(args.new_tokens / b, 1),
                          "same_tokens": our_tokens[turn] == their_tokens[turn]}))
    total_ours, total_theirs = sum(our_times), sum(their_times)
    print(json.dumps({"summary": True, "ours_total_s": round(total_ours, 3), "ours_first_run_s": round(compile_s, 1),
                      "transformers_total_s": round(total_theirs, 3),
                      "ours_tokens_per_s": round(args.turns * args.new_tokens / total_ours, 1),
                      "transformers_tokens_per_s": round(args.turns * args.new_tokens / total_theirs, 1),
                      "speedup": round(total_theirs / total_ours, 2), "compilations": dict(sampler.compilations)}))


if __name__ == "__main__":
    main()
