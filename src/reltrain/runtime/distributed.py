"""The only module that talks to torch.distributed or reads the launcher's environment. Every
collective here is the identity in a single process, so one code path serves world size 1 and N."""

from __future__ import annotations

import importlib
import inspect
import logging
import os
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field
from datetime import timedelta

import torch
import torch.distributed as dist
import torch.nn as nn

from reltrain.runtime.devices import check_device_name
from reltrain.runtime.errors import SharedUserError, UserError

log = logging.getLogger(__name__)


@dataclass
class DistContext:
    """Where this process stands in the job; a plain value, built by ``setup``."""

    rank: int = 0
    local_rank: int = 0
    world_size: int = 1
    device: torch.device = field(default_factory=lambda: torch.device("cpu"))
    strategy: str = "single"  # single, ddp or dp
    backend: str | None = None
    dp_devices: list[int] = field(default_factory=list)

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def distributed(self) -> bool:
        return self.strategy == "ddp"

    def _tensor_device(self) -> torch.device:
        return self.device if self.backend == "nccl" else torch.device("cpu")

    def barrier(self) -> None:
        if self.distributed:
            dist.barrier()

    def all_gather_objects(self, obj) -> list:
        """Every rank's ``obj``, in rank order, on every rank."""
        if not self.distributed:
            return [obj]
        out = [None] * self.world_size
        dist.all_gather_object(out, obj)
        return out

    def broadcast_object(self, obj):
        """Rank 0's ``obj`` on every rank."""
        if not self.distributed:
            return obj
        box = [obj]
        dist.broadcast_object_list(box, src=0)
        return box[0]

    def sum(self, values: list[float]) -> list[float]:
        """Each of ``values`` summed over the ranks."""
        if not self.distributed:
            return list(values)
        t = torch.tensor(values, dtype=torch.float64, device=self._tensor_device())
        dist.all_reduce(t)
        return t.tolist()

    def start_vote(self, flag: int):
        """Agree on the largest ``flag`` over the ranks; returns a function giving it. The
        all-reduce runs in the background, so a vote read one step later costs no waiting."""
        if not self.distributed:
            return lambda: flag
        t = torch.tensor([flag], dtype=torch.int64, device=self._tensor_device())
        work = dist.all_reduce(t, op=dist.ReduceOp.MAX, async_op=True)

        def result() -> int:
            work.wait()
            return int(t.item())

        return result

    def agree(self, produce):
        """Rank 0 runs ``produce()``; every rank gets its value or the same ``UserError``, so no
        rank waits at a collective for an answer that became an exception."""
        if self.is_main:
            try:
                found = ("ok", produce())
            except UserError as exc:
                found = ("error", str(exc))
        else:
            found = None
        status, value = self.broadcast_state(found)
        if status == "error":
            raise SharedUserError(value)
        return value

    def broadcast_state(self, tree):
        """Rank 0's ``tree`` on every rank: its outline pickled, its tensors by
        ``dist.broadcast``."""
        if not self.distributed:
            return tree
        tensors: list = []
        outline = self.broadcast_object(_take_tensors(tree, tensors) if self.is_main else None)
        return self._send_tensors(outline, tensors)

    def _send_tensors(self, outline, tensors: list):
        slots: list[_Slot] = []
        _map(outline, lambda leaf: slots.append(leaf) if isinstance(leaf, _Slot) else None)
        if not slots:
            return outline
        device, received = self._tensor_device(), {}
        for slot in slots:
            t = (tensors[slot.index].contiguous().to(device) if self.is_main
                 else torch.empty(slot.shape, dtype=slot.dtype, device=device))
            dist.broadcast(t, src=0)
            received[slot.index] = tensors[slot.index] if self.is_main else t.cpu()
        return _map(outline, lambda leaf: received[leaf.index] if isinstance(leaf, _Slot) else leaf)

    @contextmanager
    def main_first(self):
        """Rank 0 runs the body first (e.g. fills a cache), then the others; a failure on rank 0
        ends them too instead of leaving them at the barrier until the timeout."""
        if not self.distributed:
            yield
            return
        if self.is_main:
            failure = None
            try:
                yield
            except BaseException as exc:
                failure = exc
            if failure is None:
                self.broadcast_object(None)
                return
            try:
                self.broadcast_object(f"{type(failure).__name__}: {failure}")
            except Exception:  # the others are gone already (stopped by the same signal)
                pass
            raise failure
        status = self.broadcast_object(None)
        if status is not None:  # rank 0 reports its own error; this one only ends the rank
            raise SharedUserError(f"rank 0 failed: {status}")
        yield


