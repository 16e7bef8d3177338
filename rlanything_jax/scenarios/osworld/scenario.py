"""The OSWorld scenario: a vision-language policy on desktop tasks, a reward model that sees the
screenshots before and after each step, and a task pool rewritten by difficulty (ALGORITHM.md 5.1).

Tasks are OSWorld task JSON: the bundled offline set (`bundled_tasks`, with scripted experts and
difficulty knobs) or a directory of OSWorld / RLAnything files (`task_dir`). Desktops are local
sessions (`provider="local"`) or OSWorld VM servers (`provider="remote"`, `endpoints`).
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

from rlanything_jax.agents.curriculum.generators import EnvironmentModel, GeneratorChain
from rlanything_jax.agents.envs.base import TASK_GROUP, Task
from rlanything_jax.agents.scenario import GeneratorContext, TaskCounts, TaskSets
from rlanything_jax.core import validation
from rlanything_jax.core.validation import ConfigError
from rlanything_jax.scenarios import register_scenario
from rlanything_jax.scenarios.osworld import env as desktop_env
from rlanything_jax.scenarios.osworld.agent_prompts import PAPER_MAX_PIXELS, DesktopAgentPrompts
from rlanything_jax.scenarios.osworld.bundled_tasks import bundled_tasks
from rlanything_jax.scenarios.osworld.endpoint import VmEndpoint, split_endpoints
from rlanything_jax.scenarios.osworld.expert import DesktopExpert
from rlanything_jax.scenarios.osworld.generators import EvaluatorRewriteGenerator, KnobGenerator
from rlanything_jax.scenarios.osworld.judge_prompts import DesktopJudgePrompts
from rlanything_jax.scenarios.osworld.task_families import FAMILIES
from rlanything_jax.scenarios.osworld.task_lists import EXAMPLE_FOLDERS, interleave_domains, load_listed_tasks
from rlanything_jax.scenarios.osworld.tasks import TaskFormatError, load_task_dir, task_from_json, unsupported_parts

NAME = "osworld"
PROVIDERS = ("remote", "local", "docker")
NEEDS_DESKTOPS = (
    "The OSWorld scenario needs desktops and model weights, and this config names no desktops to use. Provide "
    "(1) OSWorld VM servers, any provider that exposes OSWorld's server: "
    "--config.tasks.endpoints=HOST:PORT[,HOST:PORT...], or local desktop sessions on this machine (bubblewrap, "
    "Xvfb, openbox; see the README): --config.tasks.provider=local; and (2) local Hugging Face directories of "
    "the models: --config.model.policy.path=/path/to/Qwen3-VL-8B-Thinking "
    "--config.model.reward.path=/path/to/Qwen3-VL-8B-Thinking --config.model.environment.path=/path/to/Qwen3-8B. "
    "To try the whole loop without either, run configs/osworld.py:cpu.")

NEEDS_RESET = (
    "OSWorld VMs keep one episode's state into the next, so each is reverted to its snapshot before every "
    "episode: give the command that does it, run on this host with {endpoint}, {host} and {port} replaced, "
    "e.g. --config.tasks.reset_command='virsh snapshot-revert osworld-{port} clean' (exit status 0: reverted; "
    "the run then waits tasks.reset_wait_s). If something else reverts them, say so with "
    "--config.tasks.reset_command=true.")


@dataclasses.dataclass(frozen=True)
class OsWorldOptions:
    """The `tasks` section of an OSWorld config."""

    # "remote": OSWorld VM servers at `endpoints`; "local": local desktop sessions; "docker": OSWorld's Docker
    # provider, a fresh container over `vm_path` (OSWorld's Ubuntu.qcow2) for every episode (`providers.DockerVm`)
    provider: str = "remote"
    vm_path: str = ""
    endpoints: str = ""             # comma-separated host:port of OSWorld servers
    task_dir: str = ""              # OSWorld task JSON (train/ and heldout/ below it, or one folder); "": bundled
    # OSWorld's task lists in task_dir (`task_lists`): {domain: [id, ...]} files such as train_nochrome.json or
    # test_all.json, over <task_dir>/<examples>/<domain>/<id>.json. Training plays `task_list` from `examples`;
    # evaluation plays `eval_task_list` ("": the training list, the reference's protocol) from `eval_examples`.
    task_list: str = ""
    examples: str = "new_examples"  # RLAnything's co-evolved variants of the listed ids
    eval_task_list: str = ""
    eval_examples: str = "examples"  # OSWorld's own task files
    domains: str = ""               # comma-separated domains of the lists to use; "": all
    families: str = ""              # comma-separated bundled task families to use (`task_families`); "": all
    screen_width: int = 1920
    screen_height: int = 1080
    max_steps: int = 30             # desktop steps per episode (the evaluator runs after the last)
    settle_s: float = 1.0           # wait after an action before the screenshot
    max_pixels: int = PAPER_MAX_PIXELS   # the agent's screenshot resize cap (smart_resize, factor 32)
    image_history: int = 3          # screenshots in the policy's prompt (max_image_history_length)
    runtime_root: str = desktop_env.DEFAULT_RUNTIME_ROOT
    # Files tasks read (download inputs, cloud_file gold files): <cache_root>/<task id>/..., filled by
    # `python -m rlanything_jax.scenarios.osworld.cache`; episodes never download.
    cache_root: str = "cache"
    # VM servers are reverted before every episode (`providers`): a shell line run on this host, with {endpoint},
    # {host} and {port} replaced (e.g. a hypervisor's snapshot revert); "true" if something else reverts them.
    reset_command: str = ""
    reset_wait_s: float = 60.0      # after a revert, for the VM to come up (the reference's wait)
    evaluate_wait_s: float = 20.0   # before the evaluator runs on a VM (the reference's wait)

    def __post_init__(self):
        validation.one_of("provider", self.provider, PROVIDERS)
        for key in ("screen_width", "screen_height", "max_steps", "max_pixels", "image_history"):
            validation.positive_int(key, getattr(self, key))
        for key in ("settle_s", "reset_wait_s", "evaluate_wait_s"):
            validation.non_negative(key, getattr(self, key))
        for text in self.endpoint_list:
            try:
                VmEndpoint.parse(text)
            except ValueError as error:
                raise ConfigError("tasks.endpoints", str(error), self.endpoints) from None
        for key in ("examples", "eval_examples"):
            validation.one_of(key, getattr(self, key), EXAMPLE_FOLDERS)
        if (self.eval_task_list or self.domains) and not self.task_list:
            raise ConfigError("tasks.task_list", "eval_task_list and domains select from task lists: name the "
                              "training list too (e.g. train_nochrome.json)", self.task_list)
        if self.task_list and not self.task_dir:
            raise ConfigError("tasks.task_dir", "a task list needs the task directory it indexes (OSWorld's "
                              "evaluation_examples)", self.task_dir)
        unknown = sorted(set(self.family_list) - set(FAMILIES) - {"infeasible"})
        if unknown:
            raise ConfigError("tasks.families", f"unknown task families {', '.join(unknown)}; the bundled ones are "
                              f"{', '.join(FAMILIES)}, infeasible", self.families)

    @property
    def family_list(self) -> list[str]:
        return [f.strip() for f in self.families.split(",") if f.strip()]

    @property
    def domain_list(self) -> list[str]:
        return [d.strip() for d in self.domains.split(",") if d.strip()]

    @property
    def endpoint_list(self) -> list[str]:
        return split_endpoints(self.endpoints)

    def settings(self) -> desktop_env.DesktopEnvSettings:
        endpoints = ",".join(self.endpoint_list) if self.provider == "remote" else ""
        vm_path = str(Path(self.vm_path).expanduser().resolve()) if self.provider == "docker" else ""
        return desktop_env.DesktopEnvSettings(screen_width=self.screen_width, screen_height=self.screen_height,
                                              max_steps=self.max_steps, settle_s=self.settle_s,
                                              runtime_root=self.runtime_root, endpoints=endpoints,
                                              cache_root=self.cache_root,
                                              reset_command=self.reset_command, reset_wait_s=self.reset_wait_s,
                                              evaluate_wait_s=self.evaluate_wait_s, vm_path=vm_path)


class DesktopPrompts(DesktopAgentPrompts, DesktopJudgePrompts):
    """The policy's and the reward model's prompts (one resizer: a screenshot is resized once for both)."""

    def __init__(self, max_pixels: int = PAPER_MAX_PIXELS, image_history: int = 3):
        DesktopAgentPrompts.__init__(self, max_pixels, image_history)
        DesktopJudgePrompts.__init__(self, self.resize)


def _seed_major(tasks: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Bundled tasks ordered seed by seed, so that the first k cover k families; an infeasible request is one
    more family (its seed's one comes after that seed's feasible tasks)."""
    order = {family: i for i, family in enumerate(FAMILIES)}

    def key(task):
        knobs = task.get("rla_knobs") or {}
        return (knobs.get("seed", 0), order.get(knobs.get("family"), len(order)))

    return sorted(tasks, key=key)


