"""Prompts of the text-game scenarios (ALFWorld/TextWorld) in the reference's wording, as chat messages.

Every builder returns `[{"role": ..., "content": ...}]` so any tokenizer's chat
template renders it (`Tokenizer.encode_chat`). The wording follows the reference
implementation (ALGORITHM.md 3.1, 4.1, 4.3, 5.2), which writes ChatML by hand;
here the template does that, and a "<think>" opener, if wanted, is the
generation prompt's business.

The policy prompt comes in two equivalent forms:
- `policy_messages_full_history`: the reference's form, the whole trajectory in one
  user message every turn. The reward model reads its user text as "the agent's prompt".
- `PolicyDialogue`: one user message per observation and one assistant message per
  response, so turn k's prompt is turn k-1's prompt + response + one new user
  message and a KV cache carries over (`chat_tokens.turn_delta` writes that piece).
Both forms give the same first prompt.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from rlanything_jax.agents.chat_tokens import Message

SYSTEM_PROMPT = "You are a helpful assistant."  # the reference's system turn, for every role

POLICY_GUIDE = (
    "You are playing a text game. Your objective is to complete the task as soon as possible.\n"
    "Below is your trajectory so far and current candidate actions.\n"
    "You need to think step by step then put the integer (the index of your chosen action) in \\boxed{}.\n"
)
_CHOOSE = "You need to think step by step then choose one action by number:\n"
_NO_ACTION_FALLBACK = ("look",)


def chat(user: str, system: str = SYSTEM_PROMPT) -> list[Message]:
    return [{"role": "system", "content": system}, {"role": "user", "content": user}]


# ---------------------------------------------------------------- policy


def candidate_actions(admissible_actions: Sequence[str]) -> tuple[str, ...]:
    """The numbered list the policy sees; "look" when the game lists none (as the reference).

    The rollout maps the parsed index through this same tuple.
    """
    return tuple(admissible_actions) or _NO_ACTION_FALLBACK


def _numbered_actions(admissible_actions: Sequence[str]) -> str:
    return "\n".join(f"{k}) {a}" for k, a in enumerate(candidate_actions(admissible_actions)))


def _choice_block(admissible_actions: Sequence[str]) -> str:
    return _CHOOSE + _numbered_actions(admissible_actions) + "\n"


def render_trajectory(observations: Sequence[str], actions_taken: Sequence[str]) -> str:
    """Lines `observation: ...` / `you took action: ...`: observation i, then the action taken on it."""
    lines = []
    for i, observation in enumerate(observations):
        lines.append(f"observation: {observation}")
        if i < len(actions_taken):
            lines.append(f"you took action: {actions_taken[i]}")
    return "\n".join(lines) or "(empty)"


def policy_step_text(observations: Sequence[str], actions_taken: Sequence[str],
                     admissible_actions: Sequence[str]) -> str:
    """The reference's per-step user text: guide, full trajectory, numbered candidate actions.

    `observations` runs to the current one; `actions_taken` has one action per earlier observation.
    """
    trajectory = render_trajectory(observations, actions_taken)
    return f"{POLICY_GUIDE}\n\n{trajectory}\n\n{_choice_block(admissible_actions)}"


def policy_messages_full_history(observations: Sequence[str], actions_taken: Sequence[str],
                                 admissible_actions: Sequence[str]) -> list[Message]:
    """The reference's policy prompt: one user message with the whole trajectory."""
    return chat(policy_step_text(observations, actions_taken, admissible_actions))


def policy_first_user_text(observation: str, admissible_actions: Sequence[str]) -> str:
    """Turn 0 of the multi-turn form; equal to the full-history text at turn 0."""
    return policy_step_text([observation], [], admissible_actions)


def policy_next_user_text(observation: str, admissible_actions: Sequence[str],
                          action_taken: str | None = None) -> str:
    """A later turn's user message: the new observation and candidates, after the executed
    action when given (the index may have been clamped or defaulted, so the model is told
    what actually ran)."""
    taken = f"you took action: {action_taken}\n" if action_taken is not None else ""
    return f"{taken}observation: {observation}\n\n{_choice_block(admissible_actions)}"


