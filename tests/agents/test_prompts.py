"""Prompt builders: required pieces, chat-template rendering, and the incremental policy chat."""

import pytest

from rlanything_jax.agents.curriculum.adaptation import DIRECTIONS
from rlanything_jax.core.models.tokenizer import Tokenizer
from rlanything_jax.scenarios.alfworld import goal_prompts
from rlanything_jax.scenarios.coding import prompts as coding_prompts
from rlanything_jax.scenarios.coding.prompts import TestCases
from rlanything_jax.scenarios.text_games import prompts
from rlanything_jax.scenarios.text_games.prompts import PolicyDialogue

OBS0 = ("You are in the middle of a room. Looking around you, you see a fridge 1.\n\n"
        "Your task is to: put a cool apple in fridge.")
ACTIONS0 = ["go to fridge 1", "look", "inventory"]
# (response, executed action, next observation, next admissible actions)
TURNS = [
    ("The apple may be in the fridge. \\boxed{0}", "go to fridge 1", "You arrive at fridge 1. It is closed.",
     ["open fridge 1", "look"]),
    ("Open it.\nStep: \\boxed{0} \u2014 caf\u00e9 \U0001f34e", "open fridge 1",
     "You open the fridge 1. You see an apple 1.",
     ["take apple 1 from fridge 1", "close fridge 1"]),
    ("```\ncode?\n```\n\\boxed{7}", "close fridge 1", "You close the fridge 1.", []),  # clamped index, no actions
]


def _user(messages):
    assert [m["role"] for m in messages] == ["system", "user"]
    return messages[1]["content"]


# ---------------------------------------------------------------- policy prompt, both forms


def test_full_history_prompt_has_guide_trajectory_and_numbered_actions():
    text = _user(prompts.policy_messages_full_history([OBS0, "You arrive at fridge 1."], ["go to fridge 1"],
                                                      ["open fridge 1", "look"]))
    assert text.startswith("You are playing a text game. Your objective is to complete the task as soon as possible.\n")
    assert "put the integer (the index of your chosen action) in \\boxed{}" in text
    assert f"observation: {OBS0}\nyou took action: go to fridge 1\nobservation: You arrive at fridge 1.\n\n" in text
    assert text.endswith("You need to think step by step then choose one action by number:\n"
                         "0) open fridge 1\n1) look\n")


def test_full_history_prompt_fallbacks():
    text = prompts.policy_step_text([], [], [])
    assert "\n\n(empty)\n\n" in text
    assert text.endswith("0) look\n")                       # no admissible commands: "look", as the reference
    assert prompts.candidate_actions([]) == ("look",)
    assert prompts.candidate_actions(("a", "b")) == ("a", "b")


def test_dialogue_turns_and_first_prompt_equals_full_history_form():
    dialogue = PolicyDialogue.start(OBS0, ACTIONS0)
    assert dialogue.messages == prompts.policy_messages_full_history([OBS0], [], ACTIONS0)
    assert dialogue.num_responses == 0
    observations, actions = [OBS0], []
    for response, action, observation, admissible in TURNS:
        dialogue = dialogue.advance(response, observation, admissible, action)
        observations.append(observation)
        actions.append(action)
        assert dialogue.messages[-2] == {"role": "assistant", "content": response}
        new = dialogue.new_user_message
        assert new["role"] == "user"
        assert new["content"].startswith(f"you took action: {action}\nobservation: {observation}\n\n")
        assert new["content"].endswith(prompts._numbered_actions(admissible) + "\n")
    assert dialogue.num_responses == len(TURNS)
    assert [m["role"] for m in dialogue.messages] == ["system"] + ["user", "assistant"] * len(TURNS) + ["user"]
    # Same information as the full-history form of the last step.
    full = prompts.policy_step_text(observations, actions, TURNS[-1][3])
    for observation, action in zip(observations, actions):
        assert f"observation: {observation}" in full and f"you took action: {action}" in full
    # Without the executed action (a scenario that only sees observations), the turn starts at the observation.
    bare = PolicyDialogue.start(OBS0, ACTIONS0).advance("\\boxed{1}", "Nothing happens.", ["look"])
    assert bare.new_user_message["content"] == "observation: Nothing happens.\n\n" + prompts._choice_block(["look"])
    with pytest.raises(ValueError):
        PolicyDialogue(dialogue.turns + (("assistant", "x"),)).advance("y", "o", [])


