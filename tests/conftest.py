"""One BLAS thread for the test suite, as `python bilinear_numpy.py` uses (see the top of
bilinear_numpy.py): the tests' matrices are small, and on a busy machine BLAS threads that
wait for each other doubled the suite's time (measured 29 s instead of 15 s on 2 shared
cores). Set before any test module imports NumPy; a value already set is kept.

Real processes started early (REAL_PROCESSES, below): a test whose subject is a real process
(no display, a console's encoding, a script run from a shell) runs it on the other core while
this one runs other tests."""
import os
import subprocess
import time

import pytest   # pytest imports no NumPy

for _name in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS",
              "VECLIB_MAXIMUM_THREADS"):
    os.environ.setdefault(_name, "1")


@pytest.fixture(scope="session")
def verify_report():
    """`verify`'s report, measured once in this process for every test that reads it
    (test_cli.py, test_figures.py): (the number of disagreements it returned, its lines)."""
    from experiments import cli
    lines = []
    failures = cli.verification_report(out=lines.append)
    return failures, lines


SEEDS = (0, 1, 2)           # the solutions are graded for these seeds (one, without a variant)


@pytest.fixture(scope="session")
def solutions(tmp_path_factory):
    """{(number, seed): the Result of the solution of exercise `number`}, graded once for every
    test that reads it (test_exercises.py, test_backward_cost.py, test_class.py): seed 0 for
    every exercise, seeds 1 and 2 too for those with a variant (the others' rows do not depend
    on the seed), each with the checker's own time limit, from a folder of the solutions under
    the student's names (release.write_solved). Run as the progress view and grade run them:
    the exercises of one seed shared among 2 x cores children (checker.check_job, one child a
    share), that many at a time (checker.parallel). Skips without the solutions (a handout)."""
    from exercises.course import COURSE
    from exercises.grading import checker, release
    if not checker.SOLUTIONS_FOLDER.is_dir():
        pytest.skip("no exercises/solutions/ (a handout)")
    solved = tmp_path_factory.mktemp("solved")
    release.write_solved(solved)
    jobs = 2 * (os.cpu_count() or 1)         # children mostly wait (start, pipe): past the cores
    numbers = {seed: [n for n, e in enumerate(COURSE, start=1)
                      if seed == 0 or e.variant is not None] for seed in SEEDS}
    shares = [(seed, numbers[seed][k::jobs]) for seed in SEEDS for k in range(jobs)
              if numbers[seed][k::jobs]]
    tasks = [(share, solved, checker.TIME_LIMIT, None, seed) for seed, share in shares]
    found = {}
    for (seed, share), results in zip(shares, checker.parallel(checker.check_job, tasks, jobs)):
        found.update({(n, seed): result for n, result in zip(share, results)})
    return found


# ----- real processes, started early ---------------------------------------------------------
# pytest runs the tests one after another on one core (one BLAS thread, above); a test of a
# real process mostly waits for it. Such a process is declared in its test module as
# REAL_PROCESSES = {fixture name: start}, start(folder) -> (argv, {"cwd": ..., "env": ...,
# "timeout": seconds}), folder a new empty folder; the fixture of that name reads it with
# real_processes.result(name), a subprocess.CompletedProcess (stdout and stderr as bytes; its
# .folder is the folder).
# The processes of the tests selected are started one at a time, in the order the tests need
# them, from this process's main thread (no thread: a forking test stays safe), each as the one
# before it ends (checked after every test): on two cores, beside the tests of this process.
# A process not yet started when its test asks is started then; a test waits for its own
# process only, at most its timeout from its start. Output goes to files, not pipes (nobody
# reads a pipe meanwhile). Everything a test asserts is read from the finished process, as
# subprocess.run would give it; what runs, in what environment, is the test module's.

class RealProcesses:
    def __init__(self, starts, folder_of):
        self.queue = list(starts)            # [(name, start)], in the order the tests need them
        self.folder_of = folder_of           # name -> a new empty folder
        self.started = {}                    # name -> (Popen, argv, folder, deadline)
        self.running = None                  # the Popen started by step(), until it ends

    def _start(self, name, start):
        folder = self.folder_of(name)
        argv, options = start(folder)
        deadline = time.monotonic() + options.pop("timeout")
        with open(folder / ".stdout", "wb") as out, open(folder / ".stderr", "wb") as err:
            proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=out, stderr=err,
                                    **options)
        self.started[name] = (proc, argv, folder, deadline)
        return proc

    def step(self):
        """Start the next process of the queue if the one step() started has ended."""
        if self.running is not None and self.running.poll() is None:
            return
        self.running = None
        while self.queue and self.running is None:
            name, start = self.queue.pop(0)
            if name not in self.started:
                self.running = self._start(name, start)

    def result(self, name):
        """The process `name`, ended (started now if it was not): a CompletedProcess, and
        its .folder the folder start(folder) was given. Raises subprocess.TimeoutExpired, the process killed, at its timeout from its start."""
        if name not in self.started:
            self._start(name, dict(self.queue)[name])
        proc, argv, folder, deadline = self.started[name]
        try:
            proc.wait(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            raise
        done = subprocess.CompletedProcess(argv, proc.returncode,
                                           (folder / ".stdout").read_bytes(),
                                           (folder / ".stderr").read_bytes())
        done.folder = folder                 # the folder start was given
        return done

    def close(self):
        """Kill what still runs (a session that ended early: -x, Ctrl-C)."""
        for proc, *_ in self.started.values():
            if proc.poll() is None:
                proc.kill()
                proc.wait()


_SESSION = []                                # the session's RealProcesses, while it runs


@pytest.fixture(scope="session", autouse=True)
def real_processes(request, tmp_path_factory):
    """The RealProcesses of the tests selected (see above), the first one started."""
    starts = {}
    for item in request.session.items:
        for name, start in getattr(getattr(item, "module", None), "REAL_PROCESSES", {}).items():
            if name in item.fixturenames:
                starts.setdefault(name, start)
    real = RealProcesses(starts.items(), tmp_path_factory.mktemp)
    _SESSION.append(real)
    real.step()
    yield real
    _SESSION.clear()
    real.close()


def pytest_runtest_teardown(item, nextitem):
    if _SESSION:
        _SESSION[0].step()
