"""Seconds each model-output parser takes on hostile, huge inputs (one JSON line).

    python bench/parser_speed.py

The suite checks only that the parsers return on these inputs (tests/agents/test_parsers.py); how
long they take is measured here, where a slow machine cannot fail a test.
"""

from __future__ import annotations

import json
import time

from rlanything_jax.agents.parsers import last_boxed, parse_judgment
from rlanything_jax.scenarios.alfworld.goal_prompts import parse_goal_types
from rlanything_jax.scenarios.coding.parsers import parse_code_block, parse_generated_task, parse_unit_test
from rlanything_jax.scenarios.text_games.parsers import parse_action_index, parse_failure_summary

HUGE = ["1" * 200_000, "\\boxed{" + "1" * 200_000 + "}", "x" * 1_000_000 + "\\boxed{1}",
        "**Test Input:**" * 20_000, "```json\n{" * 20_000, '{"q": "' + "\\\"" * 100_000 + '"}',
        "\n{" * 50_000, "*" * 1_000_000, "\\boxed{" + "{" * 200_000, '{"a":' * 50_000 + "1" + "}" * 50_000]
PARSERS = {"action_index": lambda t: parse_action_index(t, 7), "judgment": parse_judgment,
           "goal_types": parse_goal_types, "failure_summary": parse_failure_summary, "code_block": parse_code_block,
           "unit_test": parse_unit_test, "generated_task": parse_generated_task, "last_boxed": last_boxed}


def main() -> None:
    seconds = {}
    for name, parser in PARSERS.items():
        start = time.perf_counter()
        for text in HUGE:
            parser(text)
        seconds[name] = round(time.perf_counter() - start, 4)
    print(json.dumps({"bench": "parser_speed", "inputs": len(HUGE), "seconds": seconds}))


if __name__ == "__main__":
    main()
