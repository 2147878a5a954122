"""A checkpoint's training state (``training_state.pt``, beside the model folder): one versioned
dataclass, and the only code that names its keys. Training writes it (training/checkpoint.py);
resuming reads it with ``torch.load(weights_only=True)`` and checks each field before using it:
a checkpoint is input from a stranger. The model itself is the folder's (model_folder.py)."""

from __future__ import annotations

import math
import pickle
import random
import zipfile
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path

import numpy as np
import torch

from reltrain.config.train import METRICS
from reltrain.runtime.errors import UserError, first_line

FORMAT = "reltrain-training-state"
STATE_FILE = "training_state.pt"
VERSION = 1


@dataclass
class TrainState:
    """Progress that a resumed run needs; saved in every checkpoint, the same on every rank."""

    epoch: int = 1  # the epoch to run next (or to finish, when batch_in_epoch > 0)
    step: int = 0  # optimizer steps taken
    batch_in_epoch: int = 0  # batches of `epoch` already trained
    best: dict | None = None  # {"metric", "value", "epoch", "valid"} of the selection metric
    best_by_metric: dict = field(default_factory=dict)  # each metric's own best and its epoch
    bad_epochs: int = 0  # epochs since the selection metric last improved
    stopped_early: bool = False


@dataclass
class EpochProgress:
    """This rank's running totals for the current epoch (differ per rank; saved per rank)."""

    loss_sum: float = 0.0
    examples: int = 0
    seconds: float = 0.0


@dataclass
class RunIdentity:
    """What a checkpoint must share with a run to be resumed by it."""

    labels: list
    vocab: list | None
    lm: dict | None
    data_key: str
    entity_types: list | None = None  # task=extract


@dataclass
class TrainingState:
    """``training_state.pt``: what resuming needs beside a checkpoint's model folder. Tensors and
    plain data only, so ``weights_only`` loading reads it."""

    data_key: str | None = None  # the prepared data's cache key
    world_size: int | None = None
    global_batch_size: int | None = None
    optimizer: dict | None = None
    scheduler: dict | None = None
    scaler: dict | None = None  # only where fp16 ran
    state: dict | None = None  # a TrainState
    rank_states: list | None = None  # per rank: {"rng": capture_rng(), "progress": EpochProgress}

    @classmethod
    def from_payload(cls, payload: dict) -> "TrainingState":
        """The fields of a loaded file, as they are (``check`` bounds them)."""
        return cls(**{f.name: payload.get(f.name) for f in fields(cls)})

    def to_payload(self) -> dict:
        present = {f.name: getattr(self, f.name) for f in fields(self)}
        return {"format": FORMAT, "version": VERSION,
                **{k: v for k, v in present.items() if v is not None}}

    def check(self, where: str) -> None:
        """Every field resuming reads, typed and bounded: a stranger's file is one line, never a
        traceback in the middle of a restore (the model's part: ``Artifact``)."""
        state, ranks = self.state, self.rank_states
        problems = {
            "its training state": isinstance(state, dict)
            and set(state) == {f.name for f in fields(TrainState)}
            and all(_count(state[k]) for k in ("epoch", "step", "batch_in_epoch", "bad_epochs"))
            and state["epoch"] >= 1 and isinstance(state["stopped_early"], bool)
            and (state["best"] is None or _best_of_state(state["best"]))
            and _bests(state["best_by_metric"]),
            "its per-rank states": isinstance(ranks, list) and 1 <= len(ranks) <= 65536
            and all(_rank_state(r) for r in ranks),
            "its optimizer and schedule": isinstance(self.optimizer, dict)
            and isinstance(self.scheduler, dict),
            "its world size and global batch": _count(self.world_size, 1)
            and _count(self.global_batch_size, 1),
            "its data key": self.data_key is None or isinstance(self.data_key, str),
        }
        wrong = [what for what, fine in problems.items() if not fine]
        if wrong:
            raise UserError(f"{where}: not a resumable checkpoint of this reltrain version "
                            f"({wrong[0]}; it can still be used with evaluate / predict)")

    def train_state(self) -> TrainState:
        """The counters (after ``check``)."""
        return TrainState(**self.state)

    def rank_progress(self) -> list[EpochProgress]:
        return [EpochProgress(**r["progress"]) for r in self.rank_states]

    def restore_rng(self, rank: int) -> None:
        """This rank's RNG streams as saved; a rank the saving run did not have takes rank
        ``rank % saved ranks``'s."""
        _restore_rng(self.rank_states[rank % len(self.rank_states)]["rng"])


def rank_state(progress: EpochProgress) -> dict:
    """This rank's entry of ``Checkpoint.rank_states``."""
    return {"rng": _capture_rng(), "progress": asdict(progress)}


def best_metric(value: object) -> dict | None:
    """``{"metric", "value", "epoch"}`` when well formed, else None (it only labels the card)."""
    if not isinstance(value, dict):
        return None
    metric, score, epoch = value.get("metric"), value.get("value"), value.get("epoch")
    if (metric in (*METRICS, "loss") and _number(score) and math.isfinite(score)
            and isinstance(epoch, int) and not isinstance(epoch, bool)):
        return {"metric": metric, "value": float(score), "epoch": epoch}
    return None


def metric_values(value: object) -> dict | None:
    """The finite numbers of a metrics mapping under known metric names; None if there are none."""
    if not isinstance(value, dict):
        return None
    out = {k: float(value[k]) for k in (*METRICS, "loss")
           if _number(value.get(k)) and math.isfinite(value[k])}
    return out or None