@pytest.fixture
def chat_tokenizer(request):
    if request.param == "smollm2":
        return Tokenizer.from_dir(request.getfixturevalue("smollm2_dir"))
    return request.getfixturevalue(request.param)


PREFIX_STABLE = ["qwen25_tokenizer", "qwen3_tokenizer", pytest.param("smollm2", marks=pytest.mark.slow)]
CHATML_TURN = "<|im_end|>\n<|im_start|>user\n{content}<|im_end|>\n<|im_start|>assistant\n"


@pytest.mark.parametrize("chat_tokenizer", PREFIX_STABLE, indirect=True)
def test_incremental_chat_is_prompt_plus_response_plus_new_user_turn(chat_tokenizer):
    """encode(turn k) == encode(turn k-1) + encode(response) + encode(delta), delta = the new user turn.

    Holds for these templates with responses that have no <think> block (Qwen3) and do not
    start with a newline (see the next test).
    """
    tok = chat_tokenizer
    im_end = tok.token_to_id("<|im_end|>")
    dialogue = PolicyDialogue.start(OBS0, ACTIONS0)
    stream = tok.encode_chat(dialogue.messages)        # what a cached rollout holds
    for response, action, observation, admissible in TURNS:
        prev_text = tok.apply_chat_template(dialogue.messages)
        dialogue = dialogue.advance(response, observation, admissible, action)
        full_text = tok.apply_chat_template(dialogue.messages)
        assert full_text.startswith(prev_text + response)
        delta = full_text[len(prev_text) + len(response):]
        assert delta == CHATML_TURN.format(content=dialogue.new_user_message["content"])
        full_ids = tok.encode(full_text)
        assert full_ids == tok.encode(prev_text) + tok.encode(response) + tok.encode(delta)
        # A sampler that stops on <|im_end|> already has it: the rest of the delta starts at "\n".
        stream = stream + tok.encode(response) + [im_end] + tok.encode(delta[len("<|im_end|>"):])
        assert stream == full_ids


def test_incremental_chat_boundaries(qwen25_tokenizer, qwen3_tokenizer):
    """Where re-encoding text would not give the cached tokens back."""
    tok = qwen25_tokenizer
    start = PolicyDialogue.start(OBS0, ACTIONS0)
    prev = tok.apply_chat_template(start.messages)
    # A response starting with "\n" merges with the header's "\n" into one token when the whole
    # text is encoded, so a rollout must keep the sampled ids rather than re-encode its text.
    response = "\nThinking. \\boxed{0}"
    full = tok.apply_chat_template(start.advance(response, "ok", ["look"], "look").messages)
    assert full.startswith(prev + response)
    delta = full[len(prev) + len(response):]
    assert tok.encode(full) != tok.encode(prev) + tok.encode(response) + tok.encode(delta)
    # Qwen3's template drops <think> from assistant turns before the last user turn: the
    # re-rendered chat is no longer the cached one, whose tokens keep what was sampled.
    tok3 = qwen3_tokenizer
    thinking = "<think>\nThe fridge.\n</think>\n\n\\boxed{0}"
    after = start.advance(thinking, "You arrive.", ["look"], "go to fridge 1")
    assert not tok3.apply_chat_template(after.messages).startswith(tok3.apply_chat_template(start.messages) + thinking)


def test_every_builder_renders_with_a_chat_template(qwen25_tokenizer):
    tests = TestCases.of(["1 2"], ["3"], [0.5])
    builders = [
        prompts.policy_messages_full_history([OBS0], [], ACTIONS0),
        prompts.judge_messages("p", "r", "o"),
        prompts.failure_summary_messages("task", [OBS0], ["look"], 40, [0]),
        goal_prompts.goal_rewrite_messages("init", "pick_and_place_simple", ["AppleType"], ["FridgeType"], "harder",
                                           1.0),
        coding_prompts.coding_policy_messages("problem"),
        coding_prompts.unit_test_messages("problem"),
        coding_prompts.task_generation_messages("harder", "root", tests, "current", tests, tests),
    ]
    for messages in builders:
        text = qwen25_tokenizer.apply_chat_template(messages)
        assert text.startswith("<|im_start|>system\n") and text.endswith("<|im_start|>assistant\n")
        assert qwen25_tokenizer.encode_chat(messages)


