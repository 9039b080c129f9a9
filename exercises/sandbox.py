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
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent     # the repository (or the handout)
COURSE_GLOBS = ("*.py", "exercises/*.py", "exercises/checks/*.py", "experiments/*.py")
SUBMISSION_LIMIT = 8 * 2 ** 20                     # bytes of a submission's files copied
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


def submission_snapshot(folder):
    """{name: bytes} of the files directly in a student's folder, SUBMISSION_LIMIT in all."""
    files, total = {}, 0
    for path in sorted(Path(folder).iterdir()):
        if path.is_file() and not path.is_symlink() and total < SUBMISSION_LIMIT:
            files[path.name] = path.read_bytes()[:SUBMISSION_LIMIT - total]
            total += len(files[path.name])
    return files


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
