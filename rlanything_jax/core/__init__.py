"""The core: what another JAX stack imports. Models (`models/`), the sampler (`sampling/`), the RL math and
the pure train step (`rl/`), and their leaves: the model protocols (`interfaces`), shardings and meshes,
multi-process helpers, checkpoints, config errors, seeds, progress lines and stage counts. The core knows
nothing of agents, environments, scenarios or the loop (tests/test_layers.py)."""
