"""Warm-start data and expert labels from real ALFWorld expert games, for every prompt style."""

import numpy as np
import pytest

from rlanything_jax.agents import sft
from rlanything_jax.agents.demonstrations import play_expert
from rlanything_jax.agents.envs.base import Observation, make_env
from rlanything_jax.agents.trajectory import Episode
from rlanything_jax.scenarios.alfworld import env as alfworld
from rlanything_jax.scenarios.alfworld.knobs import GameKnobs
from rlanything_jax.scenarios.text_games import expert as text_expert
from rlanything_jax.scenarios.text_games.compact import (
    NUMBERED_CHOICE_INSTRUCTION,
    NUMBERED_JUDGE_INSTRUCTION,
    CompactChoicePrompts,
    CompactPrompts,
    NumberedChoicePrompts,
    closest_action,
    game_text,
)
from rlanything_jax.scenarios.text_games.reference import DialoguePrompts, ReferencePrompts

SCENARIOS = [ReferencePrompts(), DialoguePrompts(), CompactPrompts(), CompactChoicePrompts(), NumberedChoicePrompts()]


def _ids(scenario):
    return f"{scenario.name}-{type(scenario).__name__}"


@pytest.fixture(scope="module")
def expert_game(tmp_path_factory):
    task = alfworld.make_task(3, "pick_and_place_simple", GameKnobs(num_receptacles=5, num_distractors=1),
                              str(tmp_path_factory.mktemp("games")))
    env = make_env("alfworld")
    return task, play_expert(task, alfworld.expert_actions(task), env), env


def reward_examples(tok, prompts, task, steps, env, negatives_per_step, labels="walkthrough"):
    expert = text_expert.TextGameExpert(alfworld.expert_actions, step_labels=labels)
    labelled = expert.labelled_steps(task, steps, env, np.random.default_rng(0), negatives_per_step)
    return sft.reward_sft_examples(tok, prompts, task, labelled)


@pytest.mark.parametrize("scenario", SCENARIOS, ids=_ids)
def test_expert_episode_tokens_are_the_chat_template_rendering(scenario, expert_game, qwen25_tokenizer):
    task, steps, _ = expert_game
    tok = qwen25_tokenizer
    episode = sft.expert_episode(task, steps, scenario, tok)
    assert len(episode.steps) == len(steps) >= 4 and episode.won
    messages = scenario.initial_messages(task, steps[0].observation)
    im_end = tok.token_to_id("<|im_end|>")
    rebuilt = getattr(scenario, "rebuilds_history", False)
    for t, (record, step) in enumerate(zip(episode.steps, steps)):
        if rebuilt:   # each turn's prompt is built afresh from the trajectory
            messages = scenario.step_messages(task, Episode(task, 0, episode.steps[:t]), step.observation)
        elif t:
            messages.append(scenario.turn_message(Episode(task, 0, episode.steps[:t]), step.observation))
        # Outside truth: the template renders the whole chat at once; the records are built turn by turn.
        assert list(record.prompt_tokens) == tok.encode_chat(messages)
        answer = scenario.answer_text(step.observation, step.action)
        assert list(record.response_tokens) == tok.encode(answer) + [im_end]
        assert np.isnan(record.logprobs).all() and len(record.logprobs) == len(record.response_tokens)
        # The rollout's parser reads the expert's answer back as the expert's action.
        assert scenario.parse_action(answer, step.observation).action == step.action
        messages.append({"role": "assistant", "content": answer})
    examples = sft.policy_sft_examples(episode, pack=False)
    assert [list(e.prompt_ids) for e in examples] == [list(r.prompt_tokens) for r in episode.steps]
    assert all(e.advantage == 1.0 for e in examples)
    if rebuilt:   # the turns do not extend each other: one example per step
        assert [e.segments for e in sft.policy_sft_examples(episode)] == [None] * len(steps)
        return
    [packed] = sft.policy_sft_examples(episode)
    last = episode.steps[-1]
    assert list(packed.prompt_ids) + list(packed.response_ids) == list(last.prompt_tokens + last.response_tokens)


