"""The trials' scratch folder on a worker: one per user of the machine, ``$TMPDIR/mutexmatch_trials-<uid>``, mode
0700. A trial's run folder and snapshots live there, outside the trial folder Ray syncs. One folder for every user
(``$TMPDIR/mutexmatch_trials`` before issue 33) let a second user's trials fail on the first one's folder, delete
its stale attempts, or read its checkpoints; a folder another user made (or a link planted in its place) is refused
instead of written into."""

from __future__ import annotations

import os
import stat
import tempfile
from pathlib import Path

__all__ = ["SCRATCH_DIRNAME", "scratch_root"]

SCRATCH_DIRNAME = "mutexmatch_trials"  # the name's stem; the folder is scratch_root()'s


def scratch_root() -> Path:
    """This user's scratch folder in this process's temporary folder, made 0700 when missing. Raises
    ``PermissionError`` (one line: the path, why, what to do) when the path is not this user's private folder."""
    uid = os.getuid()
    root = Path(tempfile.gettempdir()) / f"{SCRATCH_DIRNAME}-{uid}"
    try:
        root.mkdir(mode=0o700, parents=True)  # a TMPDIR that does not exist yet is made too
    except FileExistsError:
        pass
    info = root.lstat()
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != uid:
        raise PermissionError(f"the trials' scratch folder {root} is not a folder of user {uid} (a link, a file or "
                              "another user's folder); remove it or set TMPDIR to a folder of your own")
    if stat.S_IMODE(info.st_mode) & 0o077:  # made by an older version or another umask: private from now on
        root.chmod(0o700)
    return root
