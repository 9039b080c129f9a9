"""The course: exercises on the paper, checked automatically. This docstring is the design.

    python -m exercises start --name alice   once: your seed, kept in exercises/student.json
    python -m exercises                      your progress (exit 0 when every exercise is done)
    python -m exercises check N [--hint L]   exercise N's rows, and hints 1 to L (of 3)
    python -m exercises handout DIR          instructors: the repository, stubs, no solutions
    python -m exercises grade SUBS --csv F   instructors: a class, one folder per student
    python -m exercises.release [--write]    instructors: the stubs made from solutions/

In a notebook: run its Setup cell (it finds the repository), save, then
`import exercises; exercises.check(1)` in a cell.

1. course.py lists the exercises. Exercise N is exNN_<slug>.ipynb when that exists, else
   exNN_<slug>.py (file times never decide; every view names the file graded).
2. checker.run_exercise runs the file in a child process of its own session, with its own
   temporary folder. The child imports it and calls the exercise's function of checks.py,
   which adds rows through a checker.Checks `c`: c.close (arrays), c.equal, c.answer_is and
   c.predicted (exact, types included), c.holds (a property). The student's code runs only
   inside c.call and c.answer, on copies; whatever it raises is a row (checker.Row: ok,
   WRONG, ERROR, TIMEOUT, TODO), and so is a call of a bn function the exercise asks the
   student to write or a change of bilinear_numpy's tables (put back, as is the working
   folder). The expected values are computed there, at check time, for the student's own
   variant (c.variant, c.rng: drawn from the seed in student.json). A wrong array's
   message diagnoses its shape or value ("a transpose?"); a wrong value that a known
   slip gives is recognised (mistakes={(point, slip): value}).
3. Each check has a time limit: past it the child writes its stack and ends; the parent
   kills the child's process tree, empties its temporary folder, writes a TIMEOUT row (the
   line) and starts a new child at the next check. Inside a child a check does nothing.
4. checker.advice is the one place that says what the failing rows tell the student, as
   three hint levels (where to look, the slip or the idea, the rule): from the slips
   recognised in the rows, else from which rows fail together, else from hints.json.
5. __main__.py prints rows, progress and hints and grades a class in parallel; release.py
   makes the stubs from the solutions and the handout.

Exercise 20 is optional (it needs PyTorch; without it, one SKIPPED row) and counted apart.
Exit status: 0 done (grade, handout: the work ran); 1 not done (release: a stub differs); 2 bad
usage.
"""


def check(exercise=None, *options):
    """check(1) is `python -m exercises check 1`, check() `python -m exercises`; options as
    on the command line, e.g. check(9, "--hint", "2"). Returns the exit status."""
    from exercises.__main__ import main
    return main(([] if exercise is None else ["check", str(exercise)]) + [str(o) for o in options])


def variant(exercise, folder=None):
    """Your own variant of exercise N (a dict; its "y" says it in one line), drawn from the
    seed in student.json (seed 0 before `python -m exercises start`) of `folder` (default:
    exercises/). The checker hands the same dict to your functions."""
    from exercises import checker
    from exercises.course import COURSE
    chosen = COURSE[exercise - 1]
    if chosen.variant is None:
        raise ValueError(f"exercise {exercise} is the same for everyone: it has no variant")
    seed = checker.read_seed(checker.PACKAGE if folder is None else folder)[1]
    return checker.own_variant(chosen, exercise, seed)
