"""The embedded CPU default: the whole RLAnything loop on a 2-core machine in about 10 minutes.

`python -m rlanything_jax.main` uses this file when --config is not given. A policy
and a reward model (small decoders with a BPE tokenizer, built by the run from its
own game text) are warm-started on 96 expert games, then trained together for 10
RLAnything steps on generated ALFWorld pick-and-place games while the procedural
generator rewrites tasks that are too easy or too hard. Held-out success is
measured on 48 unseen games before, during and after RL. Variants: `cpu` (that run),
`smoke` (2 tiny steps in about a minute).
"""

from configs import alfworld, common


def get_config(variant: str = "cpu"):
    common.check_variant("configs/default.py", variant, ("cpu", "smoke"))
    if variant == "smoke":
        cfg = alfworld.get_config("smoke")
    else:
        cfg = common.base_config("alfworld")
        alfworld.scratch_run(cfg)
    cfg.workdir = "runs/default" if variant == "cpu" else "runs/default_smoke"
    return cfg
