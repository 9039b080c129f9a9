"""The course: exercises on the paper, checked automatically. This docstring is the design.

Students:

    python -m exercises start --name alice   once: your seed, kept in exercises/student.json
    python -m exercises                      your progress (exit 0 when every exercise is done)
    python -m exercises check N              exercise N's checks, a row each, and hint 1
    python -m exercises check N --hint 2     ... up to hint 2 (3: the rule for the failing step)
    python -m exercises hint N               hints 1 and 2 without the table

From a notebook (opened in the repository's folder or in exercises/): save, then in a cell
`import exercises; exercises.check(1)`. A graded derivation is posed on a variant of the
student's own, drawn from their seed: `exercises.variant(N)` returns it (a dict; the
checker hands the same dict to the student's functions, which read it).

Instructors:

    python -m exercises handout DIR          the repository for students: stubs, no solutions
    python -m exercises grade SUBS --csv F   a class, one folder per student, to a CSV
    python -m exercises release [--write]    the stubs made from exercises/solutions/

The files, in the order a check runs through them:

- course.py: COURSE, the list of exercises: Exercise(slug, title, check, writes, diagnose).
  Exercise N is the file exNN_<slug>.py (or exNN_<slug>.ipynb: a notebook, when there is
  one, is the file graded; file times never decide), solved in solutions/exNN_<slug>.py.
- checks.py: one function per exercise. It gets a checker.Checks `c` and adds rows:
  c.close (arrays, rel_error), c.equal and c.answer_is (exact, types included), c.holds (a
  property). The student's code is reached only through c.call(name, ...) and c.answer(name),
  inside the lambdas, so whatever it does becomes a row. Expected values are computed
  there, at check time, from bilinear_numpy or finite differences; c.variant() (the
  exercise's variant(rng), in course.py) and c.rng(...) draw from the student's seed, so a
  problem is the student's own, handed to the student's functions as their last argument;
  c.predicted compares a prediction without showing its truth. A wrong value that matches
  a known slip (mistakes={(point, slip): value}) is recognised; a backward pass's rows
  ("dNAME vs ...") are read by one rule, checker.gradient_diagnosis.
- checker.py: rows and their comparison (with the shape/value diagnosis: "a transpose? got
  (5, 4) where (4, 5) was due"), Checks, and the child process. Each exercise runs in its own
  child (`python -c ... child_main`), in its own session, with its own temporary folder, and
  reports each row as it goes through a file. Each check has its time limit (10 s; the import
  is a check): past it the parent kills the child's whole process tree, keeps the rows
  before, writes a TIMEOUT row and starts a new child from the next check; later rows of the
  function that did not return are TIMEOUT without running, the others run. Each call gets
  copies of its inputs; the working folder and bilinear_numpy's tables are put back after
  it (a replaced table is an ERROR row, as is a call of a bn function listed in `writes`).
  A child marks itself and its environment: a check asked for inside a file being checked (a
  notebook's saved check cell) does nothing. checker.advice is the one place that says what
  the failing rows tell the student: hint level 1 (where to look), 2 (the slip named, or the
  idea), 3 (the rule for the failing step), from the slips recognised in the rows or else the
  exercise's diagnose (which rows fail together), and the hints in hints.json.
- __main__.py: the command line: progress, check, hint, start, grade (exercises run in
  parallel, as many as the machine has cores).
- release.py: stubs from solutions (`# BEGIN SOLUTION: todo` ... `# END SOLUTION`,
  `NAME = value  # ANSWER: todo`) and the handout.

Every exit status: 0 means done (a student's progress: every exercise; check N: that one)
or, for grade and handout, that the work ran; 1 not done; 2 bad usage.
"""


def check(exercise=None, *options):
    """check(1) is `python -m exercises check 1`, check() `python -m exercises`; options as
    on the command line, e.g. check(9, "--hint", "2"). Returns the exit status. Inside a
    file that the checker is running (a notebook's saved check cell) it does nothing."""
    from exercises.__main__ import main
    argv = ([] if exercise is None else ["check", str(exercise)]) + [str(o) for o in options]
    return main(argv)


def variant(exercise, folder=None):
    """Your own variant of exercise N (a dict; its "y" says it in one line), drawn from the
    seed in student.json (seed 0 before `python -m exercises start --name YOU`) of `folder`
    (default: exercises/). The checker hands the same dict to your functions."""
    from exercises import checker
    from exercises.course import COURSE
    chosen = COURSE[exercise - 1]
    if chosen.variant is None:
        raise ValueError(f"exercise {exercise} is the same for everyone: it has no variant")
    seed = checker.read_seed(checker.PACKAGE if folder is None else folder)[1]
    return checker.own_variant(chosen, exercise, seed)


def hint(exercise, level=None):
    """hint(9) is `python -m exercises hint 9`."""
    from exercises.__main__ import main
    return main(["hint", str(exercise)] + ([] if level is None else ["--level", str(level)]))
