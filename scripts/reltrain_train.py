"""Entry script for the tutorial's launcher shape, which needs a file rather than a module:

    python -m torch.distributed.launch --nproc_per_node=2 scripts/reltrain_train.py data.train=...

The launcher passes ``--local-rank=R`` (torch >= 2; older ones ``--local_rank=R``); reltrain
accepts both and otherwise reads ``LOCAL_RANK`` / ``RANK`` / ``WORLD_SIZE`` from the environment,
as torchrun sets them. ``torchrun ... -m reltrain train ...`` is the modern equivalent.
"""

import sys

from reltrain.cli import main

if __name__ == "__main__":
    sys.exit(main(["train", *sys.argv[1:]]))