class OsWorldScenario:
    name = NAME
    env_module = desktop_env.__name__
    reward_model_role = "judge_steps"   # its reward model judges every step (reward_models.step_judging)
    runs_untrusted_code = False   # actions are parsed into pyautogui literals (actions.py), inside the session

    def __init__(self, options: OsWorldOptions):
        # Checked when the run starts (the defaults name no VMs, and configs are built from the defaults).
        if options.provider == "remote" and not options.endpoint_list:
            raise ConfigError("tasks.endpoints", NEEDS_DESKTOPS, show_value=False)
        if options.provider == "remote" and not options.reset_command:
            raise ConfigError("tasks.reset_command", NEEDS_RESET, show_value=False)
        if options.provider == "docker" and not Path(options.vm_path).expanduser().is_file():
            raise ConfigError("tasks.vm_path", "provider=docker runs OSWorld's VM image in OSWorld's container: give "
                              "the path of its Ubuntu.qcow2 (OSWorld's Docker provider downloads it to "
                              "docker_vm_data/; Docker and the happysixd/osworld-docker image must be on this host)",
                              options.vm_path)
        self.options = options
        self.prompts = DesktopPrompts(options.max_pixels, options.image_history)
        self.reward_prompts = self.prompts   # one object holds the policy's and the reward model's prompts
        self.expert = DesktopExpert()

    def make_task(self, data: dict[str, Any], task_id: str | None = None, group: str = "") -> Task:
        """A pool task from OSWorld JSON: what the env plays, plus the file itself (`source`: variants, knobs and
        expert, for rewrites and the warm start); `group` is its task list's domain (per-domain success)."""
        parsed = task_from_json(data)
        played = desktop_env.make_env_task(parsed, self.options.settings())
        payload = {**played.payload, "source": data} | ({TASK_GROUP: group} if group else {})
        return Task(task_id or played.task_id, played.kind, played.goal, payload)

    def _listed(self, list_name: str, examples: str) -> list[Task]:
        """A task list's runnable tasks, domains interleaved (the first k span the domains)."""
        options = self.options
        try:
            listed = load_listed_tasks(options.task_dir, list_name, examples, options.domain_list)
        except TaskFormatError as error:
            raise ConfigError("tasks.task_list", str(error), list_name) from None
        runnable = [t for t in interleave_domains(listed.tasks) if not unsupported_parts(t.task)]
        return [self.make_task(json.loads(Path(t.task.source_path).read_text(encoding="utf-8")), group=t.domain)
                for t in runnable]

    def _list_sets(self, counts: TaskCounts) -> TaskSets:
        options = self.options
        train = self._listed(options.task_list, options.examples)
        held_out = self._listed(options.eval_task_list or options.task_list, options.eval_examples)
        self._check_enough(counts, len(train))
        # The whole evaluation list is a split of its own: the reference evaluates every listed task.
        return TaskSets(train=train[:counts.train], eval=held_out[:counts.eval],
                        warm_start=train[counts.train:counts.train + counts.warm_start],
                        splits={"eval_list": held_out})

    @staticmethod
    def _check_enough(counts: TaskCounts, available: int) -> None:
        needed = counts.train + counts.warm_start
        if needed > available:
            raise ConfigError("env.num_train_tasks", f"{counts.train} pool tasks plus {counts.warm_start} warm-start "
                              f"tasks need {needed} training tasks; the task set has {available}", counts.train)

    def _split(self, split: str) -> list[dict[str, Any]]:
        if not self.options.task_dir:
            wanted = set(self.options.family_list)
            return _seed_major([t for t in bundled_tasks(split)
                                if not wanted or (t.get("rla_knobs") or {}).get("family") in wanted])
        root = Path(self.options.task_dir).expanduser()
        folder = root / split if (root / split).is_dir() else root
        loaded = load_task_dir(folder)
        return [json.loads(Path(t.source_path).read_text(encoding="utf-8")) for t in loaded.tasks]

    def build_tasks(self, counts: TaskCounts, out_dir: Path) -> TaskSets:
        del out_dir   # tasks are JSON in their payloads
        if self.options.task_list:
            return self._list_sets(counts)
        train = self._split("train")
        held_out = self._split("heldout") if not self.options.task_dir or \
            (Path(self.options.task_dir).expanduser() / "heldout").is_dir() else []
        self._check_enough(counts, len(train))
        needed = counts.train + counts.warm_start
        return TaskSets(train=[self.make_task(d) for d in train[:counts.train]],
                        eval=[self.make_task(d) for d in held_out[:counts.eval]],
                        warm_start=[self.make_task(d) for d in train[counts.train:needed]])

    def play_task(self, seed: int, task_type: str | None, out_dir: Path) -> Task:
        del out_dir
        if self.options.task_list:
            listed = [t for t in self._listed(self.options.task_list, self.options.examples)
                      if task_type is None or t.payload.get(TASK_GROUP) == task_type]
            if not listed:
                raise ValueError(f"no runnable task of domain {task_type!r} in {self.options.task_list}")
            return listed[seed % len(listed)]
        tasks = [t for t in self._split("train") if task_type is None or (t.get("rla_knobs") or {}).get("family")
                 == task_type]
        if not tasks:
            raise ValueError(f"no task of type {task_type!r}; types: {', '.join(FAMILIES)}, infeasible")
        return self.make_task(tasks[seed % len(tasks)])

    def task_generator(self, context: GeneratorContext) -> Any:
        knobs = KnobGenerator(self.make_task)
        if context.generator == "procedural" or context.environment_sampler is None:
            return knobs
        model = EnvironmentModel.from_context(context)
        rewrite = EvaluatorRewriteGenerator(model, self.make_task, num_samples=context.candidates_per_task,
                                            max_new_tokens=context.max_new_tokens)
        return GeneratorChain([rewrite, knobs])


register_scenario(NAME, OsWorldScenario, OsWorldOptions)
