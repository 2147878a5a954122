"""Self-contained checkpoints of tensors and plain data only, written atomically by one process:
``torch.load(weights_only=True)`` reads them, so a checkpoint from a stranger cannot run code."""

from __future__ import annotations

import json
import os
import random
from pathlib import Path

import numpy as np
import torch

from reltrain.artifacts import FORMAT, VERSION
from reltrain.errors import UserError, first_line
from reltrain.output import atomic_file



def save_checkpoint(path: str | Path, payload: dict, sidecar: dict | None = None) -> None:
    """Write a temporary file beside ``path``, fsync, rename: a crash leaves the old file whole."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    payload = {"format": FORMAT, "version": VERSION, **payload}
    _atomic_write(path, lambda f: torch.save(payload, f))
    if sidecar is not None:
        text = json.dumps(sidecar, indent=2, ensure_ascii=False).encode()
        _atomic_write(path.with_suffix(path.suffix + ".json"), lambda f: f.write(text))


def _atomic_write(path: Path, write) -> None:
    # ".tmp": a run directory's leftovers of a killed write are removed by that suffix.
    with atomic_file(path, "wb", suffix=".tmp", fsync=True) as f:
        write(f)


def capture_rng() -> dict:
    """RNG states as tensors and lists, so they survive ``weights_only`` loading."""
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


def restore_rng(state: dict) -> None:
    version, internal, gauss = state["python"]
    random.setstate((version, tuple(internal), gauss))
    n = state["numpy"]
    np.random.set_state(("MT19937", n["keys"].numpy().astype(np.uint32), n["pos"], n["has_gauss"],
                         n["gauss"]))
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


class Checkpointer:
    """Saves and restores the training state part for part (``_parts``, counters, every rank's RNG
    and partial totals); rank 0 writes ``last.pt``, ``best.pt`` and ``ckpt-<step>.pt`` links."""

    def __init__(self, directory: str | Path, static: dict, model, optimizer, scheduler,
                 ctx, scaler=None, keep: int = 2):
        self.directory, self.ctx = Path(directory), ctx
        self.static, self.model = static, model
        self.optimizer, self.scheduler, self.scaler, self.keep = optimizer, scheduler, scaler, keep

    def _parts(self) -> dict:
        """The objects with a ``state_dict``, by their key in a checkpoint."""
        from reltrain import distributed as D

        parts = {"model": D.unwrap(self.model), "optimizer": self.optimizer,
                 "scheduler": self.scheduler}
        if self.scaler is not None and self.scaler.is_enabled():
            parts["scaler"] = self.scaler
        return parts

    def save(self, state: dict, rank_state: dict, best: bool, summary: dict) -> None:
        # Every rank's RNG and partial-epoch counters, so each rank resumes exactly.
        rank_states = self.ctx.all_gather_objects({"rng": capture_rng(), **rank_state})
        if not self.ctx.is_main:
            return
        payload = {**self.static, **{k: part.state_dict() for k, part in self._parts().items()},
                   "state": state, "rank_states": rank_states}
        if best:  # before last.pt: a crash in between replays the epoch, which rewrites best.pt
            save_checkpoint(self.directory / "best.pt", payload, summary)
        last = self.directory / "last.pt"
        save_checkpoint(last, payload, summary)
        numbered = self.directory / f"ckpt-{state['step']:08d}.pt"
        for suffix in ("", ".json"):
            _link_or_copy(Path(str(last) + suffix), Path(str(numbered) + suffix))
        for old in numbered_checkpoints(self.directory)[self.keep:]:
            for suffix in ("", ".json"):
                Path(str(old) + suffix).unlink(missing_ok=True)

    def restore(self, payload: dict, trainer):
        """Put a checkpoint (on every rank, resume.find_resume) back into the parts it was saved
        from, but the model's weights, which ``load_model_weights`` put in before wrapping;
        returns the trainer's counters and sets its partial-epoch totals."""
        from reltrain.training.trainer import EpochProgress, TrainState

        for key, part in self._parts().items():
            if key != "model" and key in payload:  # a scaler only where fp16 ran
                _load_part(key, part, payload)
        rank_states = payload["rank_states"]
        restore_rng(rank_states[self.ctx.rank % len(rank_states)]["rng"])
        progress = [EpochProgress(**r["progress"]) for r in rank_states]
        if len(rank_states) == self.ctx.world_size:
            trainer.partial = progress[self.ctx.rank]
        elif self.ctx.is_main:  # the epoch's running totals of all old ranks, on the new rank 0
            trainer.partial = EpochProgress(sum(p.loss_sum for p in progress),
                                            sum(p.examples for p in progress),
                                            max(p.seconds for p in progress))
        return TrainState(**payload["state"])


def load_model_weights(model, payload: dict) -> None:
    """A resumed run's weights into the model before DDP wraps it: wrapping then starts every
    rank from them, and nothing is loaded into a wrapper."""
    _load_part("model", model, payload)


def _load_part(key: str, part, payload: dict) -> None:
    from reltrain.artifacts import strip_wrapper_prefixes

    try:
        part.load_state_dict(strip_wrapper_prefixes(payload[key]) if key == "model" else payload[key])
    except (ValueError, KeyError, TypeError, RuntimeError) as exc:  # a stranger's file
        raise UserError(f"{payload.get('path', 'the checkpoint')}: its {key} state does not fit "
                        f"this run ({first_line(exc)[:200]})") from None


def _link_or_copy(src: Path, dst: Path) -> None:
    tmp = dst.with_name(dst.name + ".tmp")
    tmp.unlink(missing_ok=True)
    try:
        os.link(src, tmp)
        os.replace(tmp, dst)
    except OSError:
        tmp.unlink(missing_ok=True)
        _atomic_write(dst, lambda f: f.write(src.read_bytes()))


def numbered_checkpoints(directory: Path) -> list[Path]:
    """``ckpt-<step>.pt`` files, newest first."""
    found = []
    for path in Path(directory).glob("ckpt-*.pt"):
        step = path.stem[len("ckpt-"):]
        if step.isascii() and step.isdigit():
            found.append((int(step), path))
    return [p for _, p in sorted(found, reverse=True)]


def resume_candidates(directory: Path) -> list[Path]:
    """Checkpoints for ``resume=auto``, newest first; ``last.pt`` (written before its link)
    leads."""
    out: list[Path] = []
    for path in [Path(directory) / "last.pt", *numbered_checkpoints(directory)]:
        if path.is_file() and not any(os.path.samefile(path, p) for p in out):
            out.append(path)
    return out


def seed_everything(seed: int) -> None:
    """Seed python, numpy and torch (all devices) alike on every rank."""
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
