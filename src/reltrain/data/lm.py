"""Subword input for pretrained encoders: entity markers as special tokens at the entities'
character offsets, a window around them, and [UNK]-only characters added as tokens of their own."""

from __future__ import annotations

import tempfile
from collections import Counter
from collections.abc import Iterable
from itertools import islice
from pathlib import Path

from reltrain.data.schema import Record
from reltrain.data.tokenize import Tokenized, truncate
from reltrain.runtime.errors import UserError, first_line


# What a guarded tokenizer call lets through: the user's own interrupt and the interpreter's exit.
_STOPS = (KeyboardInterrupt, SystemExit, GeneratorExit)

# The tokenizer files a checkpoint or an exported folder may carry: names, never paths.
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json",
                   "vocab.txt", "vocab.json", "merges.txt", "added_tokens.json")


def _markers(role: str, type_: str | None) -> tuple[str, str]:
    tag = f"{role}:{type_}" if type_ else role
    return f"[{tag}]", f"[/{tag}]"


def _add_special_tokens(hf, tokens: list[str]) -> None:
    """Add ``tokens`` as special tokens, keeping the tokenizer's own extra ones (transformers 5
    calls them "extra_special_tokens", 4.x "additional_special_tokens")."""
    import inspect

    params = inspect.signature(hf.add_special_tokens).parameters
    kind = "extra" if "replace_extra_special_tokens" in params else "additional"
    hf.add_special_tokens({f"{kind}_special_tokens": tokens},
                          **{f"replace_{kind}_special_tokens": False})


