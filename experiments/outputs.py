"""Where the commands write, and how: nothing finished is lost, nothing half-written is left.

- output_folder / output_file check an --out before any work: the folder exists or is made,
  is a folder, takes a new file; otherwise UsageError names the option (exit status 2).
- one_run_at_a_time(folder, job): a lock file, so that two runs of one job into one folder
  never mix their files; a second run is refused before it starts.
- Staged: new versions of a run's files written under temporary names beside them, then
  renamed over the old ones together (os.replace, with Ctrl-C held off for the renames): a CSV
  never sits beside a PNG of another run, and a stopped or failed run leaves the old files.
- Stopped: Ctrl-C, carrying what the run kept and where (exit status 130).
- provenance: what produced a results file (command, commit, Python and package versions).
"""

from __future__ import annotations

import contextlib
import datetime
import json
import os
import platform
import signal
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent      # the repository


class UsageError(ValueError):
    """A bad option value or output location, found before any work: `error: ...`, exit 2."""


class Stopped(KeyboardInterrupt):
    """Ctrl-C during a run; str() says what the run kept and where (exit status 130)."""


class Failed(Exception):
    """An OSError during the work (a full disk): str() says what and what was kept (exit 1)."""


def output_folder(option, path):
    """The folder `path`, made if missing, checked to take new files; returns it as a Path.

    Args: option: the option's name for messages (e.g. "--out"); path: str or Path.
    Raises: UsageError for an empty name, a path that is a file (or under one), a folder
        that cannot be made, or one that cannot be written in.
    """
    text = str(path)
    if not text.strip():
        raise UsageError(f"{option}: got {text!r}; expected a folder name (an empty one would "
                         "write into the working folder)")
    path = Path(path)
    if path.exists() and not path.is_dir():
        raise UsageError(f"{option}: got {text!r}, which is a file; expected a folder "
                         "(made if missing)")
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UsageError(f"{option}: got {text!r}, a folder that cannot be made "
                         f"({exc.strerror or exc}); expected one that exists or can be "
                         "made") from None
    try:                                            # the real test: make a file, remove it
        fd, probe = tempfile.mkstemp(prefix=".write-test-", dir=path)
        os.close(fd)
        os.unlink(probe)
    except OSError as exc:
        raise UsageError(f"{option}: got {text!r}, a folder that takes no new file "
                         f"({exc.strerror or exc}); expected one that can be written in") from None
    return path


def output_file(option, path):
    """A file path whose folder output_folder accepts, and that is not itself a folder.

    Returns: Path. Raises: UsageError as output_folder, or for a path that is a folder.
    """
    text = str(path)
    if not text.strip():
        raise UsageError(f"{option}: got {text!r}; expected a file name")
    path = Path(path)
    if path.is_dir():
        raise UsageError(f"{option}: got {text!r}, which is a folder; expected a file name, "
                         f"e.g. {Path(text) / 'bench.csv'}")
    output_folder(option, path.parent)
    return path


# ----- one run of a job per folder --------------------------------------------------------


def _lock_is_stale(text):
    # "pid N on HOST ..." of a process on this machine that no longer runs. Only on POSIX,
    # where os.kill(pid, 0) asks without sending anything (on Windows it would end the process).
    parts = text.split()
    if os.name != "posix" or len(parts) < 4 or parts[0] != "pid" or parts[2] != "on":
        return False
    if parts[3] != platform.node() or not parts[1].isdigit():
        return False
    try:
        os.kill(int(parts[1]), 0)
    except ProcessLookupError:
        return True
    except OSError:                                 # it runs, as another user
        return False
    return False


