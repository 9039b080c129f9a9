"""Lets the checker run from this folder (exercises/) as from the repository's folder.

    python -m exercises check 1        from exercises/ (this file runs) or from the repository

In a notebook opened in this folder (or in the repository's folder), from a cell:

    import exercises; exercises.check(1)

Here `import exercises` first finds this file; it puts the repository's folder first on
sys.path and hands over to the package exercises/ (its __init__.py), which replaces this
module in sys.modules, so that the import gives the package.
"""
import sys
from pathlib import Path

_here = Path(__file__).resolve().parent
sys.path[:] = [str(_here.parent)] + [p for p in sys.path if Path(p or ".").resolve() != _here]
sys.modules.pop("exercises", None)           # this file, when imported under that name
import exercises                              # noqa: E402  the package: now in sys.modules

if __name__ == "__main__":
    from exercises.__main__ import run       # noqa: E402
    run()
