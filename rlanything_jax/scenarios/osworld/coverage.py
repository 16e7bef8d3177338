"""How much of an OSWorld task list this project can set up and score (`tasks.unsupported_parts`).

    python -m rlanything_jax.scenarios.osworld.coverage --task_dir=evaluation_examples --list=train_nochrome.json

prints, per domain, how many listed tasks have every setup step, getter and metric implemented (all
tasks, and the feasible ones: an infeasible task is scored on the agent's FAIL alone), then the parts
that block the rest (with how many tasks each blocks), and ends with one JSON line of the same figures.
A listed task whose file is missing or malformed counts as unsupported ("missing task file").
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from collections import Counter
from collections.abc import Sequence

from rlanything_jax.scenarios.osworld.task_lists import EXAMPLE_FOLDERS, ListedTasks, load_listed_tasks
from rlanything_jax.scenarios.osworld.tasks import TaskFormatError, unsupported_parts

MISSING = "missing task file"


@dataclasses.dataclass(frozen=True)
class DomainCoverage:
    tasks: int = 0
    supported: int = 0
    feasible: int = 0
    feasible_supported: int = 0

    def add(self, supported: bool, feasible: bool) -> DomainCoverage:
        return DomainCoverage(self.tasks + 1, self.supported + supported, self.feasible + feasible,
                              self.feasible_supported + (supported and feasible))


@dataclasses.dataclass(frozen=True)
class Coverage:
    domains: dict[str, DomainCoverage]
    blocking: dict[str, int]            # part -> how many listed tasks it blocks, most first
    blocked_tasks: dict[str, list[str]]  # "domain/id" -> its unsupported parts

    @property
    def total(self) -> DomainCoverage:
        fields = [sum(getattr(d, f.name) for d in self.domains.values()) for f in dataclasses.fields(DomainCoverage)]
        return DomainCoverage(*fields)


def measure(listed: ListedTasks) -> Coverage:
    """Coverage of the tasks a list names (its missing files included, as unsupported)."""
    domains: dict[str, DomainCoverage] = {}
    blocked: dict[str, list[str]] = {}
    for item in listed.tasks:
        parts = unsupported_parts(item.task)
        feasible = item.task.evaluator.get("func") != "infeasible"
        domains[item.domain] = domains.get(item.domain, DomainCoverage()).add(not parts, feasible)
        if parts:
            blocked[f"{item.domain}/{item.task.task_id}"] = parts
    for key in listed.problems:
        domain = key.split("/", 1)[0]
        domains[domain] = domains.get(domain, DomainCoverage()).add(False, True)
        blocked[key] = [MISSING]
    counts = Counter(part for parts in blocked.values() for part in parts)
    return Coverage(domains, dict(sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))), blocked)


def _fraction(part: int, whole: int) -> str:
    return f"{part}/{whole} ({100 * part / whole:.0f}%)" if whole else "0/0"


def report_lines(coverage: Coverage, list_name: str, top: int = 25) -> list[str]:
    """The human-readable report (the JSON line is `summary`)."""
    lines = [f"{list_name}: tasks with every setup step, getter and metric supported",
             f"  {'domain':<22} {'all':<16} feasible"]
    for name, domain in [*sorted(coverage.domains.items()), ("all", coverage.total)]:
        lines.append(f"  {name:<22} {_fraction(domain.supported, domain.tasks):<16} "
                     f"{_fraction(domain.feasible_supported, domain.feasible)}")
    if coverage.blocking:
        lines.append("blocking parts (tasks blocked):")
        lines += [f"  {count:4d}  {part}" for part, count in list(coverage.blocking.items())[:top]]
        if len(coverage.blocking) > top:
            lines.append(f"  ... and {len(coverage.blocking) - top} more")
    return lines


def summary(coverage: Coverage, list_name: str) -> dict:
    total = coverage.total
    return {"list": list_name, **dataclasses.asdict(total),
            "domains": {name: dataclasses.asdict(d) for name, d in sorted(coverage.domains.items())},
            "blocking": coverage.blocking}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--task_dir", required=True, help="OSWorld's evaluation_examples (lists and task folders)")
    parser.add_argument("--list", dest="task_list", required=True,
                        help="a task list: a file of task_dir (train_nochrome.json, test_all.json) or a path")
    parser.add_argument("--examples", default="examples", choices=EXAMPLE_FOLDERS, help="the task files' folder")
    parser.add_argument("--domains", default="", help="comma-separated domains of the list (default: all)")
    parser.add_argument("--top", type=int, default=25, help="how many blocking parts to print")
    args = parser.parse_args(argv)
    domains = [d.strip() for d in args.domains.split(",") if d.strip()]
    try:
        listed = load_listed_tasks(args.task_dir, args.task_list, args.examples, domains)
    except TaskFormatError as error:
        print(f"coverage: {error}", file=sys.stderr)
        return 2
    coverage = measure(listed)
    print("\n".join(report_lines(coverage, args.task_list, args.top)))
    print(json.dumps(summary(coverage, args.task_list)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
