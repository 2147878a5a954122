"""Records -> token ids and entity spans, cached on disk as numpy arrays + JSON (no pickle),
in a folder named by a hash of the input bytes and of every option that changes the result."""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from reltrain import children, stops
from reltrain.data.readers import labels_from_records, read_labels, read_records
from reltrain.data.schema import Record
from reltrain.data.tokenize import Tokenizer
from reltrain.data.vocab import Vocab
from reltrain.errors import DataError, UserError

log = logging.getLogger(__name__)

CACHE_FORMAT = 2  # 2: entries of pretrained encoders keep their added characters
SPLITS = ("train", "valid", "test")


@dataclass
class Split:
    """One split as flat arrays: tokens of example i are ``token_ids[offsets[i]:offsets[i+1]]``."""

    token_ids: np.ndarray  # (T,) int32
    offsets: np.ndarray  # (N+1,) int64
    head: np.ndarray  # (N, 2) int32 token span, end exclusive
    tail: np.ndarray  # (N, 2) int32
    labels: np.ndarray  # (N,) int64; -1 where the input had no relation

    def __len__(self) -> int:
        return len(self.labels)

    @property
    def lengths(self) -> np.ndarray:
        return np.diff(self.offsets)

    def save(self, path: Path) -> None:
        np.savez(path, token_ids=self.token_ids, offsets=self.offsets, head=self.head,
                 tail=self.tail, labels=self.labels)

    @classmethod
    def load(cls, path: Path) -> "Split":
        with np.load(path, allow_pickle=False) as z:
            return cls(**{k: z[k] for k in ("token_ids", "offsets", "head", "tail", "labels")})


@dataclass
class Prepared:
    vocab: Vocab | None  # None for pretrained encoders, which bring their own (``lm``)
    labels: list[str]
    splits: dict[str, Split]
    meta: dict = field(default_factory=dict)
    cache_path: Path | None = None  # None: not cached (the cache location is not writable)
    reused: bool = False
    lm: object = None  # data.lm.LMTokenizer for pretrained encoders
    cache_key: str = ""  # hash of the data files and options: identifies the data of a run

    @property
    def vocab_size(self) -> int:
        return len(self.lm) if self.lm is not None else len(self.vocab)


def encode_records(records: list[Record], tokenize, to_ids, label_index: dict[str, int],
                   max_len: int, progress: bool = False,
                   desc: str = "tokenize") -> tuple[Split, list[list], int]:
    """Tokenize and index records; ``to_ids`` None: ids later, once a vocabulary exists."""
    from tqdm.auto import tqdm

    all_tokens, heads, tails, truncated = [], [], [], 0
    for rec in tqdm(records, desc=desc, disable=not progress, unit="sent", leave=False):
        tok = tokenize(rec, max_len)
        all_tokens.append(tok.tokens)
        heads.append(tok.head)
        tails.append(tok.tail)
        truncated += tok.truncated
    lengths = np.array([len(t) for t in all_tokens], dtype=np.int64)
    ids = [] if to_ids is None else [i for toks in all_tokens for i in to_ids(toks)]
    split = Split(
        token_ids=np.asarray(ids, dtype=np.int32),
        offsets=np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64),
        head=np.asarray(heads, dtype=np.int32).reshape(-1, 2),
        tail=np.asarray(tails, dtype=np.int32).reshape(-1, 2),
        labels=np.asarray([label_index.get(r.relation, -1) if r.relation is not None else -1
                           for r in records], dtype=np.int64),
    )
    return split, all_tokens, truncated


def cache_key(data_cfg, tokenizer_id: str) -> str:
    """A hash of the data files' bytes and of every option that changes the prepared tensors."""
    digest = hashlib.sha256()
    options = {"format": CACHE_FORMAT, "tokenizer": tokenizer_id, "max_len": data_cfg.max_len,
               "min_freq": data_cfg.min_freq, "skip_bad_rows": data_cfg.skip_bad_rows}
    digest.update(json.dumps(options, sort_keys=True).encode())
    for name in (*SPLITS, "labels"):
        path = getattr(data_cfg, name)
        digest.update(f"\0{name}\0".encode())
        if path:
            _hash_file(digest, path)
    return digest.hexdigest()[:20]


