"""Where a child runs, what it may take, and how it ends with everything it started
(docs/course.md, "What is isolated", says what holds on each machine). Each child has a scratch
folder: course/ and submission/, written from snapshots read before any child ran, and work/
(its working folder and TMPDIR). mode() says how a child is kept apart here:

- "bwrap": inside bubblewrap (Linux, where it runs): the copies read-only, its own /tmp, its
  own PID and network namespaces, nothing else of the machine.
- "uid": root without a working bubblewrap (a container, a grading service): each child runs
  as an unprivileged user of its own (a uid and gid nobody else has, no supplementary groups).
  It can write only its work/ (and the world-writable /tmp, /var/tmp, /dev/shm) and read, of
  what the checker made, only its own scratch folder; after it, every process of its uid is
  ended and its files in those folders removed. The instructor's files must be unreadable to
  such a user (chmod o-rwx): grading_refusal() checks it, as such a user, before `grade` works.
- "none": an ordinary child of this user (a laptop, macOS, Windows): `check` runs so; `grade`
  refuses (grading_refusal) unless --unsafe, and flags every row.
What a child may take (Limits) the child sets itself, child.set_limits, before any of the
student's code runs.
"""

import contextlib
import ctypes
import dataclasses
import functools
import json
import os
import shlex
import shutil
import signal
import site
import stat
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]        # the repository (or the handout)
COURSE_GLOBS = ("*.py", "exercises/*.py", "exercises/checks/*.py", "exercises/grading/*.py",
                "experiments/*.py")
SUBMISSION_BOUNDS = {".py": 2 ** 20, ".ipynb": 4 * 2 ** 20, ".json": 64 * 2 ** 10}   # bytes a file
SNAPSHOT = None                                    # course_snapshot(), once read
SUBREAPER = False                                  # set by the command line (cli.py)
LOCK = threading.Lock()                            # a child's start, and the sweep, one at a time
LIVE = set()                                       # the pids of the children this process started
SHARED_TMP = ("/tmp", "/var/tmp", "/dev/shm")      # where any user writes: a child's files removed
CLAIMED = set()                                    # the uids of this process's children ("uid")
UID_LOCKS = None                                   # (pid, fd): a byte a uid, locked while in use
UNISOLATED = "graded without isolation"            # the flag of every row graded so (--unsafe)


@dataclasses.dataclass(frozen=True)
class Limits:
    """What one child may take (0: no limit), set in it before the student's code runs
    (child.set_limits: resource.setrlimit, Linux and macOS).
    memory: bytes of data (RLIMIT_DATA: the heap and private writable mappings, what arrays
        take); its address space (RLIMIT_AS, which also counts what BLAS and torch reserve
        without using) is held to 4 times it. macOS does not enforce either.
    processes: processes and threads it may start (RLIMIT_NPROC, counted past those its user
        runs when it starts: exact for a user of its own, "uid"; shared with the user's other
        processes otherwise; not enforced for root, --unsafe as root or bwrap as root).
    file_size: bytes of any one file it writes (RLIMIT_FSIZE).
    cpu: seconds of CPU time of each of its processes (RLIMIT_CPU), every check together."""
    memory: int = 2 * 2 ** 30
    processes: int = 256
    file_size: int = 256 * 2 ** 20
    cpu: int = 600

    def over(self, kind):
        """The words of a child that went over the limit `kind` (a row's message)."""
        return {"memory": f"used more than {size_text(self.memory)} of memory",
                "processes": f"started more than {self.processes} processes or threads",
                "file_size": f"wrote a file of more than {size_text(self.file_size)}",
                "cpu": f"used more than {self.cpu} s of CPU time"}[kind] + \
            f" (the limit: {LIMIT_OPTIONS[kind]})"


LIMITS = Limits()                                  # set by the command line's options
LIMIT_OPTIONS = {"memory": "--memory-limit", "processes": "--process-limit",
                 "file_size": "--file-size-limit", "cpu": "--cpu-limit"}