# ---------------------------------------------------------------- reward model and env model (text games)


def test_judge_prompt_has_rubric_and_the_step():
    step = prompts.policy_step_text([OBS0], [], ACTIONS0)
    text = _user(prompts.judge_messages(step, "I go. \\boxed{0}", "You arrive at fridge 1."))
    assert text.startswith("You are a judge for an agent acting in a text-based environment.\nEvaluate ONE step using:")
    for piece in ("Score 1 if ALL are true", "(a) The selected action is appropriate", "(b) The reasoning is present",
                  "(c) The chosen index exists in the candidate list", "Otherwise score -1",
                  "think first then put the final score in \\boxed{}"):
        assert piece in text
    assert text.endswith(f"Agent's prompt:\n{step}\n\nAgent's response:\nI go. \\boxed{{0}}\n\n"
                         "Next observation after this action:\nYou arrive at fridge 1.\n")
    assert "<|im_start|>" not in text


def test_failure_summary_prompt():
    text = _user(prompts.failure_summary_messages("put a cool apple in fridge", [OBS0, "Nothing happens."],
                                                  ["look", "look"], 40, [1, 3]))
    assert "did NOT finish the task within 40 interaction steps" in text
    assert "Task (natural language): put a cool apple in fridge\n" in text
    assert "High-risk steps (always -1): [1,3] (match [idx]).\n" in text
    assert f"[0] observation: {OBS0}\n[0] action: look\n[1] observation: Nothing happens.\n[1] action: look\n" in text
    assert "In at most TWO sentences" in text and "in \\boxed{} and output NOTHING else" in text
    empty = _user(prompts.failure_summary_messages("", [], [], 40))
    assert "High-risk" not in empty and "(empty trajectory)" in empty and "(unknown task)" in empty


@pytest.mark.parametrize("task_type", goal_prompts.ALFWORLD_TASK_TYPES)
@pytest.mark.parametrize("direction", DIRECTIONS)
def test_goal_rewrite_prompt(task_type, direction):
    objects = ["DeskLampType", "KeyChainType"] if task_type == "look_at_obj_in_light" else ["AppleType"]
    receptacles = [] if task_type == "look_at_obj_in_light" else ["FridgeType"]
    text = _user(goal_prompts.goal_rewrite_messages("### Object classes\n- AppleType: apple1", task_type, objects,
                                               receptacles, direction, 0.875, [(3, "Looped."), (1, " Lost. ")],
                                               attempt=2, num_attempts=8))
    assert text.startswith("Review the following details about an interactive environment. "
                           "A related task will follow.\n"
                           "### Object classes\n- AppleType: apple1\n\n---\n")
    assert "- Rollout 1: Lost.\n- Rollout 3: Looped.\n" in text       # sorted by rollout
    assert f"makes the task **{direction.upper()}**" in text
    assert "(prev_acc) is 0.875" in text and f"**{direction.upper()}** (prev_acc=0.875)" in text
    assert "you may only modify two tokens" in text and "\\boxed{TOKEN_A,TOKEN_B}" in text
    assert ("*fewer*" if direction == "harder" else "*more*") in text
    assert "**Overall Framework**" in text
    second = objects[1] if task_type == "look_at_obj_in_light" else receptacles[0]
    assert f"The final output example is \\boxed{{{objects[0]}, {second}}}" in text
    assert text.endswith("\n\n(Attempt 2/8)")


def test_goal_rewrite_prompt_edge_cases():
    text = _user(goal_prompts.goal_rewrite_messages("init", "unknown", [], [], "easier", 0.0))
    assert "Failure summaries" not in text and "(Attempt" not in text
    assert text.endswith("**Original goal**: (unknown task type).")
    missing = goal_prompts.goal_brief("pick_and_place_simple", [], [], "harder", 1.0)
    assert "\\boxed{<?>, <?>}" in missing
    with pytest.raises(ValueError):
        goal_prompts.goal_rewrite_messages("init", "pick_and_place_simple", ["A"], ["B"], "same", 0.5)