def _hash_file(digest, path) -> None:
    try:
        with open(path, "rb") as f:
            for chunk in iter(lambda: f.read(1 << 20), b""):
                digest.update(chunk)
    except OSError as exc:
        raise UserError(f"{path}: cannot read: {exc.strerror or exc}") from None


def default_cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "reltrain"


def _tokenizer_id(data_cfg, lm_folder: str, lm_markers: str, lm_add_chars: int) -> str:
    """What the cache key knows of the tokenization: cheap to compute, so a hit costs a hash
    and a read (the LM tokenizer is hashed by its files, not loaded)."""
    if not lm_folder:
        tokenizer = Tokenizer.from_config(data_cfg)
        return f"{tokenizer.kind}:lower={tokenizer.lowercase}"
    from reltrain.artifacts import TOKENIZER_FILES

    digest = hashlib.sha256(f"{lm_markers}:{lm_add_chars}".encode())
    for name in TOKENIZER_FILES:
        path = Path(lm_folder) / name
        if path.is_file():
            digest.update(f"\0{name}\0".encode())
            _hash_file(digest, path)
    return "lm:" + digest.hexdigest()


def prepare(data_cfg, progress: bool = False, lm_folder: str = "", lm_markers: str = "plain",
            lm_add_chars: int = 0) -> Prepared:
    """The cached tensors for these files and options, built if needed (a damaged entry is replaced;
    an unwritable cache location: no cache). ``lm_folder``: its subwords, no vocabulary."""
    root = Path(data_cfg.cache_dir) if data_cfg.cache_dir else default_cache_dir()
    key = cache_key(data_cfg, _tokenizer_id(data_cfg, lm_folder, lm_markers, lm_add_chars))
    path = root / key
    prepared = _load_cached(path) if path.exists() else None
    if prepared is None:
        prepared = _built_in_child(data_cfg, path, progress, lm_folder, lm_markers, lm_add_chars)
    if lm_folder and prepared.lm is None:
        from reltrain.data.lm import LMTokenizer

        saved = prepared.meta["lm"]
        prepared.lm = LMTokenizer.from_folder(lm_folder, saved["types"])
        prepared.lm.add_chars(saved["added"])
    prepared.cache_key = key
    return prepared


def _build_and_save(data_cfg, path: Path, progress: bool, lm_folder: str, lm_markers: str,
                    lm_add_chars: int) -> Prepared:
    lm = _lm_tokenizer(data_cfg, lm_folder, lm_markers, lm_add_chars) if lm_folder else None
    tokenize = lm or Tokenizer.from_config(data_cfg)
    prepared = _build(data_cfg, tokenize, progress, with_vocab=lm is None)
    prepared.meta["tokenizer"] = "lm" if lm else tokenize.kind
    if lm is not None:
        prepared.meta["lm"] = {"types": lm.types, "added": lm.added}
    prepared.cache_path = _save(prepared, path)
    prepared.lm = lm
    return prepared


def _built_in_child(data_cfg, path: Path, *options) -> Prepared:
    """``_build_and_save`` in a child that ends, handing its result over through the cache entry:
    the training process never holds jieba's dictionary or the garbage of segmentation."""
    def stop():
        stops.check("while preprocessing; nothing to save")

    if _writable(path.parent) and children.call(_wrote_cache, data_cfg, path, *options, stop=stop):
        prepared = _load_cached(path)
        if prepared is not None:
            prepared.reused = False
            return prepared
    else:
        log.warning("cannot write the preprocessing cache under %s: continuing without a cache "
                    "(set data.cache_dir to a writable folder)", path.parent)
    with tempfile.TemporaryDirectory(prefix="reltrain-data-") as scratch:  # for the hand-over
        entry = Path(scratch) / path.name
        if children.call(_wrote_cache, data_cfg, entry, *options, stop=stop):
            prepared = _load(entry)
            prepared.cache_path, prepared.reused = None, False
            return prepared
    return _build_and_save(data_cfg, path, *options)  # nowhere to hand over through


