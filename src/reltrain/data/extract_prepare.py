"""The data of a task=extract run: the gold files read (data/extraction.py), the entity types and
relations of the training file, the vocabulary (or the pretrained tokenizer), and every sentence
as the span model reads it. Validation and test sentences are cut into units without their gold
(what prediction sees); their gold stays beside them for scoring."""

from __future__ import annotations

import hashlib
import logging
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

from reltrain.data.extraction import read_annotated
from reltrain.data.schema import Annotated
from reltrain.data.sentences import resolve_sentences
from reltrain.data.spans import SpanDataset, SpanEncoder, lowercase_ids
from reltrain.data.tokenize import Tokenizer
from reltrain.data.vocab import Vocab
from reltrain.runtime.errors import DataError, UserError
from reltrain.data.readers import read_text
from reltrain.data.lm import LMTokenizer

log = logging.getLogger(__name__)

SPLITS = ("train", "valid", "test")


@dataclass
class PreparedSpans:
    labels: list[str]  # the relations
    entity_types: list[str]
    sets: dict[str, SpanDataset]
    vocab: Vocab | None
    lm: object  # an LMTokenizer, or None
    cache_key: str  # what the run's data and options were, for resume
    meta: dict = field(default_factory=dict)

    @property
    def vocab_size(self) -> int:
        return len(self.lm) if self.lm is not None else len(self.vocab)


def unit_tokenizer(data_cfg) -> Tokenizer:
    """Units of the span model: words as treebanks cut them for English (the tokens of the
    data it is trained on, CoNLL04's), characters for Chinese (jieba's words may cross an
    entity's edge, which no span could then match)."""
    kind = data_cfg.tokenizer
    if kind == "auto":
        kind = "char" if data_cfg.language == "zh" else "treebank"
    return Tokenizer(kind, lowercase=False)


def span_encoder(cfg, entity_types, relations, vocab=None, lm=None,
                 symmetric: frozenset[str] = frozenset()) -> SpanEncoder:
    to_ids = None if lm is not None else (partial(lowercase_ids, vocab) if cfg.data.lowercase
                                          else vocab.encode)
    return SpanEncoder(unit_tokenizer(cfg.data), entity_types, relations, cfg.extract.max_width,
                       cfg.data.max_len, to_ids=to_ids, lm=lm,
                       tags=cfg.extract.mentions == "tags", symmetric=symmetric,
                       shapes=cfg.extract.shapes)


def prepare_spans(cfg) -> PreparedSpans:
    files = {s: getattr(cfg.data, s) for s in SPLITS if getattr(cfg.data, s)}
    if "train" not in files:
        raise UserError("task=extract needs data.train: a file of sentences with their entities "
                        "and relations (SpERT JSON, PURE, DuIE or reltrain JSON lines)")
    sentences, skipped = {}, {}
    for split, path in files.items():
        sentences[split], skipped[split] = _read(path, cfg.data)
    train = sentences["train"]
    types = sorted({e.type for s in train for e in s.entities})
    relations = sorted({r.type for s in train for r in s.relations})
    if not types or not relations:
        raise UserError(f"{files['train']}: no entity or no relation to learn from")
    vocab, lm = None, None
    if cfg.model.name == "lm":
        lm = LMTokenizer.from_folder(cfg.model.lm.pretrained)
    else:
        units = unit_tokenizer(cfg.data)
        words = ([p[0].lower() if cfg.data.lowercase else p[0]
                  for p in units.pieces(s.text, set())] if s.tokens is None
                 else [t.lower() if cfg.data.lowercase else t for t in s.tokens] for s in train)
        vocab = Vocab.build(words, cfg.data.min_freq)
    symmetric = resolve_symmetric(cfg.extract.symmetric, cfg.data.labels, relations,
                                  cfg.data.encoding)
    encode = span_encoder(cfg, types, relations, vocab, lm, symmetric)
    # a tagger's mentions cannot overlap
    overlap = ("flat" if cfg.extract.mentions == "tags"
               else resolve_overlap(cfg.extract.overlap, train))
    sets, lost = {}, {}
    pad = lm.pad_id if lm is not None else 0
    for split, data in sentences.items():
        examples = [encode(s, labelled=split == "train") for s in data]
        lost[split] = sum(x.lost for x in examples)
        sets[split] = SpanDataset(examples, data, pad, types, relations, flat=overlap == "flat",
                                  symmetric=symmetric,
                                  tune=split == "valid" and cfg.extract.tune_thresholds)
    meta = {"rows": {k: len(v) for k, v in sentences.items()}, "skipped": skipped,
            "lost_entities": lost, "entity_types": types, "strings": any(s.strings for s in train),
            "overlap": overlap, "tags": cfg.extract.mentions == "tags",
            "sentences": resolve_sentences(cfg.extract.sentences, train, cfg.data.language),
            "symmetric": sorted(symmetric)}
    return PreparedSpans(relations, types, sets, vocab, lm, _key(files, cfg), meta)


