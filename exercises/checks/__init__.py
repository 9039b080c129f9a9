"""The checks of the course: one file an exercise (<slug>.py: its TITLE, WRITES, variant, check,
diagnose and HINTS; a family later exercises reuse, in the file of the one that introduces it)
and common.py, what several share. Each runs in the checker's process, never in the student's,
and imports nothing of the machinery that runs it: see exercises/grading/__init__.py."""
