"""A tokenizer for benchmark prompts written as "t12 t7 ...": enough for Tunix's TokenizerAdapter.

Imported by the Tunix workers (run with Tunix's interpreter, from this folder).
"""


class CountingTokenizer:
    def encode(self, text, **kwargs):
        return [int(piece[1:]) for piece in text.split()]

    def decode(self, ids, **kwargs):
        return " ".join(f"t{i}" for i in ids)

    def bos_id(self):
        return 1

    def eos_id(self):
        return 2

    def pad_id(self):
        return 0
