"""The checks of the course: one file an exercise (exNN_slug.py: its TITLE, WRITES, ROWS,
variant, check, diagnose and HINTS), common.py, what they share, and capstone.py, what the
capstone's checks measure. Each runs in the checker's process, never in the student's: see
exercises/__init__.py."""
