"""The user's own cache folders (docs/security.md, P8): where they are, and whether what one holds
can only have been written by this user."""

from __future__ import annotations

import os
import stat
from pathlib import Path


def default_cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "reltrain"


def owned_privately(path: Path) -> bool:
    """``path`` and what it holds are this user's, not links, and not writable by everyone: only
    then is a cache entry in a shared folder what this user's own run wrote."""
    if not hasattr(os, "getuid"):
        return True
    try:
        entries = [path] + [os.path.join(top, name) for top, dirs, files in os.walk(path)
                            for name in dirs + files]
        infos = [os.lstat(p) for p in entries]
    except OSError:
        return False
    return all(i.st_uid == os.getuid() and not i.st_mode & stat.S_IWOTH and not stat.S_ISLNK(i.st_mode)
               for i in infos)
