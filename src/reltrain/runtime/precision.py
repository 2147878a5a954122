"""The precision a run computes in (``train.amp``). Weights stay fp32; autocast runs the matrix
products in bf16 or fp16. ``auto``: a pretrained encoder in bf16 where the hardware has it (a
GPU: else fp16 with a loss scaler; a CPU: else fp32, emulated bf16 being far slower), reltrain's
own encoders in fp32. Training, evaluation and prediction follow the same rule."""

from __future__ import annotations

import contextlib
from dataclasses import dataclass

import torch

from reltrain.runtime.devices import AMP_SETTINGS as SETTINGS
from reltrain.runtime.errors import UserError

NATIVE_CPU = "this CPU multiplies bf16 in hardware (AVX512-BF16 or AMX)"
NO_BF16_CPU = "this CPU has no bf16 arithmetic (no AVX512-BF16 or AMX)"


@dataclass(frozen=True)
class Precision:
    dtype: torch.dtype | None  # the autocast type; None: fp32 throughout
    reason: str

    @property
    def name(self) -> str:
        return {None: "fp32", torch.bfloat16: "bf16", torch.float16: "fp16"}[self.dtype]

    def autocast(self, device: torch.device):
        if self.dtype is None:
            return contextlib.nullcontext()
        return torch.autocast(device.type, dtype=self.dtype)

    def describe(self) -> str:
        return f"precision {self.name} ({self.reason})"


FP32 = Precision(None, "amp=off")


def native_bf16_cpu() -> bool:
    """oneDNN's own test for bf16 in hardware; False where the build cannot tell."""
    check = getattr(torch.ops.mkldnn, "_is_mkldnn_bf16_supported", None)
    try:
        return bool(torch.backends.mkldnn.is_available() and check is not None and check())
    except RuntimeError:
        return False


def resolve(setting: str, device: torch.device, pretrained: bool) -> Precision:
    """The precision for ``setting`` (auto, off, bf16, fp16) on ``device``."""
    if setting not in SETTINGS:
        raise UserError(f"amp must be one of {', '.join(SETTINGS)}, not '{setting}'")
    cuda = device.type == "cuda"
    if setting == "off":
        return FP32
    if setting == "fp16":
        if not cuda:
            raise UserError("amp=fp16 needs CUDA; on CPU use bf16 or off")
        return Precision(torch.float16, "amp=fp16")
    if setting == "bf16":
        if not cuda and not native_bf16_cpu():
            return Precision(torch.bfloat16, f"amp=bf16, although {NO_BF16_CPU}: emulated, far slower")
        return Precision(torch.bfloat16, "amp=bf16")
    if not pretrained:
        return Precision(None, "auto: reltrain's own encoders compute in fp32")
    if cuda:
        if torch.cuda.is_bf16_supported():
            return Precision(torch.bfloat16, "auto: a pretrained encoder on a GPU with bf16")
        return Precision(torch.float16, "auto: a pretrained encoder on a GPU without bf16")
    if native_bf16_cpu():
        return Precision(torch.bfloat16, f"auto: a pretrained encoder, and {NATIVE_CPU}")
    return Precision(None, f"auto: {NO_BF16_CPU}, and emulated bf16 is far slower")
