"""How text becomes token ids (our own words and vocabulary, or a pretrained model's subwords):
training, prediction and export all ask this one object, so no caller branches on the encoder."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from reltrain.data.schema import Record
from reltrain.data.tokenize import Tokenized, Tokenizer
from reltrain.data.vocab import UNK, Vocab
from reltrain.data.lm import LMTokenizer


@dataclass
class TextEncoder:
    tokenize: Callable[[Record, int], Tokenized]  # (record, max_len) -> tokens and entity spans
    to_ids: Callable[[list], list[int]]  # tokens -> ids
    size: int  # embedding rows the model needs
    pad_id: int
    added_tokens: int  # lm: characters added to the pretrained vocabulary
    unk_id: int | None = None  # the id of a token the vocabulary does not hold


def text_encoder(data_cfg, vocab: Vocab | None = None, lm=None) -> TextEncoder:
    """The encoder of a vocabulary (with the configured word tokenizer) or of an ``LMTokenizer``."""
    if lm is not None:
        return TextEncoder(lm, list, len(lm), lm.pad_id, len(lm.added), lm.hf.unk_token_id)
    assert vocab is not None, "a vocabulary or a pretrained tokenizer is needed"
    return TextEncoder(Tokenizer.from_config(data_cfg), vocab.encode, len(vocab), 0, 0,
                       vocab.encode([UNK])[0])


def identity_encoder(data_cfg, vocab: list[str] | None, lm: dict | None) -> TextEncoder:
    """Rebuild the encoder from what a checkpoint stores: a vocabulary, or a pretrained
    tokenizer's files (``lm``)."""
    if lm:
        return text_encoder(data_cfg, lm=LMTokenizer.from_files(lm["files"], lm["types"],
                                                                 lm.get("added")))
    return text_encoder(data_cfg, Vocab(vocab))
