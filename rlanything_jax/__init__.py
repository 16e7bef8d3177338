"""rlanything_jax: RLAnything (policy, reward model and task pool trained together) in JAX.

The package's folders are its layers, each importing only from those below it (tests/test_layers.py):

    core/       models, sampler, RL math and train step, shardings, checkpoints   (what other stacks import)
    agents/     rollouts, judging, examples, reward-model roles, task pool, environments (no scenario named)
    scenarios/  one package per scenario (text games, coding, desktops), each registered by name
    system/     config, assembling a run, the RL step, the run loop, evaluation, metrics

The modules beside them are the command line: `python -m rlanything_jax.main` (the run), `evaluate`, `play`,
`generate`, `convert`, `export`, `plan` and `experiments.ablation`.
"""

__version__ = "0.1.0"
