"""Host API of the KV-cache sampler: token ids or text in; text, tokens and log-probabilities out.

Shapes are bucketed (batch, prompt length, cache length, output buffer) so a run
compiles a handful of programs; `Sampler.compilations` counts them. Every program
is `jax.jit` with explicit shardings over the sampler's mesh (batch over the data
axes, cache heads over `tensor`) and donates the decode state (except "replicate",
which copies each prompt's prefilled rows for several samples into a larger state).
"""

from __future__ import annotations

import collections
import dataclasses
import functools
from typing import Any, Callable, Sequence

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx
from jax.sharding import Mesh

from rlanything_jax.core import multihost
from rlanything_jax.core import sharding as sharding_lib
from rlanything_jax.core.interfaces import CausalLM, cache_is_stacked
from rlanything_jax.core.sampling import decode as decode_lib
from rlanything_jax.core.sampling.buckets import bucket_length
from rlanything_jax.core.sampling.stops import Completion, finish_rows
from rlanything_jax.core.sampling.strategies import Greedy, SamplingStrategy
from rlanything_jax.core.sampling.vision_inputs import VisionInputs


@dataclasses.dataclass(frozen=True)
class SamplerConfig:
    max_cache_length: int = 4096   # no conversation grows past this many cache columns
    min_window: int = 128          # smallest attention window over the cache
    cache_dtype: str | None = None  # default: the model's compute dtype
    pad_token_id: int = 0


def window_buckets(cache_length: int, min_window: int) -> tuple[int, ...]:
    windows = []
    w = min_window
    while w < cache_length:
        windows.append(w)
        w *= 2
    return tuple(windows) + (cache_length,)


@dataclasses.dataclass
class Conversation:
    """A batch of conversations whose KV cache stays on device between turns."""

    state: decode_lib.DecodeState
    num_rows: int                 # real rows; the rest of the batch bucket is padding
    last_decode_start: int = 0    # cache column where the last decode began

    @property
    def cache_length(self) -> int:
        return self.state.cache.valid.shape[1]

    @property
    def used_columns(self) -> int:
        return int(self.state.write_index)


