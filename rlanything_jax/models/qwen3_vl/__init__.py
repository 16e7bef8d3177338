"""Qwen3-VL: the vision-language model of the desktop (OSWorld) scenario, on the project's Qwen3 decoder."""
