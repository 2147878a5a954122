"""Writing a model folder (what ``reltrain export`` shares and what every checkpoint is) and a
checkpoint: the model folder plus ``training_state.pt``, put in place by one rename so a crash
leaves the old one whole. The files' names and keys are model_folder.py's and
training_state.py's."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

from reltrain.artifacts.card import model_card
from reltrain.artifacts.model_folder import (CONFIG, FOLDER_FORMAT, FOLDER_VERSION, VOCAB, WEIGHTS,
                                             Artifact)
from reltrain.artifacts.training_state import STATE_FILE, TrainingState, save_training_state
from reltrain.config.train import to_dict
from reltrain.runtime.errors import UserError
from reltrain.data.schema import negative_index
from reltrain import __version__

EPOCH_FILE = "epoch.json"  # a checkpoint's epoch summary, for people; nothing reads it back
TMP = ".tmp"  # a folder being written; ".old.tmp": one being replaced (run_dir cleans both)


def write_model_folder(out: Path, artifact: Artifact, test: dict | None = None,
                       summary: dict | None = None, onnx: bool = False) -> None:
    """config.json, model.safetensors, the vocabulary or tokenizer files and README.md into the
    existing folder ``out``."""
    from safetensors.torch import save_file

    config = folder_config(artifact, test, summary or {}, __version__)
    (out / CONFIG).write_text(json.dumps(config, indent=2, ensure_ascii=False), encoding="utf-8")
    weights = {k: v.detach().to("cpu").contiguous() for k, v in artifact.weights.items()}
    save_file(_unshared(weights), str(out / WEIGHTS), metadata={"format": "pt"})
    # safetensors creates its file private (0600); the folder is for sharing, as its other files
    shutil.copymode(out / CONFIG, out / WEIGHTS)
    if artifact.lm:
        for name, text in artifact.lm["files"].items():  # allow-listed plain names
            (out / name).write_text(text, encoding="utf-8")
    else:
        (out / VOCAB).write_text(json.dumps(artifact.vocab, ensure_ascii=False), encoding="utf-8")
    (out / "README.md").write_text(model_card(config, out, onnx=onnx), encoding="utf-8")


def _unshared(weights: dict) -> dict:
    """safetensors refuses tensors that share memory (a tied embedding); those get their own copy."""
    seen, out = set(), {}
    for key, tensor in weights.items():
        ptr = tensor.untyped_storage().data_ptr()
        out[key] = tensor.clone() if ptr in seen else tensor
        seen.add(ptr)
    return out


def write_checkpoint(directory: Path, artifact: Artifact, training: TrainingState,
                     epoch_summary: dict) -> None:
    """The checkpoint folder ``directory``: written beside it, fsynced, renamed into place."""
    tmp = directory.with_name(directory.name + TMP)
    try:
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
        write_model_folder(tmp, artifact)
        save_training_state(tmp / STATE_FILE, training)
        text = json.dumps(epoch_summary, indent=2, ensure_ascii=False)
        (tmp / EPOCH_FILE).write_text(text, encoding="utf-8")
        _fsync_folder(tmp)
        put_in_place(tmp, directory)
    except OSError as exc:
        shutil.rmtree(tmp, ignore_errors=True)
        raise UserError(f"cannot write the checkpoint {directory}: {exc.strerror or exc}") from None


def link_checkpoint(source: Path, directory: Path) -> None:
    """``directory`` as a copy of the checkpoint ``source``, its files hard links where the file
    system has them (a numbered fall-back for resume costs no space)."""
    tmp = directory.with_name(directory.name + TMP)
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    for path in source.iterdir():
        try:
            os.link(path, tmp / path.name)
        except OSError:
            shutil.copyfile(path, tmp / path.name)
    _fsync_folder(tmp)
    put_in_place(tmp, directory)


def put_in_place(tmp: Path, directory: Path) -> None:
    """Rename ``tmp`` to ``directory``; an existing one is moved aside first and removed after
    (a crash between the renames leaves ``<name>.old.tmp``, which ``recover_checkpoints`` puts
    back)."""
    old = directory.with_name(directory.name + ".old" + TMP)
    if directory.exists():
        shutil.rmtree(old, ignore_errors=True)
        os.replace(directory, old)
    os.replace(tmp, directory)
    _fsync_dir(directory.parent)
    shutil.rmtree(old, ignore_errors=True)


def recover_checkpoints(directory: Path) -> None:
    """After a killed write: a replaced folder whose successor never landed goes back; every
    half-written folder goes."""
    for stale in sorted(directory.glob("*" + TMP)):
        name = stale.name[:-len(TMP)]
        if name.endswith(".old") and not (directory / name[:-len(".old")]).exists():
            os.replace(stale, directory / name[:-len(".old")])
        elif stale.is_dir() and not stale.is_symlink():
            shutil.rmtree(stale)
        else:
            stale.unlink()


def _fsync_folder(folder: Path) -> None:
    for path in folder.iterdir():
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
    _fsync_dir(folder)


def _fsync_dir(folder: Path) -> None:
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:  # a platform without directory descriptors
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def folder_config(artifact: Artifact, test: dict | None, summary: dict, version: str) -> dict:
    """config.json: the Hugging Face keys (``id2label``, ``model_type``) and reltrain's own."""
    cfg, labels, data = to_dict(artifact.config), artifact.labels, artifact.config.data
    lm = artifact.lm
    return {
        "library_name": "reltrain", "format": FOLDER_FORMAT, "format_version": FOLDER_VERSION,
        "reltrain_version": version, "model_type": artifact.config.model.name
        + ("-spans" if artifact.config.task == "extract" else ""),
        "id2label": {str(i): name for i, name in enumerate(labels)},
        "label2id": {name: i for i, name in enumerate(labels)},
        "task": artifact.config.task, "entity_types": artifact.entity_types,
        "preprocessing": {k: getattr(data, k) for k in ("language", "tokenizer", "lowercase",
                                                        "max_len", "pos_limit")},
        "tokenizer": ({"kind": "pretrained", "types": lm["types"], "added": lm["added"],
                       "files": sorted(lm["files"])} if lm else {"kind": "words", "vocab": VOCAB}),
        "hf_config": artifact.hf_config,
        "metrics": {"test": test, "best": artifact.best,
                    "negative_label": _negative_name(artifact) if test else None},
        "training_data": _training_data(cfg, artifact, summary),
        "reltrain_config": cfg,
    }


def _negative_name(artifact: Artifact) -> str | None:
    try:
        index = negative_index(artifact.config.eval.negative_label, artifact.labels)
    except UserError:
        return None
    return artifact.labels[index] if index is not None else None


def _training_data(cfg: dict, artifact: Artifact, summary: dict) -> dict:
    data = summary.get("data") if isinstance(summary.get("data"), dict) else {}
    rows = artifact.data_rows or data.get("rows") or {}
    rows = rows if isinstance(rows, dict) else {}
    return {split: {"file": Path(cfg["data"][split]).name if cfg["data"][split] else None,
                    "rows": rows.get(split) if isinstance(rows.get(split), int) else None}
            for split in ("train", "valid", "test")}
