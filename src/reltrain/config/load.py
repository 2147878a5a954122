"""A whole ``Config``: from defaults, a file and ``key=value`` overrides (the user's own, P6 of
docs/security.md), or from a checkpoint's or an exported folder's JSON (a stranger's, P2)."""

from __future__ import annotations

import dataclasses

from reltrain.config.checks import validate, validate_values
from reltrain.config.files import parse_overrides, read_config_file
from reltrain.config.train import Config, finite_number, option_keys
from reltrain.runtime.errors import UserError, first_line


def load_config(path: str | None = None, overrides: list[str] | tuple[str, ...] = ()) -> Config:
    """Defaults, then the file at ``path``, then ``key=value`` overrides; validated once."""
    from omegaconf import OmegaConf
    from omegaconf.errors import OmegaConfBaseException

    sources = [read_config_file(path)] if path else []
    sources.append(parse_overrides(overrides))
    try:
        merged = OmegaConf.structured(Config)
        for src in sources:
            merged = OmegaConf.merge(merged, src)
        _task_defaults(merged, sources)
        cfg = OmegaConf.to_object(merged)
    except OmegaConfBaseException as exc:
        raise UserError(_option_error(exc)) from None
    except (ValueError, OverflowError) as exc:  # a number no option can hold, e.g. 1e400 as int
        raise UserError(f"bad option: {first_line(exc, 200)}") from None
    validate(cfg)
    return cfg


def _task_defaults(merged, sources: list[dict]) -> None:
    """task=extract's own defaults where no source set the option: model.name bilstm (cnn,
    the default, reads no spans) and, for it, train.lr 5e-3 (at 1e-3 its span classifier learns
    the bundled example's entities in 10 epochs to F1 0.48; at 5e-3 to 0.99)."""
    def given(section: str, key: str) -> bool:
        return any(key in (s.get(section) or {}) for s in sources)

    if merged.task != "extract":
        return
    if not given("model", "name"):
        merged.model.name = "bilstm"
    if merged.model.name == "bilstm" and not given("train", "lr"):
        merged.train.lr = 5e-3


def config_from_dict(data: object, where: str = "checkpoint") -> Config:
    """The Config of a checkpoint or an exported folder, read as input from a stranger: plain typed
    values, no interpolation, unknown keys refused, missing ones defaulted, ranges checked."""
    if not isinstance(data, dict):
        raise UserError(f"{where}: its config is not a mapping")
    try:
        cfg = _typed_dataclass(Config, data, "")
        validate_values(cfg)
    except UserError as exc:
        raise UserError(f"{where}: its config is not valid: {exc}") from None
    return cfg


_MAX_STRING = 4096  # characters of one string option
_MAX_LIST = 64  # entries of one list option


def _typed_dataclass(cls, data: dict, prefix: str):
    import typing

    hints = typing.get_type_hints(cls)
    known = {f.name for f in dataclasses.fields(cls)}
    for key in data:
        if key not in known:
            raise UserError(f"unknown key '{prefix}{str(key)[:80]}'")
    values = {}
    for name in known & set(data):
        kind, value, key = hints[name], data[name], prefix + name
        if dataclasses.is_dataclass(kind):
            if not isinstance(value, dict):
                raise UserError(f"{key} is not a mapping")
            values[name] = _typed_dataclass(kind, value, key + ".")
        else:
            values[name] = _typed_value(kind, value, key)
    return cls(**values)


def _typed_value(kind, value, key: str):
    ok = {bool: isinstance(value, bool),
          int: isinstance(value, int) and not isinstance(value, bool),
          float: isinstance(value, (int, float)) and not isinstance(value, bool),
          str: isinstance(value, str) and len(value) <= _MAX_STRING,
          list[int]: (isinstance(value, list) and len(value) <= _MAX_LIST
                      and all(isinstance(v, int) and not isinstance(v, bool) for v in value))}[kind]
    if ok and kind is float and not finite_number(value):
        raise UserError(f"{key} must be a finite number")
    if ok:
        return float(value) if kind is float else list(value) if kind == list[int] else value
    if kind is str and isinstance(value, str):
        raise UserError(f"{key} is longer than {_MAX_STRING} characters")
    if kind == list[int]:
        raise UserError(f"{key} must be a list of at most {_MAX_LIST} integers")
    raise UserError(f"{key} must be {kind.__name__}, not {type(value).__name__}")


def _option_error(exc) -> str:
    from omegaconf.errors import ConfigAttributeError, ConfigKeyError

    key = getattr(exc, "full_key", None)
    if isinstance(exc, (ConfigKeyError, ConfigAttributeError)) and key:
        import difflib

        close = difflib.get_close_matches(str(key), option_keys(), n=1, cutoff=0.6)
        hint = f"did you mean '{close[0]}'? " if close else ""
        return f"bad option: unknown key '{key}' ({hint}see 'reltrain train --help')"
    where = f"{key}: " if key else ""
    return f"bad option: {where}{first_line(exc)}"
