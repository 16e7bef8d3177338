"""rlanything_jax: RLAnything (policy, reward model and task pool trained together) in JAX."""

__version__ = "0.1.0"
