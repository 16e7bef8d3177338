"""The paper's Table 1 / Fig. 1 ablations: the same run with components switched off, over seeds.

    python -m rlanything_jax.experiments.ablation --config=configs/default.py --seeds 3

Rows: outcome_only (GRPO-style), fixed_reward_model (policy on integrated rewards from an
untrained RM), policy_reward (+ RM training), rlanything (+ environment adaptation) and
step_only (optimised step-wise reward without the outcome). Each (row, seed) is an
ordinary run in `<workdir>/ablation/<row>/seed<k>`, so an interrupted ablation resumes
where it stopped. The rows of one seed start from the same warm start: it runs once, in
`<workdir>/ablation/warm_start/seed<k>` (a run of 0 RL steps), and each row's run starts
from a copy of it, so the rows differ only in their RL steps (and an ablation of 5 rows
costs one warm start per seed, not five). Writes `ablation.md` (mean and spread per row)
and `ablation.png`, also after every run; `--report_only` writes them from the runs that
have finished, without running anything.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import shutil
import statistics
import sys
from pathlib import Path

from rlanything_jax.core.validation import ConfigError
from rlanything_jax.main import parse_args
from rlanything_jax.system.config import ABLATIONS, load_config

COLUMNS = (("held_out_success_start", "held-out success (start)"), ("held_out_success_end", "held-out success (end)"),
           # The fixed probe of expert-labelled held-out steps (agents/reward_models/probe.py): after the warm
           # start and at the end.
           ("reward_model/probe_step_accuracy_first", "RM probe step acc (start)"),
           ("reward_model/probe_step_accuracy_last", "RM probe step acc (end)"),
           # On each step's own rollouts, which move with the policy.
           ("reward_model/step_accuracy_last", "RM step acc on rollouts (end)"),
           ("reward_model/outcome_accuracy_last", "RM outcome acc"), ("accepted_tasks", "accepted tasks"),
           # The share of the policy's step advantages whose sign the judgments set (examples.judgment_sway).
           ("judgment_sign_changes_share", "policy steps signed by the judgments"))


def _cell(values: list[float | None], form: str = ".3f") -> str:
    """Mean ± population spread over seeds; one seed's value alone (it has no spread)."""
    present = [v for v in values if v is not None]
    if not present:
        return "-"
    if len(present) == 1:
        return format(present[0], form)
    return f"{format(statistics.mean(present), form)} ± {format(statistics.pstdev(present), form.lstrip('+'))}"


def _gain_points(run: dict) -> float | None:
    start, end = run.get("held_out_success_start"), run.get("held_out_success_end")
    return None if start is None or end is None else 100 * (end - start)


