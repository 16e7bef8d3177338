"""OSWorld-format desktop tasks (reference: configs/osworld_rl.yaml): not available yet.

The OSWorld scenario (a Qwen3-VL policy and reward model on Ubuntu desktops) needs the
vision-language model and the desktop environment; until they land this file stops with
a one-line message instead of a half-working run.
"""

from rlanything_jax.validation import ConfigError


def get_config(variant: str = "paper"):
    raise ConfigError("scenario", "the OSWorld desktop scenario is not implemented yet; use configs/alfworld.py, "
                      "configs/coding.py or configs/default.py", "osworld")