def size_text(n):
    """2147483648 -> "2 GiB"; 1536 -> "1.5 KiB"."""
    for unit, size in (("GiB", 2 ** 30), ("MiB", 2 ** 20), ("KiB", 2 ** 10)):
        if n >= size:
            return f"{n / size:.4g} {unit}"
    return f"{n} bytes"


def parse_size(text):
    """"2G", "512M", "64k", "100000" (bytes; binary units) -> bytes, or a ValueError."""
    text = str(text).strip().upper().removesuffix("B").removesuffix("I")
    scale = {"K": 2 ** 10, "M": 2 ** 20, "G": 2 ** 30, "T": 2 ** 40}.get(text[-1:], 1)
    number = float(text[:-1] if scale > 1 else text)
    if not 0 <= number * scale < 2 ** 62:
        raise ValueError(f"expected a size such as 2G, 512M or 0 (none), got {text!r}")
    return int(number * scale)


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
    from exercises.course import TABLE                # here: a child imports sandbox alone
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


def searchable(path):
    """True when every folder from / to `path` lets any user through (o+x)."""
    path = Path(path).resolve()
    try:
        return all(os.stat(folder).st_mode & 0o001 for folder in [path, *path.parents])
    except OSError:
        return False


def temporary_folder(prefix):
    """A new folder for a child's files (the caller removes it), in the temporary folder, or in
    /tmp when a user of its own could not reach that one ("uid")."""
    parent = tempfile.gettempdir()
    if own_user() and not searchable(parent):
        parent = "/tmp"
    return Path(tempfile.mkdtemp(prefix=prefix, dir=parent))


def new_scratch():
    """A temporary folder: course/ (written), submission/ and work/. The caller removes it."""
    scratch = temporary_folder("exercises-")
    for part in ("course", "submission", "work"):
        (scratch / part).mkdir()
    write_files(scratch / "course", course_snapshot())
    return scratch


# ----- bubblewrap ----------------------------------------------------------------------------


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
    """True when bwrap runs a child's Python here (EXERCISES_NO_SANDBOX=1 or
    EXERCISES_NO_BWRAP=1, which tests the route of a machine without it: off)."""
    if os.environ.get("EXERCISES_NO_SANDBOX") or os.environ.get("EXERCISES_NO_BWRAP") or \
            sys.platform != "linux":
        return False
    probe = bwrap_command("/nonexistent-scratch")     # no such folders: the -try binds skip them
    try:
        return subprocess.run(probe + [sys.executable, "-c", "pass"], capture_output=True,
                              timeout=30).returncode == 0
    except (OSError, subprocess.SubprocessError):      # no bwrap, or none that works
        return False


@functools.lru_cache(maxsize=None)
def bwrap_as_user():
    """True when this process is root and bwrap also runs a child's Python (and NumPy) as a
    user of its own: then it does (the limit on processes holds: root is exempt from it)."""
    if sys.platform != "linux" or os.geteuid() != 0 or not bwrap_works():
        return False
    uid = claim_uid()
    try:
        return subprocess.run(bwrap_command("/nonexistent-scratch") + [
            sys.executable, "-c", "import numpy"], capture_output=True, cwd="/", timeout=60,
            env={k: v for k, v in os.environ.items() if k in ("PATH", "LANG")},
            **as_user(uid)).returncode == 0
    except (OSError, subprocess.SubprocessError):
        return False
    finally:
        end_user(uid)
        release_uid(uid)


# ----- A user of its own: root without bubblewrap --------------------------------------------


