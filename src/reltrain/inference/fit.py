"""Whether a text looks like what a model was trained on: both tasks warn before predicting a
file or a sentence whose answers would mean little (another script, or tokens it mostly does not
know), which would otherwise end with exit status 0 and nothing to notice."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np


def misfit(language: str, texts: list[str], token_ids: Callable[[], np.ndarray] | None,
           unk_id: int | None) -> str | None:
    """Why a model trained on ``language`` may not read ``texts`` (another script, or mostly
    tokens it does not know: ``token_ids()`` of them, None where it knows any); None when they
    look like its data. Both tasks warn with it."""
    from reltrain.data.preprocess import cjk_share  # the cache's code: a check's only need

    if not any(text.strip() for text in texts):
        return None
    cjk = cjk_share(texts)
    if language == "en" and cjk > 0.3:
        return (f"{cjk:.0%} of the characters are Chinese, Japanese or Korean, but this model "
                f"was trained on English text (data.language=en): its answers mean little")
    if language == "zh" and cjk < 0.05:
        return (f"only {cjk:.0%} of the characters are Chinese, but this model was trained "
                f"on Chinese text (data.language=zh): its answers mean little")
    ids = token_ids() if token_ids is not None else np.zeros(0, np.int64)
    unknown = float((ids == unk_id).mean()) if len(ids) else 0.0
    if unknown > 0.5:
        return (f"{unknown:.0%} of the tokens are not in the model's vocabulary: the text is "
                f"not like what it was trained on, and its answers mean little")
    return None
