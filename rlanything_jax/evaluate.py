"""Evaluate a policy (and a reward model) on a split of any registered scenario's tasks.

    python -m rlanything_jax.evaluate --config=CFG [--config.KEY=VALUE ...] --split=NAME
        --policy=expert|WORKDIR[:STEP]|HF_DIR|package:NAME [--reward_model=WORKDIR[:STEP]|HF_DIR|package:NAME]
        [--rollouts=K] [--out=DIR] [--traces=N]

NAME: train, eval (held out), warm_start, or a benchmark's named split. The policy plays with the
config's evaluation settings (`eval.group_size` rollouts of `eval.max_turns` steps at
`eval.temperature`; `--rollouts` sets the rollouts), by the same code as a training run's own
evaluation (`system/evaluation.py`). `expert` plays the scenario's expert (a check of the data and the
evaluators); WORKDIR[:STEP] restores a run's checkpoint (the newest, or STEP's), built as that run
built it. With `--reward_model`, the reward model judges the played episodes: step accuracy
against the expert's labels and outcome accuracy, or unit-test accuracy and detection.

Writes DIR/eval.json and a few episode traces under DIR/traces/; prints progress lines and ends with
one JSON line: {"split": ..., "num_tasks": ..., "success_rate": ..., "pass_at_k": {...}, "per_type": {...}}.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
import tempfile
import time
from pathlib import Path

from rlanything_jax.core.validation import ConfigError
from rlanything_jax.system.config import load_config

EXPERT = "expert"
CHECKPOINTS = "checkpoints"   # run.CHECKPOINTS, without importing JAX before the arguments are read


def _log(message: str) -> None:
    print(f"[evaluate {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def parse_args(argv: list[str]) -> tuple[argparse.Namespace, list[str]]:
    parser = argparse.ArgumentParser(prog="python -m rlanything_jax.evaluate", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", required=True, help="a config file, configs/<file>.py[:variant]")
    parser.add_argument("--split", default="eval", help="train, eval, warm_start or a named split")
    parser.add_argument("--policy", required=True, help="expert, WORKDIR[:STEP], a Hugging Face dir or package:NAME")
    parser.add_argument("--reward_model", default=None, help="WORKDIR[:STEP], a Hugging Face dir or package:NAME")
    parser.add_argument("--rollouts", type=int, default=None, help="rollouts per task (default: eval.group_size)")
    parser.add_argument("--out", default=None, help="where eval.json and traces go (default: a temp dir)")
    parser.add_argument("--traces", type=int, default=3, help="episode traces written (0: none)")
    config_args = [a for a in argv if a.startswith("--config.")]
    args = parser.parse_args([a for a in argv if not a.startswith("--config.")])
    if args.rollouts is not None and args.rollouts < 1:
        parser.error("--rollouts must be a positive integer")
    return args, [a[len("--config."):] for a in config_args]


def run_of(spec: str) -> tuple[Path, int | None] | None:
    """(workdir, step) when `spec` names a run's workdir (WORKDIR or WORKDIR:STEP), else None."""
    path, _, step = spec.rpartition(":") if spec.rpartition(":")[2].isdigit() else (spec, "", "")
    if not (Path(path) / CHECKPOINTS).is_dir():
        return None
    return Path(path).resolve(), int(step) if step else None


def _load_run(cfg, workdir: Path, step: int | None):
    """A run's system rebuilt from its config with the checkpoint of `step` (the newest: None) restored."""
    from rlanything_jax.core.checkpoint import SystemCheckpointer
    from rlanything_jax.system.run import build_system, restore_state

    _compare_with_run(cfg, workdir)
    system = build_system(cfg, workdir, _log)
    checkpointer = SystemCheckpointer(workdir / CHECKPOINTS, max_to_keep=None)
    try:
        state = restore_state(system, checkpointer, system.initial_state(), step)
    finally:
        checkpointer.close()
    if state is None:
        raise FileNotFoundError(f"no readable checkpoint in {workdir / CHECKPOINTS}")
    _log(f"restored step {state.step} of {workdir}")
    return system


def _flat(tree, prefix: str = "") -> dict:
    if not isinstance(tree, dict):
        return {prefix[:-1]: tree}
    return {k: v for key, value in tree.items() for k, v in _flat(value, f"{prefix}{key}.").items()}


def _compare_with_run(cfg, workdir: Path) -> None:
    """Says which settings differ from the run's own (its config.json): the policy is rebuilt from these."""
    saved = workdir / "config.json"
    if not saved.is_file():
        return
    ours = _flat(json.loads(json.dumps(dataclasses.asdict(cfg), default=str)))
    theirs = _flat(json.loads(saved.read_text()))
    differ = sorted(k for k in ours.keys() | theirs.keys()
                    if ours.get(k) != theirs.get(k) and k not in ("config_file", "workdir"))
    if differ:
        _log(f"settings that differ from the run's ({saved}): {', '.join(differ)}")


def _sampler(cfg, role: str, spec: str):
    from rlanything_jax.system import assemble

    directory = assemble.resolve_model_dir(spec)
    meshes = assemble.build_meshes(cfg)
    model, tokenizer = assemble.load_model(cfg, role, directory, meshes.learner)
    _log(f"{role} model: {directory}")
    return assemble.sampler_for(cfg, role, model, tokenizer, meshes.sampler)


@dataclasses.dataclass(frozen=True)
class _Setup:
    """What plays the split: the scenario, its tasks, the loop's settings, the policy and its environments."""

    scenario: object
    tasks: object           # agents.scenario.TaskSets
    settings: object        # loop.LoopSettings
    policy: object          # loop.Rollouts
    runner: object = None   # the environments' runner, closed at the end (none for the expert)
    system: object = None   # run.System, when the policy is a run's checkpoint


