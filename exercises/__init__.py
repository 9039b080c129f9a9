"""The course: exercises on the paper, checked automatically (the guide: docs/course.md).

    python -m exercises start --code CODE    once: your seed, from your instructor's code
                                             (alone: --name YOU), kept in student.json
    python -m exercises [check N [--hint L]] your progress, or exercise N's rows and hints
    python -m exercises handout DIR          instructors: the repository, stubs, no solutions
    python -m exercises roster CLASS.csv     instructors: a code per student
    python -m exercises grade SUBS --csv F   instructors: a class's points, feedback, review
    python -m exercises.release [--write]    instructors: the stubs made from solutions/

In a notebook: `import exercises; exercises.check(1)`.

What is here: the files a student edits (exNN_<slug>.py, or a .ipynb of the same name, which
is then the one graded), their checks (checks/<slug>.py), the solutions (solutions/<slug>.py,
absent from a handout), the tour, tiny_checkpoint.py, and the course's table (course.py: the
slugs in order, each one's points; exercise N is the table's N-th). The machinery that runs and
grades the student's code is exercises/grading/; its design is at the top of its __init__.py.

Exit status: 0 done (grade, handout: it ran); 1 not done (release: a stub differs); 2 bad usage.
"""


def check(exercise=None, *options):
    """check(1) (or check("key_value_memory")) is `python -m exercises check 1`, check() the
    progress, check(9, "--hint", "2") that option: the exit status, or None in an IPython
    kernel (no 0 or 1 under the rows)."""
    import sys
    from exercises.grading.cli import main
    words = ([] if exercise is None else ["check", exercise]) + list(options)
    status = main([str(w) for w in words], python_call=True)
    ipython = sys.modules.get("IPython")
    return None if ipython is not None and ipython.get_ipython() is not None else status


def variant(exercise, folder=None):
    """Your own variant of an exercise, by its slug ("symmetry_ablation") or its number (8): a
    dict (its "y" says it), from the seed in student.json (of `folder`, default exercises/; seed
    0 before `start`): the dict your functions get."""
    from exercises.grading import checker
    return checker.student_variant(exercise, folder)
