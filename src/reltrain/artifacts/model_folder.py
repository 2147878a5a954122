"""The model folder, what a checkpoint and an export both are (``model.safetensors``,
``config.json``, the vocabulary or tokenizer files, a model card), read as input from a stranger:
one typed, bounded schema (``Artifact``) that names no path, and the only code that reads
weights. A file that breaks a rule is one ``UserError`` naming it, raised before anything is
allocated from its sizes."""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch

from reltrain.artifacts.training_state import best_metric, metric_values
from reltrain.config.load import config_from_dict
from reltrain.config.train import Config
from reltrain.data.lm import TOKENIZER_FILES
from reltrain.runtime.errors import UserError, first_line
from reltrain.data.schema import label_name_problem
from reltrain.data.vocab import PAD, UNK

FOLDER_FORMAT = "reltrain-model"
FOLDER_VERSION = 1
_FORMATS = (FOLDER_FORMAT, "reltrain-export")  # the name 0.1's exports carry; the same files
WEIGHTS = "model.safetensors"
CONFIG = "config.json"
VOCAB = "vocab.json"

MIB = 1 << 20
TEXT_LIMIT = 256 * MIB  # one JSON or tokenizer file: far above any real tokenizer's
MAX_LABELS = 100_000
MAX_VOCAB = 20_000_000
MAX_NAME = 1000  # characters of a label, a token, a weight's name
MAX_NODES = 1_000_000  # values in a nested config (shared references count each time)
# A pretrained encoder's config builds the model before any weight is compared with it.
MAX_HF_INT = 1 << 31
MAX_HF_LAYERS = 1024
MAX_HF_POSITIONS = 1 << 20


@dataclass
class Artifact:
    """A trained model as prediction needs it: config, labels, how text becomes ids, weights."""

    config: Config
    labels: list[str]
    weights: dict[str, torch.Tensor]
    vocab: list[str] | None  # reltrain's own encoders
    lm: dict | None  # pretrained encoder: {"files": {name: text}, "types": [...], "added": [...]}
    hf_config: dict | None
    best: dict | None  # {"metric", "value", "epoch"} of the epoch these weights are from
    test: dict | None  # test metrics, when the folder's card or the run's summary has them
    data_rows: dict | None  # rows per split the model trained on
    entity_types: list[str] | None = None  # task=extract: the entity types it finds

    @classmethod
    def checked(cls, where: str, *, config: object, labels: object, weights: object,
                vocab: object, lm: object, hf_config: object, best: object, test: object,
                data_rows: object, entity_types: object = None) -> "Artifact":
        """Check every field prediction and export read; ``where`` names the file in errors."""
        config = config_from_dict(config, where)
        labels, weights = _labels(labels, where), _weights(weights, where)
        if config.model.pretrained_encoder:
            if not lm or hf_config is None:
                raise UserError(f"{where}: a pretrained-encoder model without its tokenizer "
                                f"files or encoder config")
            lm, vocab, hf_config = checked_tokenizer(lm, where), None, _hf_config(hf_config, where)
        else:
            if vocab is None:
                raise UserError(f"{where}: incomplete: no vocabulary")
            lm, vocab, hf_config = None, _vocab(vocab, where), None
        if config.task == "extract":
            entity_types = _names(entity_types, where, "the entity types", MAX_LABELS)
            if not entity_types:
                _fail(where, "an extraction model without its entity types")
        else:
            entity_types = None
        return cls(config, labels, weights, vocab, lm, hf_config, best_metric(best),
                   metric_values(test), _rows(data_rows), entity_types)


def _fail(where: str, what: str):
    raise UserError(f"{where}: {what}")


def _names(value: object, where: str, what: str, limit: int) -> list[str]:
    if not isinstance(value, list) or len(value) > limit:
        _fail(where, f"{what} must be a list of at most {limit} strings")
    if not all(isinstance(v, str) and 0 < len(v) <= MAX_NAME for v in value):
        _fail(where, f"{what} must hold non-empty strings of at most {MAX_NAME} characters")
    if len(set(value)) != len(value):
        _fail(where, f"{what} holds a name twice")
    return list(value)


def _labels(value: object, where: str) -> list[str]:
    labels = _names(value, where, "the label list", MAX_LABELS)
    if not labels:
        _fail(where, "the label list is empty")
    for name in labels:
        if label_name_problem(name):
            _fail(where, f"the label list: {label_name_problem(name)}")
    return labels


