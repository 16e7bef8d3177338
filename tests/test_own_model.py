"""Use the train step and the sampler in your own JAX stack: a toy model that is not this project's
`Decoder`, written against `interfaces.CausalLM`, is trained by the public jitted PPO step (its loss
falls) and sampled by the public KV-cache `Sampler` (greedy decoding equals its own full forward).

Nothing from `envs`, `agents` or `scenarios` is imported: the core stands on its own.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from flax import nnx

from rlanything_jax.core import sharding
from rlanything_jax.core.interfaces import ModelInputs
from rlanything_jax.core.models.attention import causal_padding_mask, grouped_query_attention
from rlanything_jax.core.rl.train_state import init_train_state
from rlanything_jax.core.rl.train_step import TrainBatch, TrainSpec, jit_train_step
from rlanything_jax.core.sampling.sampler import Sampler
from rlanything_jax.core.sampling.strategies import Greedy

VOCAB, DIM = 32, 16


@dataclasses.dataclass(frozen=True)
class ToyLayout:
    num_layers: int = 1
    num_kv_heads: int = 1
    head_dim: int = DIM
    vocab_size: int = VOCAB


class ToyLM(nnx.Module):
    """One attention layer over learned position-free embeddings plus a learned position table."""

    def __init__(self, rngs: nnx.Rngs):
        self.config, self.dtype = ToyLayout(), jnp.float32
        init = jax.nn.initializers.normal(0.3)
        self.embed = nnx.Param(init(rngs.params(), (VOCAB, DIM)), logical_axes=("vocab", "embed"))
        self.where = nnx.Param(init(rngs.params(), (64, DIM)), logical_axes=(None, "embed"))
        self.qkv = nnx.Param(init(rngs.params(), (DIM, 3, DIM)), logical_axes=("embed", None, "head_dim"))
        self.out = nnx.Param(init(rngs.params(), (DIM, VOCAB)), logical_axes=("embed", "vocab"))

    def run_layers(self, input_ids, positions, attend, carry, last=None, inputs: ModelInputs | None = None,
                   remat="none"):   # one layer: nothing to checkpoint
        return self.run_embedded(self.embed[...][input_ids], positions, attend, carry, last)

    def run_embedded(self, x, positions, attend, carry, last=None):
        x = x + self.where[...][positions]
        q, k, v = (jnp.einsum("btd,de->bte", x, self.qkv[...][:, i])[:, :, None, :] for i in range(3))
        if last is not None:
            q, x = q[:, -last:], x[:, -last:]
        attended, carry = attend(0, q, k, v, carry)
        return x + attended[:, :, 0, :], carry

    def hidden_states(self, input_ids, attention_mask=None, positions=None, last=None, inputs=None, remat="none"):
        mask = jnp.ones(input_ids.shape, jnp.int32) if attention_mask is None else attention_mask
        if positions is None:
            positions = jnp.maximum(jnp.cumsum(mask, axis=-1) - 1, 0)
        causal = causal_padding_mask(mask)

        def attend(layer, q, k, v, carry):
            return grouped_query_attention(q, k, v, causal[:, causal.shape[1] - q.shape[1]:]), carry

        return self.run_layers(input_ids, positions, attend, None, last, inputs, remat)[0]

    def logits(self, hidden):
        return jnp.einsum("btd,dv->btv", hidden, self.out[...]).astype(jnp.float32)

    def target_logprobs(self, hidden, targets):
        logp = jax.nn.log_softmax(self.logits(hidden), axis=-1)
        return jnp.take_along_axis(logp, targets[..., None], axis=-1)[..., 0]


def _mesh():
    return sharding.build_mesh({}, devices=jax.devices()[:1])


def _batch(rng: np.random.Generator) -> TrainBatch:
    """8 rows of a 12-token pattern: the responses (last 6 tokens) get advantage +1 (supervised-like)."""
    ids = np.stack([np.tile(rng.permutation(6), 2) + 1 for _ in range(8)]).astype(np.int32)
    targets = np.concatenate([ids[:, 1:], np.zeros((8, 1), np.int32)], axis=1)
    loss_mask = np.zeros(ids.shape, np.float32)
    loss_mask[:, 5:11] = 1.0   # positions 5..10 predict the second repeat's tokens 6..11
    return TrainBatch(input_ids=ids, attention_mask=np.ones_like(ids), targets=targets, loss_mask=loss_mask,
                      old_logp=np.full(ids.shape, np.nan, np.float32), advantages=np.ones(8, np.float32))


def test_a_model_of_your_own_trains_through_the_public_train_step():
    model = ToyLM(nnx.Rngs(0))
    graphdef, params = nnx.split(model)
    tx = optax.adam(3e-2)
    spec = TrainSpec(graphdef=graphdef, tx=tx, kl_beta=0.0, aggregation="token_mean")
    state = init_train_state(params, tx)
    batch = _batch(np.random.default_rng(0))
    step = jit_train_step(spec, state, batch, _mesh())
    losses = []
    for _ in range(40):
        state, metrics = step(state, batch)
        # With advantage 1 and on-policy old log-probs the PPO gradient is the targets' log-likelihood
        # gradient; "entropy" is their mean negative log-likelihood (the loss itself is -ratio = -1).
        losses.append(float(metrics["entropy"]))
    # It starts near log(32) = 3.47, and the second half of each row repeats the first: learnable.
    assert losses[0] > 2.5 and losses[-1] < 0.5 * losses[0], losses[::8]


@pytest.mark.slow   # 20-90 s on a 2-core CPU (fast-tier budget)
def test_a_model_of_your_own_samples_through_the_public_sampler():
    model = ToyLM(nnx.Rngs(1))
    sampler = Sampler(model, tokenizer=None, mesh=_mesh())
    prompts = [[3, 1, 4, 1, 5], [2, 7]]
    completions = sampler.generate(prompts, max_new_tokens=6, strategy=Greedy(), stop_token_ids=())
    for prompt, completion in zip(prompts, completions):
        # Outside truth: greedy decoding by re-running the model's own full forward at every step.
        tokens = list(prompt)
        for _ in range(6):
            logits = model.logits(model.hidden_states(jnp.asarray([tokens], jnp.int32)))
            tokens.append(int(jnp.argmax(logits[0, -1])))
        assert list(completion.token_ids) == tokens[len(prompt):]
        expected = jax.nn.log_softmax(model.logits(model.hidden_states(jnp.asarray([tokens], jnp.int32)))[0], -1)
        wanted = [float(expected[len(prompt) - 1 + i, t]) for i, t in enumerate(completion.token_ids)]
        np.testing.assert_allclose(completion.logprobs, wanted, atol=1e-5)
