"""The options of ``reltrain serve`` (``ServeOptions``) and ``reltrain export``
(``ExportOptions``): every setting, its default, flag and help once, checked once; the command
line's parser is built from them (reltrain/options.py) and the Python API (``create_app``,
``export_model``) takes the same objects."""

from __future__ import annotations

from dataclasses import dataclass

from reltrain.config import check_choices
from reltrain.errors import UserError
from reltrain.options import ModelOptions, opt


@dataclass
class ServeOptions(ModelOptions):
    model: str = opt(help="an exported folder, a run directory or a .pt checkpoint")
    host: str = opt("127.0.0.1", "address to listen on (default 127.0.0.1; 0.0.0.0 for every "
                                 "interface)")
    port: int = opt(8000, "(default 8000)")
    max_batch: int = opt(64, "examples per model batch (default 64; 1: no micro-batching)",
                         metavar="N")
    max_wait_ms: float = opt(0.0, "how long a batch waits for more requests (default 0: it takes "
                                  "what queued while the model was busy)", metavar="MS")
    workers: int = opt(1, "server processes, each with the model and the cores shared (default 1)",
                       metavar="N")
    top_k: int = opt(3, "alternatives per answer (a request may ask ?top_k=N)")
    max_items: int = opt(1024, "examples per request, each pair of a sentence's entities counting "
                               "(default 1024)", metavar="N")
    max_text_chars: int = opt(10_000, "characters per text (default 10000)", metavar="N")
    max_request_chars: int = opt(1_000_000, "characters of text one request may ask to read, each "
                                            "example (every entity pair) reading its whole text; "
                                            "more: 413 (default 1000000)", metavar="N")
    max_queue: int = opt(4096, "examples waiting for the model at most; more: 503 with "
                               "Retry-After (default 4096)", metavar="N")
    max_connections: int = opt(1000, "open connections per worker process; more: 503 (default "
                                     "1000)", metavar="N")
    body_timeout_s: float = opt(30.0, "a request body slower than this: 408 (default 30)",
                                metavar="S")
    drain_timeout_s: float = opt(30.0, "on SIGTERM/SIGINT, how long requests in flight may finish "
                                       "(default 30; a second signal stops at once)", metavar="S")
    access_log: bool = opt(False, "one JSON line per request on stderr (request id, status, time)")
    demo: bool = opt(True, "no demo page at GET / (the JSON API only)")
    max_body_bytes: int = 1_000_000
    threads: int = 0  # torch threads per process; 0: the cores shared among the workers

    def __post_init__(self):
        super().__post_init__()
        for name in ("max_batch", "top_k", "max_items", "max_text_chars", "max_request_chars",
                     "max_body_bytes", "max_queue", "workers", "max_connections"):
            if getattr(self, name) < 1:
                raise UserError(f"--{name.replace('_', '-')} must be at least 1, not "
                                f"{getattr(self, name)}")
        for name in ("body_timeout_s", "drain_timeout_s"):
            if not getattr(self, name) > 0:
                raise UserError(f"--{name.replace('_', '-')} must be positive, not "
                                f"{getattr(self, name):g}")
        if self.max_wait_ms < 0:
            raise UserError(f"--max-wait-ms must be >= 0, not {self.max_wait_ms:g}")
        if not 0 <= self.port <= 65535:
            raise UserError("--port must be from 0 to 65535")
        if self.max_queue < self.max_items:
            raise UserError(f"--max-queue ({self.max_queue}) must hold at least one request of "
                            f"--max-items ({self.max_items}) examples")
        if self.threads < 0:
            raise UserError("threads must be >= 0 (0: the cores shared among the workers)")


EXPORT_FORMATS = ("safetensors", "onnx")


@dataclass
class ExportOptions:
    checkpoint: str = opt(help="a .pt checkpoint, a run directory or an exported folder")
    out_dir: str = opt(help="a new (or empty) folder", metavar="OUT_DIR")
    format: str = opt("safetensors", "onnx: also model.onnx, for --runtime onnx (needs "
                                     "reltrain[onnx])", choices=EXPORT_FORMATS)

    def __post_init__(self):
        check_choices(format=(self.format, EXPORT_FORMATS))
        if not str(self.out_dir).strip():
            raise UserError("OUT_DIR must name the folder to write")
