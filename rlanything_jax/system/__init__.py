"""The system that runs a loop: the config (`config`, `config_sections`), building a run from it
(`assemble`), one RL step (`loop`), the run around it (`run`: restore or warm start, evaluate, checkpoint,
metrics), held-out evaluation, traces, trackers, placement, exporting models and the planner's estimates
(`planning/`). It may import every layer below it: the core, the agent side and the scenarios."""
