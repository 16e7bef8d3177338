"""Task generators driven by a real (tiny, random) environment model: nonsense is counted, not raised, the
chains fall back, prompts share prefills and rows (the deterministic parts: tests/scenarios/test_generators.py)."""

import pytest

pytest.importorskip("alfworld")
pytest.importorskip("textworld")

from rlanything_jax.agents.curriculum.generators import (
    Ask,
    EnvironmentModel,
    GeneratorChain,
    ProceduralGenerator,
    run_proposals,
)
from rlanything_jax.agents.trajectory import Episode, JudgedEpisode
from rlanything_jax.scenarios.alfworld import env as alfworld
from rlanything_jax.scenarios.alfworld.generators import GoalRewriteGenerator, procedural_maker
from rlanything_jax.scenarios.alfworld.knobs import harder_knobs
from rlanything_jax.scenarios.coding import env as coding
from rlanything_jax.scenarios.coding.generators import ProblemRewriteGenerator
from rlanything_jax.scenarios.coding.problems import (
    problem_prompt,
)
from tests.scenarios.generator_inputs import ROOM, THREE_SUMS, failed_alfworld_episodes, problem_json, step_record

# ---------------------------------------------------------------- environment model: a real tiny random model


class CountingSampler:
    """The real sampler, recording each generate call's generations (batches) and prompts prefilled."""

    def __init__(self, sampler):
        self._sampler, self.batches, self.prefilled = sampler, [], []
        self.tokenizer, self.config = sampler.tokenizer, sampler.config

    def generate(self, prompts, *args, **kwargs):
        self.batches.append(len(prompts) * kwargs.get("num_samples", 1))
        self.prefilled.append(len(prompts))
        return self._sampler.generate(prompts, *args, **kwargs)


@pytest.fixture(scope="module")
def env_model(tmp_path_factory, qwen25_tokenizer):
    from rlanything_jax.core.models import load_pretrained
    from rlanything_jax.core.sampling.sampler import Sampler, SamplerConfig
    from tests import hf_reference

    path = tmp_path_factory.mktemp("env_model")
    hf_reference.build("qwen2", path, vocab_size=qwen25_tokenizer.vocab_size, tie_word_embeddings=True)
    return Sampler(load_pretrained(path), tokenizer=qwen25_tokenizer, config=SamplerConfig(max_cache_length=8192))


def test_random_env_model_on_alfworld_counts_and_the_chain_falls_back(env_model, raw_alfworld, tmp_path):
    sampler = CountingSampler(env_model)
    model = GoalRewriteGenerator(EnvironmentModel(sampler, seed=1), tmp_path, num_tries=3, max_new_tokens=8,
                                 summary_max_new_tokens=8)
    chain = GeneratorChain([model, ProceduralGenerator(procedural_maker(tmp_path))])
    episodes = failed_alfworld_episodes(raw_alfworld)
    candidate, counts = chain.propose(raw_alfworld, raw_alfworld, "harder", 1 / 3, episodes, step=5)
    assert sampler.batches == [2, 3]  # one call for the two failure summaries, one for all tries
    summaries = sum(v for k, v in counts.items() if k.startswith("alfworld/summary/") and "tokens" not in k)
    assert summaries == 2
    assert counts["alfworld/goal/unparseable"] == 3 and counts["env_model/alfworld/none"] == 1
    # The model's nonsense gives nothing; the knobs do.
    assert candidate.payload["proposed_by"] == "procedural"
    assert alfworld.knobs_of(candidate) == harder_knobs(ROOM)
    assert counts["procedural/alfworld/accepted"] == 1   # the chain's counts: both generators'


def test_random_env_model_on_coding_counts_and_returns_none(env_model, sum_two, tmp_path):
    sampler = CountingSampler(env_model)
    model = ProblemRewriteGenerator(EnvironmentModel(sampler, seed=2), max_new_tokens=8)
    episodes = [JudgedEpisode(Episode(task=sum_two, group_index=0, steps=[step_record(sum_two.goal, "print(0)")]))]
    candidate, counts = model.propose(sum_two, sum_two, "easier", 0.0, episodes, step=1)
    assert candidate is None
    assert sampler.batches == [3] and sampler.prefilled == [1]   # the rewrite prompt, prefilled once
    assert counts["coding/problem/unparseable"] == 3 and counts["env_model/coding/none"] == 1
    humaneval = coding.humaneval_tasks()[0]   # a function problem is rewritten too
    candidate, counts = model.propose(humaneval, humaneval, "harder", 1.0, [], step=1)
    assert candidate is None
    assert sampler.batches == [3, 3] and counts["env_model/coding/none"] == 1   # this call's count, no total
    assert not any(k.startswith("env_model/unsupported") for k in counts)