class Sampler:
    """Batched generation with a KV cache for one model (any `interfaces.CausalLM`) on one mesh."""

    def __init__(self, model: CausalLM, tokenizer: Any = None, mesh: Mesh | None = None,
                 rules: sharding_lib.Rules = sharding_lib.DEFAULT_LOGICAL_AXIS_RULES,
                 config: SamplerConfig = SamplerConfig()):
        self.model_config = model.config
        self.tokenizer = tokenizer
        self.config = config
        self.mesh = mesh if mesh is not None else sharding_lib.build_mesh({}, devices=jax.devices()[:1])
        self.rules = rules
        self.graphdef, params = nnx.split(model)
        self._param_shardings = sharding_lib.state_shardings(params, self.mesh, rules)
        self.params = multihost.to_device(params, self._param_shardings)
        self.cache_dtype = jnp.dtype(config.cache_dtype or model.dtype)
        self.compilations: collections.Counter[str] = collections.Counter()
        # Real (non-padding) "rows" and "tokens" sent through prefill: shows what replication saves.
        self.prefilled: collections.Counter[str] = collections.Counter()
        self._programs: dict[tuple, Any] = {}
        # A vision-language model's host-side image handling (`interfaces.VisionLM`); None for a text model.
        self.image_inputs = getattr(model, "image_inputs", None)
        self._vision = (VisionInputs(self.image_inputs, self.graphdef, self._param_shardings, self.compilations)
                        if self.image_inputs is not None else None)

    # ------------------------------------------------------------------ weights

    def update_params(self, params: nnx.State) -> None:
        """Swaps in new weights of the same structure, shapes and dtypes: no recompilation."""
        old = jax.tree.map(lambda a: (a.shape, a.dtype), self.params)
        new = jax.tree.map(lambda a: (a.shape, a.dtype), params)
        # (jax's PyTreeDef stub declares no `!=`)
        if jax.tree.structure(old) != jax.tree.structure(new) or old != new:  # type: ignore[operator]
            raise ValueError("update_params needs parameters with the sampler's structure, shapes and dtypes")
        self.params = multihost.to_device(params, self._param_shardings)

    # ------------------------------------------------------------------ programs

    def _state_shardings(self, state_shapes: decode_lib.DecodeState):
        def to_sharding(axes, leaf):
            return sharding_lib.named_sharding(self.mesh, axes, self.rules, leaf.shape)

        layout = self.model_config
        axes = decode_lib.state_logical_axes(layout.num_layers, cache_is_stacked(layout))
        return jax.tree.map(to_sharding, axes, state_shapes, is_leaf=decode_lib.is_axes)

    def _rows_sharding(self, state: decode_lib.DecodeState, rank: int):
        """How a host array of one value (rank 1) or one token list (rank 2) per row is laid out."""
        axes = ("batch", "length")[:rank]
        return sharding_lib.named_sharding(self.mesh, axes, self.rules, state.done.shape + (1,) * (rank - 1))

    def _replicated(self, value: np.ndarray) -> jax.Array:
        """A host array every process holds, on every device of the mesh (a global array in multi-process)."""
        return multihost.to_device(value, sharding_lib.named_sharding(self.mesh, (), self.rules))

    def _program(self, kind: str, state: decode_lib.DecodeState, **static) -> Any:
        # Shardings depend on shapes (a mesh axis that does not divide a dim is dropped).
        shapes = tuple(leaf.shape for leaf in jax.tree.leaves(state))
        key = (kind, shapes, tuple(sorted(static.items())))
        if key not in self._programs:
            self._programs[key] = self._compile(kind, state, **static)
        return self._programs[key]

    def _compile(self, kind: str, state: decode_lib.DecodeState, **static) -> Any:
        state_shardings = self._state_shardings(state)
        batch_2d = self._rows_sharding(state, 2)
        replicated = sharding_lib.named_sharding(self.mesh, (), self.rules)
        counter = self.compilations

        donate = (1,)  # the decode state; it follows the params
        program: Callable[..., Any]   # each kind's own signature
        in_shardings: tuple[Any, ...]
        rows = self._rows_sharding(state, 1)   # a prefill's activations stay split by rows (decode_lib)
        if kind == "prefill":
            def program(params, state, tokens, valid):
                counter["prefill"] += 1  # runs once per trace, i.e. per compilation
                return decode_lib.prefill(params, state, tokens, valid, graphdef=self.graphdef, row_sharding=rows,
                                          **static)
            in_shardings = (self._param_shardings, state_shardings, batch_2d, batch_2d)
        elif kind == "prefill_images":
            static.pop("input_shapes")   # only a cache key: the shapes of the model's inputs

            def program(params, state, tokens, valid, inputs):
                counter["prefill_images"] += 1
                return decode_lib.prefill(params, state, tokens, valid, inputs, graphdef=self.graphdef,
                                          row_sharding=rows, **static)
            in_shardings = (self._param_shardings, state_shardings, batch_2d, batch_2d, None)
        elif kind == "decode":
            def program(params, state, max_new_tokens, max_steps):
                counter["decode"] += 1
                return decode_lib.decode(params, state, max_new_tokens, max_steps, **static)
            in_shardings = (self._param_shardings, state_shardings, replicated, replicated)
        elif kind == "truncate":
            def program(state, keep, start):
                counter["truncate"] += 1
                return decode_lib.truncate_generation(state, keep, start)
            batch_1d = self._rows_sharding(state, 1)
            in_shardings = (state_shardings, batch_1d, replicated)
            donate = (0,)
        elif kind == "insert":
            def program(state, source, rows):
                counter["insert"] += 1
                return decode_lib.insert_rows(state, source, rows)
            source_shapes = static.pop("source")
            in_shardings = (state_shardings, self._state_shardings(source_shapes), replicated)
            donate = (0,)
        elif kind == "repack":
            def program(state, rows, write_column):
                counter["repack"] += 1
                return decode_lib.repack_rows(state, rows, write_column, **static)
            smaller = jax.eval_shape(functools.partial(decode_lib.repack_rows, **static), state,
                                     jax.ShapeDtypeStruct((static["batch"],), jnp.int32),
                                     jax.ShapeDtypeStruct((), jnp.int32))
            return jax.jit(program, in_shardings=(state_shardings, replicated, replicated),
                           out_shardings=self._state_shardings(smaller))
        elif kind == "replicate":
            def program(state, num_rows, num_samples):
                counter["replicate"] += 1
                return decode_lib.replicate_rows(state, num_rows, num_samples, **static)
            in_shardings = (state_shardings, replicated, replicated)
            # The output has more rows than the input: no buffer could be reused, so nothing is donated.
            bigger = jax.eval_shape(functools.partial(decode_lib.replicate_rows, **static), state, 1, 1)
            return jax.jit(program, in_shardings=in_shardings, out_shardings=self._state_shardings(bigger))
        else:
            raise ValueError(kind)
        return jax.jit(program, in_shardings=in_shardings, out_shardings=state_shardings, donate_argnums=donate)

    # ------------------------------------------------------------------ conversations

    def start(self, prompts: Sequence[Sequence[int]], max_new_tokens: int,
              cache_length: int | None = None, num_samples: int = 1,
              images: Sequence[Sequence[Any]] | None = None) -> Conversation:
        """Prefills a batch of token-id prompts into a fresh cache.

        With num_samples = k, each prompt is prefilled once and its cache row copied k
        times: the conversation has k rows per prompt, prompt-major (prompt 0's k rows first).
        A vision-language model's prompts may hold images: `images[row]` are that row's, in
        order, as the model encodes them (`ImageInputs.encode`), each matching a run of image pads in the
        prompt (`ImageInputs.expand`).
        """
        if not prompts or any(len(p) == 0 for p in prompts):
            raise ValueError("every prompt needs at least one token")
        if num_samples < 1:
            raise ValueError(f"num_samples must be >= 1, got {num_samples}")
        batch = bucket_length(len(prompts), 1)
        prompt_length = bucket_length(max(len(p) for p in prompts), 16)
        needed = prompt_length + max_new_tokens
        cache_length = cache_length or bucket_length(needed, self.config.min_window)
        if cache_length > self.config.max_cache_length or needed > cache_length:
            raise ValueError(f"a prompt bucket of {prompt_length} tokens plus {max_new_tokens} new tokens needs "
                             f"{needed} cache columns; cache length {cache_length}, "
                             f"max_cache_length {self.config.max_cache_length}")
        state = decode_lib.init_decode_state(self.model_config, batch, cache_length,
                                             bucket_length(max_new_tokens, 16), self.cache_dtype)
        state = multihost.to_device(state, self._state_shardings(state))
        conversation = Conversation(state=state, num_rows=len(prompts))
        self._append(conversation, prompts, prompt_length, images)
        if num_samples > 1:
            self._replicate(conversation, num_samples)
        return conversation

    def _replicate(self, conversation: Conversation, num_samples: int) -> None:
        rows = conversation.num_rows * num_samples
        program = self._program("replicate", conversation.state, batch=bucket_length(rows, 1))
        conversation.state = program(conversation.state, jnp.asarray(conversation.num_rows, jnp.int32),
                                     jnp.asarray(num_samples, jnp.int32))
        conversation.num_rows = rows

    def extend(self, conversation: Conversation, new_tokens: Sequence[Sequence[int]],
               images: Sequence[Sequence[Any]] | None = None) -> None:
        """Appends each row's next tokens (e.g. the next observation, with `images[row]` for a vision-language
        model: a new screenshot); rows given [] sit the turn out. The history is not read again."""
        if len(new_tokens) != conversation.num_rows:
            raise ValueError(f"extend needs one token list per row ({conversation.num_rows}), got {len(new_tokens)}")
        length = bucket_length(max(len(t) for t in new_tokens), 1)
        if conversation.used_columns + length > conversation.cache_length:
            raise ValueError(f"the conversation's cache is full: {conversation.used_columns} + {length} columns "
                             f"exceed its length {conversation.cache_length}")
        self._append(conversation, new_tokens, length, images)

    def join(self, conversation: Conversation, rows: Sequence[int], prompts: Sequence[Sequence[int]],
             images: Sequence[Sequence[Any]] | None = None, num_samples: int = 1) -> None:
        """Starts new conversations in `rows` of a running one (continuous batching): the prompts are prefilled
        on their own, batched, and their cache rows placed in the conversation's, ending at its write column;
        whatever those rows held is forgotten. The others keep their caches and do not wait for a prefill of
        the newcomers' length. The next `decode` generates for the new rows too (call it after any `extend`).
        With num_samples = k, each prompt is prefilled once and takes k rows, prompt-major (as in `start`).
        """
        if len(rows) != len(prompts) * num_samples or not prompts:
            raise ValueError(f"join needs {num_samples} rows per prompt, got {len(prompts)} prompts for rows "
                             f"{list(rows)}")
        batch = conversation.state.done.shape[0]
        if any(not 0 <= row < batch for row in rows) or len(set(rows)) != len(rows):
            raise ValueError(f"join needs distinct rows of the conversation's {batch}, got {list(rows)}")
        length = bucket_length(max(len(p) for p in prompts), 16)
        if length > conversation.used_columns:
            raise ValueError(f"a {length}-column prompt bucket cannot end at column {conversation.used_columns}")
        source = self.start(prompts, 0, cache_length=length, num_samples=num_samples, images=images)
        targets = np.full(source.state.done.shape[0], batch, np.int32)   # batch padding rows: dropped
        targets[:len(rows)] = rows
        program = self._program("insert", conversation.state, source=jax.eval_shape(lambda s: s, source.state))
        conversation.state = program(conversation.state, source.state, self._replicated(targets))
        conversation.num_rows = max(conversation.num_rows, max(rows) + 1)

    def repack(self, conversation: Conversation, rows: Sequence[int], cache_length: int,
               write_column: int = 0) -> Conversation:
        """A conversation of the given rows of this one, in that order (row i of the new one is rows[i]; -1:
        an empty row), each row's cached tokens moved to the front of a `cache_length`-column cache: no
        prefill, only the cache moved. Shrinks the batch when rows have left, and the attention window when
        rows joined and left at different columns (continuous batching). The next tokens are written after
        the longest row or at `write_column`, whichever is later (room for prompts that `join`)."""
        state = conversation.state
        counts = multihost.to_host(state.cache.valid.sum(axis=1))
        kept = np.asarray([counts[row] for row in rows if row >= 0] + [write_column], np.int64)
        if not rows or int(kept.max()) > cache_length or cache_length > self.config.max_cache_length:
            raise ValueError(f"repack needs rows whose tokens ({kept[:-1].tolist()}) and write column "
                             f"({write_column}) fit {cache_length} columns, at most max_cache_length "
                             f"{self.config.max_cache_length}")
        batch = bucket_length(len(rows), 1)
        targets = np.full(batch, -1, np.int32)
        targets[:len(rows)] = rows
        program = self._program("repack", state, batch=batch, cache_length=cache_length)
        return Conversation(state=program(state, self._replicated(targets),
                                          self._replicated(np.asarray(write_column, np.int32))),
                            num_rows=len(rows))

    def _append(self, conversation: Conversation, token_lists: Sequence[Sequence[int]], length: int,
                images: Sequence[Sequence[Any]] | None = None) -> None:
        state = conversation.state
        batch = state.done.shape[0]
        tokens = np.full((batch, length), self.config.pad_token_id, np.int32)
        valid = np.zeros((batch, length), np.int32)
        for row, ids in enumerate(token_lists):
            if ids:
                tokens[row, length - len(ids):] = ids
                valid[row, length - len(ids):] = 1
        windows = window_buckets(conversation.cache_length, self.config.min_window)
        window = next(w for w in windows if w >= conversation.used_columns + length)
        self.prefilled.update(rows=sum(1 for ids in token_lists if ids),
                              tokens=sum(len(ids) for ids in token_lists))
        if images is not None and any(images):
            if self._vision is None:
                raise ValueError("images need a vision-language model (an interfaces.VisionLM, with image_inputs)")
            inputs = self._vision.inputs(self.params, multihost.to_host(state.positions), tokens, valid, images)
            shapes = tuple(x.shape for x in jax.tree.leaves(inputs))
            program = self._program("prefill_images", state, window=window, input_shapes=shapes)
            tokens, valid = multihost.to_device((tokens, valid), self._rows_sharding(state, 2))
            conversation.state = program(self.params, state, tokens, valid, inputs)
            return
        program = self._program("prefill", state, window=window)
        tokens, valid = multihost.to_device((tokens, valid), self._rows_sharding(state, 2))
        conversation.state = program(self.params, state, tokens, valid)

    def decode(self, conversation: Conversation, max_new_tokens: int, strategy: SamplingStrategy = Greedy(),
               seed: int = 0, stop_token_ids: Sequence[int] | None = None,
               stop_strings: Sequence[str] = ()) -> list[Completion]:
        """Generates for every row that has pending input; returns one Completion per real row."""
        conversation.last_decode_start = conversation.used_columns
        self.advance(conversation, max_new_tokens, max_new_tokens, strategy, seed, stop_token_ids)
        if stop_token_ids is None:
            stop_token_ids = self.tokenizer.stop_token_ids if self.tokenizer is not None else ()
        completions, keep = finish_rows(conversation.state, conversation.num_rows, self.tokenizer,
                                        stop_token_ids, stop_strings, max_new_tokens)
        if keep is not None:
            self._truncate(conversation, keep)
        return completions

    def advance(self, conversation: Conversation, max_new_tokens: int, max_steps: int,
                strategy: SamplingStrategy = Greedy(), seed: int = 0,
                stop_token_ids: Sequence[int] | None = None) -> None:
        """At most `max_steps` decode steps of generations of up to `max_new_tokens` tokens per row (counted
        since the row's prompt): a generation paused here goes on in the next call, its tokens kept in the
        state (`sampling.slots` refills rows in between)."""
        state = conversation.state
        if max_new_tokens > state.tokens.shape[1]:
            more = ((0, 0), (0, bucket_length(max_new_tokens, 16) - state.tokens.shape[1]))
            state = state.replace(tokens=jnp.pad(state.tokens, more), logprobs=jnp.pad(state.logprobs, more))
            state = multihost.to_device(state, self._state_shardings(state))
        if stop_token_ids is None:
            stop_token_ids = self.tokenizer.stop_token_ids if self.tokenizer is not None else ()
        spec = decode_lib.DecodeSpec(
            graphdef=self.graphdef, strategy=strategy, stop_token_ids=tuple(int(t) for t in stop_token_ids),
            window_buckets=window_buckets(conversation.cache_length, self.config.min_window),
            pad_token_id=self.config.pad_token_id)
        state = state.replace(rng=jax.random.key_data(jax.random.key(seed)))
        program = self._program("decode", state, spec=spec)
        conversation.state = program(self.params, state, jnp.asarray(max_new_tokens, jnp.int32),
                                     jnp.asarray(max_steps, jnp.int32))

    def _truncate(self, conversation: Conversation, keep: np.ndarray) -> None:
        state = conversation.state
        padded = np.zeros(state.done.shape[0], np.int32)
        padded[:len(keep)] = keep
        program = self._program("truncate", state)
        conversation.state = program(state, multihost.to_device(padded, self._rows_sharding(state, 1)),
                                     jnp.asarray(conversation.last_decode_start, jnp.int32))

    # ------------------------------------------------------------------ one-shot

    def generate(self, prompts: Sequence[str] | Sequence[Sequence[int]], max_new_tokens: int,
                 strategy: SamplingStrategy = Greedy(), seed: int = 0, chat: bool = False,
                 stop_strings: Sequence[str] = (), stop_token_ids: Sequence[int] | None = None,
                 num_samples: int = 1, images: Sequence[Sequence[Any]] | None = None) -> list[Completion]:
        """Prompts (text, chat messages' user text with chat=True, or token ids) -> completions.

        num_samples completions per prompt, prompt-major; each prompt is prefilled once. `images[i]` are
        prompt i's images (token-id prompts with expanded image pads, as for `start`).
        """
        token_lists = [self._encode(p, chat) for p in prompts]
        conversation = self.start(token_lists, max_new_tokens, num_samples=num_samples, images=images)
        return self.decode(conversation, max_new_tokens, strategy, seed, stop_token_ids, stop_strings)

    def _encode(self, prompt: str | Sequence[int], chat: bool) -> list[int]:
        if not isinstance(prompt, str):
            return [int(t) for t in prompt]
        if self.tokenizer is None:
            raise ValueError("text prompts need a tokenizer")
        if chat:
            return self.tokenizer.encode_chat([{"role": "user", "content": prompt}])
        return self.tokenizer.encode(prompt)

