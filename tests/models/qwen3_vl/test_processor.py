"""The host-side image processor, prompt expansion and M-RoPE positions equal transformers' exactly."""

import numpy as np
import pytest
import torch
from PIL import Image
from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil

from rlanything_jax.core.models.qwen3_vl import processor

# (height, width): square, wide, tall, below the minimum pixels (upscaled), odd sizes that round.
SIZES = {"square": (96, 96), "wide": (70, 190), "tall": (230, 61), "below-min": (20, 33), "odd": (301, 257)}


def _released_image_processor():
    return Qwen2VLImageProcessorPil(patch_size=16, temporal_patch_size=2, merge_size=2, image_mean=[0.5] * 3,
                                    image_std=[0.5] * 3, size={"shortest_edge": 65536, "longest_edge": 16777216})


def _images(sizes, seed=0):
    rng = np.random.default_rng(seed)
    return [Image.fromarray(rng.integers(0, 256, (h, w, 3), dtype=np.uint8)) for h, w in sizes]


@pytest.mark.parametrize("name", sorted(SIZES))
def test_pixel_values_and_grid_equal_transformers(name):
    images = _images([SIZES[name]])
    expected = _released_image_processor()(images=images, return_tensors="np")
    pixel_values, grid = processor.preprocess_images(images)
    assert pixel_values.dtype == np.float32 and pixel_values.shape[1] == 1536
    np.testing.assert_array_equal(grid, expected["image_grid_thw"])
    np.testing.assert_array_equal(pixel_values, expected["pixel_values"])


@pytest.mark.parametrize("count", [1, 2, 3])
def test_several_images_and_rgba_equal_transformers(count):
    images = _images([(64, 64), (80, 120), (300, 90)][:count], seed=count)
    images[-1] = images[-1].convert("RGBA")
    images[-1].putalpha(90)
    expected = _released_image_processor()(images=images, return_tensors="np")
    pixel_values, grid = processor.preprocess_images(images)
    np.testing.assert_array_equal(grid, expected["image_grid_thw"])
    np.testing.assert_array_equal(pixel_values, expected["pixel_values"])


def test_smart_resize_equals_transformers_and_refuses_extreme_aspect_ratios():
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import smart_resize

    from rlanything_jax.core.models import image_sizes

    assert image_sizes.smart_resize(1080, 1920) == (1088, 1920)   # a screenshot: 68 x 120 patches
    for height, width in [(1080, 1920), (10, 10), (5000, 4000), (33, 6000), (777, 91)]:
        for max_pixels in (16 * 16 * 4 * 1280, 16777216):
            assert image_sizes.smart_resize(height, width, max_pixels=max_pixels) == smart_resize(
                height, width, factor=32, min_pixels=65536, max_pixels=max_pixels)
        for factor in (28, 32):   # Qwen2.5-VL's patch grid, and the desktop agent's
            assert image_sizes.smart_resize(height, width, factor=factor, min_pixels=factor ** 2) == smart_resize(
                height, width, factor=factor, min_pixels=factor ** 2, max_pixels=16777216)
    with pytest.raises(ValueError, match="aspect ratio"):
        image_sizes.smart_resize(10, 2500)


def _tiny_reference_model():
    from transformers import Qwen3VLConfig, Qwen3VLModel

    cfg = Qwen3VLConfig(text_config=dict(vocab_size=64, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                                         num_attention_heads=2, num_key_value_heads=1, head_dim=8,
                                         rope_parameters={"rope_type": "default", "rope_theta": 1e4,
                                                          "mrope_section": [2, 1, 1], "mrope_interleaved": True}),
                        vision_config=dict(depth=1, hidden_size=16, intermediate_size=16, num_heads=2,
                                           out_hidden_size=16, num_position_embeddings=16,
                                           deepstack_visual_indexes=[]),
                        image_token_id=60, video_token_id=61, vision_start_token_id=62, vision_end_token_id=63)
    return Qwen3VLModel(cfg).eval()


@pytest.mark.parametrize("counts", [(1,), (2,), (3,), (2, 0, 1)])
def test_rope_index_equals_transformers_on_left_padded_rows(counts):
    image_token, start, end = 60, 62, 63
    rng = np.random.default_rng(sum(counts))
    shapes = [(64, 64), (80, 120), (300, 90), (40, 700)]
    rows, grids = [], []
    for images in counts:
        ids = list(rng.integers(1, 50, 3))
        for k in range(images):
            _, grid = processor.preprocess_images(_images([shapes[(k + len(grids)) % 4]]))
            grids.append(grid[0])
            ids += [start, image_token, end] + list(rng.integers(1, 50, 2 + k))
        rows.append(processor.expand_image_pads(ids, np.asarray(grids[len(grids) - images:]), image_token))
    width = max(map(len, rows))
    input_ids = np.zeros((len(rows), width), np.int64)
    mask = np.zeros_like(input_ids)
    for r, ids in enumerate(rows):
        input_ids[r, width - len(ids):] = ids
        mask[r, width - len(ids):] = 1
    grid_thw = np.asarray(grids)
    positions, deltas = processor.get_rope_index(input_ids, grid_thw, image_token, mask)

    ids_t = torch.tensor(input_ids)
    expected, expected_deltas = _tiny_reference_model().get_rope_index(
        ids_t, mm_token_type_ids=(ids_t == image_token).int(), image_grid_thw=torch.tensor(grid_thw),
        attention_mask=torch.tensor(mask))
    np.testing.assert_array_equal(positions, expected.numpy())
    np.testing.assert_array_equal(deltas, expected_deltas.numpy()[:, 0])


@pytest.mark.slow   # converts the Qwen3 tokenizer (about 7 s)
def test_prompt_expansion_and_ids_equal_transformers_processor(qwen3_tokenizer_dir):
    from transformers import AutoTokenizer, Qwen3VLProcessor

    tokenizer = AutoTokenizer.from_pretrained(qwen3_tokenizer_dir)
    # Without torchvision the processor cannot build its video processor; only images are used here.
    Qwen3VLProcessor.check_argument_for_proper_class = lambda *args: None
    reference = Qwen3VLProcessor(image_processor=_released_image_processor(), tokenizer=tokenizer)
    images = _images([(64, 64), (80, 120), (33, 20)], seed=7)
    image = processor.VISION_START + processor.IMAGE_PAD + processor.VISION_END
    prompt = f"<|im_start|>user\n{image}Where?{image}{image} And here?<|im_end|>\n<|im_start|>assistant\n"
    expected = reference(text=[prompt], images=images, return_tensors="np")

    pixel_values, grid = processor.preprocess_images(images)
    expanded = processor.expand_image_pads_in_text(prompt, grid)
    ids = tokenizer(expanded)["input_ids"]
    np.testing.assert_array_equal(np.asarray([ids]), expected["input_ids"])
    np.testing.assert_array_equal(pixel_values, expected["pixel_values"])
    image_token = tokenizer.convert_tokens_to_ids(processor.IMAGE_PAD)
    assert image_token == 151655
    unexpanded = tokenizer(prompt)["input_ids"]
    assert processor.expand_image_pads(unexpanded, grid, image_token) == ids
    np.testing.assert_array_equal(np.asarray([ids]) == image_token, expected["mm_token_type_ids"] == 1)