class LMTokenizer:
    """A Hugging Face fast tokenizer with entity markers; ``types`` enables typed markers."""

    def __init__(self, hf_tokenizer, types: list[str] | None = None, added: list[str] | None = None):
        if not getattr(hf_tokenizer, "is_fast", False):
            raise UserError("model.lm.pretrained needs a fast tokenizer (tokenizer.json) for exact "
                            "character offsets")
        self.hf, self.types = hf_tokenizer, sorted(types) if types else None
        markers = [m for role in ("E1", "E2") for m in _markers(role, None)]
        for t in self.types or ():
            markers += [m for role in ("E1", "E2") for m in _markers(role, t)]
        _add_special_tokens(self.hf, markers)
        # What the tokenizer puts around one sequence ([CLS] ... [SEP], <s> ... </s>): read off
        # the encoding of a lone marker, which is one token (transformers 5 has no
        # build_inputs_with_special_tokens for every tokenizer).
        marker = self.hf.convert_tokens_to_ids(markers[0])
        wrapped = self.encode(markers[0], add_special_tokens=True)["input_ids"]
        at = wrapped.index(marker)
        self.prefix, self.suffix = wrapped[:at], wrapped[at + 1:]
        self.pad_id = self.hf.pad_token_id or 0
        self.added = list(added or [])  # characters added by add_unknown_chars, in id order

    @classmethod
    def from_folder(cls, folder: str | Path, types: list[str] | None = None,
                    added: list[str] | None = None) -> "LMTokenizer":
        from transformers import AutoTokenizer

        try:
            hf = AutoTokenizer.from_pretrained(str(folder), use_fast=True, local_files_only=True)
        except _STOPS:
            raise
        except BaseException as exc:  # Rust errors and panics alike mean "unusable"
            raise UserError(f"cannot load a tokenizer from {folder}: {first_line(exc, 200)}") from None
        return cls(hf, types, added)

    @classmethod
    def from_files(cls, files: dict[str, str], types: list[str] | None = None,
                   added: list[str] | None = None) -> "LMTokenizer":
        """Rebuild from the files a checkpoint carries (no model folder needed)."""
        with tempfile.TemporaryDirectory() as tmp:
            for name, text in files.items():
                (Path(tmp) / name).write_text(text, encoding="utf-8")
            return cls.from_folder(tmp, types, added)

    def add_unknown_chars(self, texts: Iterable[str], min_count: int) -> dict:
        """Give each character that the tokenizer reads as [UNK] alone, seen so ``min_count`` times
        in ``texts`` (read twice, a batch at a time), a token of its own; returns the [UNK] share
        of subwords before and after."""
        unk = self.hf.unk_token_id
        if unk is None or min_count <= 0 or self.added:
            return {}
        before, counts = self._unknown(texts)
        if before is None:
            return {}
        chars = sorted(ch for ch, n in counts.items() if n >= min_count)
        # Alone too: a character known alone is not the cause (and adding it would cut words).
        alone = self.encode(chars, add_special_tokens=False)["input_ids"] if chars else []
        unknown = [ch for ch, ids in zip(chars, alone) if unk in ids]
        self.add_chars(unknown)
        return {"unk_before": before, "unk_after": self._unknown(texts)[0], "added": len(unknown)}

    def add_chars(self, chars: list[str]) -> None:
        """Give ``chars`` tokens of their own, after the markers (ids in this order)."""
        from tokenizers import AddedToken

        # Not normalized: matched in the raw text, where they were found.
        self.hf.add_tokens([AddedToken(ch, normalized=False, single_word=False) for ch in chars])
        self.added = list(chars)

    def _unknown(self, texts: Iterable[str]) -> tuple[float | None, Counter]:
        """The [UNK] share of the subwords (None: no text), and the characters under each [UNK]."""
        total, unknown, counts = 0, 0, Counter()
        texts = iter(texts)
        while batch := list(islice(texts, 1024)):
            enc = self.encode(batch, add_special_tokens=False, return_offsets_mapping=True)
            for text, ids, offsets in zip(batch, enc["input_ids"], enc["offset_mapping"]):
                total += len(ids)
                for i, (s, e) in zip(ids, offsets):
                    if i == self.hf.unk_token_id:
                        unknown += 1
                        counts.update(ch for ch in text[s:e] if not ch.isspace())
        return (unknown / total if total else None), counts

    def encode(self, text: str | list[str], **kwargs):
        """The tokenizer on ``text``; every call with text goes through here. The tokenizer may
        come from a stranger's folder: its Rust code can panic on a text (a
        pathological pre-tokenizer regex), which pyo3 raises as a BaseException; that is one
        line about the model, not a traceback."""
        try:
            return self.hf(text, **kwargs)
        except _STOPS:
            raise
        except BaseException as exc:
            raise UserError(f"the model's tokenizer failed on this text: {first_line(exc, 200)}") from None

    def files(self) -> dict[str, str]:
        """The tokenizer's own files (markers included) as text, to store in a checkpoint."""
        with tempfile.TemporaryDirectory() as tmp:
            self.hf.save_pretrained(tmp)
            return {p.name: p.read_text(encoding="utf-8") for p in Path(tmp).iterdir()
                    if p.name in TOKENIZER_FILES}

    def __len__(self) -> int:
        return len(self.hf)

    def __call__(self, record: Record, max_len: int) -> Tokenized:
        h, t = record.head, record.tail
        typed = self.types is not None
        h_open, h_close = _markers("E1", h.type if typed and h.type in self.types else None)
        t_open, t_close = _markers("E2", t.type if typed and t.type in self.types else None)
        # At one position: closing markers first (inner before outer), then opening ones
        # (outer before inner), so nested and adjacent entities stay well bracketed.
        inserts = sorted([(h.start, 1, -h.end, h_open, "h0"), (h.end, 0, -h.start, h_close, "h1"),
                          (t.start, 1, -t.end, t_open, "t0"), (t.end, 0, -t.start, t_close, "t1")])
        text, pieces, at, where = record.text, [], 0, {}
        length = 0
        for pos, _, _, marker, key in inserts:
            pieces.append(text[at:pos])
            length += pos - at
            pieces.append(f" {marker} ")
            where[key] = length + 1
            length += len(marker) + 2
            at = pos
        pieces.append(text[at:])
        enc = self.encode("".join(pieces), add_special_tokens=False, return_offsets_mapping=True)
        starts = {s: i for i, (s, e) in enumerate(enc["offset_mapping"]) if e > s}
        pos = {key: starts[c] for key, c in where.items()}
        head, tail = (pos["h0"], pos["h1"] + 1), (pos["t0"], pos["t1"] + 1)
        cut = truncate(enc["input_ids"], head, tail, max_len - len(self.prefix) - len(self.suffix))
        k = len(self.prefix)
        return Tokenized(self.prefix + cut.tokens + self.suffix, (cut.head[0] + k, cut.head[1] + k),
                         (cut.tail[0] + k, cut.tail[1] + k), cut.truncated)
