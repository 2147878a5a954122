"""Which files of src/ run code on the way from ``reltrain train`` to the first optimizer step:
each file whose function (not module body) is first called before it, in the order reached.
Issue 45 asks a reader to need at most 12 files for this walk; this counts what runs, an upper
bound on what a reader must open.

    python bench/call_walk.py train train.epochs=1 log.progress=false output_dir=/tmp/walk
"""

from __future__ import annotations

import sys
from collections import OrderedDict

from reltrain.cli import main
from reltrain.training.trainer import Trainer


class _FirstStep(Exception):
    pass


def walk(argv: list[str]) -> OrderedDict:
    seen: OrderedDict = OrderedDict()

    def profile(frame, event, arg):
        code = frame.f_code
        if event == "call" and "/src/reltrain/" in code.co_filename and code.co_name != "<module>":
            seen.setdefault(code.co_filename.split("/src/", 1)[1], code.co_name)

    def first_step(self, step, number):
        sys.setprofile(None)
        raise _FirstStep

    Trainer._run_step = first_step
    sys.setprofile(profile)
    try:
        main(argv)
    except (_FirstStep, SystemExit):
        pass
    finally:
        sys.setprofile(None)
    return seen


if __name__ == "__main__":
    files = walk(sys.argv[1:])
    for path, function in files.items():
        print(f"{path:<45} {function}")
    print(f"{len(files)} files")
