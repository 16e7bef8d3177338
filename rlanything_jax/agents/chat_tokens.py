"""Token ids of a chat that grows turn by turn, so a KV cache can be extended instead of re-read.

The cache of a conversation holds: the first prompt (rendered by the tokenizer's chat
template, ending with the assistant header), the policy's response tokens, then for
every later turn the tokens that close the assistant turn and open the next user
turn. `turn_delta` renders that piece with the template itself, on a placeholder
conversation, so it follows whatever format the template writes (ChatML, SmolLM2,
Qwen3 ...).
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any, Mapping

Message = Mapping[str, str]  # {"role": ..., "content": ...}

_PLACEHOLDER_REPLY = "\u2063reply\u2063"  # invisible separator: never appears in real text


@dataclasses.dataclass(frozen=True)
class TurnFormat:
    assistant_close: str   # what the template writes after an assistant message's content
    user_open: str         # what comes before a user message's content (after the close)
    user_close: str        # after the user content, up to and including the generation prompt


@functools.lru_cache(maxsize=8)
def _turn_format(tokenizer: Any) -> TurnFormat:
    marker = "\u2063user\u2063"
    base = [{"role": "user", "content": "x"}, {"role": "assistant", "content": _PLACEHOLDER_REPLY}]
    closed = tokenizer.apply_chat_template(base, add_generation_prompt=False)
    full = tokenizer.apply_chat_template(base + [{"role": "user", "content": marker}], add_generation_prompt=True)
    after_reply = closed[closed.rindex(_PLACEHOLDER_REPLY) + len(_PLACEHOLDER_REPLY):]
    tail = full[full.rindex(_PLACEHOLDER_REPLY) + len(_PLACEHOLDER_REPLY):]
    if not tail.startswith(after_reply) or marker not in tail:
        raise ValueError("the chat template does not append turns to a closed assistant message; "
                         "multi-turn cache reuse needs a template that does")
    user_part = tail[len(after_reply):]
    open_part, close_part = user_part.split(marker)
    return TurnFormat(assistant_close=after_reply, user_open=open_part, user_close=close_part)


def turn_delta(tokenizer: Any, message: Mapping[str, str], finish_reason: str, stop_text: str) -> list[int]:
    """Tokens to append after the policy's response to start its next turn with `message`.

    `stop_text` is the text of the stop token the response ended with (when
    finish_reason == "stop"); the part of the assistant close it already covers is
    not written twice. A response cut by length or a stop string gets the whole close.
    """
    fmt = _turn_format(tokenizer)
    close = fmt.assistant_close
    if finish_reason == "stop" and stop_text and close.startswith(stop_text):
        close = close[len(stop_text):]
    text = close + fmt.user_open + message["content"] + fmt.user_close
    return tokenizer.encode(text)


def first_prompt(tokenizer: Any, messages: list[Mapping[str, str]]) -> list[int]:
    return tokenizer.encode_chat(messages)