def uid_span():
    """(first, end): the uids a child may get, the top 2**20 below 2**31 of those this user
    namespace maps (/proc/self/uid_map); claim_uid skips any that /etc/passwd or a process has."""
    try:
        maps = [tuple(map(int, line.split()))
                for line in Path("/proc/self/uid_map").read_text().splitlines()]
    except (OSError, ValueError):
        maps = [(0, 0, 2 ** 32)]
    inside, _, count = max(maps, key=lambda m: m[0] + m[2])
    end = min(inside + count - 1, 2 ** 31 - 1)         # 2**32 - 1 is no uid
    return max(inside, end - 2 ** 20, 1000), end


def uid_locks():
    """This process's descriptor of the lock file of uids in use (a byte each, locked by the
    process whose child has it: two `grade` runs at once never share a uid)."""
    global UID_LOCKS
    if UID_LOCKS is None or UID_LOCKS[0] != os.getpid():      # POSIX locks: a process each
        folder = "/run" if os.access("/run", os.W_OK) else "/tmp"
        fd = os.open(os.path.join(folder, "exercises-uids.lock"),
                     os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
        if os.fstat(fd).st_uid != 0:
            raise RuntimeError(f"{folder}/exercises-uids.lock is not root's: remove it")
        UID_LOCKS = (os.getpid(), fd)
    return UID_LOCKS[1]


def known_id(number):
    """True when a user or a group of the system has this number (it is not a child's)."""
    import grp
    import pwd
    for lookup in (pwd.getpwuid, grp.getgrgid):
        with contextlib.suppress(KeyError):
            lookup(number)
            return True
    return False


def claim_uid():
    """A uid (and the gid of the same number) for one child: no user, group or process has it,
    nor another child of any process (its byte of uid_locks() locked, till release_uid)."""
    import fcntl
    first, end = uid_span()
    span, fd = end - first, uid_locks()
    offset = os.getpid() * 64 % span                    # processes start apart
    with LOCK:
        for k in range(span):
            uid = first + (offset + k) % span
            if uid in CLAIMED or known_id(uid) or processes_of(uid):
                continue
            try:
                fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB, 1, uid - first)
            except OSError:                              # another process's child has it
                continue
            CLAIMED.add(uid)
            return uid
    raise RuntimeError("no free uid for a child")


def release_uid(uid):
    import fcntl
    with LOCK:
        fcntl.lockf(uid_locks(), fcntl.LOCK_UN, 1, uid - uid_span()[0])
        CLAIMED.discard(uid)


def processes_of(uid):
    """The pids of the live processes (not zombies) any of whose uids (real, effective, saved,
    file system) is `uid` (Linux /proc)."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            with contextlib.suppress(OSError, ValueError, KeyError, IndexError):
                status = Path(f"/proc/{entry}/status").read_text()
                fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
                if fields["State"].split()[0] != "Z" and str(uid) in fields["Uid"].split():
                    found.append(int(entry))
    return found


def end_user(uid):
    """Every process of `uid` ended (a fork loop: again, till none is left), then its files
    in SHARED_TMP removed (a folder of its own with all it holds): those at their top and in
    the world-writable folders reached from there through world-writable folders, where
    alone a user of its own can write (a folder another user made writable by all inside
    one of their own is not searched)."""
    for _ in range(1000):
        pids = processes_of(uid)
        if not pids:
            break
        for pid in pids:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.002)
    for top in (top for top in SHARED_TMP if os.path.isdir(top)):
        device = os.stat(top).st_dev
        for folder, folders, files in os.walk(top):     # links are not followed
            for name in folders + files:
                path = os.path.join(folder, name)
                with contextlib.suppress(OSError):
                    info = os.lstat(path)
                    if info.st_dev != device:           # a mount: not the child's to fill
                        folders.remove(name)
                        continue
                    if info.st_uid == uid:
                        if name in folders:
                            shutil.rmtree(path, ignore_errors=True)
                        else:
                            os.unlink(path)
                    if name in folders and (info.st_uid == uid or not info.st_mode & 0o002):
                        folders.remove(name)            # gone, or not writable by any user


def open_to(uid, scratch, shared):
    """The scratch folder readable by `uid` alone (owner root, group its gid, 750), its copies
    read-only to it, its work/ its own; the shared folder (files the checks write) readable."""
    for folder in [scratch] + ([shared] if shared else []):
        os.chown(folder, 0, uid)
        os.chmod(folder, 0o750)
    for part in ("course", "submission"):
        for folder, folders, files in os.walk(Path(scratch) / part):
            os.chmod(folder, 0o755)
            for name in files:
                os.chmod(os.path.join(folder, name), 0o644)
    os.chown(Path(scratch) / "work", uid, uid)
    os.chmod(Path(scratch) / "work", 0o700)


def as_user(uid):
    """Popen's words that start a process as `uid` (and its gid), no supplementary group."""
    return {"user": uid, "group": uid, "extra_groups": []}