# ---------------------------------------------------------------- coding


def test_coding_policy_prompt():
    messages = coding_prompts.coding_policy_messages("Read n, print n+1.")
    assert messages[0] == {"role": "system", "content": "You are a helpful assistant help user solve problems."}
    text = messages[1]["content"]
    assert text.startswith("You need to think first then write python script. "
                           "You should use input() to input and print() to output in your script.")
    assert text.endswith("This is the problem:\nRead n, print n+1.")
    assert "rather than generating the given test example" not in text
    eval_prompt = coding_prompts.coding_policy_messages("p", True)[1]["content"]
    assert "rather than generating the given test example" in eval_prompt


def test_unit_test_prompt():
    messages = coding_prompts.unit_test_messages("Sum two numbers.")
    assert "rigorous unit-test designer" in messages[0]["content"]
    assert "produce exactly ONE new test example" in messages[0]["content"]
    text = messages[1]["content"]
    for piece in ("**Test Input:**\n```<put the EXACT stdin content here>```",
                  "**Test Output:**\n```<put the EXACT stdout content here>```", "**Explanation:**",
                  "exactly one **Test Input:** block and one **Test Output:** block"):
        assert piece in text
    assert text.endswith("Problem:\nSum two numbers.")


def test_task_generation_prompt():
    long = "9" * 101
    current = TestCases.of(["1 2", long, "3 4", ""], ["3", "x", "7", "0"], [0.25, 0.5, 0.75, 1.0])
    synthetic = TestCases.of(["5 5"], ["10"], [0.125])
    messages = coding_prompts.task_generation_messages(
        "harder", "Add two numbers.", TestCases.of(["0 0"], ["0"]), "Add two big numbers.", current, synthetic,
        num_tests=5)
    system, user = messages[0]["content"], messages[1]["content"]
    assert system.startswith("You are a coding dataset curator.")
    for key in ('"question"', '"test_method": "stdio"', '"test_time_limit"', '"test_input"', '"test_output"'):
        assert key in system
    assert "lists of the SAME length (>= 5)" in system
    assert user.startswith("Goal: make the new problem harder.\n\nCRITICAL ANCHOR (do NOT drift away):")
    assert "[ORIGINAL ROOT PROBLEM]\nAdd two numbers.\n" in user
    assert "[CURRENT ACTIVE PROBLEM]\nAdd two big numbers.\n" in user
    assert long not in user                                     # tests over 100 chars are left out
    assert '- test_input examples:\n["1 2", "3 4"]\n- test_output examples:\n["3", "7"]' in user
    # Pass rates stay with their tests after the drops; the root tests have none.
    assert '"pass_rate": 0.25,\n    "test_input": "1 2"' in user
    assert '"pass_rate": 0.75,\n    "test_input": "3 4"' in user
    assert '"pass_rate": 0.125,\n    "test_input": "5 5"' in user
    root_json = user.split("[ORIGINAL ROOT UNIT TESTS (reference; truncated)]\n")[1].split("\n\n")[0]
    assert '"test_input": "0 0"' in root_json and "pass_rate" not in root_json
    assert "Synthetic unit tests (may not be accurate):" in user
    assert user.endswith('- Provide at least 5 ground-truth tests in "test_input"/"test_output".')
    with pytest.raises(ValueError):
        coding_prompts.task_generation_messages("same", "r", synthetic, "c", synthetic, synthetic)


def test_test_cases_shown():
    cases = TestCases.of(["a", "b" * 5, "c", None], ["1", "2", "", "4"], [0.1, 0.2, 0.3, 0.4])
    shown = cases.shown(max_chars=4)
    assert shown == TestCases(("a",), ("1",), (0.1,))
    assert TestCases.of(["a", "b"], ["1", "2"], [0.5]).shown(10).pass_rates == ()  # rates that do not line up: none
    assert not TestCases.of([], []).shown(100).inputs
