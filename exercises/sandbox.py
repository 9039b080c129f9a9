"""Where a child runs and how it ends, with everything it started (docs/course.md says what
is isolated on each platform). Each child has a scratch folder: course/ and submission/,
written from snapshots read before any child ran, and work/ (its working folder and TMPDIR).
"""

import contextlib
import ctypes
import functools
import os
import signal
import site
import stat
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent     # the repository (or the handout)
COURSE_GLOBS = ("*.py", "exercises/*.py", "exercises/checks/*.py", "experiments/*.py")
SUBMISSION_BOUNDS = {".py": 2 ** 20, ".ipynb": 4 * 2 ** 20, ".json": 64 * 2 ** 10}   # bytes a file
SNAPSHOT = None                                    # course_snapshot(), once read
SUBREAPER = False                                  # set by the command line (__main__.py)
LOCK = threading.Lock()                            # a child's start, and the sweep, one at a time
LIVE = set()                                       # the pids of the children this process started


def read_course():
    """{relative path: bytes} of the course's Python files (not the solutions) on disk now."""
    return {str(path.relative_to(ROOT)): path.read_bytes()
            for pattern in COURSE_GLOBS for path in ROOT.glob(pattern) if path.is_file()}


def course_snapshot():
    """read_course(), read once."""
    global SNAPSHOT
    if SNAPSHOT is None:
        SNAPSHOT = read_course()
    return SNAPSHOT


class Snapshot(dict):
    """{name: bytes} of the files read from a student's folder, and `faults`: {name: why that
    file was not read} (a link, not a regular file, over its bound, unreadable)."""

    def __init__(self, files=(), faults=None):
        super().__init__(files)
        self.faults = dict(faults or {})


def graded_names():
    """{name: bound in bytes} of every file a grade reads from a folder: exNN_slug.py and .ipynb
    of each exercise of the course, and student.json."""
    from exercises.course import TABLE                # here: course imports the checker
    names = {f"ex{n:02d}_{slug}{suffix}": SUBMISSION_BOUNDS[suffix]
             for n, (slug, _) in enumerate(TABLE, start=1) for suffix in (".py", ".ipynb")}
    return names | {"student.json": SUBMISSION_BOUNDS[".json"]}


def read_bounded(path, bound, links=False):
    """The bytes of the regular file `path`, at most `bound` of them, never through a link
    (links: through one, for the instructor's files); None when there is none; a ValueError
    saying why it is not read (a link, a folder, a pipe, larger than `bound`, unreadable)."""
    try:
        if Path(path).is_symlink() and not links:      # also where O_NOFOLLOW is missing
            raise ValueError(f"a link ({os.readlink(path)[:100]!r}): a link is never followed")
        fd = os.open(path, os.O_RDONLY | (0 if links else getattr(os, "O_NOFOLLOW", 0))
                     | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_BINARY", 0))
    except FileNotFoundError:
        return None
    except OSError as error:                           # ELOOP: a link made since
        raise ValueError(f"cannot be read ({error.strerror})") from None
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise ValueError("not a regular file (a folder, a pipe or a device)")
    with os.fdopen(fd, "rb") as f:
        data = f.read(bound + 1)                       # +1: one that grows is seen too
    if len(data) > bound:
        size = f"{bound // 2 ** 20} MiB" if bound >= 2 ** 20 else f"{bound // 2 ** 10} KiB"
        raise ValueError(f"larger than {size}, the bound of a file graded")
    return data


def submission_snapshot(folder, names=None):
    """Snapshot of a student's folder: the files graded_names() lists (or `names`: {name:
    bound}) that are there, each read once within its bound; a link, a folder, a pipe or a
    file over its bound is a fault (its exercise's ERROR row), never read. Nothing else of the
    folder is read: other files, subfolders and links are left alone."""
    snapshot = Snapshot()
    if Path(folder).is_symlink() or not Path(folder).is_dir():
        snapshot.faults["."] = "the folder is a link or no folder: nothing in it is read"
        return snapshot
    for name, bound in (graded_names() if names is None else names).items():
        try:
            data = read_bounded(Path(folder) / name, bound)
        except ValueError as error:
            snapshot.faults[name] = str(error)
            continue
        if data is not None:
            snapshot[name] = data
    return snapshot


def write_files(folder, files):
    for name, data in files.items():
        path = Path(folder) / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)


