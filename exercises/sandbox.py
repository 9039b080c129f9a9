"""Where a child runs: a fresh copy of the course and of the submission, and, where the
machine allows, a sandbox; and how it ends, with everything it started.

Each child gets a temporary folder: course/ (the course's Python files, written from a
snapshot the checker read once, when it started, so a file that rewrites the instructor's
copy changes no later student's run), submission/ (the student's files, likewise from a
snapshot), work/ (its working folder, TMPDIR and the trace of a time-out). The folder goes
when the child does.

- Linux with bubblewrap (`bwrap`, Debian package bubblewrap) that works here: the child
  runs inside it: the system and Python read-only, the course and submission copies
  read-only, work/ writable, its own /tmp, no network, its own PID namespace (everything
  it starts ends with it), nothing else of the machine (not the instructor's repository,
  not the solutions, not other submissions).
- Linux without it: the checker's process becomes a child subreaper, so a process the
  student's code starts in a session of its own comes back to the checker when its parent
  ends, and is ended then. The child can read and write what the instructor's account can:
  the snapshots keep later runs clean, and `grade` puts back any course file it finds
  changed and flags it.
- macOS and Windows: the child's process group (Windows: its process tree) is ended; a
  process that leaves it survives. The snapshots hold as on Linux.
"""

from __future__ import annotations

import ctypes
import functools
import os
import shutil
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


def course_snapshot():
    """{relative path: bytes} of the course's Python files (not the solutions), read once."""
    global SNAPSHOT
    if SNAPSHOT is None:
        SNAPSHOT = {str(path.relative_to(ROOT)): path.read_bytes()
                    for pattern in COURSE_GLOBS for path in sorted(ROOT.glob(pattern))}
    return SNAPSHOT


def submission_snapshot(folder):
    """{name: bytes} of the files directly in a student's folder (the exercises, their
    student.json, a helper module of theirs), up to SUBMISSION_LIMIT bytes in all."""
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
    """The course files whose bytes differ from the snapshot (or are gone), put back; the
    new files among the course's are removed. Returns their relative paths."""
    saved, changed = course_snapshot(), []
    found = {str(p.relative_to(ROOT)) for pattern in COURSE_GLOBS for p in ROOT.glob(pattern)}
    for name in sorted(found | set(saved)):
        path = ROOT / name
        if name not in saved:
            path.unlink(missing_ok=True)
            changed.append(name)
        elif not path.is_file() or path.read_bytes() != saved[name]:
            path.write_bytes(saved[name])
            changed.append(name)
    return changed


# ----- The sandbox ------------------------------------------------------------------------


def python_folders():
    """The folders Python and its packages live in (bound read-only in the sandbox)."""
    folders = {sys.prefix, sys.base_prefix, sys.exec_prefix, *site.getsitepackages()}
    if site.ENABLE_USER_SITE and os.path.isdir(site.getusersitepackages()):
        folders.add(site.getusersitepackages())
    return sorted(f for f in folders if os.path.isdir(f))


def bwrap_command(scratch, shared=None):
    """The bwrap words before the child's command: what the child sees of the machine
    (shared: a folder of the checker's files for the student's code to read)."""
    words = ["bwrap", "--unshare-all", "--die-with-parent", "--new-session", "--cap-drop",
             "ALL", "--tmpfs", "/tmp", "--dev", "/dev", "--proc", "/proc", "--ro-bind", "/usr",
             "/usr", "--ro-bind-try", "/etc", "/etc"]
    for top in ("/bin", "/sbin", "/lib", "/lib32", "/lib64"):
        if os.path.islink(top):
            words += ["--symlink", os.readlink(top), top]
        elif os.path.isdir(top):
            words += ["--ro-bind", top, top]
    for folder in python_folders():
        words += ["--ro-bind", folder, folder]
    for part, mode in (("course", "--ro-bind"), ("submission", "--ro-bind"), ("work", "--bind")):
        words += [mode, str(Path(scratch) / part), str(Path(scratch) / part)]
    if shared is not None:
        words += ["--ro-bind", str(shared), str(shared)]
    return words + ["--chdir", str(Path(scratch) / "work"), "--"]


