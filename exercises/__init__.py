"""The course: exercises on the paper, checked automatically. This docstring is the design.

Students:

    python -m exercises start --name alice   once: your seed, kept in exercises/student.json
    python -m exercises                      your progress (exit 0 when every exercise is done)
    python -m exercises check N              exercise N's checks, a row each, and hint 1
    python -m exercises check N --hint 2     ... up to hint 2 (3: the rule for the failing step)
    python -m exercises hint N               hints 1 and 2 without the table

From a notebook (opened in the repository's folder or in exercises/): save, then in a cell
`import exercises; exercises.check(1)`. `exercises.variant(N)` is the student's own variant
of exercise N (a dict drawn from their seed), the one the checker hands their functions.

Instructors:

    python -m exercises handout DIR          the repository for students: stubs, no solutions
    python -m exercises grade SUBS --csv F   a class, one folder per student, to a CSV
    python -m exercises release [--write]    the stubs made from exercises/solutions/

A check, from the command to the row a student reads:

1. course.py: COURSE, the exercises in order, each an Exercise(slug, title, check, writes,
   diagnose, variant). Exercise N is the file exNN_<slug>.py, or exNN_<slug>.ipynb when
   that exists (the rule; file times never decide, and every view names the file graded).
2. checker.run_exercise starts a child process (`python -c ... child_main`) in its own
   session, with its own temporary folder and output pipe. In it, check_file imports the
   student's file (the import is a row) and calls the exercise's check function.
3. checks.py: one check function per exercise. It gets a checker.Checks `c` and adds rows:
   c.close (arrays, rel_error), c.equal and c.answer_is (exact, types included), c.holds (a
   property), c.predicted (a prediction, its truth not shown). The student's code runs only
   through c.call(name, ...) and c.answer(name), inside the lambdas, so whatever it does is
   a row. Expected values are computed there, at check time, from bilinear_numpy or finite
   differences; c.variant() and c.rng(...) draw from the student's seed. A wrong value that
   matches a known slip (mistakes={(point, slip): value}) is recognised in its row.
4. A row is (check, topic, expected, got, max|diff|, rel err, verdict, message): ok, WRONG,
   ERROR, TIMEOUT or TODO (checker.Row says when each is given), with the shape/value
   diagnosis in its message ("a transpose? got (5, 4) where (4, 5) was due").
5. Each c.call gets copies of its inputs; after it the working folder and bilinear_numpy's
   tables are put back (a change is an ERROR row), and a call of a bn function in the
   exercise's `writes` is an ERROR row ("you called bn.NAME, which this exercise asks you to
   write"): the only guard on the library.
6. The child writes each row to a file as it goes. Each step has a time limit (10 s): past
   it, faulthandler in the child writes the stack and ends it; the parent kills what the
   child started in its session, removes its temporary folder, writes a TIMEOUT row naming
   the line, and starts a new child from the next check (the other rows of the function
   that did not return are TIMEOUT, not run). A child that ends early gets an ERROR row.
   (A process that leaves the session escapes the kill: this is no sandbox.)
7. A child marks itself, its environment and its session: a check asked for inside a file
   being checked (a notebook's saved check cell) does nothing.
8. checker.advice is the one place that says what the failing rows tell the student, as
   three hint levels: 1 where to look, 2 the slip named (or the idea), 3 the rule for the
   failing step; from the slips recognised in the rows, else from which rows fail together
   (checker.gradient_diagnosis for every backward pass, the exercise's diagnose for others),
   else the hints of hints.json.
9. __main__.py prints the rows, the progress and the hints, and grades a class (exercises in
   parallel, as many as the machine has cores). release.py makes the stubs from the
   solutions (`# BEGIN SOLUTION: todo` ... `# END SOLUTION`, `NAME = value  # ANSWER: todo`)
   and the handout.

Exercise 20 is optional (Exercise.optional): it needs PyTorch, its check is one SKIPPED row
without it, and a progress or a grade counts the 19 of the course apart from it.

Exit status: 0 means done (a student's progress: every exercise of the course; check N: that
one, or skipped) or, for grade and handout, that the work ran; 1 not done; 2 bad usage.
"""


def check(exercise=None, *options):
    """check(1) is `python -m exercises check 1`, check() `python -m exercises`; options as
    on the command line, e.g. check(9, "--hint", "2"). Returns the exit status. Inside a
    file that the checker is running (a notebook's saved check cell) it does nothing."""
    from exercises.__main__ import main
    return main(([] if exercise is None else ["check", str(exercise)]) + [str(o) for o in options])


def hint(exercise, level=None):
    """hint(9) is `python -m exercises hint 9`."""
    from exercises.__main__ import main
    return main(["hint", str(exercise)] + ([] if level is None else ["--level", str(level)]))


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
