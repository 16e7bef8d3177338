"""Stop strings cut text and tokens at the right place, and a cut conversation continues from the cut."""

import pytest

from rlanything_jax.core.models import load_pretrained
from rlanything_jax.core.sampling.sampler import Sampler
from tests import hf_reference


@pytest.fixture(scope="module")
def qwen_sampler(tmp_path_factory, qwen25_tokenizer):
    """A random tiny Qwen2 over the real Qwen2.5 vocabulary, so generated ids decode to text."""
    path = tmp_path_factory.mktemp("qwen_vocab")
    hf_reference.build("qwen2", path, vocab_size=qwen25_tokenizer.vocab_size, tie_word_embeddings=True)
    return Sampler(load_pretrained(path), tokenizer=qwen25_tokenizer)


PROMPTS = ["Once upon a time", "def f(x):\n    return"]


def _fresh_piece(text: str, length: int = 3) -> str:
    """A piece of `text` whose first occurrence starts past its first few characters."""
    for start in range(len(text) // 2, 2, -1):
        piece = text[start:start + length]
        if text.index(piece) == start:
            return piece
    raise AssertionError(f"no usable stop string in {text!r}")


def test_stop_string_cuts_text_tokens_and_logprobs(qwen_sampler):
    tokenizer = qwen_sampler.tokenizer
    free = qwen_sampler.generate(PROMPTS, 24, stop_token_ids=[])
    text = free[0].text
    stop = _fresh_piece(text)

    cut = qwen_sampler.generate(PROMPTS, 24, stop_token_ids=[], stop_strings=[stop])
    assert cut[0].finish_reason == "stop_string"
    assert cut[0].text == text[: text.index(stop)]
    kept = len(cut[0].token_ids)
    assert cut[0].token_ids == free[0].token_ids[:kept]
    assert cut[0].logprobs == free[0].logprobs[:kept]
    assert stop in tokenizer.decode(cut[0].token_ids) and stop not in tokenizer.decode(cut[0].token_ids[:-1])
    if stop not in free[1].text:
        assert cut[1].token_ids == free[1].token_ids and cut[1].finish_reason == "length"


def test_the_earliest_of_several_stop_strings_wins(qwen_sampler):
    text = qwen_sampler.generate(PROMPTS[:1], 24, stop_token_ids=[])[0].text
    early, late = text[4:6], text[-3:]
    cut = qwen_sampler.generate(PROMPTS[:1], 24, stop_token_ids=[], stop_strings=[late, early])[0]
    assert cut.text == text[: min(text.index(early), text.index(late))]


def test_a_conversation_continues_from_the_cut(qwen_sampler):
    tokenizer = qwen_sampler.tokenizer
    prompts = [tokenizer.encode(p) for p in PROMPTS]
    free = qwen_sampler.generate(prompts, 20, stop_token_ids=[])
    stop = _fresh_piece(free[0].text)

    conversation = qwen_sampler.start(prompts, max_new_tokens=20, cache_length=256)
    first = qwen_sampler.decode(conversation, 20, stop_token_ids=[], stop_strings=[stop])
    assert first[0].finish_reason == "stop_string" and len(first[0].token_ids) < 20
    observation = tokenizer.encode("\nObservation: the door opens.\n")
    qwen_sampler.extend(conversation, [observation, observation])
    second = qwen_sampler.decode(conversation, 10, stop_token_ids=[])

    histories = [p + c.token_ids + observation for p, c in zip(prompts, first)]
    expected = qwen_sampler.generate(histories, 10, stop_token_ids=[])
    assert [c.token_ids for c in second] == [c.token_ids for c in expected]


def test_stop_token_is_in_tokens_but_not_in_text(qwen_sampler):
    free = qwen_sampler.generate(PROMPTS[:1], 12, stop_token_ids=[])[0]
    stop_id = free.token_ids[5]
    done = qwen_sampler.generate(PROMPTS[:1], 12, stop_token_ids=[stop_id])[0]
    first = free.token_ids.index(stop_id)
    assert done.token_ids == free.token_ids[: first + 1] and done.finish_reason == "stop"
    assert done.text == qwen_sampler.tokenizer.decode(free.token_ids[:first])
