"""``reltrain serve``: check the model, the device and the port, then run the HTTP app
(inference/server.py) under uvicorn."""

from __future__ import annotations

import json
import logging
import os
import socket
from dataclasses import asdict, replace

from reltrain.config.commands import ServeOptions
from reltrain.inference.server import OPTIONS_ENV
from reltrain.runtime.errors import UserError

log = logging.getLogger("reltrain.serve")


def run_serve(options: ServeOptions) -> None:
    """Run the server until SIGINT or SIGTERM: it stops taking connections, finishes what is in
    flight (at most ``drain_timeout_s``), and exits; a second signal stops it at once."""
    try:
        import uvicorn
    except ImportError:
        raise UserError("reltrain serve needs FastAPI and uvicorn: pip install 'reltrain[serve]'") from None
    from reltrain.runtime.distributed import resolve_device  # numpy, torch, tqdm only when used
    from reltrain.inference.predictor import Predictor  # numpy, torch, tqdm only when used

    o = options
    # Errors first, as one line: inside a worker's startup they would be uvicorn's traceback.
    resolve_device(o.device)
    Predictor.from_checkpoint(o.model, runtime=o.runtime, amp=o.amp)
    _check_port(o.host, o.port)
    if not o.threads:
        o = replace(o, threads=max(1, (os.cpu_count() or 1) // o.workers))
    wait = (f"waiting up to {o.max_wait_ms:g} ms for more" if o.max_wait_ms
            else "what queued while the model was busy")
    log.info("serving %s on http://%s:%d (POST /predict, GET /health /ready /model /metrics "
             "/docs%s); %d worker process(es), batches of up to %d examples (%s)",
             o.model, o.host, o.port, " and the demo page /" if o.demo else "", o.workers,
             o.max_batch, wait)
    os.environ[OPTIONS_ENV] = json.dumps(asdict(o))
    uvicorn.run("reltrain.inference.server:app_from_env", factory=True, host=o.host, port=o.port,
                workers=o.workers, access_log=False, log_level="info",
                limit_concurrency=o.max_connections,
                timeout_graceful_shutdown=max(1, round(o.drain_timeout_s)))


def _check_port(host: str, port: int) -> None:
    """A port in use (or an address not of this machine) is one line before uvicorn starts,
    not uvicorn's error and exit 1."""
    try:
        family = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0][0]
        with socket.socket(family, socket.SOCK_STREAM) as sock:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as uvicorn binds
            sock.bind((host, port))
    except OSError as exc:
        raise UserError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None