def _best_of_state(value: object) -> bool:
    """A state's best: a metric's, or the latest epoch's where no validation split selects."""
    if isinstance(value, dict) and value.get("metric") is None:
        return _count(value.get("epoch"), 1) and value.get("value") is None
    return best_metric(value) is not None


def _bests(value: object) -> bool:
    """``{metric: {"value", "epoch"}}``, each metric's own best."""
    return isinstance(value, dict) and all(
        k in (*METRICS, "loss") and isinstance(v, dict) and set(v) == {"value", "epoch"}
        and best_metric({"metric": k, **v}) is not None for k, v in value.items())


def _number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _count(value: object, least: int = 0) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and least <= value <= 2**40


# The RNG streams as tensors and lists, so they survive ``weights_only`` loading: Python's
# Mersenne Twister state is 624 words and a position, numpy's the same as a tensor.
_MT_WORDS = 624


def _capture_rng() -> dict:
    np_state = np.random.get_state()
    state = {
        "python": [list(x) if isinstance(x, tuple) else x for x in random.getstate()],
        "numpy": {"keys": torch.from_numpy(np_state[1].astype(np.int64)), "pos": int(np_state[2]),
                  "has_gauss": int(np_state[3]), "gauss": float(np_state[4])},
        "torch": torch.get_rng_state(),
    }
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def _restore_rng(state: dict) -> None:
    version, internal, gauss = state["python"]
    random.setstate((version, tuple(internal), gauss))
    n = state["numpy"]
    np.random.set_state(("MT19937", n["keys"].numpy().astype(np.uint32), n["pos"], n["has_gauss"],
                         n["gauss"]))
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def _rank_state(value: object) -> bool:
    """One rank's entry as ``rank_state`` wrote it."""
    if not isinstance(value, dict) or not isinstance(value.get("progress"), dict):
        return False
    rng, progress = value.get("rng"), value["progress"]
    if set(progress) != {f.name for f in fields(EpochProgress)} or not all(
            _number(v) for v in progress.values()):
        return False
    if not isinstance(rng, dict) or not isinstance(rng.get("numpy"), dict):
        return False
    py, npy, cuda = rng.get("python"), rng["numpy"], rng.get("cuda", [])
    states = [rng.get("torch"), *(cuda if isinstance(cuda, list) else [None])]
    return (isinstance(py, list) and len(py) == 3 and isinstance(py[1], list)
            and len(py[1]) == _MT_WORDS + 1 and all(_count(x) and x < 2**32 for x in py[1])
            and isinstance(npy.get("keys"), torch.Tensor) and npy["keys"].shape == (_MT_WORDS,)
            and _count(npy.get("pos")) and _count(npy.get("has_gauss"))
            and isinstance(npy.get("gauss"), float)
            and all(_bytes(t) for t in states))


def _bytes(value: object) -> bool:
    return (isinstance(value, torch.Tensor) and value.dtype == torch.uint8 and value.dim() == 1
            and value.numel() <= 1 << 16)


def save_training_state(path: Path, training: TrainingState) -> None:
    """``torch.save`` of the payload into a folder being written (renamed into place after)."""
    with open(path, "wb") as f:
        torch.save(training.to_payload(), f)


def load_training_state(path: Path, map_location="cpu") -> TrainingState:
    """Read ``training_state.pt`` with ``weights_only=True``; a bad file is one line."""
    if not path.is_file():
        raise UserError(f"{path.parent}: not a resumable checkpoint (no {path.name}; a model "
                        f"folder without it can still be used with evaluate / predict)")
    _check_members(path)
    try:
        payload = torch.load(path, map_location=map_location, weights_only=True)
    except Exception as exc:  # truncated zip, foreign pickle, ...: all one user-facing answer
        raise UserError(f"{path}: not a readable reltrain training state "
                        f"({_load_failure(path, exc)})") from None
    if not isinstance(payload, dict) or payload.get("format") != FORMAT:
        raise UserError(f"{path}: not a reltrain training state")
    version = payload.get("version", 0)
    if not isinstance(version, int) or isinstance(version, bool) or version < 0:
        raise UserError(f"{path}: its format version must be a non-negative integer")
    if version > VERSION:
        raise UserError(f"{path}: written by a newer reltrain (format {version})")
    return TrainingState.from_payload(payload)


def _check_members(path: Path) -> None:
    """``torch.save`` stores its members uncompressed; a compressed one could inflate a small
    file into any amount of memory, so it is refused before anything is read."""
    try:
        with zipfile.ZipFile(path) as archive:
            packed = [m.filename for m in archive.infolist() if m.compress_type != zipfile.ZIP_STORED]
    except (zipfile.BadZipFile, OSError, ValueError):
        return  # torch.load names what is wrong with it
    if packed:
        raise UserError(f"{path}: not a checkpoint torch.save wrote (compressed member "
                        f"{packed[0][:80]!r})")


def _load_failure(path: Path, exc: Exception) -> str:
    """Why ``torch.load`` refused a file, without torch's advice to turn ``weights_only`` off
    (which would let a stranger's file run code)."""
    from torch.serialization import get_unsafe_globals_in_checkpoint

    if not zipfile.is_zipfile(path):
        return "not a complete torch checkpoint: truncated, or a file of another kind"
    try:
        unsafe = get_unsafe_globals_in_checkpoint(path)  # reads the pickle's opcodes, runs nothing
    except Exception:  # a damaged archive: torch's own message below says how
        unsafe = []
    if unsafe:
        return (f"it holds a pickled Python object ({unsafe[0][:80]}); reltrain loads tensors "
                f"and plain data only")
    if isinstance(exc, pickle.UnpicklingError):  # what weights_only refuses
        return "it holds pickled objects other than tensors and plain data"
    return first_line(exc, 200)
