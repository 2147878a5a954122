"""Records -> token ids and entity spans, cached on disk as numpy arrays + JSON (no pickle),
in a folder named by a hash of the input bytes and of every option that changes the result."""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple

from reltrain.runtime import children
from reltrain.data.build import Spec
from reltrain.data.private import default_cache_dir, owned_privately
from reltrain.data.readers import iter_records, read_labels
from reltrain.data.split import Split
from reltrain.data.tokenize import Tokenizer
from reltrain.data.vocab import Vocab
from reltrain.runtime.errors import DataError, UserError, first_line
from reltrain.data import build
from reltrain.data.lm import TOKENIZER_FILES, LMTokenizer
from reltrain.data.report import data_report

log = logging.getLogger(__name__)

CACHE_FORMAT = 5  # 2: pretrained encoders' added characters; 3: one folder of .npy per split;
# 4: the data report (data/report.py) in meta.json; 5: rows with lists of relations
SPLITS = ("train", "valid", "test")
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


def cache_key(data_cfg, tokenizer_id: str) -> str:
    """A hash of the data files' bytes and of every option that changes the prepared tensors."""
    digest = hashlib.sha256()
    options = {"format": CACHE_FORMAT, "tokenizer": tokenizer_id, "max_len": data_cfg.max_len,
               "min_freq": data_cfg.min_freq, "max_vocab": data_cfg.max_vocab,
               "skip_bad_rows": data_cfg.skip_bad_rows, "encoding": data_cfg.encoding}
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


def _tokenizer_id(data_cfg, lm) -> str:
    """What the cache key knows of the tokenization: cheap to compute, so a hit costs a hash
    and a read (the LM tokenizer is hashed by its files, not loaded)."""
    if lm is None:
        tokenizer = Tokenizer.from_config(data_cfg)
        return f"{tokenizer.kind}:lower={tokenizer.lowercase}"

    digest = hashlib.sha256(f"{lm.markers}:{lm.add_chars}".encode())
    for name in TOKENIZER_FILES:
        path = Path(lm.pretrained) / name
        if path.is_file():
            digest.update(f"\0{name}\0".encode())
            _hash_file(digest, path)
    return "lm:" + digest.hexdigest()


def prepare(data_cfg, progress: bool = False, lm=None, stop: Callable[[], None] | None = None,
            local_processes: int = 1) -> Prepared:
    """The cached tensors for these files and options, built if needed (a damaged entry is replaced;
    an unwritable cache location: no cache). ``lm``: a pretrained encoder's options (``model.lm``:
    its folder's subwords, no vocabulary); ``stop``: called while the tokenizing child works, it
    may raise to give up; ``local_processes``: the launcher's processes on this host, which
    share its cores."""
    root = Path(data_cfg.cache_dir) if data_cfg.cache_dir else default_cache_dir()
    key = cache_key(data_cfg, _tokenizer_id(data_cfg, lm))
    path = root / key
    foreign = path.exists() and not owned_privately(path)
    if foreign:  # in a shared data.cache_dir: planted, or open to others' changes
        log.warning("%s belongs to another user or others may write it: not reused; tokenizing "
                    "without the cache (set data.cache_dir to a folder of your own)", path)
    prepared = _load_cached(path) if path.exists() and not foreign else None
    if prepared is None:
        workers = data_cfg.preprocess_workers or children.default_workers(local_processes)
        prepared = _built_in_child(data_cfg, path, progress, lm, workers, cache=not foreign,
                                   stop=stop)
    if lm is not None and prepared.lm is None:
        saved = prepared.meta["lm"]
        prepared.lm = LMTokenizer.from_folder(lm.pretrained, saved["types"])
        prepared.lm.add_chars(saved["added"])
    prepared.cache_key = key
    return prepared


def _build_and_save(data_cfg, path: Path, progress: bool, lm_options, workers: int) -> bool:
    """Write the entry into a temporary sibling folder, then rename it into place in one step;
    False when the location cannot be written (logged)."""
    lm = _lm_tokenizer(data_cfg, lm_options) if lm_options is not None else None
    spec = Spec(data_cfg, lm_options.pretrained, lm.types, lm.added) if lm else Spec(data_cfg)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=path.name + ".", dir=path.parent))
    except OSError as exc:
        _no_cache(path, exc.strerror or exc)
        return False
    try:
        _write_entry(data_cfg, tmp, spec, progress, workers)
        if lm is not None:
            meta = json.loads((tmp / "meta.json").read_text())
            meta["lm"] = {"types": lm.types, "added": lm.added}
            (tmp / "meta.json").write_text(json.dumps(meta, ensure_ascii=False, indent=1))
    except OSError as exc:
        shutil.rmtree(tmp, ignore_errors=True)
        _no_cache(path, exc.strerror or exc)
        return False
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    try:
        os.replace(tmp, path)
    except OSError:  # another process finished the same entry first: theirs is as good
        shutil.rmtree(tmp, ignore_errors=True)
    return True


