"""Images in your own JAX stack: a toy vision-language model that is not Qwen3-VL, written against
`interfaces.VisionLM` in a few lines, is trained by the public train phase (its vision part trained, or frozen
and left bit-identical) and sampled by the public KV-cache `Sampler`, where its image changes what it writes.

Its image is a vector of PIX pixels, one pad token stands for it, and a linear "eye" turns it into the
embedding that replaces the pad. Nothing from `envs`, `agents` or `scenarios` is imported, nor any model family.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from rlanything_jax.core.interfaces import ModelInputs
from rlanything_jax.core.rl.data import Example
from rlanything_jax.core.rl.phase import Learner, train_phase
from rlanything_jax.core.rl.vision import ImageTraining
from rlanything_jax.core.sampling.sampler import Sampler
from rlanything_jax.core.sampling.strategies import Greedy
from tests.test_own_model import DIM, ToyLM, _mesh

PIX, IMAGE, EOS = 6, 31, 2   # pixels per image, the image pad token, the end token


@dataclasses.dataclass(frozen=True)
class ToyImages:
    """The toy's `interfaces.ImageInputs`: an image is its pixel vector; row inputs are {"pixels" [B, K, PIX]}."""

    image_token_id: int = IMAGE

    def encode(self, image):
        return np.asarray(image, np.float32).reshape(PIX)

    def token_count(self, image):
        return 1

    def expand(self, token_ids, images):
        return list(token_ids)

    def batch_inputs(self, input_ids, attention_mask, images):
        pixels = np.zeros((input_ids.shape[0], max(1, max(map(len, images))), PIX), np.float32)
        for row, row_images in enumerate(images):
            pixels[row, :len(row_images)] = row_images
        return {"pixels": pixels}

    def tower_input(self, image):
        return image

    def prompt_inputs(self, features, input_ids, valid, next_positions, images):
        return ModelInputs(embeddings=jnp.stack(features), placeholder=jnp.asarray((input_ids == IMAGE) & (valid > 0)))


def _in_order(values, mask):
    """values [B, K, E] (row b's pads take row b's, in order) or [N, E] (row-major over the batch) at each pad."""
    if values.ndim == 3:
        return jnp.take_along_axis(values, jnp.maximum(jnp.cumsum(mask, axis=1) - 1, 0)[..., None], axis=1)
    return values[jnp.maximum(jnp.cumsum(mask.reshape(-1)) - 1, 0).reshape(mask.shape)]


class ToyVLM(ToyLM):
    """`ToyLM` whose image pads take the eye's embedding of their image."""

    image_inputs = ToyImages()
    vision_params = ("eye",)

    def __init__(self, rngs: nnx.Rngs):
        super().__init__(rngs)
        self.eye = nnx.Param(jax.nn.initializers.normal(1.0)(rngs.params(), (PIX, DIM)), logical_axes=(None, "embed"))

    def encode_image(self, pixels):
        return pixels @ self.eye[...]

    def batch_model_inputs(self, input_ids, row_inputs, remat="none"):
        features = row_inputs["features"] if "features" in row_inputs else self.encode_image(row_inputs["pixels"])
        return ModelInputs(embeddings=features, placeholder=input_ids == IMAGE)

    def with_image_features(self, row_inputs):
        if "features" in row_inputs:
            return row_inputs
        return {"features": jax.lax.stop_gradient(self.encode_image(row_inputs["pixels"]))}

    def run_layers(self, input_ids, positions, attend, carry, last=None, inputs=None, remat="none"):
        x = self.embed[...][input_ids]
        if inputs is not None and inputs.embeddings is not None:   # the pads take their images' embeddings
            x = jnp.where(inputs.placeholder[..., None], _in_order(inputs.embeddings, inputs.placeholder), x)
        return self.run_embedded(x, positions, attend, carry, last)


TRAIN = {"learning_rate": 3e-2, "updates_per_step": 1, "micro_batch_size": 4, "max_prompt_tokens": 16,
         "max_response_tokens": 8, "kl_beta": 0.0}


def _examples() -> list[Example]:
    """8 prompts [1, IMAGE, 3] whose answer (token 10 or 11) is the class of their image's pixels."""
    rng = np.random.default_rng(0)
    return [Example([1, IMAGE, 3], [10 + i % 2, EOS], 1.0, [-1.0, -1.0],
                    images=[ToyImages().encode((2 * (i % 2) - 1) + 0.1 * rng.standard_normal(PIX))])
            for i in range(8)]


@pytest.mark.parametrize("frozen", [False, True])
def test_a_vision_model_of_your_own_trains_through_the_public_train_phase(frozen):
    model = ToyVLM(nnx.Rngs(0))
    graphdef, params = nnx.split(model)
    before = jax.tree.map(np.array, params)
    learner = Learner(graphdef=graphdef, train_config=TRAIN, mesh=_mesh(), eos_id=EOS, pad_id=0,
                      images=ImageTraining.of(model, freeze_vision=frozen))
    state, phase = train_phase(learner, learner.fresh_state(params), _examples(), seed=0)
    assert phase["policy/updates"] == 1 and np.isfinite(phase["policy/loss"])

    def changed(name):
        return not np.array_equal(np.asarray(before[name][...]), np.asarray(state.params[name][...]))

    assert changed("eye") is not frozen   # frozen: the vision parameters stay bit-identical
    assert changed("qkv") and changed("embed")
    # Frozen: the step read the images' features computed outside it (one vision pass, no gradient).
    assert any(key[0] == "vision_features" for key in learner.compiled) is frozen


@pytest.mark.slow   # compiles the sampler's prefill, decode and vision programs
def test_a_vision_model_of_your_own_samples_through_the_public_sampler():
    model = ToyVLM(nnx.Rngs(1))
    sampler = Sampler(model, tokenizer=None, mesh=_mesh())
    rng = np.random.default_rng(1)
    images = [ToyImages().encode(rng.standard_normal(PIX)) for _ in range(2)]
    prompt = [3, IMAGE, 4, 1]
    completions = sampler.generate([prompt, prompt], max_new_tokens=5, strategy=Greedy(), stop_token_ids=(),
                                   images=[[images[0]], [images[1]]])
    for image, completion in zip(images, completions):
        # Outside truth: greedy decoding by re-running the model's own full forward with the image at every step.
        tokens = list(prompt)
        for _ in range(5):
            ids = jnp.asarray([tokens], jnp.int32)
            inputs = ModelInputs(embeddings=model.encode_image(jnp.asarray(image))[None], placeholder=ids == IMAGE)
            tokens.append(int(jnp.argmax(model.logits(model.hidden_states(ids, inputs=inputs))[0, -1])))
        assert list(completion.token_ids) == tokens[len(prompt):]
    # The same tokens with another image: another distribution over the first answer token.
    assert abs(completions[0].logprobs[0] - completions[1].logprobs[0]) > 1e-3 or \
        completions[0].token_ids[0] != completions[1].token_ids[0]
    assert sampler.compilations["vision"] == 1   # one vision program for the one image shape
