"""Config files and ``key=value`` overrides read as input from a stranger: bounded in size,
depth and number length, UTF-8 text, no YAML aliases (a few hundred bytes of aliases expand
into any amount of memory). Each problem is one ``UserError``."""

from __future__ import annotations

import os
import stat

import yaml

from reltrain.runtime.errors import UserError, first_line

MAX_CONFIG_BYTES = 1 << 20  # a real config is a few KB
MAX_DEPTH = 16  # the deepest option is three levels down (model.cnn.kernel_sizes)
MAX_NUMBER_CHARS = 64  # int() stops at 4,300 digits with a bare ValueError; no option needs 65


class _Refused(Exception):
    pass


class _Loader(yaml.SafeLoader):
    """PyYAML's safe loader without aliases, nested at most ``MAX_DEPTH`` levels."""

    depth = 0

    def compose_node(self, parent, index):
        if self.check_event(yaml.AliasEvent):
            raise _Refused("YAML aliases (*name) are not accepted in a config; write the value out")
        if self.depth >= MAX_DEPTH:
            raise _Refused(f"nested more than {MAX_DEPTH} levels deep")
        self.depth += 1
        try:
            return super().compose_node(parent, index)
        finally:
            self.depth -= 1

    def construct_yaml_int(self, node):
        _check_number(node.value)
        return super().construct_yaml_int(node)

    def construct_yaml_float(self, node):
        _check_number(node.value)
        return super().construct_yaml_float(node)


_Loader.add_constructor("tag:yaml.org,2002:int", _Loader.construct_yaml_int)
_Loader.add_constructor("tag:yaml.org,2002:float", _Loader.construct_yaml_float)


def _check_number(text: str) -> None:
    if len(text) > MAX_NUMBER_CHARS:
        raise _Refused(f"a number of {len(text)} characters (at most {MAX_NUMBER_CHARS})")


def parse_yaml(text: str, where: str) -> object:
    """One YAML (or JSON) document, bounded; ``where`` names it in the error."""
    try:
        return yaml.load(text, Loader=_Loader)  # noqa: S506 (a SafeLoader subclass)
    except _Refused as exc:
        raise UserError(f"{where}: {exc}") from None
    except yaml.YAMLError as exc:
        raise UserError(f"{where}: not valid YAML/JSON: {first_line(exc, 200)}") from None
    except RecursionError:
        raise UserError(f"{where}: nested too deeply") from None


def read_config_file(path: str) -> dict:
    """The mapping in a YAML/JSON config file."""
    try:
        # Non-blocking, then checked: a FIFO named as the config would otherwise block the open.
        with open(os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0)), "rb") as f:
            if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
                raise UserError(f"{path}: not a regular file")
            raw = f.read(MAX_CONFIG_BYTES + 1)
    except FileNotFoundError:
        raise UserError(f"{path}: config file not found") from None
    except OSError as exc:
        raise UserError(f"{path}: cannot read it ({exc.strerror or exc})") from None
    if len(raw) > MAX_CONFIG_BYTES:
        raise UserError(f"{path}: more than {MAX_CONFIG_BYTES // 1024} KiB; not a config file")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise UserError(f"{path}: not UTF-8 text (byte {exc.start}); a config is a YAML or JSON "
                        f"file") from None
    data = parse_yaml(text, path)
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise UserError(f"{path}: a config holds a mapping of options, not a {type(data).__name__}")
    return data


def parse_overrides(items: list[str] | tuple[str, ...]) -> dict:
    """``key=value`` items as one nested mapping; each value is read as YAML (``3`` a number,
    ``[3, 5]`` a list), an empty value as the empty string."""
    out: dict = {}
    for item in items:
        key, sep, raw = item.partition("=")
        if not sep or not key or any(not part for part in key.split(".")):
            raise UserError(f"override '{item[:80]}' is not key=value (see 'reltrain train --help')")
        value = "" if raw == "" else parse_yaml(raw, f"override {key}")
        node = out
        *parents, last = key.split(".")
        for part in parents:
            child = node.setdefault(part, {})
            if not isinstance(child, dict):
                raise UserError(f"override '{key}': {part} is set to a value and used as a section")
            node = child
        node[last] = value
    return out
