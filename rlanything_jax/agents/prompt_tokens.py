"""Chat messages that may carry images -> the token ids and preprocessed images a model reads.

A message's content is a string or a list of parts: `{"type": "text", "text": ...}` and
`{"type": "image", "image": <HWC uint8 array>}` (the Qwen3-VL chat template renders an image part
as one `<|vision_start|><|image_pad|><|vision_end|>`). `encode_prompt` renders the chat, then
expands each image pad to the image's token count and preprocesses the image
(`models.qwen3_vl.processor.prepare_prompt`), so the sampler and the train step get tokens and
images that match. Text-only messages give exactly `tokenizer.encode_chat`.

A turn's prompt is either the previous prompt + response + the next message (`turn_message`, the
text scenarios), or rebuilt from the whole episode (`step_messages`, for prompts that keep only
the last few screenshots). `next_prompt` builds either and says whether it extends the cached
history (then only the delta is prefilled) or not (then the row is prefilled again).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from rlanything_jax.agents.chat_tokens import first_prompt, turn_delta
from rlanything_jax.models.qwen3_vl.processor import (
    IMAGE_PAD,
    VISION_END,
    VISION_START,
    ImageInput,
    expand_image_pads,
    preprocess_images,
)

IMAGE_PLACEHOLDER = VISION_START + IMAGE_PAD + VISION_END


def is_image_part(part: Any) -> bool:
    return isinstance(part, Mapping) and (part.get("type") in ("image", "image_url") or "image" in part)


def message_images(messages: Sequence[Mapping[str, Any]]) -> list[Any]:
    """The images of `messages`, in the order the template renders them."""
    return [part.get("image") for message in messages if not isinstance(message.get("content"), str)
            for part in message.get("content") or () if is_image_part(part)]


def render_content(content: Any) -> str:
    """A message's content as text, each image as its single placeholder (what the VL template writes)."""
    if isinstance(content, str):
        return content
    return "".join(IMAGE_PLACEHOLDER if is_image_part(part) else str(part.get("text", "")) for part in content or ())


def text_only(messages: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The messages with string contents (images as placeholders), for templates that take only text."""
    return [{**message, "content": render_content(message.get("content"))} for message in messages]


def _placeholders(messages: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    # The template needs only the parts' kinds; the arrays stay out of the tokenizer's hands.
    out = []
    for message in messages:
        content = message.get("content")
        if not isinstance(content, str):
            content = [{"type": "image"} if is_image_part(part) else part for part in content or ()]
        out.append({**message, "content": content})
    return out


@dataclasses.dataclass
class ImageCache:
    """Preprocessed images by the identity of their arrays: a screenshot shown on several turns is
    preprocessed once, and the same `ImageInput` object stands for it every time."""

    entries: dict[int, tuple[Any, ImageInput]] = dataclasses.field(default_factory=dict)

    def image(self, image: Any) -> ImageInput:
        entry = self.entries.get(id(image))
        if entry is None or entry[0] is not image:
            pixel_values, grid = preprocess_images([image])
            entry = (image, ImageInput(pixel_values, tuple(int(v) for v in grid[0])))
            self.entries[id(image)] = entry   # the array is kept, so its id is not reused meanwhile
        return entry[1]

    def prepare(self, tokens: Sequence[int], images: Sequence[Any],
                image_token_id: int) -> tuple[list[int], list[ImageInput]]:
        """`tokens` with each image pad expanded to its image's run, and the preprocessed images."""
        prepared = [self.image(image) for image in images]
        grids = np.asarray([image.grid_thw for image in prepared], np.int64).reshape(-1, 3)
        return expand_image_pads(tokens, grids, image_token_id), prepared


def image_token_id(tokenizer: Any) -> int:
    token_id = tokenizer.token_to_id(IMAGE_PAD)
    if token_id is None:
        raise ValueError(f"prompts with images need a tokenizer with {IMAGE_PAD} (a vision-language model's)")
    return token_id


def encode_prompt(tokenizer: Any, messages: Sequence[Mapping[str, Any]],
                  cache: ImageCache | None = None) -> tuple[list[int], list[ImageInput]]:
    """The chat's token ids (generation prompt included), image pads expanded, and its images."""
    images = message_images(messages)
    if not images:
        return first_prompt(tokenizer, list(messages)), []
    tokens = tokenizer.encode_chat(_placeholders(messages))
    return (cache or ImageCache()).prepare(tokens, images, image_token_id(tokenizer))


def same_images(a: Sequence[ImageInput], b: Sequence[ImageInput]) -> bool:
    return len(a) == len(b) and all(x is y or (x.grid_thw == y.grid_thw and np.array_equal(x.pixel_values,
                                                                                           y.pixel_values))
                                    for x, y in zip(a, b))


@dataclasses.dataclass(frozen=True)
class TurnPrompt:
    """The prompt of a turn: all of it, and when it extends the cached history, the part to append."""

    tokens: tuple[int, ...]
    images: tuple[ImageInput, ...]
    delta: tuple[int, ...] | None          # None: it does not extend the history (prefill it again)
    delta_images: tuple[ImageInput, ...] = ()


def next_prompt(tokenizer: Any, prompts: Any, task: Any, episode: Any, observation: Any,
                history: Sequence[int], history_images: Sequence[ImageInput], finish_reason: str = "stop",
                stop_text: str = "", cache: ImageCache | None = None) -> TurnPrompt:
    """The policy's prompt for its next turn of `episode` (steps so far) at `observation`, given the
    tokens and images its cache holds (`history`: the last prompt + response; empty on the first turn)."""
    cache = cache if cache is not None else ImageCache()
    if getattr(prompts, "rebuilds_history", False):
        tokens, images = encode_prompt(tokenizer, prompts.step_messages(task, episode, observation), cache)
        n = len(history)
        extends = n > 0 and tokens[:n] == list(history) and same_images(images[:len(history_images)], history_images)
        if not history:   # the first turn: all of it is new
            return TurnPrompt(tuple(tokens), tuple(images), tuple(tokens), tuple(images))
        if extends:
            return TurnPrompt(tuple(tokens), tuple(images), tuple(tokens[n:]), tuple(images[len(history_images):]))
        return TurnPrompt(tuple(tokens), tuple(images), None)
    if not history:
        tokens, images = encode_prompt(tokenizer, prompts.initial_messages(task, observation), cache)
        return TurnPrompt(tuple(tokens), tuple(images), tuple(tokens), tuple(images))
    message = prompts.turn_message(episode, observation)
    delta = turn_delta(tokenizer, {**message, "content": render_content(message.get("content"))}, finish_reason,
                       stop_text)
    images: list[ImageInput] = []
    new_images = message_images([message])
    if new_images:
        delta, images = cache.prepare(delta, new_images, image_token_id(tokenizer))
    return TurnPrompt(tuple(history) + tuple(delta), tuple(history_images) + tuple(images), tuple(delta),
                      tuple(images))
