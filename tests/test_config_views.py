"""One name and one default per key: the records the agents and the loop read (`RolloutConfig`, `JudgeConfig`,
`SignalConfig`, `LoopSettings`) hold the config sections' keys under the same names, with the same defaults,
and `assemble`'s views copy them unrenamed."""

import dataclasses
from pathlib import Path

import pytest

from rlanything_jax.agents.examples import SignalConfig
from rlanything_jax.agents.judging import JudgeConfig
from rlanything_jax.agents.rollout_config import RolloutConfig
from rlanything_jax.agents.scenario import GeneratorContext
from rlanything_jax.core.rl.train_config import TrainConfig
from rlanything_jax.system import assemble
from rlanything_jax.system.config import Ablation, load_config
from rlanything_jax.system.config_sections import CurriculumConfig, RewardConfig, RolloutSection, TrainSection
from rlanything_jax.system.loop import LoopSettings

ROOT = Path(__file__).resolve().parent.parent

# Each record and the config sections its keys come from.
SOURCES = [(RolloutConfig, RolloutSection), (JudgeConfig, RewardConfig), (SignalConfig, RewardConfig),
           (SignalConfig, TrainSection), (LoopSettings, RolloutSection), (LoopSettings, CurriculumConfig),
           (LoopSettings, TrainSection), (LoopSettings, Ablation), (LoopSettings, TrainConfig),
           (GeneratorContext, CurriculumConfig)]


def _default(field: dataclasses.Field):
    if field.default_factory is not dataclasses.MISSING:
        return field.default_factory()
    return field.default


@pytest.mark.parametrize("record, section", SOURCES, ids=lambda c: c.__name__)
def test_a_record_and_its_section_share_every_default(record, section):
    defaults = {f.name: _default(f) for f in dataclasses.fields(section)}
    shared = [f for f in dataclasses.fields(record) if f.name in defaults]
    assert shared
    for field in shared:   # no default, or the config's
        assert _default(field) in (dataclasses.MISSING, defaults[field.name]), f"{record.__name__}.{field.name}"


def test_the_views_copy_the_config_unrenamed():
    cfg = load_config(str(ROOT / "configs/default.py:smoke"), [
        "rollout.max_prompt_tokens=1000", "rollout.top_k=5", "rollout.stop_strings=('</a>',)",
        "reward.max_new_tokens=123", "reward.temperature=0.5", "reward.band_low=0.3",
        "train.policy_acc_low=0.25", "curriculum.harder_at=0.7"])
    settings = assemble.loop_settings(cfg, assemble.build_scenario(cfg))
    for view, section in [(settings.rollout, cfg.rollout), (settings.judge, cfg.reward), (settings.signal, cfg.reward),
                          (settings.signal, cfg.train), (settings, cfg.rollout), (settings, cfg.curriculum)]:
        names = {f.name for f in dataclasses.fields(view)} & {f.name for f in dataclasses.fields(section)}
        for name in names - {"continuous_batching"}:   # the section's "auto", resolved for the platform
            assert getattr(view, name) == getattr(section, name), name
    assert (settings.rollout.max_prompt_tokens, settings.judge.max_new_tokens) == (1000, 123)


def test_a_key_in_two_sections_is_an_error():
    @dataclasses.dataclass(frozen=True)
    class Both:
        temperature: float

    with pytest.raises(ValueError, match="temperature"):
        assemble.view(Both, RolloutSection(), RewardConfig())