def _vocab(value: object, where: str) -> list[str]:
    tokens = _names(value, where, "the vocabulary", MAX_VOCAB)
    if tokens[:2] != [PAD, UNK]:
        _fail(where, f"the vocabulary must start with {PAD}, {UNK}")
    return tokens


def _weights(value: object, where: str) -> dict[str, torch.Tensor]:
    # safetensors checks that every tensor's bytes are in the file (no view declares more)
    if not isinstance(value, dict) or not value:
        _fail(where, "the weights are not a mapping of names to tensors")
    for key, tensor in value.items():
        if not isinstance(key, str) or len(key) > MAX_NAME or not isinstance(tensor, torch.Tensor):
            _fail(where, "the weights are not a mapping of names to tensors")
    for key, tensor in value.items():
        if tensor.is_floating_point() and not bool(torch.isfinite(tensor).all()):
            _fail(where, f"weight {key[:80]} holds NaN or infinite values: the model would "
                         f"answer nothing usable")
    return strip_wrapper_prefixes(value)


def strip_wrapper_prefixes(state_dict: dict) -> dict:
    """Keys as the plain model names them, whatever wrapped the model that saved them."""
    out = {}
    for key, value in state_dict.items():
        while key.startswith(("module.", "_orig_mod.")):
            key = key.split(".", 1)[1]
        out[key] = value
    return out


def checked_tokenizer(value: object, where: str) -> dict:
    """A pretrained encoder's tokenizer entry ``{"files", "types", "added"}``, bounded, its
    tokenizer_config.json without file names."""
    if not isinstance(value, dict) or not isinstance(value.get("files"), dict):
        _fail(where, "the tokenizer entry must hold a mapping of file names to texts")
    files = {}
    for name, text in value["files"].items():
        if name not in TOKENIZER_FILES:
            _fail(where, f"tokenizer file {str(name)[:80]!r} is not one of "
                         f"{', '.join(TOKENIZER_FILES)}")
        if not isinstance(text, str) or len(text) > TEXT_LIMIT:
            _fail(where, f"tokenizer file {name} must be a text of at most {TEXT_LIMIT // MIB} MiB")
        files[name] = _without_file_names(text, where) if name == "tokenizer_config.json" else text
    if "tokenizer.json" not in files:
        _fail(where, "the tokenizer files lack tokenizer.json (a fast tokenizer)")
    types = value.get("types")
    types = None if types is None else _names(types, where, "the entity types", 10_000)
    added = _names(value.get("added") or [], where, "the added characters", MAX_VOCAB)
    if any(len(ch) != 1 for ch in added):
        _fail(where, "the added characters must be single characters")
    return {"files": files, "types": types, "added": added}


def _without_file_names(text: str, where: str) -> str:
    """tokenizer_config.json less the keys through which transformers would open other files or look
    for code (``auto_map``): the tokenizer reads only the files beside it."""
    try:
        config = json.loads(text)
    except (ValueError, RecursionError):
        _fail(where, "tokenizer_config.json is not JSON")
    if not isinstance(config, dict):
        _fail(where, "tokenizer_config.json is not a JSON object")
    kept = {k: v for k, v in config.items()
            if not (k.endswith(("_file", "_files")) or k == "auto_map")}
    return text if len(kept) == len(config) else json.dumps(kept, indent=2, ensure_ascii=False)


def _hf_config(value: object, where: str) -> dict:
    """A pretrained encoder's config: JSON-like values, a known model type, sizes in bounds
    (the model is built from it before the weights are compared with it)."""
    if not isinstance(value, dict) or not isinstance(value.get("model_type"), str):
        _fail(where, "the encoder config must be a mapping with a model_type")
    budget = [MAX_NODES]

    def check(key: str, item: object) -> None:
        budget[0] -= 1
        if budget[0] < 0:
            _fail(where, "the encoder config is too large")
        if isinstance(item, dict):
            for k, v in item.items():
                if not isinstance(k, (str, int)) or isinstance(k, bool):  # id2label: int keys
                    _fail(where, "the encoder config has a key that is neither text nor a number")
                check(str(k), v)
        elif isinstance(item, list):
            for v in item:
                check(key, v)
        elif isinstance(item, bool) or item is None:
            pass
        elif isinstance(item, int):
            limit = (MAX_HF_LAYERS if "layer" in key or "head" in key
                     else MAX_HF_POSITIONS if "position" in key else MAX_HF_INT)
            if abs(item) > limit:
                _fail(where, f"the encoder config's {key} = {item} is out of bounds (at most {limit})")
        elif isinstance(item, float):
            pass
        elif not isinstance(item, str) or len(item) > TEXT_LIMIT:
            _fail(where, f"the encoder config's {key} is not a JSON value")

    check("", value)
    return value