def ablation_table(summaries: dict[str, list[dict]]) -> str:
    lines = ["| row | seeds | held-out gain (points) | " + " | ".join(title for _, title in COLUMNS) + " |",
             "|---|---|---|" + "---|" * len(COLUMNS)]
    for row, runs in summaries.items():
        seeds = ", ".join(str(r["seed"]) for r in runs if "seed" in r) or str(len(runs))
        cells = [seeds, _cell([_gain_points(r) for r in runs], "+.1f")]
        cells += [_cell([r.get(key) for r in runs]) for key, _ in COLUMNS]
        lines.append(f"| {row} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def plot_ablation(summaries: dict[str, list[dict]], out_path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(COLUMNS), figsize=(4 * len(COLUMNS), 3.4))
    rows = list(summaries)
    for ax, (key, title) in zip(axes, COLUMNS):
        means = [statistics.mean([r[key] for r in summaries[row] if r.get(key) is not None] or [0.0])
                 for row in rows]
        ax.bar(range(len(rows)), means)
        ax.set_xticks(range(len(rows)), rows, rotation=45, ha="right", fontsize=8)
        ax.set_title(title, fontsize=9)
    fig.tight_layout()
    fig.savefig(out_path, dpi=100)
    plt.close(fig)


# What a row's run copies from its seed's warm start: the games, the built models and the
# step-0 checkpoint and metrics line (held-out success of the warm-started policy).
_SHARED = ("games", "models", "checkpoints", "metrics.jsonl")


def start_from_warm_start(warm_dir: Path, row_dir: Path) -> None:
    """Seeds a row's workdir with its seed's warm start; a row already started is left as it is."""
    if row_dir.exists():
        return
    staging = row_dir.with_name(row_dir.name + ".copying")
    shutil.rmtree(staging, ignore_errors=True)
    for name in _SHARED:
        source = warm_dir / name
        if source.is_dir():
            shutil.copytree(source, staging / name)
        elif source.exists():
            staging.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, staging / name)
    staging.rename(row_dir)  # all or nothing: a copy cut short is redone


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seeds", type=int, default=3, help="seeds per row")
    parser.add_argument("--rows", default=",".join(ABLATIONS), help="comma-separated ablation rows to run")
    parser.add_argument("--report_only", action="store_true",
                        help="write the table and plot from the runs that have finished; run nothing")
    args, config_args = parser.parse_known_args(argv)
    rows = [row for row in args.rows.split(",") if row]
    try:
        spec, overrides, _ = parse_args(config_args)
        base = load_config(spec, overrides)
        unknown = [row for row in rows if row not in ABLATIONS]
        if unknown:
            raise ConfigError("ablation", f"unknown row; rows: {', '.join(ABLATIONS)}", unknown[0])
    except (ConfigError, ValueError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    from rlanything_jax.system.run import run_rl

    root = Path(base.workdir) / "ablation"
    summaries: dict[str, list[dict]] = {}
    for row in rows:
        for seed_index in range(args.seeds):
            cfg = dataclasses.replace(base, ablation=row, seed=base.seed + seed_index,
                                      workdir=str(root / row / f"seed{seed_index}"))
            if args.report_only:
                finished = _finished_summary(Path(cfg.workdir), cfg.loop.total_steps)
                if finished is not None:
                    summaries.setdefault(row, []).append(finished)
                continue
            if cfg.warm_start.enabled:
                # The warm start does not read the row: one 0-step run per seed, copied into every row.
                warm = dataclasses.replace(cfg, ablation="rlanything",
                                           loop=dataclasses.replace(cfg.loop, total_steps=0),
                                           workdir=str(root / "warm_start" / f"seed{seed_index}"))
                if not (Path(warm.workdir) / "summary.json").exists():  # written when it has finished
                    print(f"[ablation] warm start, seed {cfg.seed}: {warm.workdir}", flush=True)
                    run_rl(warm, log=lambda m: print(f"[warm start] {m}", flush=True))
                start_from_warm_start(Path(warm.workdir), Path(cfg.workdir))
            print(f"[ablation] {row}, seed {cfg.seed}: {cfg.workdir}", flush=True)
            summaries.setdefault(row, []).append(run_rl(cfg, log=lambda m, row=row: print(f"[{row}] {m}", flush=True)))
            _report(root, summaries, final=False)  # the table so far: an ablation cut short still has one
    if not summaries:
        print(f"error: no finished runs under {root}", file=sys.stderr)
        return 1
    _report(root, summaries, final=True)
    return 0


def _finished_summary(workdir: Path, total_steps: int) -> dict | None:
    """A run's summary.json when it has run all its steps (a run writes it when it finishes)."""
    path = workdir / "summary.json"
    if not path.exists():
        return None
    summary = json.loads(path.read_text())
    return summary if summary.get("steps") == total_steps else None


def _report(root: Path, summaries: dict[str, list[dict]], final: bool) -> None:
    root.mkdir(parents=True, exist_ok=True)
    table = ablation_table(summaries)
    (root / "ablation.md").write_text(table)
    (root / "ablation.json").write_text(json.dumps(summaries, indent=2) + "\n")
    plot_ablation(summaries, root / "ablation.png")
    if final:
        print(table)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