MAX_TYPES_BYTES = 1 << 20


def resolve_symmetric(setting: str, types_file: str, relations: list[str],
                      encoding: str = "utf-8") -> frozenset[str]:
    """The relations that hold in either order: ``extract.symmetric``'s names, or with ``auto``
    those a SpERT types file (``data.labels``) marks ``"symmetric": true`` (none without one).
    A name that is no relation of the training data is an error."""
    if setting != "auto":
        names = [n.strip() for n in setting.split(",") if n.strip()]
        unknown = [n for n in names if n not in relations]
        if unknown:
            raise UserError(f"extract.symmetric: '{unknown[0][:80]}' is not a relation of the "
                            f"training data ({', '.join(relations[:8])}"
                            f"{', ...' if len(relations) > 8 else ''})")
        return frozenset(names)
    if not types_file:
        return frozenset()
    return frozenset(n for n in read_symmetric(types_file, encoding) if n in relations)


def read_symmetric(path: str, encoding: str = "utf-8") -> list[str]:
    """The relations a SpERT types file (``{"entities": {...}, "relations": {NAME: {...,
    "symmetric": bool}}}``) marks symmetric."""
    import json

    if Path(path).stat().st_size > MAX_TYPES_BYTES:
        raise DataError(path, None, None, f"a types file of more than {MAX_TYPES_BYTES} bytes")
    try:
        types = json.loads(read_text(path, encoding))
    except json.JSONDecodeError as exc:
        raise DataError(path, exc.lineno, None, f"not JSON: {exc.msg}") from None
    relations = types.get("relations") if isinstance(types, dict) else None
    if not isinstance(relations, dict):
        raise DataError(path, None, "relations", "expected a SpERT types file: an object with "
                                                 "\"relations\": {NAME: {\"symmetric\": ...}}")
    out = []
    for name, about in relations.items():
        flag = about.get("symmetric", False) if isinstance(about, dict) else None
        if not isinstance(flag, bool):
            raise DataError(path, None, f"relations.{name[:80]}", "expected an object whose "
                            "\"symmetric\" is true or false")
        if flag:
            out.append(name)
    return out


NESTED_SHARE = 0.2  # auto decodes nested from this share of training sentences with overlaps


def resolve_overlap(setting: str, train: list[Annotated]) -> str:
    """``auto``: flat unless at least ``NESTED_SHARE`` of the training sentences have two
    mentions that overlap. CoNLL04 has none; DuIE's strings nest in 716 of 7,398 sentences (a
    song's title holds its singer's name), and there flat decoding still answered far better
    (validation triples F1 0.256 against 0.110 nested, the same model: docs/extraction.md): a
    span model proposes a word and its neighbours' pieces together, and only the rare nesting
    it misses is worth them."""
    if setting != "auto":
        return setting
    nested = 0
    for s in train:
        ends = sorted((e.start, e.end) for e in set(s.entities))
        nested += any(b[0] < a[1] for a, b in zip(ends, ends[1:]))
    return "nested" if train and nested >= NESTED_SHARE * len(train) else "flat"


def _read(path: str, data_cfg) -> tuple[list[Annotated], list[str]]:
    skipped = [] if data_cfg.skip_bad_rows else None
    return read_annotated(path, data_cfg.encoding, skipped=skipped), skipped or []


def _key(files: dict, cfg) -> str:
    digest = hashlib.sha256()
    for split, path in sorted({**files, "labels": cfg.data.labels}.items()):
        if not path:
            continue
        digest.update(split.encode())
        with open(path, "rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                digest.update(block)
    d = cfg.data
    digest.update(repr((d.language, d.tokenizer, d.lowercase, d.max_len, d.min_freq,
                        cfg.extract.max_width, cfg.extract.mentions,
                        Path(cfg.model.lm.pretrained).name)).encode())
    if cfg.extract.symmetric != "auto":  # the keys of runs from before the option stay
        digest.update(cfg.extract.symmetric.encode())
    if cfg.extract.shapes:  # likewise
        digest.update(b"shapes")
    if unit_tokenizer(d).kind == "treebank":  # English units before it were cut as "word"
        digest.update(b"treebank")
    return digest.hexdigest()[:16]
