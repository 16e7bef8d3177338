"""The ALFWorld engine (TextWorld's PDDL environment + ALFWorld's demangler) and a speed-up for it.

TextWorld's PDDL text generator re-parses every command template and grammar condition with
TatSu on every step, and deep-copies the whole game state each time it copies a grammar
symbol; every reset translates the same PDDL problem to SAS twice. That makes a step of a
generated room cost tens of milliseconds. `speed_up_textgen` memoises the pure parses and
translations, and shares (instead of copying) the read-only state inside symbol contexts.
The text it produces is unchanged (tests/envs/test_alfworld.py compares transcripts with and
without it). Set RLANYTHING_ALFWORLD_PLAIN_TEXTGEN=1 to play without it.
"""

from __future__ import annotations

import contextlib
import copy
import functools
import os
import sys

PLAIN_TEXTGEN_ENV = "RLANYTHING_ALFWORLD_PLAIN_TEXTGEN"
_patched = False


def speed_up_textgen() -> bool:
    """Patches textworld.envs.pddl.textgen once per process; returns whether it is active."""
    global _patched
    if os.environ.get(PLAIN_TEXTGEN_ENV) == "1":
        return False
    if _patched:
        return True
    from textworld.envs.pddl import textgen

    parse = textgen._parse_and_convert

    @functools.lru_cache(maxsize=4096)
    def _parsed(text: str, rule_name: str, trace) -> tuple:
        return tuple(parse(text, rule_name=rule_name, trace=trace))

    def parse_and_convert(text, rule_name="symbols", trace=False):
        # Derivation mutates the symbols it gets, so every caller receives fresh copies.
        return copy.deepcopy(list(_parsed(text, rule_name, trace)))

    rule_class = textgen.Rule

    class _MemoRule:
        """Stands in for textworld.logic.Rule inside textgen only: parsed queries are read-only there."""
        parse_conjunctive_query = staticmethod(functools.lru_cache(maxsize=4096)(rule_class.parse_conjunctive_query))

    def symbol_copy(self, context):
        # The state, facts and entity infos are only read during derivation: share them, copy the rest.
        memo = {}
        for ctx in (self.context, context):
            for key in ("state", "facts", "entity_infos"):
                if key in ctx:
                    memo[id(ctx[key])] = ctx[key]
        duplicate = copy.deepcopy(self, memo)
        duplicate.context = textgen.copy_context(context)
        return duplicate

    import fast_downward

    translate = fast_downward.pddl2sas

    @functools.lru_cache(maxsize=32)
    def pddl2sas(domain: str, problem: str, verbose: bool = False, optimize: bool = False):
        # Every reset re-translates the same problem twice; the translated task is only read afterwards.
        return translate(domain, problem, verbose=verbose, optimize=optimize)

    from textworld.envs.pddl import logic

    parse_logic = logic._parse_and_convert

    @functools.lru_cache(maxsize=64)
    def parse_game_logic(text: str, rule_name: str):
        # GameLogic copies the parsed actions and rules into its own containers and only reads them.
        return parse_logic(text, rule_name=rule_name)

    fast_downward.pddl2sas = pddl2sas
    logic._parse_and_convert = lambda text, rule_name: parse_game_logic(text, rule_name)
    textgen._parse_and_convert = parse_and_convert
    textgen.Rule = _MemoRule
    textgen.Symbol.copy = symbol_copy
    _patched = True
    return True


def new_engine():
    """TextWorld's PDDL engine with ALFWorld's name demangler, as alfworld plays its own games."""
    speed_up_textgen()
    import textworld
    from alfworld.agents.environment.alfred_tw_env import AlfredDemangler
    from textworld.envs import PddlEnv

    return AlfredDemangler(PddlEnv(textworld.EnvInfos(admissible_commands=True, won=True)), shuffle=False)


@contextlib.contextmanager
def keep_argv():
    """fast-downward's translator overwrites sys.argv with ["translate.py", "domain", "task"]; undo it."""
    saved = sys.argv
    try:
        yield
    finally:
        sys.argv = saved