def launched_by_torchrun() -> bool:
    return _is_set("WORLD_SIZE") and _is_set("RANK")


def _is_set(name: str) -> bool:
    return bool(os.environ.get(name, "").strip())


def launched() -> bool:
    """Started as one of several workers: by torchrun (or a launcher like it) or by Slurm's srun."""
    return launched_by_torchrun() or slurm_tasks(os.environ) > 1


def _env_int(name: str, default: int) -> int:
    value = os.environ.get(name, "")
    return int(value) if value.strip().isdigit() else default


def slurm_tasks(env) -> int:
    """How many tasks srun started (0: not under srun, or an interactive allocation's shell)."""
    if env.get("SLURM_JOB_NAME") in ("bash", "interactive"):  # salloc's shell: the user decides
        return 0
    value = env.get("SLURM_NTASKS", "")
    return int(value) if value.isdigit() else 0


def slurm_launch_env(env) -> dict[str, str]:
    """torchrun's variables for a task started by ``srun``, by Lightning's conventions (the first
    host of the node list, a port from the job id) so the two agree on a shared cluster."""
    missing = [k for k in ("SLURM_PROCID", "SLURM_LOCALID", "SLURM_JOB_ID") if not env.get(k, "").isdigit()]
    nodelist = env.get("SLURM_JOB_NODELIST") or env.get("SLURM_NODELIST")
    if not nodelist:
        missing.append("SLURM_JOB_NODELIST")
    if missing:
        raise UserError(f"SLURM_NTASKS={env['SLURM_NTASKS']} but {', '.join(missing)} "
                        f"{'is' if len(missing) == 1 else 'are'} not set as srun sets them: start "
                        f"the tasks with srun, or use torchrun")
    job = env["SLURM_JOB_ID"]
    if env.get("SLURM_ARRAY_JOB_ID", "").isdigit():  # array tasks share a job id: keep them apart
        job = env["SLURM_ARRAY_JOB_ID"] + env.get("SLURM_ARRAY_TASK_ID", "")
    return {"RANK": env["SLURM_PROCID"], "WORLD_SIZE": env["SLURM_NTASKS"],
            "LOCAL_RANK": env["SLURM_LOCALID"],
            "MASTER_ADDR": env.get("MASTER_ADDR") or first_host(nodelist),
            "MASTER_PORT": env.get("MASTER_PORT") or str(15000 + int(job[-4:]))}


def first_host(nodelist: str) -> str:
    """The first host of a Slurm node list such as ``gpu[03-05,09],cpu1``."""
    import shutil
    import subprocess

    if shutil.which("scontrol"):
        out = subprocess.run(["scontrol", "show", "hostnames", nodelist], capture_output=True,
                             text=True)
        if out.returncode == 0 and out.stdout.split():
            return out.stdout.split()[0]
    try:
        import hostlist
    except ImportError:
        raise UserError("expanding SLURM_JOB_NODELIST needs scontrol or python-hostlist: "
                        "pip install 'reltrain[slurm]', or set MASTER_ADDR") from None
    try:
        return hostlist.expand_hostlist(nodelist)[0]
    except (hostlist.BadHostlist, IndexError) as exc:
        raise UserError(f"SLURM_JOB_NODELIST={nodelist!r} is not a node list: {exc}") from None


def _check_launcher_env() -> None:
    """Half of torchrun's variables is a mistake, not a single-process run."""
    present = [k for k in ("RANK", "WORLD_SIZE") if _is_set(k)]
    if len(present) == 1:
        other = "WORLD_SIZE" if present == ["RANK"] else "RANK"
        raise UserError(f"{present[0]} is set but {other} is not: start the workers with "
                        f"torchrun (or srun), or unset {present[0]}")


