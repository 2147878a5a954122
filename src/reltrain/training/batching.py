"""The global batch: what the user fixes, and how it is split on the hardware at hand."""

from __future__ import annotations

from dataclasses import dataclass

from reltrain.runtime.errors import UserError


@dataclass(frozen=True)
class BatchPlan:
    batch_size: int  # per process and micro-batch
    accum_steps: int  # micro-batches per optimizer step
    world_size: int

    @property
    def global_batch(self) -> int:
        return self.batch_size * self.accum_steps * self.world_size

    def describe(self) -> str:
        return (f"global batch {self.global_batch} = {self.world_size} process(es) x batch "
                f"{self.batch_size} x {self.accum_steps} micro-batch(es) per step")


def plan_batches(train_cfg, world_size: int, saved_global: int | None = None,
                 saved_from: str = "") -> BatchPlan:
    """Split the global batch over ``world_size`` processes: ``train.global_batch_size``, else a
    resumed checkpoint's (accum_steps then adjusts), else W x B x accum_steps."""
    batch = train_cfg.batch_size
    wanted = train_cfg.global_batch_size or saved_global
    if not wanted:
        return BatchPlan(batch, train_cfg.accum_steps, world_size)
    source = (f"train.global_batch_size={wanted}" if train_cfg.global_batch_size
              else f"the global batch of {wanted} that {saved_from or 'the checkpoint'} was trained with")
    if wanted % world_size:
        raise UserError(f"{source} cannot be split over {world_size} processes: use a number of "
                        f"processes that divides {wanted}")
    per_process = wanted // world_size
    if per_process % batch:
        fits = max(d for d in range(1, min(batch, per_process) + 1) if per_process % d == 0)
        raise UserError(f"{source} is not {world_size} process(es) x train.batch_size={batch} x "
                        f"whole micro-batches: set train.batch_size={fits} (or another divisor "
                        f"of {per_process})")
    plan = BatchPlan(batch, per_process // batch, world_size)
    # On resume the accumulation adjusts to the processes at hand; a global batch set explicitly
    # next to an accumulation that contradicts it is a mistake.
    if train_cfg.global_batch_size and train_cfg.accum_steps not in (1, plan.accum_steps):
        raise UserError(f"train.accum_steps={train_cfg.accum_steps} does not give {source} on "
                        f"{world_size} process(es) x batch {batch} (that takes "
                        f"{plan.accum_steps}); leave train.accum_steps out, it is derived")
    return plan