@pytest.mark.parametrize("scenario", SCENARIOS, ids=_ids)
def test_reward_examples_label_expert_steps_good_and_others_bad(scenario, expert_game, qwen25_tokenizer):
    task, steps, env = expert_game
    tok = qwen25_tokenizer
    examples = reward_examples(tok, scenario, task, steps, env, negatives_per_step=1)
    assert len(examples) == 2 * len(steps)
    for t, step in enumerate(steps):
        good, bad = examples[2 * t], examples[2 * t + 1]
        assert tok.decode(good.response_ids) == "\\boxed{1}<|im_end|>"
        assert tok.decode(bad.response_ids) == "\\boxed{-1}<|im_end|>"
        good_prompt, bad_prompt = tok.decode(good.prompt_ids), tok.decode(bad.prompt_ids)
        assert good_prompt != bad_prompt
        if isinstance(scenario, CompactPrompts):
            assert f"action: {step.action}\n" in good_prompt and f"action: {step.action}\n" not in bad_prompt
            # The other action's result comes from the engine, replayed to the same state.
            replay = make_env("alfworld")
            replay.reset(task)
            for earlier in steps[:t]:
                replay.step(earlier.action)
            other = bad_prompt.split("action: ")[1].split("\n")[0]
            assert f"result: {game_text(replay.step(other).observation)}\n" in bad_prompt
        assert scenario.parse_judgment(scenario.judgment_text(1)).score == 1
        assert scenario.parse_judgment(scenario.judgment_text(-1)).score == -1


def test_progress_labels_follow_the_walkthrough_in_order():
    plan = ["go to a", "take x from a", "go to b", "put x in b"]
    labels = [text_expert.progress_label(plan, earlier, action) for earlier, action in [
        ([], "go to a"), ([], "go to b"),                                   # progress; the goal receptacle too early
        (["go to b"], "go to a"), (["go to a"], "go to a"),                 # progress after a wrong visit; a repeat
        (["go to a", "take x from a"], "go to b"), (plan, "look")]]         # progress; after the end
    assert labels == [1, -1, 1, -1, 1, -1]


def test_searching_expert_visits_other_receptacles_then_wins(expert_game, qwen25_tokenizer):
    task, _, env = expert_game
    plan = alfworld.expert_actions(task)
    detours = set()
    for seed in range(6):
        steps = text_expert.play_searching_expert(task, plan, np.random.default_rng(seed), env)
        actions = [s.action for s in steps]
        start = actions.index(plan[0])
        assert actions[start:] == plan
        assert sft.expert_episode(task, steps, CompactPrompts(), qwen25_tokenizer).won
        assert all(a.startswith(("go to ", "open ")) and a != plan[0] for a in actions[:start])
        assert all(s.action in s.observation.admissible_actions for s in steps)   # every command was listed
        detours.add(start)
        # The reward model's labels: the wrong visits are -1, the walkthrough +1.
        examples = reward_examples(qwen25_tokenizer, CompactPrompts(), task, steps, env, negatives_per_step=0)
        assert [qwen25_tokenizer.decode(e.response_ids) for e in examples] == \
            ["\\boxed{-1}<|im_end|>"] * start + ["\\boxed{1}<|im_end|>"] * len(plan)
        # An expert who does not know where the object is calls every step of this search good.
        examples = reward_examples(qwen25_tokenizer, CompactPrompts(), task, steps, env, negatives_per_step=0,
                                   labels="search")
        assert [qwen25_tokenizer.decode(e.response_ids) for e in examples] == ["\\boxed{1}<|im_end|>"] * len(steps)
    assert len(detours) >= 3   # the number of wrong visits varies with the seed, including none


def test_compact_judge_prompt_shows_goal_history_action_and_result(expert_game):
    task, steps, _ = expert_game
    scenario = CompactPrompts()
    episode = sft.expert_episode(task, steps, scenario)
    text = scenario.judge_messages(task, episode, 2)[0]["content"]
    goal = task.goal if task.goal else ""
    assert text.splitlines()[0].startswith("goal: ") and goal.split()[-1].rstrip(".") in text.splitlines()[0]
    assert text.splitlines()[1] == f"done: {steps[0].action}; {steps[1].action}"
    assert f"action: {steps[2].action}" in text and text.endswith("good?")
    assert "Welcome" not in text and "-=" not in text


def closest(text, admissible):
    parsed = closest_action(text, admissible)
    return parsed.action, parsed.status


def test_closest_action_maps_untrusted_text_to_an_admissible_command():
    obs = Observation("x", ("go to bed 1", "go to desk 1", "take laptop 1 from bed 1", "look"))
    assert closest("go to desk 1", obs.admissible_actions) == ("go to desk 1", "ok")
    assert closest("  Go to DESK 1. ", obs.admissible_actions) == ("go to desk 1", "ok")
    assert closest("take laptop", obs.admissible_actions) == ("take laptop 1 from bed 1", "closest")
    assert closest("", obs.admissible_actions) == ("go to bed 1", "empty")
    assert closest("zzz qqq", obs.admissible_actions)[1] == "closest"
    assert closest("anything", ()) == ("look", "no_actions")
    assert closest("\x00" * 10_000 + "rm -rf /", obs.admissible_actions)[0] in obs.admissible_actions


