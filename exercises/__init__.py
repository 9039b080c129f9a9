"""The course: exercises on the paper, checked automatically.

Run `python -m exercises` for the progress over every exercise and
`python -m exercises check N` for the checks of exercise N. The list of exercises is in
course.py, their checks in checks.py, the machinery in checker.py, the hints in hints.json.
"""
