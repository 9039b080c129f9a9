"""The course: exercises on the paper, checked automatically. This docstring is the design.

    python -m exercises start --code CODE    once: your seed (from your instructor's code;
                                             alone: --name YOU), kept in student.json
    python -m exercises                      your progress (exit 0 when every exercise is done)
    python -m exercises check N [--hint L]   exercise N's rows, and hints 1 to L (of 3)
    python -m exercises handout DIR          instructors: the repository, stubs, no solutions
    python -m exercises roster CLASS.csv     instructors: a code per student (gradebook.py)
    python -m exercises grade SUBS --csv F   instructors: a class, one folder per student:
        [--roster CLASS.csv] [--feedback DIR] [--format canvas]   points, feedback, review
    python -m exercises.release [--write]    instructors: the stubs made from solutions/

In a notebook: run its Setup cell (it finds the repository), save, then
`import exercises; exercises.check(1)` in a cell.

1. course.py lists the exercises. Exercise N is exNN_<slug>.ipynb when that exists, else
   exNN_<slug>.py (file times never decide; every view names the file graded). Everything
   the checker says about it is in exercises/checks/exNN_<slug>.py: its TITLE, WRITES (the
   bn names it asks the student to write), variant, check, diagnose and HINTS; what the
   exercises share is in checks/common.py.
2. The student's code only answers; the checker judges. checker.run_exercise starts a child
   (child.py) that imports the student's file, from a fresh copy of it and of the course
   (sandbox.py: inside bubblewrap where it works), and does nothing but what the checker
   asks on its pipe: call a function on these arguments, read an answer, fetch a value it
   keeps. Values cross as data (protocol.py: arrays and plain values, never pickles); what
   is not data stays in the child as a handle (a student's cache). The exercise's check(c)
   runs here, in the checker's process, which never imports the student's file and never
   reads what it prints: it draws the inputs (c.rng, c.variant: from the student's seed),
   computes every truth, and adds rows through a checker.Checks `c`: c.close (arrays),
   c.equal and c.predicted (exact, types included), c.reading (a reading question, whose
   truth is in solutions/answers.py: a handout checks its form only, "when graded"),
   c.holds (a property), backward passes timed by common.cost_row. Whatever the file
   replaces in its own process (the checker's modules, bn, NumPy, builtins, exit) changes
   only its own answers.
3. Functions cross by what they are. A function the checker hands the student's code (a
   forward for numerical_gradient, bn's pairs) is a function of the course, sent by module
   and name with its data arguments and rebuilt in the child; the capstone's registry entry
   and training loop stay here and call the student's forward and backward across the pipe
   (c.student(name)); exercise 20's torch runs in the child (a course function that calls
   the student's), and only arrays come back. Nothing is called back from the child.
4. Each request has a time limit: past it the child is ended (with everything it started:
   bubblewrap's PID namespace, else the checker's subreaper on Linux, else its process
   group), the row is TIMEOUT with the line it was on, the function's later rows are not
   run, and the next request starts a new child. A child that ends its process costs the
   request an ERROR row. Its temporary folder goes with it.
5. checker.advice is the one place that says what the failing rows tell the student, as
   three hint levels (where to look, the slip or the idea, the rule): from the slips
   recognised in the rows, else from which rows fail together, else from the HINTS.
6. __main__.py prints rows, progress and hints; gradebook.py issues a class its codes
   (the roster: each variant's seed follows from an HMAC of the student id) and grades it
   in worker processes (each submission from a snapshot taken before any child runs, each
   against its roster variant; the course's files compared after each child and put
   back): points (course.py's POINTS x rows passed / the exercise's ROWS), each student's
   feedback and the capstone's review sheet; release.py makes the stubs and the handout.

Exercise 20 is optional (it needs PyTorch; without it, one SKIPPED row) and counted apart.
Exit status: 0 done (grade, handout: the work ran); 1 not done (release: a stub differs); 2 bad
usage.
"""


def check(exercise=None, *options):
    """check(1) is `python -m exercises check 1`, check() `python -m exercises`; options as
    on the command line, e.g. check(9, "--hint", "2"), and its suggestions are such calls.
    Returns the exit status (0 done, 1 not), or None in an IPython kernel (a notebook), so
    that no 0 or 1 is shown under the rows."""
    import sys
    from exercises.__main__ import main
    status = main(([] if exercise is None else ["check", str(exercise)])
                  + [str(o) for o in options], python_call=True)
    ipython = sys.modules.get("IPython")
    return None if ipython is not None and ipython.get_ipython() is not None else status


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