PROBE = """
import json, os, sys
import numpy
readable = []
for path in json.loads(sys.argv[1]):
    try:
        if os.path.isdir(path):
            os.listdir(path)
        else:
            os.close(os.open(path, os.O_RDONLY | os.O_NONBLOCK))
        readable.append(path)
    except OSError:
        pass
print(json.dumps(readable))
"""


def probe(paths):
    """(which of `paths` a new user of its own can read, "") when this Python (and NumPy) runs
    as one, else (None, why not)."""
    uid = claim_uid()
    try:
        run = subprocess.run([sys.executable, "-c", PROBE, json.dumps([str(p) for p in paths])],
                             capture_output=True, text=True, timeout=120, cwd="/",
                             env={k: v for k, v in os.environ.items() if k in ("PATH", "LANG")},
                             **as_user(uid))
        why = (run.stderr.strip().splitlines() or [""])[-1][:200] if run.returncode else ""
    except (OSError, subprocess.SubprocessError) as error:
        why = f"{type(error).__name__}: {error}"
    finally:
        end_user(uid)
        release_uid(uid)
    if not why:
        return json.loads(run.stdout), ""
    closed = next((str(folder) for path in (sys.executable, sys.prefix)
                   for folder in Path(path).resolve().parents[::-1]
                   if not os.stat(folder).st_mode & 0o001), "")
    return None, (f"this Python ({sys.executable}) does not run as an unprivileged user: "
                  + (f"{closed} is closed to others (`chmod o+x {closed}`, or a Python "
                     f"outside it)" if closed else why))


@functools.lru_cache(maxsize=None)
def uid_problem():
    """Why "uid" cannot run here ("" when it can): not Linux, not root, or this Python does
    not run as an unprivileged user."""
    if sys.platform != "linux" or os.geteuid() != 0:
        return "not root"
    return probe([])[1]


# ----- How a child is kept apart here, and whether `grade` may run -----------------------------


def mode():
    """"bwrap", "uid" or "none" (the module's docstring); EXERCISES_NO_SANDBOX=1: "none"."""
    if os.environ.get("EXERCISES_NO_SANDBOX"):
        return "none"
    if bwrap_works():
        return "bwrap"
    return "uid" if not uid_problem() else "none"


def own_user():
    """True when each child runs as a user of its own here ("uid", or bwrap as root)."""
    return mode() == "uid" or mode() == "bwrap" and bwrap_as_user()


def isolation():
    """One line for the output: how the child is kept apart on this machine."""
    how = mode()
    if how == "bwrap":
        return ("sandbox: bubblewrap (the copies read-only, own /tmp and PID namespace, no "
                "network" + ", a user of its own)" * bwrap_as_user() + ")" * (not bwrap_as_user()))
    if how == "uid":
        return ("sandbox: a user of its own (root, no bubblewrap): it writes only its folder, "
                "reads none of the instructor's files; its processes and /tmp files end with it")
    if sys.platform == "linux":
        return ("sandbox: none (no working bwrap: install bubblewrap; `grade` needs it), fresh "
                "copies, orphans reaped")
    return "sandbox: none on this platform (`grade` needs Linux): fresh copies, the child's " \
           "process group ended"