def _writable(folder: Path) -> bool:
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError:
        return False
    return os.access(folder, os.W_OK)


def _wrote_cache(*args) -> bool:
    return _build_and_save(*args).cache_path is not None


def _load_cached(path: Path) -> Prepared | None:
    """The cache entry at ``path``, or None (a damaged one is moved out of the way first)."""
    try:
        prepared = _load(path)
        prepared.reused = True
        return prepared
    except Exception as exc:  # truncated npz, bad JSON, missing file: rebuilt, never trusted
        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        log.warning("preprocessing cache %s is damaged (%s); rebuilding it", path, reason)
    aside = path.with_name(f"{path.name}.damaged-{os.getpid()}")
    try:
        os.replace(path, aside)
        shutil.rmtree(aside, ignore_errors=True)
    except OSError:  # another process moved or replaced it first
        pass
    return None


def prepare_run(cfg, progress: bool = False) -> Prepared:
    """``prepare`` with the tokenization the configured model needs."""
    lm = cfg.model.name == "lm"
    return prepare(cfg.data, progress, lm_folder=cfg.model.lm.pretrained if lm else "",
                   lm_markers=cfg.model.lm.markers, lm_add_chars=cfg.model.lm.add_chars)


def token_identity(prepared: Prepared) -> dict:
    """What a checkpoint must share with the data to be resumed or used: vocabulary or tokenizer."""
    if prepared.lm is not None:
        lm = prepared.lm
        return {"vocab": None, "lm": {"files": lm.files(), "types": lm.types, "added": lm.added}}
    return {"vocab": prepared.vocab.tokens, "lm": None}


def _lm_tokenizer(data_cfg, folder: str, markers: str, add_chars: int):
    from reltrain.data.lm import LMTokenizer

    records = []
    if markers == "typed" or add_chars > 0:
        records = read_records(data_cfg.train, skip_bad_rows=data_cfg.skip_bad_rows).records
    # Entity types only from the training file's own head_type / tail_type columns.
    types = sorted({t for r in records for t in (r.head.type, r.tail.type) if t})
    lm = LMTokenizer.from_folder(folder, types if markers == "typed" else None)
    stats = lm.add_unknown_chars((r.text for r in records), add_chars)
    if stats.get("unk_before"):
        log.info("%s reads %.1f%% of the training subwords as [UNK]; %d characters seen at least "
                 "%d times get tokens of their own (model.lm.add_chars): %.1f%% [UNK] now",
                 folder, 100 * stats["unk_before"], stats["added"], add_chars, 100 * stats["unk_after"])
    return lm


def _build(data_cfg, tokenize, progress: bool, with_vocab: bool) -> Prepared:
    given = read_labels(data_cfg.labels) if data_cfg.labels else None
    skip = data_cfg.skip_bad_rows
    train = read_records(data_cfg.train, given, skip_bad_rows=skip)
    _check_training_data(data_cfg, train.records, tokenize)
    labels = given if given is not None else labels_from_records(train.records)
    index = {name: i for i, name in enumerate(labels)}
    results = {"train": train}
    for name in ("valid", "test"):
        if getattr(data_cfg, name):
            results[name] = read_records(getattr(data_cfg, name), labels, skip_bad_rows=skip)
    splits, token_lists, meta = {}, {}, {"skipped": {}, "truncated": {}, "rows": {}}
    for name, result in results.items():
        split, tokens, cut = encode_records(result.records, tokenize, None if with_vocab else list,
                                            index, data_cfg.max_len, progress, desc=f"tokenize {name}")
        splits[name], token_lists[name] = split, tokens
        meta["skipped"][name] = result.skipped
        meta["truncated"][name] = cut
        meta["rows"][name] = len(result.records)
    vocab = None
    if with_vocab:
        vocab = Vocab.build(token_lists["train"], data_cfg.min_freq)
        for name, split in splits.items():
            split.token_ids = np.asarray([i for toks in token_lists[name] for i in vocab.encode(toks)],
                                         dtype=np.int32)
    return Prepared(vocab=vocab, labels=labels, splits=splits, meta=meta)


