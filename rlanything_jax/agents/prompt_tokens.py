"""Chat messages that may carry images -> the token ids and preprocessed images a model reads.

A message's content is a string or a list of parts: `{"type": "text", "text": ...}` and
`{"type": "image", "image": <HWC uint8 array>}` (the vision-language chat template renders an image
part as one `IMAGE_PLACEHOLDER`). `encode_prompt` renders the chat, then has the model's
`interfaces.ImageInputs` encode each image and expand its pad to the image's token count, so the
sampler and the train step get tokens and images that match. Text-only messages give exactly
`tokenizer.encode_chat`.

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
from rlanything_jax.core.interfaces import ImageInputs
from rlanything_jax.core.models.qwen_tokenizer_io import IMAGE_PLACEHOLDER


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
    """Encoded images by the identity of their arrays: a screenshot shown on several turns is encoded
    once, and the same encoded image stands for it every time."""

    entries: dict[int, tuple[Any, Any]] = dataclasses.field(default_factory=dict)

    def image(self, image: Any, image_inputs: ImageInputs) -> Any:
        entry = self.entries.get(id(image))
        if entry is None or entry[0] is not image:
            entry = (image, image_inputs.encode(image))
            self.entries[id(image)] = entry   # the array is kept, so its id is not reused meanwhile
        return entry[1]

    def prepare(self, tokens: Sequence[int], images: Sequence[Any],
                image_inputs: ImageInputs | None) -> tuple[list[int], list[Any]]:
        """`tokens` with each image pad expanded to its image's run, and the encoded images."""
        if image_inputs is None:
            raise ValueError("prompts with images need a vision-language model (its image_inputs)")
        prepared = [self.image(image, image_inputs) for image in images]
        return image_inputs.expand(tokens, prepared), prepared


def encode_prompt(tokenizer: Any, messages: Sequence[Mapping[str, Any]], cache: ImageCache | None = None,
                  image_inputs: ImageInputs | None = None) -> tuple[list[int], list[Any]]:
    """The chat's token ids (generation prompt included), image pads expanded, and its images as the model
    (`image_inputs`, e.g. a sampler's) encodes them."""
    images = message_images(messages)
    if not images:
        return first_prompt(tokenizer, list(messages)), []
    tokens = tokenizer.encode_chat(_placeholders(messages))
    return (cache or ImageCache()).prepare(tokens, images, image_inputs)


def _equal(x: Any, y: Any) -> bool:
    """Equal encoded images: arrays element by element, records (dataclasses) field by field."""
    if dataclasses.is_dataclass(x) and type(x) is type(y):
        return all(_equal(getattr(x, field.name), getattr(y, field.name)) for field in dataclasses.fields(x))
    if isinstance(x, np.ndarray) or isinstance(y, np.ndarray):
        return np.array_equal(x, y)
    return x == y


def same_images(a: Sequence[Any], b: Sequence[Any]) -> bool:
    """Encoded images equal one by one (the same objects, or equal contents)."""
    return len(a) == len(b) and all(x is y or _equal(x, y) for x, y in zip(a, b))


@dataclasses.dataclass(frozen=True)
class TurnPrompt:
    """The prompt of a turn: all of it, and when it extends the cached history, the part to append."""

    tokens: tuple[int, ...]
    images: tuple[Any, ...]
    delta: tuple[int, ...] | None          # None: it does not extend the history (prefill it again)
    delta_images: tuple[Any, ...] = ()


def next_prompt(tokenizer: Any, prompts: Any, task: Any, episode: Any, observation: Any,
                history: Sequence[int], history_images: Sequence[Any], finish_reason: str = "stop",
                stop_text: str = "", cache: ImageCache | None = None,
                image_inputs: ImageInputs | None = None) -> TurnPrompt:
    """The policy's prompt for its next turn of `episode` (steps so far) at `observation`, given the
    tokens and images its cache holds (`history`: the last prompt + response; empty on the first turn).
    Images are encoded by `image_inputs` (the policy's, `Sampler.image_inputs`)."""
    cache = cache if cache is not None else ImageCache()
    if getattr(prompts, "rebuilds_history", False):
        tokens, images = encode_prompt(tokenizer, prompts.step_messages(task, episode, observation), cache,
                                       image_inputs)
        n = len(history)
        extends = n > 0 and tokens[:n] == list(history) and same_images(images[:len(history_images)], history_images)
        if not history:   # the first turn: all of it is new
            return TurnPrompt(tuple(tokens), tuple(images), tuple(tokens), tuple(images))
        if extends:
            return TurnPrompt(tuple(tokens), tuple(images), tuple(tokens[n:]), tuple(images[len(history_images):]))
        return TurnPrompt(tuple(tokens), tuple(images), None)
    if not history:
        tokens, images = encode_prompt(tokenizer, prompts.initial_messages(task, observation), cache, image_inputs)
        return TurnPrompt(tuple(tokens), tuple(images), tuple(tokens), tuple(images))
    message = prompts.turn_message(episode, observation)
    delta = turn_delta(tokenizer, {**message, "content": render_content(message.get("content"))}, finish_reason,
                       stop_text)
    images: list[Any] = []
    new_images = message_images([message])
    if new_images:
        delta, images = cache.prepare(delta, new_images, image_inputs)
    return TurnPrompt(tuple(history) + tuple(delta), tuple(history_images) + tuple(images), tuple(delta),
                      tuple(images))
