"""The checks of the course: one file an exercise (<slug>.py: its TITLE, WRITES, ROWS,
variant, check, diagnose and HINTS; a family later exercises reuse, in the file of the one that
introduces it) and common.py, what several share. Each runs in the checker's process, never in
the student's: see exercises/__init__.py."""
