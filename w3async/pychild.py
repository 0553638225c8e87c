"""A Python child of this package (the accounting's /proc reader, the video maker):
`python_child(module, *args)` is the command that runs `module` as `__main__` with the
w3async the parent imported, whatever the child's working folder holds.

Not `python -m module`: it puts the working folder first on the path, so a folder with a
w3async/ of its own (another checkout, a user's project) was imported instead; run from
an older checkout's folder, the accounting's reader died with "No module named
w3async.observe.proc_sampler" on every sample.
"""

from __future__ import annotations

import sys
from pathlib import Path

import w3async

ROOT = str(Path(w3async.__file__).resolve().parent.parent)  # the folder that holds this w3async/
# -P: nothing of the working folder on the path; then this package's folder first
_RUN = ("import runpy, sys; root, mod = sys.argv[1:3]; sys.path.insert(0, root); sys.argv = [mod, *sys.argv[3:]]; "
        "runpy.run_module(mod, run_name='__main__', alter_sys=True)")


def python_child(module: str, *args: str) -> list[str]:
    """The command line that runs `module` of this package as a script, with args."""
    return [sys.executable, "-P", "-c", _RUN, ROOT, module, *args]