def resolve_device(name: str, local_rank: int = 0, per_rank: bool = False) -> torch.device:
    """``auto`` picks CUDA when present; under DDP each rank takes the GPU of its LOCAL_RANK."""
    check_device_name(name)
    if name == "cpu" or (name == "auto" and not torch.cuda.is_available()):
        return torch.device("cpu")
    if not torch.cuda.is_available():
        raise UserError(f"device={name} but CUDA is not available "
                        f"(torch {torch.__version__}, CUDA build: {torch.version.cuda or 'no'})")
    if per_rank:
        return torch.device("cuda", local_rank)
    index = int(name.split(":")[1]) if ":" in name else 0
    if index >= torch.cuda.device_count():
        raise UserError(f"device={name} but only {torch.cuda.device_count()} GPU(s) are visible")
    return torch.device("cuda", index)


def setup(device: str, dist_cfg) -> DistContext:
    """Read the launcher's variables, pick the device and, under a launcher, join the group."""
    _check_launcher_env()
    if not launched_by_torchrun() and slurm_tasks(os.environ) > 1:
        os.environ.update(slurm_launch_env(os.environ))  # then init_process_group reads them
    launched = launched_by_torchrun()
    rank, local_rank = _env_int("RANK", 0), _env_int("LOCAL_RANK", 0)
    world_size = _env_int("WORLD_SIZE", 1)
    strategy = dist_cfg.strategy
    if strategy == "auto":
        strategy = "ddp" if launched else "single"
    if strategy == "ddp" and not launched:
        raise UserError("dist.strategy=ddp needs a launcher: use torchrun, srun, or devices=N")
    if launched and world_size > 1 and strategy != "ddp":
        raise UserError(f"started by a launcher with WORLD_SIZE={world_size}, but dist.strategy="
                        f"{strategy}; use dist.strategy=ddp (or auto)")
    dev = resolve_device(device, local_rank, per_rank=strategy == "ddp")
    ctx = DistContext(rank=rank, local_rank=local_rank, world_size=world_size, device=dev,
                      strategy=strategy)
    if strategy == "ddp":
        if dev.type == "cuda":
            torch.cuda.set_device(dev)  # before any CUDA work, so NCCL binds the right GPU
        backend = dist_cfg.backend if dist_cfg.backend != "auto" else (
            "nccl" if dev.type == "cuda" else "gloo")
        if backend == "nccl" and dev.type != "cuda":
            raise UserError("dist.backend=nccl needs CUDA devices; use gloo on CPU")
        if not dist.is_initialized():
            _import_before_joining()
            timeout = timedelta(seconds=dist_cfg.timeout_s)
            store = _attempt_store(timeout)
            extra = {} if store is None else {"store": store, "rank": rank, "world_size": world_size}
            dist.init_process_group(backend=backend, timeout=timeout, **extra)
        ctx.backend = backend
    elif strategy == "dp":
        ctx.dp_devices = _dp_devices(dev, list(dist_cfg.dp_devices))
    return ctx


def _import_before_joining() -> None:
    """Imported after joining, torch.distributed.nn held the world group past teardown and its gloo
    threads now and then aborted a finished rank at exit (docs/fault-tolerance.md)."""
    importlib.import_module("torch.distributed.nn")


def _attempt_store(timeout: timedelta):
    """torchrun's store with keys of this restart attempt only: a restarted rank could otherwise
    read the address of the worker it replaced (docs/fault-tolerance.md)."""
    if os.environ.get("TORCHELASTIC_USE_AGENT_STORE") != "True" or _env_int("GROUP_WORLD_SIZE", 1) != 1:
        return None
    base = dist.TCPStore(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]),
                         is_master=False, timeout=timeout)
    return dist.PrefixStore(f"reltrain/attempt_{restart_count()}", base)