def _write_entry(data_cfg, folder: Path, spec: Spec, progress: bool, workers: int) -> None:
    files = {name: getattr(data_cfg, name) for name in SPLITS if getattr(data_cfg, name)}
    kind = "lm" if not spec.words else Tokenizer.from_config(data_cfg).kind
    given = read_labels(data_cfg.labels, data_cfg.encoding) if data_cfg.labels else None
    labels, vocab, meta = build.write_splits(
        files, folder, spec, given, workers, progress,
        check_texts=lambda texts: _check_script(data_cfg, texts, kind),
        check_relations=lambda relations: _check_relations(data_cfg, relations))
    if vocab is not None:
        (folder / "vocab.json").write_text(json.dumps(vocab.tokens, ensure_ascii=False))
    (folder / "labels.json").write_text(json.dumps(labels, ensure_ascii=False))
    meta.update(format=CACHE_FORMAT, tokenizer=kind,
                report=data_report(files, labels, data_cfg.encoding))
    (folder / "meta.json").write_text(json.dumps(meta, ensure_ascii=False, indent=1))


def _no_cache(path: Path, reason) -> None:
    log.warning("cannot write the preprocessing cache under %s (%s): continuing without a cache "
                "(set data.cache_dir to a writable folder)", path.parent, reason)


def _built_in_child(data_cfg, path: Path, *options, cache: bool = True,
                    stop: Callable[[], None] | None = None) -> Prepared:
    """``_build_and_save`` in a child that ends, handing its result over through the cache entry:
    the training process never holds jieba's dictionary or the garbage of segmentation."""
    built = cache and _writable(path.parent) and children.call(_build_and_save, data_cfg, path,
                                                               *options, stop=stop)
    if built:
        prepared = _load_cached(path) if owned_privately(path) else None
        if prepared is not None:
            prepared.reused = False
            return prepared
    elif cache:
        _no_cache(path, "not writable")
    with tempfile.TemporaryDirectory(prefix="reltrain-data-") as scratch:  # for the hand-over
        entry = Path(scratch) / path.name
        if children.call(_build_and_save, data_cfg, entry, *options, stop=stop):
            prepared = _load(entry, mapped=False)  # the folder goes when this block ends
            prepared.cache_path, prepared.reused = None, False
            return prepared
    raise UserError(f"cannot write the tokenized data under {path.parent} nor in a temporary "
                    f"folder ({tempfile.gettempdir()}): free some space or set data.cache_dir")


def _writable(folder: Path) -> bool:
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError:
        return False
    return os.access(folder, os.W_OK)


def _load_cached(path: Path) -> Prepared | None:
    """The cache entry at ``path``, or None (a damaged one is moved out of the way first)."""
    try:
        prepared = _load(path)
        prepared.reused = True
        return prepared
    except Exception as exc:  # truncated npz, bad JSON, missing file: rebuilt, never trusted
        log.warning("preprocessing cache %s is damaged (%s); rebuilding it", path, first_line(exc))
    aside = path.with_name(f"{path.name}.damaged-{os.getpid()}")
    try:
        os.replace(path, aside)
        shutil.rmtree(aside, ignore_errors=True)
    except OSError:  # another process moved or replaced it first
        pass
    return None


PREPROCESSING = "while preprocessing; nothing to save"  # the stop point's name in messages


def prepare_run(cfg, progress: bool = False, stop: Callable[[], None] | None = None,
                local_processes: int = 1) -> Prepared:
    """``prepare`` with the tokenization the configured model needs."""
    return prepare(cfg.data, progress, cfg.model.lm if cfg.model.pretrained_encoder else None,
                   stop, local_processes)


class TokenIdentity(NamedTuple):
    """What a checkpoint must share with the data to be resumed or used: the vocabulary of
    reltrain's own encoders, or a pretrained tokenizer's files (``lm``)."""

    vocab: list[str] | None
    lm: dict | None