def private_paths(submissions, roster=None, secret=None):
    """{top: [top and the paths under it a grader knows]}: what a student's code must not read
    (the repository with the solutions and the reading answers, every student's folder and
    file, the roster, the secret)."""
    solutions = ROOT / "exercises" / "solutions"
    subs = Path(submissions).resolve()
    tops = {ROOT: [ROOT, ROOT / "exercises", solutions, *sorted(solutions.glob("*"))],
            subs: [subs]}
    for folder in (p for p in subs.iterdir() if p.is_dir()):
        tops[subs] += [folder, *sorted(p for p in folder.iterdir() if p.is_file())]
    for path in (roster, secret):
        if path is not None and Path(path).exists():
            tops[Path(path).resolve()] = [Path(path).resolve()]
    return tops


def grading_refusal(submissions, roster=None, secret=None):
    """None when the students' code runs isolated here, else the one line that says why and
    what to do (`grade` refuses it before any work, or with --unsafe grades and flags it)."""
    how = mode()
    if how == "bwrap":
        return None
    if how == "uid":
        tops = private_paths(submissions, roster, secret)
        readable = set(probe([p for paths in tops.values() for p in paths])[0] or [])
        opened = [str(top) for top, paths in tops.items() if readable & {str(p) for p in paths}]
        if not opened:
            return None
        return (f"the students' code runs here as users of their own (root, no bubblewrap), "
                f"and such a user can read {opened[0]}" + " and more" * (len(opened) > 1) +
                f": `chmod o-rwx {' '.join(map(shlex.quote, opened))}` (or install "
                f"bubblewrap); --unsafe grades anyway")
    if os.environ.get("EXERCISES_NO_SANDBOX"):
        why = "EXERCISES_NO_SANDBOX is set"
    elif sys.platform != "linux":
        why = f"{sys.platform} has no bubblewrap: grade on Linux"
    elif os.geteuid() == 0:
        why = f"no working bubblewrap, and {uid_problem()}: install bubblewrap"
    else:
        why = "no working bubblewrap: install bubblewrap (apt install bubblewrap), or grade as root"
    return f"no isolation for the students' code here ({why}); --unsafe grades anyway, each " \
           f"row flagged \"{UNISOLATED}\""


# ----- A child's start and end ----------------------------------------------------------------


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
    """The child `argv` started (in bwrap, or as a user of its own: mode()), in a session of
    its own, on pipes. Its uid (None: this process's) is proc.uid."""
    how, uid, user = mode(), None, {}
    words = bwrap_command(scratch, shared) if how == "bwrap" else []
    if own_user():
        uid = claim_uid()
        open_to(uid, scratch, shared)
        user, env = as_user(uid), env | {"HOME": str(Path(scratch) / "work")}
    try:
        with LOCK:
            proc = subprocess.Popen(words + argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                    stderr=subprocess.DEVNULL, env=env, cwd=Path(scratch) / "work",
                                    start_new_session=True,   # Windows: a process group
                                    creationflags=getattr(subprocess, "CREATE_NEW_PROCESS_GROUP", 0),
                                    **user)
            LIVE.add(proc.pid)
    except BaseException:
        if uid is not None:
            release_uid(uid)
        raise
    proc.uid = uid
    return proc


def end(proc):
    """End the child with its session (in bwrap, its PID namespace; "uid": every process and
    shared temporary file of its uid; Windows: its tree)."""
    if os.name == "nt":
        subprocess.run(["taskkill", "/F", "/T", "/PID", str(proc.pid)], capture_output=True)
    else:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)
    uid = getattr(proc, "uid", None)
    if uid is not None:
        end_user(uid)
    proc.wait()
    LIVE.discard(proc.pid)                              # reaped: no sweep can mistake it
    sweep_orphans()
    if uid is not None:
        release_uid(uid)