def test_choice_prompt_numbers_the_state_changing_commands_and_parses_hostile_answers():
    obs = Observation("You arrive at bed 1.\nYour task is to: put a laptop on desk.",
                      ("go to bed 1", "go to desk 1", "examine bed 1", "take laptop 1 from bed 1", "look", "inventory"))
    scenario = CompactChoicePrompts()
    prompt = scenario.initial_messages(None, obs)[0]["content"]
    assert prompt.endswith("\n1 go to bed 1\n2 go to desk 1\n3 take laptop 1 from bed 1")
    assert scenario.answer_text(obs, "take laptop 1 from bed 1") == "3"
    assert scenario.answer_text(obs, "look") == "look"

    def parsed(text):
        p = scenario.parse_action(text, obs)
        return p.action, p.status

    assert parsed("2") == ("go to desk 1", "ok")
    assert parsed(" 3 take laptop") == ("take laptop 1 from bed 1", "ok")
    assert parsed("0")[1] == parsed("4")[1] == parsed("9" * 400)[1] == "out_of_range"
    assert parsed("take laptop") == ("take laptop 1 from bed 1", "no_number")
    assert parsed("-1")[1] == "ok" and parsed("-1")[0] == "go to bed 1"   # the first number is "1"
    assert parsed("\x00" * 10_000 + "rm -rf /")[0] in obs.admissible_actions
    assert scenario.parse_action("1", Observation("x", ())).status == "no_actions"


def test_numbered_choice_prompt_tells_an_instruct_model_to_answer_with_a_number(expert_game):
    task, steps, _ = expert_game
    compact, numbered = CompactChoicePrompts(), NumberedChoicePrompts()
    first = numbered.initial_messages(task, steps[0].observation)[0]["content"]
    plain = compact.initial_messages(task, steps[0].observation)[0]["content"]
    assert first == f"{NUMBERED_CHOICE_INSTRUCTION}\n\n{plain}"
    episode = Episode(task, 0)
    # Later turns are the game's text and choices only: the instruction is said once, at the start of the chat.
    assert numbered.turn_message(episode, steps[1].observation) == compact.turn_message(episode, steps[1].observation)
    assert numbered.parse_action("2", steps[1].observation) == compact.parse_action("2", steps[1].observation)
    judged = sft.expert_episode(task, steps, numbered)
    judge = numbered.judge_messages(task, judged, 2)[0]["content"]
    assert judge == f"{NUMBERED_JUDGE_INSTRUCTION}\n\n" + compact.judge_messages(task, judged, 2)[0]["content"]
    assert "\\boxed{1}" in judge and "\\boxed{-1}" in judge   # the format the judgment parser reads


def test_search_labels_reward_visiting_unseen_receptacles_until_the_object_is_found():
    plan = ["go to drawer 1", "open drawer 1", "take key 1 from drawer 1", "go to bed 1", "move key 1 to bed 1"]
    label = text_expert.search_label
    # Searching: a receptacle not yet visited is good (the goal one too: the agent cannot know), a
    # second visit is not; at a closed receptacle, opening it is the only good step.
    assert label(plan, [], "go to desk 1") == 1
    assert label(plan, [], "go to bed 1") == 1
    assert label(plan, ["go to desk 1"], "go to desk 1") == -1
    assert label(plan, ["go to desk 1"], "open desk 1", ("open desk 1", "go to bed 1")) == 1
    assert label(plan, ["go to desk 1"], "go to bed 1", ("open desk 1", "go to bed 1")) == -1
    assert label(plan, ["go to desk 1", "open desk 1"], "go to drawer 1", ("close desk 1",)) == 1
    assert label(plan, ["go to desk 1", "open desk 1"], "open desk 1") == -1
    assert label(plan, ["go to desk 1"], "look") == -1
    # Found (at the drawer, opened): the walkthrough from here, and going back to where its next step is.
    found = ["go to desk 1", "go to drawer 1", "open drawer 1"]
    assert label(plan, found, "take key 1 from drawer 1") == 1
    assert label(plan, found, "go to sofa 1") == -1
    assert label(plan, found + ["go to sofa 1"], "go to drawer 1") == 1
    assert label(plan, found + ["take key 1 from drawer 1"], "go to bed 1") == 1
    assert label(plan, found + ["take key 1 from drawer 1", "go to bed 1"], "go to bed 1") == -1
    assert label(plan, found + ["take key 1 from drawer 1", "go to bed 1"], "move key 1 to bed 1") == 1
    assert label(plan, plan, "look") == -1
    # A walkthrough that does not start by going somewhere has no search phase: progress labels.
    assert label(["take key 1 from drawer 1"], [], "go to desk 1") == -1
    # step_label picks the expert.
    assert text_expert.step_label("walkthrough", plan, [], "go to desk 1") == -1
    assert text_expert.step_label("search", plan, [], "go to desk 1") == 1
