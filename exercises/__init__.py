"""The course: exercises on the paper, checked automatically (the guide: docs/course.md).

    python -m exercises start --code CODE    once: your seed, from your instructor's code
                                             (alone: --name YOU), kept in student.json
    python -m exercises [check N [--hint L]] your progress, or exercise N's rows and hints
    python -m exercises handout DIR          instructors: the repository, stubs, no solutions
    python -m exercises roster CLASS.csv     instructors: a code per student
    python -m exercises grade SUBS --csv F   instructors: a class's points, feedback, review
    python -m exercises.release [--write]    instructors: the stubs made from solutions/

In a notebook: `import exercises; exercises.check(1)`. The design:

1. course.py lists the exercises. Exercise N is exNN_<slug>.ipynb if there is one, else .py;
   all the checker says of it is in exercises/checks/exNN_<slug>.py (TITLE, WRITES, variant,
   check, diagnose, HINTS, ROWS), a family later exercises extend in the file of the one
   that introduces it, and what unrelated exercises share in checks/common.py.
2. The student's code only answers; the checker judges. checker.run_exercise starts a child
   (child.py) on fresh copies of the course and of the student's files (sandbox.py: inside
   bubblewrap where it works) that does only what the checker asks on its pipe: call a
   function, read an answer, fetch a value it keeps. Values cross as data (protocol.py, never
   pickles), a function of the course by its module and name; nothing is called back. The
   exercise's check(c) runs in the checker, which never imports the student's file nor reads
   what it prints: it draws the inputs from the student's seed, computes every truth and adds
   the rows. Whatever the file replaces in its own process changes only its own answers.
3. Past a request's time limit the child ends with all it started: a TIMEOUT row, the
   function's later rows not run, a new child for the next request.
4. checker.advice says what the failing rows tell the student, in three levels of hints.
5. __main__.py prints rows, progress and hints; gradebook.py issues the roster's codes and
   grades a class in workers (each folder from a snapshot, against its roster seed) to points
   (POINTS x rows passed / ROWS), feedback and the review sheet; release.py makes the stubs
   and the handout.

Exit status: 0 done (grade, handout: it ran); 1 not done (release: a stub differs); 2 bad usage.
"""


def check(exercise=None, *options):
    """check(1) is `python -m exercises check 1`, check() the progress, check(9, "--hint", "2")
    that option: the exit status, or None in an IPython kernel (no 0 or 1 under the rows)."""
    import sys
    from exercises.__main__ import main
    words = ([] if exercise is None else ["check", exercise]) + list(options)
    status = main([str(w) for w in words], python_call=True)
    ipython = sys.modules.get("IPython")
    return None if ipython is not None and ipython.get_ipython() is not None else status


def variant(exercise, folder=None):
    """Your own variant of exercise N (a dict; its "y" says it), from the seed in student.json
    (of `folder`, default exercises/; seed 0 before `start`): the dict your functions get."""
    from exercises import checker
    from exercises.course import COURSE
    if COURSE[exercise - 1].variant is None:
        raise ValueError(f"exercise {exercise} is the same for everyone: it has no variant")
    seed = checker.read_seed(checker.PACKAGE if folder is None else folder)[1]
    return checker.own_variant(COURSE[exercise - 1], exercise, seed)
