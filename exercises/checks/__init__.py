"""The checks of the course: one file an exercise (exNN_slug.py: its TITLE, WRITES, variant,
check, diagnose and HINTS), and common.py, what they share. Each runs in the checker's
process, never in the student's: see exercises/__init__.py."""
