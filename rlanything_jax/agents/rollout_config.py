"""How the policy plays a step's episodes: group size, turns, sampling, and the slots' schedule.

Its own module so that the rollout engine (`agents.rollout`) and the conversation's rows
(`agents.conversation_rows`) both read it without importing each other.
"""

from __future__ import annotations

import dataclasses

from rlanything_jax.core.sampling.strategies import SamplingStrategy, make_strategy


# The config's `rollout` keys that playing reads, under their names in the config file and with its defaults
# (`config_sections.RolloutSection`, a test holds them equal); `assemble.rollout_config` builds one from a run's
# config. Its own record, not the section, so that the agents import nothing of the config.
@dataclasses.dataclass(frozen=True, kw_only=True)
class RolloutConfig:
    group_size: int = 8               # G rollouts per task
    max_turns: int = 40
    temperature: float = 0.8
    top_p: float = 0.95
    top_k: int = 0
    max_new_tokens: int = 2000        # per policy turn
    max_prompt_tokens: int = 2048     # an episode ends when its history and next response no longer fit
    max_live_episodes: int = 0        # play at most this many episodes at once (0: all)
    # Refill an ended episode's slot at once (else: waves of whole tasks). No default: the section's "auto"
    # is resolved for the platform (`RolloutSection.refills_episodes`).
    continuous_batching: bool
    overlap_env_steps: bool = False   # two cohorts of slots: one's environments step while the other decodes
    stop_strings: tuple[str, ...] = ()

    @property
    def strategy(self) -> SamplingStrategy:
        return make_strategy(self.temperature, self.top_k, self.top_p)
