"""The checks of a ``Config`` that types alone cannot express: ranges and choices
(``validate_values``, also for a stranger's checkpoint), then the files and folders a run's
options name (``validate``). Each problem is one ``UserError``."""

from __future__ import annotations

from pathlib import Path

from reltrain.config.train import (MAX_WIDTH, Config, DataConfig, EvalConfig, ModelConfig,
                                   TrainConfig,
                                   check_fields, dotted, finite_number, to_dict)
from reltrain.runtime.devices import check_device_name
from reltrain.runtime.errors import UserError


def _check(ok: bool, message: str) -> None:
    if not ok:
        raise UserError(message)




def validate(cfg: Config) -> None:
    """``validate_values``, then what the values name: a registered encoder, files and folders
    that exist."""
    from reltrain.models import check_model_name  # the registry: encoders register by name

    validate_values(cfg)
    d, m = cfg.data, cfg.model
    check_model_name(m.name)  # before the data is read, not after
    for key in ("train", "valid", "test", "labels"):
        check_file(getattr(d, key), f"data.{key}")
    _check(not m.word_vectors or Path(m.word_vectors).is_file(),
           f"model.word_vectors: file not found: {m.word_vectors}" + _relative_hint(m.word_vectors))
    if m.name == "lm":
        _check(bool(m.lm.pretrained) and Path(m.lm.pretrained).is_dir(),
               f"model.name=lm needs model.lm.pretrained=<local model folder>; not a folder: "
               f"'{m.lm.pretrained}'")
    _check(cfg.task != "extract" or m.name in ("bilstm", "lm"),
           f"task=extract reads text with model.name=bilstm (reltrain's own encoder) or lm (a "
           f"pretrained one), not {m.name}")
    _check(cfg.resume in ("auto", "never") or Path(cfg.resume).exists(),
           f"resume must be auto, never or a checkpoint folder; not found: {cfg.resume}")
    _check_task_options(cfg)


# Options of the pair classifier that a task=extract run has no use for, with what to set instead.
_NOT_EXTRACT = {"model.bilstm.hidden": " (its BiLSTM is sized by extract.hidden)",
                "model.bilstm.layers": " (its BiLSTM has one layer, extract.hidden wide)",
                "model.bilstm.pooling": "", "model.pos_dim": "", "data.pos_limit": "",
                "model.lm.pooling": "", "model.lm.markers": "", "model.lm.add_chars": "",
                "model.word_vectors": " (its embeddings start from random)",
                "model.freeze_embeddings": "", "train.class_weights": "",
                "eval.negative_label": " (a pair with no relation answers none)"}
_DEFAULTS = dotted(to_dict(Config()))  # what a run that sets nothing has


def _check_task_options(cfg: Config) -> None:
    """An option the run's task has no use for is refused, not silently ignored: a width set in
    the other task's section would train a model of another size than asked for."""
    given = {k: v for k, v in dotted(to_dict(cfg)).items() if v != _DEFAULTS.get(k, v)}
    for key, value in given.items():
        if cfg.task == "extract":
            _check(key not in _NOT_EXTRACT, f"{key}={value} does not apply to task=extract"
                                            f"{_NOT_EXTRACT.get(key, '')}: leave it out")
            _check(key != "model.multi_label" or value != "false",
                   "model.multi_label=false does not apply to task=extract: it answers every "
                   "relation above its threshold (several on one pair, or none)")
        else:
            _check(not key.startswith("extract."), f"{key} applies to task=extract only (this "
                                                   f"run is task={cfg.task})")


def check_file(path: str, name: str) -> None:
    """``path`` (if given) is a file: a folder or a missing file is one line naming ``name``."""
    _check(not path or not Path(path).is_dir(), f"{name}: {path} is a directory; give a file")
    _check(not path or Path(path).is_file(), f"{name}: file not found: {path}" + _relative_hint(path))


def check_encoding(encoding: str, name: str) -> None:
    """A text encoding Python can decode files with (``gbk``, ``utf-16``; not ``rot13``)."""
    import codecs

    try:
        ok = codecs.lookup(encoding)._is_text_encoding
    except (LookupError, TypeError):
        ok = False
    _check(ok, f"{name}: '{str(encoding)[:40]}' is not a text encoding Python knows (e.g. "
               f"utf-8, gbk, gb18030, utf-16)")


def _relative_hint(path: str) -> str:
    # A path in a --config file is read as the command line's are: from where reltrain runs.
    if not path or Path(path).is_absolute():
        return ""
    return f" (relative paths, also in a --config file, are read from the current directory {Path.cwd()})"


def validate_values(cfg: Config) -> None:
    """Range and choice checks that types alone cannot express (no file is looked at)."""
    t = cfg.train
    # YAML reads `true` as a bool; these three-way options are kept as lower-case strings.
    cfg.model.multi_label = str(cfg.model.multi_label).lower()
    cfg.log.progress = str(cfg.log.progress).lower()
    cfg.log.tensorboard = str(cfg.log.tensorboard).lower()
    t.sparse_embeddings = str(t.sparse_embeddings).lower()
    # ... and `off` as False: train.amp=off on the command line arrives as "False".
    if str(t.amp).lower() in ("false", "off"):
        t.amp = "off"
    check_fields(cfg, "")
    _check_data(cfg.data)
    _check_model(cfg.model)
    _check_train(t, cfg.eval)
    _check_run(cfg)


def _check_data(d: DataConfig) -> None:
    check_encoding(d.encoding, "data.encoding")
    _check(bool(d.train) or not (d.valid or d.test), "data.valid/data.test given without data.train")


def _check_model(m: ModelConfig) -> None:
    c, f = m.cnn, m.transformer
    _check(bool(c.kernel_sizes) and len(c.kernel_sizes) <= 16
           and all(0 < k <= MAX_WIDTH and k % 2 == 1 for k in c.kernel_sizes),
           f"model.cnn.kernel_sizes must be 1 to 16 odd positive widths, not {list(c.kernel_sizes)[:16]}")
    _check(f.dim % f.heads == 0, "model.transformer.dim must be a multiple of model.transformer.heads")
    _check(m.name != "lm" or not m.word_vectors, "model.word_vectors does not apply to model.name=lm")


def _check_train(t: TrainConfig, evaluation: EvalConfig) -> None:
    _check(bool(evaluation.negative_label.strip()), "eval.negative_label must be auto, none or a label")


def _check_run(cfg: Config) -> None:
    """The options of how and where a run goes: processes, devices, logs, checkpoints."""
    _check(all(i >= 0 for i in cfg.dist.dp_devices), "dist.dp_devices must be GPU ids >= 0")
    check_device_name(cfg.device)
    for key, value in dotted(to_dict(cfg)).items():
        _check(not isinstance(value, float) or finite_number(value), f"{key} must be a finite number")