@dataclasses.dataclass(frozen=True)
class PolicyDialogue:
    """A policy episode as a growing chat: system, user, assistant, user, ...

    Only ever extended at the end, so with a prefix-stable chat template (ChatML,
    Qwen2.5, SmolLM2; Qwen3 too while responses have no <think> block) rendering
    turn k equals rendering turn k-1 + response + the new user turn, in text and in
    tokens. Qwen3's template re-renders earlier assistant turns without their
    <think> block, and a response starting with a newline merges with the header's
    newline when the whole text is encoded: the rollout keeps the sampled token ids
    (first prompt + response ids + encoded turn delta) rather than re-encoding.
    """

    turns: tuple[tuple[str, str], ...]  # (role, content)

    @classmethod
    def start(cls, observation: str, admissible_actions: Sequence[str],
              system: str = SYSTEM_PROMPT) -> PolicyDialogue:
        return cls((("system", system), ("user", policy_first_user_text(observation, admissible_actions))))

    def advance(self, response: str, observation: str, admissible_actions: Sequence[str],
                action_taken: str | None = None) -> PolicyDialogue:
        """The dialogue after the policy answered `response` and the env returned `observation`.

        `response` is the sampled text without the stop token.
        """
        if self.turns[-1][0] != "user":
            raise ValueError("advance() needs a dialogue that ends with a user turn")
        user = policy_next_user_text(observation, admissible_actions, action_taken)
        return PolicyDialogue(self.turns + (("assistant", response), ("user", user)))

    @property
    def messages(self) -> list[Message]:
        return [{"role": role, "content": content} for role, content in self.turns]

    @property
    def new_user_message(self) -> Message:
        """The last user message: what a cached rollout appends for this turn."""
        role, content = self.turns[-1]
        return {"role": role, "content": content}

    @property
    def num_responses(self) -> int:
        return sum(role == "assistant" for role, _ in self.turns)


# ---------------------------------------------------------------- reward model (judge)

JUDGE_INSTRUCTIONS = (
    "You are a judge for an agent acting in a text-based environment.\n"
    "Evaluate ONE step using:\n"
    " - the agent's prompt (observation + candidate actions),\n"
    " - its response (reasoning + chosen index), and\n"
    " - the environment's next observation after executing that action.\n"
    "Scoring (binary):\n"
    "\u2022 Score 1 if ALL are true:\n"
    "  (a) The selected action is appropriate for the current observation and task goal "
    "(it reasonably explores, progresses or completes the task);\n"
    "  (b) The reasoning is present, relevant, and not self-contradictory (no hallucinated objects/locations);\n"
    "  (c) The chosen index exists in the candidate list, and the resulting next observation "
    "is consistent with the described action.\n"
    "\u2022 Otherwise score -1. Cases include: no reasoning provided; index out of range; clearly irrelevant; "
    "undoes progress; self-contradictory/hallucinated reasoning; or next observation contradicts the action.\n"
    "Important: think first then put the final score in \\boxed{}.\n\n"
)


def judge_messages(agent_prompt: str, agent_response: str, next_observation: str) -> list[Message]:
    """The reward model's view of one policy step.

    `agent_prompt` is the step's full-history text (`policy_step_text`): plain text,
    not a rendered chat, so no special-token strings reach the judge's user turn.
    """
    return chat(
        JUDGE_INSTRUCTIONS
        + f"Agent's prompt:\n{agent_prompt}\n\n"
        + f"Agent's response:\n{agent_response}\n\n"
        + f"Next observation after this action:\n{next_observation}\n"
    )


# ---------------------------------------------------------------- environment model: failure summary


def render_numbered_trajectory(observations: Sequence[str], actions_taken: Sequence[str]) -> str:
    """Lines `[i] observation: ...` / `[i] action: ...`: step i is observation i and the action taken on it."""
    lines = []
    for i in range(max(len(observations), len(actions_taken))):
        if i < len(observations):
            lines.append(f"[{i}] observation: {observations[i]}")
        if i < len(actions_taken):
            lines.append(f"[{i}] action: {actions_taken[i]}")
    return "\n".join(lines) or "(empty trajectory)"


def failure_summary_messages(task: str, observations: Sequence[str], actions_taken: Sequence[str],
                             max_steps: int, high_risk_steps: Sequence[int] = ()) -> list[Message]:
    """Asks the env model why a failed rollout failed, in <= 2 sentences inside \\boxed{}.

    `high_risk_steps`: step indices where every reward-model vote was -1.
    """
    hint = ""
    if high_risk_steps:
        hint = f"High-risk steps (always -1): [{','.join(map(str, high_risk_steps))}] (match [idx]).\n"
    return chat(
        "You are analyzing a failed rollout of a policy in a text-based environment.\n"
        f"The rollout did NOT finish the task within {max_steps} interaction steps.\n"
        f"Task (natural language): {task.strip() or '(unknown task)'}\n\n"
        f"{hint}"
        "Full trajectory (observation/action sequence):\n"
        f"{render_numbered_trajectory(observations, actions_taken)}\n\n"
        "In at most TWO sentences, explain the most likely reasons the policy failed to finish in time.\n"
        "Be concrete (e.g., wrong exploration, looping, wrong target/location, inconsistent reasoning, "
        "hallucination, etc.).\n"
        "Put the final <=2 sentence summary in \\boxed{} and output NOTHING else.\n"
    )