def test_humaneval_problems_are_rewritten_into_stdio_problems(env_model):
    """A real HumanEval problem: the prompt shows its signature, docstring and asserts; an answer in the
    generator's format becomes a stdio task anchored on it, which a correct program passes."""
    humaneval = coding.humaneval_tasks()[53]   # add(x, y)
    assert humaneval.payload["entry_point"] == "add"
    model = ProblemRewriteGenerator(EnvironmentModel(env_model, seed=3), max_new_tokens=8, num_samples=2)
    episodes = [JudgedEpisode(Episode(task=humaneval, group_index=0, steps=[step_record(humaneval.goal, "x")]))]
    proposal = model.proposal(humaneval, humaneval, "harder", 1.0, episodes, step=4)
    ask = next(proposal)
    user = ask.prompts[0][-1]["content"]
    assert "def add(x: int, y: int)" in user and '"test_input": "0, 1"' in user and '"test_output": "1"' in user
    with pytest.raises(StopIteration) as stop:
        proposal.send(["no json", problem_json("Read three integers on one line and print their sum.",
                                                THREE_SUMS)])
    task, _ = stop.value.value
    assert task.payload["format"] == "stdio" and task.task_id.startswith("HumanEval/53/gen-")
    assert task.payload["proposed_by"] == "env_model" and task.payload["direction"] == "harder"
    assert coding.task_verdicts(task, "print(sum(map(int, input().split())))") == [coding.PASSED] * 6


def test_prompts_too_long_for_the_cache_are_dropped_and_counted(env_model, raw_alfworld, sum_two, tmp_path):
    sampler = CountingSampler(env_model)
    model = GoalRewriteGenerator(EnvironmentModel(sampler), tmp_path, num_tries=2, max_new_tokens=8000,
                                 summary_max_new_tokens=8000)
    episodes = failed_alfworld_episodes(raw_alfworld)
    candidate, counts = model.propose(raw_alfworld, raw_alfworld, "easier", 0.0, episodes, step=1)
    assert candidate is None
    coding_model = ProblemRewriteGenerator(EnvironmentModel(sampler), max_new_tokens=8000)
    coding_candidate, coding_counts = coding_model.propose(sum_two, sum_two, "harder", 1.0, [], step=1)
    assert coding_candidate is None
    assert sampler.batches == []  # nothing fits 8192 columns: the sampler is never asked
    assert counts["alfworld/summary/prompt_too_long"] == 2
    assert counts["alfworld/goal/prompt_too_long"] == 2 and counts["alfworld/goal/not_generated"] == 2
    assert coding_counts["coding/problem/prompt_too_long"] == 3


def test_repeated_prompts_are_prefilled_once_and_answered_in_their_places(env_model):
    sampler = CountingSampler(env_model)
    model = EnvironmentModel(sampler, temperature=0.0)   # greedy: every sample of a prompt is its one answer
    first, second = ([{"role": "user", "content": text}] for text in ("Rewrite the task.", "Make it harder, please."))
    texts, _ = model.generate([first, second, first, second], 6, seed=0, tag="t")
    alone = [model.generate([prompt], 6, seed=0, tag="t")[0][0] for prompt in (first, second)]
    assert texts == alone * 2 and alone[0] != alone[1]
    assert sampler.prefilled[0] == 2 and sampler.batches[0] == 4
    assert model.generate([first, first, second], 6, seed=0, tag="t")[0] == [alone[0], alone[0], alone[1]]
    assert sampler.prefilled[-1] == 3   # unequal repeats: one row per prompt, as before


def test_a_steps_rewrites_share_the_env_models_rows(env_model):
    """`run_proposals` (the loop's adaptation): three tasks' rewrite prompts go to the real sampler as one
    continuous-batching call through 6 rows, each prompt prefilled once for its 3 answers; greedy answers do
    not depend on which tasks share the rows."""
    tasks = coding.builtin_stdio_tasks()[:3]
    model = EnvironmentModel(env_model, temperature=0.0, batch_size=6)
    generator = ProblemRewriteGenerator(model, max_new_tokens=8)
    before = env_model.prefilled["rows"]
    candidates, counts = run_proposals([generator.proposal(t, t, "harder", 1.0, [], step=2) for t in tasks])
    assert candidates == [None] * 3
    assert env_model.prefilled["rows"] - before == 3
    assert counts["coding/problem/unparseable"] == 9
    assert 0 < counts["env_model/busy_slot_steps"] <= 9 * 8 and counts["env_model/slot_steps"] > 0
    asks = [Ask(model, (problem_prompt(t, t, "harder", ()),) * 3, 8, seed=0, tag="t") for t in tasks]
    together, _ = model.answer(asks)
    assert together == [model.answer([ask])[0][0] for ask in asks] and len({texts[0] for texts in together}) == 3


def test_a_chain_drives_its_model_generator_and_falls_back_inside_one_proposal(env_model, raw_alfworld, tmp_path):
    """A chain's proposal asks through its first generator and, when that gives nothing, takes the knobs'
    candidate: the same as `propose`, one task at a time."""
    model = GoalRewriteGenerator(EnvironmentModel(env_model, seed=1), tmp_path / "goal", num_tries=2,
                                 max_new_tokens=8, summary_max_new_tokens=8)
    chain = GeneratorChain([model, ProceduralGenerator(procedural_maker(tmp_path / "knobs"))])
    proposal = chain.proposal(raw_alfworld, raw_alfworld, "harder", 1.0, [], step=7)
    ask = next(proposal)   # no failed episodes: no summaries, straight to the goal prompts
    assert isinstance(ask, Ask) and len(ask.prompts) == 2 and ask.tag == "alfworld/goal"
    with pytest.raises(StopIteration) as stop:
        proposal.send(["not a rewrite", None])
    candidate, counts = stop.value.value
    assert candidate.payload["proposed_by"] == "procedural"
    assert counts["alfworld/goal/unparseable"] == 1
