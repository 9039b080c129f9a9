"""The course: exercises on the paper, checked automatically.

Run `python -m exercises` for the progress over every exercise and
`python -m exercises check N` for the checks of exercise N. The list of exercises is in
course.py, their checks in checks.py, the machinery in checker.py, the hints in hints.json.

From a notebook (opened in the repository's folder or in exercises/), save the notebook,
then in a cell: `import exercises; exercises.check(1)`.
"""


def check(exercise=None, *options):
    """Run the checker from Python (a notebook cell): check(1) is `python -m exercises
    check 1`; check() is `python -m exercises`; options as on the command line, e.g.
    check(9, "--hint", "2"). Prints the report; returns the exit status (0, 1 or 2)."""
    from exercises.__main__ import main
    argv = ([] if exercise is None else ["check", str(exercise)]) + [str(o) for o in options]
    return main(argv)


def hint(exercise, level=None):
    """The hints of an exercise from Python: hint(9) is `python -m exercises hint 9`."""
    from exercises.__main__ import main
    return main(["hint", str(exercise)] + ([] if level is None else ["--level", str(level)]))