@contextlib.contextmanager
def one_run_at_a_time(folder, job):
    """Hold the lock file folder/.JOB.lock while the block runs (removed afterwards, also
    after an error or Ctrl-C). A lock left by a process that no longer runs is taken over.

    Raises: UsageError if another run of the same job holds it.
    """
    lock = Path(folder) / f".{job}.lock"
    for attempt in (1, 2):
        try:
            fd = os.open(lock, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
            break
        except FileExistsError:
            try:
                other = lock.read_text(encoding="utf-8", errors="replace").strip()
            except OSError:
                other = "unknown"
            if attempt == 1 and _lock_is_stale(other):
                lock.unlink(missing_ok=True)
                continue
            raise UsageError(f"{folder}: another {job} run is writing there ({other}); two "
                             f"runs into one folder would mix their files. Wait for it, choose "
                             f"another --out, or delete {lock} if no run is going") from None
    started = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(f"pid {os.getpid()} on {platform.node()} since {started}\n")
    try:
        yield lock
    finally:
        lock.unlink(missing_ok=True)


# ----- files written whole -----------------------------------------------------------------


@contextlib.contextmanager
def _ctrl_c_held():
    # Ctrl-C during the block takes effect after it (only the main thread gets signals).
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    caught = []
    previous = signal.signal(signal.SIGINT, lambda signum, frame: caught.append(signum))
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
        if caught:
            raise KeyboardInterrupt


class Staged:
    """New versions of files, written to temporary names in the same folders, then renamed
    over the old files all at once by publish() (os.replace: each file whole or not at all;
    an old file whose new version was not written is removed, so no file of another run
    stays beside the new ones).

    Use as a context manager: `with Staged() as files: write(files.path(final))`; the files
    are published when the block ends normally and the temporary ones removed otherwise.
    """

    def __init__(self, remove_after=()):
        self.pending = []                           # (temporary path, final path)
        self.remove_after = list(remove_after)      # files the published ones replace (partials)

    def path(self, final):
        """The temporary path to write instead of `final`: the same name, in a hidden folder
        .tmp-PID beside it (so on the same disk, and the rename is atomic)."""
        final = Path(final)
        temporary = final.parent / f".tmp-{os.getpid()}" / final.name
        temporary.parent.mkdir(exist_ok=True)
        self.pending.append((temporary, final))
        return temporary

    def publish(self):
        with _ctrl_c_held():
            for temporary, final in self.pending:
                if temporary.exists():
                    os.replace(temporary, final)
                else:                               # not written this time: no old one stays
                    final.unlink(missing_ok=True)
            for path in self.remove_after:
                Path(path).unlink(missing_ok=True)
        self._tidy()

    def discard(self):
        for temporary, _ in self.pending:
            temporary.unlink(missing_ok=True)
        self._tidy()

    def _tidy(self):
        for folder in {temporary.parent for temporary, _ in self.pending}:
            with contextlib.suppress(OSError):      # another Staged of this run may use it
                folder.rmdir()
        self.pending = []

    def __enter__(self):
        return self

    def __exit__(self, kind, value, traceback):
        if kind is None:
            self.publish()
        else:
            self.discard()
        return False


def write_whole(path, write):
    """Call write(temporary_path), then rename the file to path (whole or not at all)."""
    with Staged() as files:
        write(files.path(path))
    return Path(path)


# ----- what produced a file ----------------------------------------------------------------


def _commit():
    try:
        git = ["git", "-C", str(ROOT)]
        commit = subprocess.run(git + ["rev-parse", "--short", "HEAD"], capture_output=True,
                                text=True, timeout=10).stdout.strip()
        changed = subprocess.run(git + ["status", "--porcelain", "--", "bilinear_numpy.py",
                                        "experiments", "data"],
                                 capture_output=True, text=True, timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "unknown (not a git checkout)"
    if not commit:
        return "unknown (not a git checkout)"
    return commit + (" with local changes to the code" if changed else "")


def provenance(command):
    """What produces a results file, as a dict: the command, the commit, the versions of
    Python, NumPy, matplotlib and SciPy (or none), the machine, the load and the date."""
    import numpy
    versions = {"python": platform.python_version(), "numpy": numpy.__version__}
    for name in ("matplotlib", "scipy"):
        module = sys.modules.get(name)
        if module is None:
            try:
                module = __import__(name)
            except ImportError:
                module = None
        versions[name] = getattr(module, "__version__", "not installed")
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    return {"command": f"python bilinear_numpy.py {command}", "commit": _commit(), **versions,
            "machine": f"{platform.machine()}, {platform.system()} {platform.release()}, "
                       f"{os.cpu_count()} CPUs",
            "load_1min_at_start": round(load, 2),
            "date_utc": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")}


def write_json(path, info):
    """Write info (a dict) to path as indented JSON (UTF-8)."""
    Path(path).write_text(json.dumps(info, indent=1) + "\n", encoding="utf-8")