def _rows(value: object) -> dict | None:
    if not isinstance(value, dict):
        return None
    return {k: value[k] for k in ("train", "valid", "test")
            if isinstance(value.get(k), int) and not isinstance(value.get(k), bool)}


def read_member(folder: Path, name: str, limit: int = TEXT_LIMIT) -> bytes:
    """The bytes of the regular file ``name`` directly inside ``folder``; a link, a device, a pipe
    or a file over ``limit`` bytes is refused, so a folder cannot make reltrain read outside it."""
    path = folder / name
    flags = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0)
    try:
        fd = os.open(path, flags)
    except OSError as exc:
        member_path(folder, name)  # says what is wrong: missing, a link, ...
        raise UserError(f"{path}: cannot read it ({exc.strerror or exc})") from None
    with os.fdopen(fd, "rb") as f:
        _check_member(path, os.fstat(f.fileno()), limit)
        return f.read()


def member_path(folder: Path, name: str) -> Path:
    """``folder / name`` once it is known to be a regular file there, not a link: for a file
    too large to read into memory first (the weights), which its loader maps from the path."""
    path = folder / name
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        raise UserError(f"{folder}: incomplete model folder: no {name}") from None
    except OSError as exc:
        raise UserError(f"{path}: cannot read it ({exc.strerror or exc})") from None
    if stat.S_ISLNK(info.st_mode):
        raise UserError(f"{path}: a link; a model folder holds its own files")
    _check_member(path, info, None)
    return path


def _check_member(path: Path, info: os.stat_result, limit: int | None) -> None:
    if not stat.S_ISREG(info.st_mode):
        raise UserError(f"{path}: not a regular file")
    if limit is not None and info.st_size > limit:
        raise UserError(f"{path}: {info.st_size} bytes, more than the {limit // MIB} MiB "
                        f"such a file may have")


def _member_json(folder: Path, name: str) -> object:
    try:
        return json.loads(read_member(folder, name).decode("utf-8"))
    except (ValueError, RecursionError) as exc:  # UnicodeDecodeError is a ValueError
        raise UserError(f"{folder / name}: not valid JSON ({str(exc)[:120]})") from None


def is_model_folder(path: str | Path) -> bool:
    return Path(path).is_dir() and (Path(path) / CONFIG).is_file()


def read_model_folder(folder: str | Path) -> Artifact:
    """The artifact of a model folder (a checkpoint or an export)."""
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    folder = Path(folder)
    card = _member_json(folder, CONFIG)
    if not isinstance(card, dict) or card.get("format") not in _FORMATS:
        raise UserError(f"{folder}: not a reltrain model folder ({CONFIG} has no "
                        f"format: {FOLDER_FORMAT})")
    version = card.get("format_version")
    if not isinstance(version, int) or isinstance(version, bool) or version < 1:
        raise UserError(f"{folder}/{CONFIG}: format_version must be a positive integer")
    if version > FOLDER_VERSION:
        raise UserError(f"{folder}: written by a newer reltrain (format {version})")
    id2label, tok = card.get("id2label"), card.get("tokenizer")
    if not isinstance(id2label, dict) or not isinstance(tok, dict):
        raise UserError(f"{folder}/{CONFIG}: needs id2label and tokenizer mappings")
    if set(id2label) != {str(i) for i in range(len(id2label))}:
        raise UserError(f"{folder}/{CONFIG}: id2label must have the keys 0 to N-1")
    labels = [id2label[str(i)] for i in range(len(id2label))]
    try:
        weights = load_file(str(member_path(folder, WEIGHTS)))
    except SafetensorError as exc:
        raise UserError(f"{folder}: incomplete or damaged model folder ({str(exc)[:200]})") from None
    trained_on = card.get("training_data") if isinstance(card.get("training_data"), dict) else {}
    lm = vocab = None
    if tok.get("kind") == "pretrained":
        names = tok.get("files")
        if not isinstance(names, list) or not all(n in TOKENIZER_FILES for n in names):
            raise UserError(f"{folder}/{CONFIG}: tokenizer.files must name files among "
                            f"{', '.join(TOKENIZER_FILES)}")
        texts = {}
        for name in names:
            try:
                texts[name] = read_member(folder, name).decode("utf-8")
            except UnicodeDecodeError:
                raise UserError(f"{folder / name}: not UTF-8 text") from None
        lm = {"files": texts, "types": tok.get("types"), "added": tok.get("added")}
    elif tok.get("kind") == "words":
        if tok.get("vocab") != VOCAB:
            raise UserError(f"{folder}/{CONFIG}: tokenizer.vocab must be {VOCAB}")
        vocab = _member_json(folder, VOCAB)
    else:
        raise UserError(f"{folder}/{CONFIG}: tokenizer.kind must be pretrained or words")
    metrics = card.get("metrics") if isinstance(card.get("metrics"), dict) else {}
    rows = {split: d.get("rows") for split, d in trained_on.items() if isinstance(d, dict)}
    return Artifact.checked(str(folder), config=card.get("reltrain_config"), labels=labels,
                            weights=weights, hf_config=card.get("hf_config"),
                            best=metrics.get("best"), test=metrics.get("test"), data_rows=rows,
                            entity_types=card.get("entity_types"),
                            lm=lm, vocab=vocab)