def changed_course_files():
    """The course files (relative paths) changed, new or gone since the snapshot, put back."""
    saved, now = course_snapshot(), read_course()
    changed = sorted(name for name in saved.keys() | now.keys()
                     if saved.get(name) != now.get(name))
    write_files(ROOT, {name: saved[name] for name in changed if name in saved})
    for name in set(changed) - saved.keys():           # new: removed
        (ROOT / name).unlink(missing_ok=True)
    return changed


def new_scratch():
    """A temporary folder: course/ (written), submission/ and work/. The caller removes it."""
    scratch = Path(tempfile.mkdtemp(prefix="exercises-"))
    for part in ("course", "submission", "work"):
        (scratch / part).mkdir()
    write_files(scratch / "course", course_snapshot())
    return scratch


def bwrap_command(scratch, shared=None):
    """The bwrap words before the child's command (shared: a folder it may read)."""
    user = [site.getusersitepackages()] if site.ENABLE_USER_SITE else []
    read = ["/usr", "/etc", "/bin", "/sbin", "/lib", "/lib32", "/lib64", sys.prefix,
            sys.base_prefix, sys.exec_prefix, *site.getsitepackages(), *user,
            Path(scratch) / "course", Path(scratch) / "submission", *([shared] if shared else [])]
    words = ["bwrap", "--unshare-all", "--die-with-parent", "--new-session", "--cap-drop", "ALL",
             "--tmpfs", "/tmp", "--dev", "/dev", "--proc", "/proc"]
    for folder in read:                                 # -try: one that is missing is skipped
        words += ["--ro-bind-try", str(folder), str(folder)]
    work = str(Path(scratch) / "work")                 # the working folder: Popen's cwd
    return words + ["--bind-try", work, work, "--"]


@functools.lru_cache(maxsize=None)
def bwrap_works():
    """True when bwrap runs a child's Python here (EXERCISES_NO_SANDBOX=1: off)."""
    if os.environ.get("EXERCISES_NO_SANDBOX") or sys.platform != "linux":
        return False
    probe = bwrap_command(ROOT / "no-scratch")         # no such folders: the -try binds skip them
    try:
        return subprocess.run(probe + [sys.executable, "-c", "pass"], capture_output=True,
                              timeout=30).returncode == 0
    except (OSError, subprocess.SubprocessError):      # no bwrap, or none that works
        return False


def isolation():
    """One line for the output: how the child is kept apart on this machine."""
    if bwrap_works():
        return "sandbox: bubblewrap (the copies read-only, own /tmp and PID namespace, no network)"
    if sys.platform == "linux":
        return "sandbox: none (no working bwrap: install bubblewrap), fresh copies, orphans reaped"
    return "sandbox: none on this platform: fresh copies, the child's process group ended"


def become_subreaper():
    """Linux: orphans of its children come back to this process, for sweep_orphans (True if
    so). For the command line only: in a kernel or a test run, its other children would go."""
    try:                                               # 36: PR_SET_CHILD_SUBREAPER
        return sys.platform == "linux" and ctypes.CDLL(None).prctl(36, 1, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def sweep_orphans():
    """A subreaper's orphans ended: the processes whose parent is this one that it did not start."""
    if not SUBREAPER:
        return
    with LOCK:
        for pid in {int(entry) for entry in os.listdir("/proc") if entry.isdigit()} - LIVE:
            with contextlib.suppress(OSError):        # gone since, or not ours to end
                stat = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
                if int(stat[1]) == os.getpid():        # its parent: this process
                    os.kill(pid, signal.SIGKILL)
                    os.waitpid(pid, 0)


def start(argv, scratch, env, shared=None):
    """The child `argv` started (in bwrap where it works), in a session of its own, on pipes."""
    words = bwrap_command(scratch, shared) if bwrap_works() else []
    with LOCK:
        proc = subprocess.Popen(words + argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                stderr=subprocess.DEVNULL, env=env, cwd=Path(scratch) / "work",
                                start_new_session=True,   # Windows: a process group
                                creationflags=getattr(subprocess, "CREATE_NEW_PROCESS_GROUP", 0))
        LIVE.add(proc.pid)
    return proc


def end(proc):
    """End the child with its session (in bwrap, its PID namespace; Windows: its tree)."""
    if os.name == "nt":
        subprocess.run(["taskkill", "/F", "/T", "/PID", str(proc.pid)], capture_output=True)
    else:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    LIVE.discard(proc.pid)                              # reaped: no sweep can mistake it
    sweep_orphans()