def _setup(cfg, policy: str, policy_run, out: Path) -> _Setup:
    import importlib

    from rlanything_jax.agents.envs.runner import EnvRunner
    from rlanything_jax.agents.rollout import RolloutEngine
    from rlanything_jax.system import assemble, evaluation

    if policy_run is not None:
        system = _load_run(cfg, *policy_run)
        return _Setup(system.scenario, system.tasks, system.settings, system.services.policy, system.runner, system)
    scenario = assemble.build_scenario(cfg)
    tasks = assemble.build_tasks(cfg, scenario, out / "games")
    importlib.import_module(scenario.env_module)
    settings = assemble.loop_settings(cfg, scenario)
    if policy == EXPERT:
        if scenario.expert is None:
            raise ValueError(f"scenario {cfg.scenario!r} has no expert")
        return _Setup(scenario, tasks, settings, evaluation.ExpertRollouts(scenario))
    if scenario.runs_untrusted_code:   # the model's programs run only in the sandbox
        from rlanything_jax.agents.envs import sandbox

        sandbox.require_strong_isolation(cfg.env.allow_weak_sandbox)
    sampler = _sampler(cfg, "policy", policy)
    runner = EnvRunner(num_workers=cfg.env.workers or None, step_timeout_s=cfg.env.step_timeout_s,
                       env_modules=(scenario.env_module,))
    return _Setup(scenario, tasks, settings, RolloutEngine(sampler, runner, scenario.prompts), runner)


def evaluate(args: argparse.Namespace, overrides: list[str]) -> dict:
    """Plays the split, judges it when asked, writes eval.json and traces; returns what eval.json holds."""
    from rlanything_jax.agents.trajectory import JudgedEpisode
    from rlanything_jax.system import assemble, evaluation, traces
    from rlanything_jax.system.run import evaluate_split

    if args.rollouts is not None:
        overrides = [*overrides, f"eval.group_size={args.rollouts}"]
    policy_run = None if args.policy == EXPERT else run_of(args.policy)
    if policy_run is not None:
        overrides = [*overrides, f"workdir={policy_run[0]}"]
    elif args.policy != EXPERT:
        overrides = [*overrides, f"model.policy.path={args.policy}"]
    cfg = load_config(args.config, overrides)
    out = Path(args.out or tempfile.mkdtemp(prefix="rlanything_eval_")).resolve()
    out.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    setup = _setup(cfg, args.policy, policy_run, out)
    scenario = setup.scenario
    try:
        split = setup.tasks.split(args.split)
        if not split:
            raise ValueError(f"split {args.split!r} has no tasks")
        rollout = assemble.eval_rollout(cfg, setup.settings)
        _log(f"{cfg.scenario} split {args.split}: {len(split)} tasks x {rollout.group_size} rollouts, "
             f"{rollout.max_turns} steps at temperature {rollout.temperature}; policy {args.policy}")
        if setup.system is not None:   # exactly as the run evaluates
            episodes, report = evaluate_split(setup.system, split, _log)
        else:
            episodes, report = evaluation.held_out(setup.policy, split, rollout, assemble.eval_seed(cfg),
                                                   assemble.eval_tasks_per_call(cfg), _log)
        judged = [JudgedEpisode(e) for e in episodes]
        if args.reward_model is not None:
            same_run = setup.system if policy_run == run_of(args.reward_model) else None
            labeler = scenario.expert.step_label if scenario.expert is not None else None   # for per-step judgments
            judged, report["reward_model"] = evaluation.reward_model_report(
                episodes, _reward_model(cfg, args.reward_model, same_run, scenario),
                setup.settings.judge, cfg.seed, labeler)
    finally:
        if setup.runner is not None:
            setup.runner.close()
    result = {"split": args.split, "scenario": cfg.scenario, "policy": args.policy,
              "reward_model_source": args.reward_model, "rollouts": rollout.group_size, "max_turns": rollout.max_turns,
              "temperature": rollout.temperature, **report, "seconds": round(time.perf_counter() - started, 1)}
    (out / "eval.json").write_text(json.dumps(result, indent=2) + "\n")
    if args.traces:
        traces.write_step_traces(judged, args.traces, out / "traces")
    _log(f"wrote {out / 'eval.json'}")
    return result


def _reward_model(cfg, spec: str, system, scenario):
    """The reward model `spec` names, as the loop uses it (its sampler in the scenario's role); `system`:
    the policy's run when `spec` names the same run and step."""
    from rlanything_jax.agents.reward_models import RewardModel
    from rlanything_jax.system.assemble import reward_model_role

    reward_run = run_of(spec)
    if reward_run is not None:
        if system is None:   # not the policy's run and step: its own
            system = _load_run(dataclasses.replace(cfg, workdir=str(reward_run[0])), *reward_run)
            system.runner.close()   # the reward model judges and writes tests without environments
        sampler = system.samplers["reward"]
    else:
        sampler = _sampler(cfg, "reward", spec)
    return RewardModel(reward_model_role(cfg, scenario), sampler)


def main(argv: list[str] | None = None) -> int:
    args, overrides = parse_args(sys.argv[1:] if argv is None else list(argv))
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from rlanything_jax.agents.envs.sandbox import SandboxUnavailable
    from rlanything_jax.system.loop import EnvironmentFailure
    from rlanything_jax.system.run import RunError

    try:
        result = evaluate(args, overrides)
    except (ConfigError, ValueError, KeyError, FileNotFoundError, SandboxUnavailable, RunError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    except EnvironmentFailure as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    summary = {k: result[k] for k in ("split", "num_tasks", "episodes", "success_rate", "pass_at_k", "per_type")}
    if "reward_model" in result:
        summary["reward_model"] = result["reward_model"]
    print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
