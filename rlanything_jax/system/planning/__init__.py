"""The planner's parts (`python -m rlanything_jax.plan`): architectures without weights, the run's shapes,
its programs compiled on fake devices, and the per-device memory on paper."""
