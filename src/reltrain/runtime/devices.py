"""The names of devices and precisions, checked without importing torch: the options of every
command refer to them, and the CLI checks them before anything starts."""

from __future__ import annotations

import re

from reltrain.runtime.errors import UserError

DEVICE_NAMES = "auto, cpu, cuda or cuda:N"
AMP_SETTINGS = ("auto", "off", "bf16", "fp16")


def check_device_name(name: str) -> None:
    """A one-line error for a device name reltrain does not know (before anything starts)."""
    if not (name in ("auto", "cpu", "cuda") or re.fullmatch(r"cuda:[0-9]+", str(name))):
        raise UserError(f"device must be {DEVICE_NAMES}, not '{name}'")
