"""How the policy plays a step's episodes: group size, turns, sampling, and the slots' schedule.

Its own module so that the rollout engine (`agents.rollout`) and the conversation's rows
(`agents.conversation_rows`) both read it without importing each other.
"""

from __future__ import annotations

import dataclasses

from rlanything_jax.sampling.strategies import SamplingStrategy, make_strategy


@dataclasses.dataclass(frozen=True)
class RolloutConfig:
    group_size: int = 8               # G rollouts per task
    max_turns: int = 40
    max_new_tokens: int = 256         # per policy turn
    max_context_tokens: int = 4096    # per episode: history + next turn must fit
    temperature: float = 0.8
    top_p: float = 0.95
    top_k: int = 0
    stop_strings: tuple[str, ...] = ()
    seed: int = 0
    max_live_episodes: int = 0        # play at most this many episodes at once (0: all)
    continuous_batching: bool = True  # refill an ended episode's slot at once (else: waves of whole tasks)
    overlap_env_steps: bool = False   # two cohorts of slots: one's environments step while the other decodes

    @property
    def strategy(self) -> SamplingStrategy:
        return make_strategy(self.temperature, self.top_k, self.top_p)