def _dp_devices(dev: torch.device, wanted: list[int]) -> list[int]:
    if dev.type != "cuda":
        log.warning("dist.strategy=dp needs GPUs and none is in use: training on one device (%s)", dev)
        return []
    ids = wanted or list(range(torch.cuda.device_count()))
    bad = [i for i in ids if i >= torch.cuda.device_count()]
    if bad:
        raise UserError(f"dist.dp_devices names GPU(s) {bad}, but {torch.cuda.device_count()} are visible")
    return ids


def teardown(ctx: DistContext) -> None:
    if ctx.distributed and dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()


# Newer torch (2.13 here) renamed DDP's broadcast_buffers to forward_sync_buffers and warns on
# the old name; older torch (>= 2.4 is supported) knows only the old one.
_SYNC_BUFFERS = ("forward_sync_buffers" if "forward_sync_buffers" in
                 inspect.signature(nn.parallel.DistributedDataParallel).parameters else "broadcast_buffers")


def wrap(model: nn.Module, ctx: DistContext, find_unused_parameters: bool = False) -> nn.Module:
    """Move to the device and wrap for the strategy. Load weights *before* calling this."""
    model = model.to(ctx.device)
    if ctx.distributed:
        ids = [ctx.device.index] if ctx.device.type == "cuda" else None
        # DDP broadcasts every buffer from rank 0 before each forward: one more collective a
        # step. reltrain's buffers (sinusoidal positions, the encoders' position ids) are
        # constants; only running statistics (batch norm) change and need it.
        running_stats = any(isinstance(m, nn.modules.batchnorm._NormBase) and m.track_running_stats
                            for m in model.modules())
        return nn.parallel.DistributedDataParallel(model, device_ids=ids,
                                                   find_unused_parameters=find_unused_parameters,
                                                   gradient_as_bucket_view=True,
                                                   **{_SYNC_BUFFERS: running_stats})
    if ctx.strategy == "dp" and ctx.dp_devices:
        return nn.DataParallel(model, device_ids=ctx.dp_devices, output_device=ctx.device)
    return model


def no_sync(model: nn.Module, skip: bool):
    """While ``skip``, DDP keeps this backward's gradients local (an accumulation micro-batch)."""
    if skip and isinstance(model, nn.parallel.DistributedDataParallel):
        return model.no_sync()
    return nullcontext()


def unwrap(model: nn.Module) -> nn.Module:
    """The plain model under DDP / DataParallel / torch.compile wrappers."""
    while True:
        if isinstance(model, (nn.parallel.DistributedDataParallel, nn.DataParallel)):
            model = model.module
        elif hasattr(model, "_orig_mod"):
            model = model._orig_mod
        else:
            return model


def launcher_run_id() -> str | None:
    """torchrun's run id or Slurm's job id: the same on every node and across a job's restarts."""
    run_id = os.environ.get("TORCHELASTIC_RUN_ID", "")
    if launched_by_torchrun() and run_id and run_id != "none":
        return f"torchrun-{run_id}"
    if slurm_tasks(os.environ) > 1 and os.environ.get("SLURM_JOB_ID"):
        return f"slurm-{os.environ['SLURM_JOB_ID']}"
    return None


def restart_count() -> int:
    return _env_int("TORCHELASTIC_RESTART_COUNT", 0)


@dataclass(frozen=True)
class _Slot:
    """Where a tensor was in a broadcast outline."""

    index: int
    shape: tuple
    dtype: torch.dtype


def _map(tree, fn):
    """``tree`` with every leaf (anything but a dict, list or tuple) replaced by ``fn(leaf)``."""
    if isinstance(tree, dict):
        return {k: _map(v, fn) for k, v in tree.items()}
    if isinstance(tree, (list, tuple)):
        return type(tree)(_map(v, fn) for v in tree)
    return fn(tree)


def _take_tensors(tree, tensors: list):
    def take(leaf):
        if not isinstance(leaf, torch.Tensor):
            return leaf
        tensors.append(leaf)
        return _Slot(len(tensors) - 1, tuple(leaf.shape), leaf.dtype)

    return _map(tree, take)
