#!/usr/bin/env bash
# The device command for bench/gpu_check.py (after bench/gpu_prepare.sh, with .gpu carried):
#   run(command="bash bench/gpu_run.sh", carry=[".gpu"], timeout_s=560)
# The report comes back in $OUT/gpu/ (report.json, report.md, profile_cnn.txt). Extra arguments
# go to gpu_check.py (`bash bench/gpu_run.sh --smoke` is a dry run of this script on a CPU).
set -uo pipefail
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site \
    .gpu/whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD/src
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv
timeout 520 python3 bench/gpu_check.py "$OUT/gpu" --work /tmp/gpucheck --data .gpu/data/deepke-zh \
    --lm .gpu/minilm "$@"