def model_source(path: str | Path) -> Path:
    """The model folder ``path`` names: itself, or a run directory's ``checkpoints/best``."""
    path = Path(path)
    if is_model_folder(path):
        return path
    best = path / "checkpoints" / "best"
    if is_model_folder(best):
        return best
    if path.is_file() or (path / "checkpoints" / "best.pt").exists():
        raise UserError(f"{path}: a model is a folder (a checkpoint such as RUN/checkpoints/best, "
                        f"or an export); one .pt file per checkpoint was reltrain's old layout, "
                        f"which this version does not read: train again, or export it with the "
                        f"reltrain that wrote it")
    if not path.exists():
        raise UserError(f"{path}: not found (a model folder or a run directory)")
    raise UserError(f"{path}: neither a model folder (no {CONFIG}) nor a run directory (no "
                    f"checkpoints/best)")


def model_task(path: str | Path) -> str:
    """``classify`` or ``extract``: what the model at ``path`` does (its config.json says)."""
    card = _member_json(model_source(path), CONFIG)
    task = card.get("task") if isinstance(card, dict) else None
    return task if task in ("classify", "extract") else "classify"


def load_artifact(path: str | Path) -> Artifact:
    """A model folder (a checkpoint or an export), or a run directory's best one, checked."""
    return read_model_folder(model_source(path))


def build_checked_model(artifact: Artifact, build: Callable[[], torch.nn.Module], where: str,
                        kind: str, optional: tuple[str, ...] = ()) -> torch.nn.Module:
    """The model ``build()`` makes (``kind``: "a cnn model", for messages) with the artifact's
    weights; built on the meta device first and every weight's name and shape compared, so a
    tampered size is an error, not an allocation. ``optional``: weights a folder from before may
    lack; the model keeps its own initial values for those."""
    try:
        with torch.device("meta"), _ShapesOnly():
            expected = {k: tuple(v.shape) for k, v in build().state_dict().items()}
    except UserError:
        raise
    except Exception as exc:  # transformers raises several types for a config it cannot build
        raise UserError(f"{where}: its config does not build {kind} "
                        f"({first_line(exc, 160)})") from None
    got = {k: tuple(v.shape) for k, v in artifact.weights.items()}
    got |= {k: expected[k] for k in optional if k in expected and k not in got}
    if expected != got:
        name = sorted(set(expected) ^ set(got)) or sorted(k for k in expected if expected[k] != got[k])
        key = name[0]
        raise UserError(f"{where}: weights do not fit {kind} with this vocabulary and label set "
                        f"({key}: {got.get(key, 'missing')} where {expected.get(key, 'none')} "
                        f"was expected)")
    model = build()
    model.load_state_dict(artifact.weights, strict=False)  # every key compared above
    return model


class _ShapesOnly(torch.overrides.TorchFunctionMode):
    """Skips in-place calls on meta tensors (the weights' random initialisation): on the meta
    device they run through torch's Python reference kernels, whose first use imports
    ``torch._dynamo`` (about a second of every prediction's start). Shapes do not change."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = getattr(func, "__name__", "")
        target = args[0] if args else kwargs.get("tensor")  # torch.nn.init passes it by name
        if (name.endswith("_") and not name.endswith("__") and isinstance(target, torch.Tensor)
                and target.is_meta):
            return target
        return func(*args, **kwargs)
