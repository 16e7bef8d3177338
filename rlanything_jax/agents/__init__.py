"""The agent side: scenario-free machinery between the core and the scenarios. Episode records
(`trajectory`), the rollout engine (`rollout`, `rollout_config`, `conversation_rows`, `prompt_tokens`),
judging and training examples (`judging`, `examples`), the scenario protocol (`scenario`), expert examples
and SFT (`sft`), the reward model's roles (`reward_models/`), the task pool and its adaptation
(`curriculum/`) and environments with their worker processes and sandbox (`envs/`). It imports only the
core and itself (tests/test_layers.py)."""