def _check_training_data(data_cfg, records: list[Record], tokenize) -> None:
    """Mistakes that would train a useless model without a word: one relation, Chinese as words."""
    relations = {r.relation for r in records}
    if len(relations) < 2:
        only = f"the relation '{next(iter(relations))}'" if relations else "no rows"
        raise DataError(data_cfg.train, None, None,
                        f"the training data has {only}: a classifier needs at least two "
                        f"relations (add rows of others, e.g. a 'None' relation for pairs "
                        f"that have none)")
    if getattr(tokenize, "kind", None) != "word":
        return
    sample = "".join(r.text for r in records[:2000])
    letters = [c for c in sample if not c.isspace()]
    cjk = sum(1 for c in letters if is_cjk(c)) / max(len(letters), 1)
    if cjk > 0.3 and data_cfg.tokenizer == "auto":
        raise DataError(data_cfg.train, None, None,
                        f"{100 * cjk:.0f}% of the characters are Chinese/Japanese/Korean, but "
                        f"data.language=en cuts text at spaces and punctuation into clause-long "
                        f"'words'; set data.language=zh (jieba words) or data.tokenizer=char")
    if cjk > 0.3:
        log.warning("%s: %.0f%% of the characters are CJK, and data.tokenizer=word cuts them "
                    "only at spaces and punctuation", data_cfg.train, 100 * cjk)


def is_cjk(ch: str) -> bool:
    """CJK ideographs, kana and hangul (the scripts written without spaces between words)."""
    code = ord(ch)
    return (0x2E80 <= code <= 0x9FFF or 0xAC00 <= code <= 0xD7AF or 0xF900 <= code <= 0xFAFF
            or 0x20000 <= code <= 0x2FA1F)


def _save(prepared: Prepared, path: Path) -> Path | None:
    """Write into a temporary sibling folder, then rename it into place in one step; None when the
    cache location cannot be written (the run goes on without a cache)."""
    tmp = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=path.name + ".", dir=path.parent))
        if prepared.vocab is not None:
            (tmp / "vocab.json").write_text(json.dumps(prepared.vocab.tokens, ensure_ascii=False))
        (tmp / "labels.json").write_text(json.dumps(prepared.labels, ensure_ascii=False))
        for name, split in prepared.splits.items():
            split.save(tmp / f"{name}.npz")
        (tmp / "meta.json").write_text(json.dumps(prepared.meta, ensure_ascii=False, indent=1))
    except OSError as exc:
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)
        log.warning("cannot write the preprocessing cache under %s (%s): continuing without a "
                    "cache (set data.cache_dir to a writable folder)", path.parent,
                    exc.strerror or exc)
        return None
    try:
        os.replace(tmp, path)
    except OSError:  # another process finished the same entry first: theirs is as good
        shutil.rmtree(tmp, ignore_errors=True)
    return path


def _load(path: Path) -> Prepared:
    meta = json.loads((path / "meta.json").read_text())
    splits = {name: Split.load(path / f"{name}.npz") for name in SPLITS
              if (path / f"{name}.npz").is_file()}
    vocab_file = path / "vocab.json"
    vocab = Vocab(json.loads(vocab_file.read_text())) if vocab_file.is_file() else None
    return Prepared(vocab=vocab,
                    labels=json.loads((path / "labels.json").read_text()),
                    splits=splits, meta=meta, cache_path=path)