@functools.lru_cache(maxsize=None)
def bwrap_works():
    """True when bwrap is installed and runs a Python here (EXERCISES_NO_SANDBOX=1: off)."""
    if os.environ.get("EXERCISES_NO_SANDBOX") or sys.platform != "linux" or \
            not shutil.which("bwrap"):
        return False
    with tempfile.TemporaryDirectory(prefix="exercises-probe-") as scratch:
        for part in ("course", "submission", "work"):
            (Path(scratch) / part).mkdir()
        try:
            done = subprocess.run(bwrap_command(scratch) + [sys.executable, "-c", "pass"],
                                  capture_output=True, timeout=30)
        except (OSError, subprocess.SubprocessError):
            return False
    return done.returncode == 0


def isolation():
    """One line for the output: how the child is kept apart on this machine."""
    if bwrap_works():
        return ("sandbox: bubblewrap (course and submission read-only, own /tmp, no network, "
                "own PID namespace)")
    if sys.platform == "linux":
        return ("sandbox: none (no working bwrap; install Debian's bubblewrap): fresh copies, "
                "processes reaped by the checker")
    return "sandbox: none on this platform: fresh copies, the child's process group ended"


# ----- Processes ---------------------------------------------------------------------------

LOCK = threading.Lock()          # a child's start, and the sweep, one at a time
LIVE = set()                     # the pids of the children this process started


def become_subreaper():
    """Linux: orphans of our children come back to us (PR_SET_CHILD_SUBREAPER), so that a
    process a student's code started in a session of its own can be ended (sweep_orphans).
    Only for the command line: inside a notebook kernel or a test run, the other children
    of the process would be ours to end too. True when it took effect."""
    if sys.platform != "linux":
        return False
    try:
        return ctypes.CDLL(None, use_errno=True).prctl(36, 1, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


SUBREAPER = False                # set by the command line (exercises/__main__.py)


def sweep_orphans():
    """End every process whose parent is this one and that is not a child it started: the
    orphans a subreaper receives (see become_subreaper)."""
    if not SUBREAPER:
        return
    with LOCK:
        for entry in os.listdir("/proc"):
            if not entry.isdigit() or int(entry) in LIVE:
                continue
            try:
                fields = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[1]) == os.getpid():
                try:
                    os.kill(int(entry), signal.SIGKILL)
                    os.waitpid(int(entry), 0)
                except (ProcessLookupError, ChildProcessError, PermissionError):
                    pass


def start(argv, scratch, env, shared=None):
    """Start the child command `argv` (after bwrap's words where it works) in a session of
    its own: its standard input and output are the pipe (the child takes them over before
    the student's file runs), its standard error the null device."""
    words = bwrap_command(scratch, shared) if bwrap_works() else []
    group = {"creationflags": subprocess.CREATE_NEW_PROCESS_GROUP} if os.name == "nt" \
        else {"start_new_session": True}
    with LOCK:
        proc = subprocess.Popen(words + argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                stderr=subprocess.DEVNULL, env=env, cwd=Path(scratch) / "work",
                                **group)
        LIVE.add(proc.pid)
    return proc


def end(proc):
    """End the child and what it started: its session (or, in bwrap, its PID namespace),
    then the orphans that came back to a subreaper."""
    if os.name == "nt":
        subprocess.run(["taskkill", "/F", "/T", "/PID", str(proc.pid)], capture_output=True)
    else:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
    proc.wait()
    with LOCK:
        LIVE.discard(proc.pid)
    sweep_orphans()


def new_scratch():
    """A temporary folder with course/, submission/ and work/ (the caller removes it)."""
    scratch = Path(tempfile.mkdtemp(prefix="exercises-"))
    for part in ("course", "submission", "work"):
        (scratch / part).mkdir()
    write_files(scratch / "course", course_snapshot())
    return scratch
