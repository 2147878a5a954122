"""ONNX export and the onnxruntime runtime (the ``[onnx]`` extra). The graph takes the tensors the
PyTorch model takes and returns the logits, so all that follows is shared by both runtimes. The
BiLSTM packs its sequences, which torch.export cannot trace: it uses the TorchScript exporter."""

from __future__ import annotations

import contextlib
import io
import logging
import warnings
from pathlib import Path

import torch
import torch.nn as nn

from reltrain.runtime.errors import UserError

ONNX_FILE = "model.onnx"
INPUTS = ("word", "pos_head", "pos_tail", "segment", "mask", "head", "tail")
OPSET = 18


class _Logits(nn.Module):
    """The model with positional inputs in ``INPUTS`` order, as the exporters want them."""

    def __init__(self, model: nn.Module):
        super().__init__()
        self.model = model

    def forward(self, word, pos_head, pos_tail, segment, mask, head, tail):
        return self.model(word=word, pos_head=pos_head, pos_tail=pos_tail, segment=segment,
                          mask=mask, head=head, tail=tail).float()


def _require(module: str) -> None:
    try:
        __import__(module)
    except ImportError:
        raise UserError(f"ONNX needs the '{module}' package: pip install 'reltrain[onnx]'") from None


def export_onnx(model: nn.Module, example: dict[str, torch.Tensor], path: Path, name: str) -> None:
    """Write ``model`` (eval mode, on the CPU) as ONNX with dynamic batch and length axes.
    ``example``: one batch of inputs, at least two examples long."""
    _require("onnx")
    wrapped = _Logits(model).eval()
    args = tuple(example[k] for k in INPUTS)
    quiet = io.StringIO()
    # Both exporters print progress and warnings about their own internals (torchvision's
    # operators missing, deprecations): nothing a user acts on.
    torch_log = logging.getLogger("torch.onnx")
    level = torch_log.level
    torch_log.setLevel(logging.ERROR)
    try:
        with warnings.catch_warnings(), contextlib.redirect_stdout(quiet), torch.no_grad():
            warnings.simplefilter("ignore")
            if name == "bilstm":
                axes = {k: ({0: "batch"} if k in ("head", "tail") else {0: "batch", 1: "length"})
                        for k in INPUTS}
                torch.onnx.export(wrapped, args, str(path), input_names=list(INPUTS),
                                  output_names=["logits"], dynamic_axes={**axes, "logits": {0: "batch"}},
                                  opset_version=OPSET, dynamo=False)
            else:
                _require("onnxscript")
                batch, length = torch.export.Dim("batch", min=1), torch.export.Dim("length", min=1)
                shapes = {k: ({0: batch} if k in ("head", "tail") else {0: batch, 1: length})
                          for k in INPUTS}
                program = torch.onnx.export(wrapped, args, input_names=list(INPUTS),
                                            output_names=["logits"], dynamic_shapes=shapes,
                                            opset_version=OPSET, dynamo=True, verbose=False)
                program.save(str(path), external_data=False)
    finally:
        torch_log.setLevel(level)


def _check_self_contained(path: Path) -> None:
    """``path`` is a regular file inside its folder (no link) whose tensors are all inside it:
    ONNX lets a tensor name an external file by path, which onnxruntime would read."""
    from reltrain.artifacts.model_folder import member_path  # torch, the config: only when used

    _require("onnx")
    import onnx
    from google.protobuf.message import DecodeError

    try:
        model = onnx.load_model(str(member_path(path.parent, path.name)), load_external_data=False)
    except (DecodeError, ValueError, RuntimeError) as exc:
        raise UserError(f"{path}: onnxruntime cannot load it (not an ONNX model: {str(exc)[:120]})") from None
    external = onnx.TensorProto.EXTERNAL
    graphs, seen = [model.graph], 0
    while graphs:  # subgraphs of If/Loop nodes hold tensors too
        graph = graphs.pop()
        seen += 1
        tensors = [*graph.initializer, *(a.t for n in graph.node for a in n.attribute if a.HasField("t")),
                   *(t for n in graph.node for a in n.attribute for t in a.tensors)]
        if any(t.data_location == external for t in tensors):
            raise UserError(f"{path}: it refers to tensors in other files; reltrain runs only "
                            f"self-contained ONNX models (as 'reltrain export' writes them)")
        graphs += [a.g for n in graph.node for a in n.attribute if a.HasField("g")]
        graphs += [g for n in graph.node for a in n.attribute for g in a.graphs]


class OnnxModel(nn.Module):
    """An onnxruntime session standing in for the PyTorch model: same inputs, same logits. The
    session opens on first use, with torch's thread count (one in a prediction worker)."""

    def __init__(self, path: str | Path, device: torch.device):
        super().__init__()
        _require("onnxruntime")
        import onnxruntime as ort

        _check_self_contained(Path(path))
        self.path, self.device = str(path), device
        self.providers = ["CPUExecutionProvider"]
        if device.type == "cuda":
            if "CUDAExecutionProvider" not in ort.get_available_providers():
                raise UserError("--runtime onnx on cuda needs onnxruntime-gpu; this onnxruntime "
                                f"runs on {', '.join(ort.get_available_providers())}")
            self.providers.insert(0, "CUDAExecutionProvider")
        self._session = None
        self.num_labels: int | None = None  # known once check() opened the session

    @property
    def session(self):
        if self._session is None:
            import onnxruntime as ort

            options = ort.SessionOptions()
            options.intra_op_num_threads = torch.get_num_threads()
            options.log_severity_level = 3  # errors only
            try:
                self._session = ort.InferenceSession(self.path, options, providers=self.providers)
            except Exception as exc:  # onnxruntime raises its own types for unreadable models
                raise UserError(f"{self.path}: onnxruntime cannot load it ({str(exc)[:200]})") from None
            self.inputs = [i.name for i in self._session.get_inputs()]
        return self._session

    def check(self) -> None:
        """Open the session now, so a damaged file is an error before any work starts."""
        shape = self.session.get_outputs()[0].shape
        self.num_labels = shape[-1] if shape and isinstance(shape[-1], int) else None
        self._session = None

    def forward(self, **inputs: torch.Tensor) -> torch.Tensor:
        session = self.session
        feed = {k: inputs[k].cpu().numpy() for k in self.inputs}
        return torch.from_numpy(session.run(None, feed)[0]).to(inputs["word"].device)
