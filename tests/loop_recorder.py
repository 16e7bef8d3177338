"""A recorder of what `rl_step` gives its collaborators (tests/test_loop.py): each wrapper keeps its
inputs and calls the real collaborator, so nothing is monkeypatched."""

from __future__ import annotations

from rlanything_jax.agents.trajectory import JudgedEpisode


class Recorder:
    """Wraps each collaborator `rl_step` is given and keeps what it was given; the real one does the work."""

    def __init__(self):
        self.episodes, self.judgments, self.trained, self.proposals = [], [], [], []

    def wrap_policy(self, engine):
        recorder = self

        class Policy:
            def play(self, tasks, config, seed):
                episodes, counts = engine.play(tasks, config, seed)
                recorder.episodes.append(episodes)
                return episodes, counts

            def update_params(self, params):
                engine.update_params(params)
        return Policy()

    def wrap_role(self, role):
        recorder = self

        class Role:
            def __getattr__(self, name):   # the rest of the role: the real one's
                return getattr(role, name)

            def judge(self, reward_model, episodes, config, seed):
                judgments, counts = role.judge(reward_model, episodes, config, seed)
                recorder.judgments.append(judgments.steps)
                return judgments, counts
        return Role()

    def wrap_trainer(self, learner):
        recorder = self

        class Trainer:
            def train(self, state, examples, seed, prefix):
                recorder.trained.append((prefix, learner, list(examples)))
                return learner.train(state, examples, seed, prefix)
        return Trainer()

    def wrap_generator(self, generator):
        recorder = self

        class Generator:
            def propose(self, raw, active, direction, accuracy, episodes, step):
                candidate, counts = generator.propose(raw, active, direction, accuracy, episodes, step)
                recorder.proposals.append((raw.task_id, direction, accuracy, step, candidate))
                return candidate, counts
        return Generator()

    def judged(self):
        """This step's episodes with their judgments."""
        (episodes,), (judgments,) = self.episodes, self.judgments
        return [JudgedEpisode(e, j) for e, j in zip(episodes, judgments, strict=True)]

    def reset(self):
        self.episodes.clear()
        self.judgments.clear()
        self.trained.clear()
        self.proposals.clear()