def token_identity(prepared: Prepared) -> TokenIdentity:
    if prepared.lm is not None:
        lm = prepared.lm
        return TokenIdentity(None, {"files": lm.files(), "types": lm.types, "added": lm.added})
    return TokenIdentity(prepared.vocab.tokens, None)


def _lm_tokenizer(data_cfg, options):
    training = _TrainingRecords(data_cfg.train, data_cfg.encoding)
    # Entity types only from the training file's own head_type / tail_type columns.
    types = sorted({t for r in training for t in (r.head.type, r.tail.type) if t}) \
        if options.markers == "typed" else None
    lm = LMTokenizer.from_folder(options.pretrained, types)
    texts, least = _TrainingRecords(data_cfg.train, data_cfg.encoding, texts=True), options.add_chars
    stats = lm.add_unknown_chars(texts, least) if least > 0 else {}
    if stats.get("unk_before"):
        log.info("%s reads %.1f%% of the training subwords as [UNK]; %d characters seen at least "
                 "%d times get tokens of their own (model.lm.add_chars): %.1f%% [UNK] now",
                 options.pretrained, 100 * stats["unk_before"], stats["added"], least,
                 100 * stats["unk_after"])
    return lm


class _TrainingRecords:
    """The training file's good rows (or their texts), read anew for each pass, so it is never
    held whole; its bad rows are raised or skipped by the tokenizing pass."""

    def __init__(self, path: str, encoding: str, texts: bool = False):
        self.path, self.encoding, self.texts = path, encoding, texts

    def __iter__(self):
        for _, item in iter_records(self.path, encoding=self.encoding):
            if not isinstance(item, DataError):
                yield item.text if self.texts else item


def _check_relations(data_cfg, relations: set) -> None:
    """One relation would train a useless model without a word."""
    if len(relations) < 2:
        only = f"the relation '{next(iter(relations))}'" if relations else "no rows"
        raise DataError(data_cfg.train, None, None,
                        f"the training data has {only}: a classifier needs at least two "
                        f"relations (add rows of others, e.g. a 'None' relation for pairs "
                        f"that have none)")


def _check_script(data_cfg, texts: list[str], kind: str) -> None:
    """Chinese cut as English words (at spaces) would train a useless model without a word."""
    if kind != "word":
        return
    cjk = cjk_share(texts)
    if cjk > 0.3 and data_cfg.tokenizer == "auto":
        raise DataError(data_cfg.train, None, None,
                        f"{100 * cjk:.0f}% of the characters are Chinese/Japanese/Korean, but "
                        f"data.language=en cuts text at spaces and punctuation into clause-long "
                        f"'words'; set data.language=zh (jieba words) or data.tokenizer=char")
    if cjk > 0.3:
        log.warning("%s: %.0f%% of the characters are CJK, and data.tokenizer=word cuts them "
                    "only at spaces and punctuation", data_cfg.train, 100 * cjk)


def cjk_share(texts) -> float:
    """The share of the texts' non-space characters that are CJK (0 when there are none)."""
    letters = [c for text in texts for c in text if not c.isspace()]
    return sum(map(is_cjk, letters)) / len(letters) if letters else 0.0


def is_cjk(ch: str) -> bool:
    """CJK ideographs, kana and hangul (the scripts written without spaces between words)."""
    code = ord(ch)
    return (0x2E80 <= code <= 0x9FFF or 0xAC00 <= code <= 0xD7AF or 0xF900 <= code <= 0xFAFF
            or 0x20000 <= code <= 0x2FA1F)


def _load(path: Path, mapped: bool = True) -> Prepared:
    meta = json.loads((path / "meta.json").read_text())
    if meta.get("format") != CACHE_FORMAT:
        raise ValueError(f"cache format {meta.get('format')}, not {CACHE_FORMAT}")
    splits = {name: Split.load(path / name, mapped) for name in SPLITS if (path / name).is_dir()}
    if "train" not in splits:
        raise ValueError("no training split")
    vocab_file = path / "vocab.json"
    vocab = Vocab(json.loads(vocab_file.read_text())) if vocab_file.is_file() else None
    labels = json.loads((path / "labels.json").read_text())
    if any(s.multi_label and s.labels.shape[1] != len(labels) for s in splits.values()):
        raise ValueError("a split's rows of labels do not fit labels.json")
    return Prepared(vocab=vocab, labels=labels, splits=splits, meta=meta, cache_path=path)
