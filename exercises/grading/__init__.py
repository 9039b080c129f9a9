"""The grading machinery of the course: it reads the course (exercises/course.py and
exercises/checks/) and runs the student's code; nothing of the course imports it, but for
exercises.check() and exercises.variant(), which call into it when they are called.

The modules:
- cli.py        the command line, `python -m exercises ...` (exercises/__main__.py runs it):
                progress, `check N`, `start`, and the instructor's `handout`, `roster`, `grade`,
                `gradescope` (docs/course.md).
- checker.py    one exercise checked: the Session of a submission's child, the Checks object
                `c` a check function fills (row by row), the comparisons, the number of rows
                a check emits (counted, row_count), and the three levels of hints (advice).
- child.py      the child process: imports the student's file and answers requests.
- protocol.py   what crosses the pipe between the two: a JSON object a line.
- sandbox.py    where a child runs, what it may take (Limits), how it ends with all it started.
- gradebook.py  a class: the roster's codes, a folder a student graded to points, the
                feedback, the capstone's review sheet, the gradebook CSV (and Canvas's).
- gradescope.py the same grading as a Gradescope autograder zip (autograder/: its setup.sh and
                run_autograder, copied into the zip).
- release.py    the stubs made from the solutions, and the handout (`python -m
                exercises.release` runs its main).

The trust boundary. The student's code runs only in a child (child.py), started by the
checker on fresh copies of the course and of the student's files (snapshots read before any
child ran). The child does only what the checker asks on its pipe: import the file, call a
function, read an answer, fetch a value it keeps. Values cross as data (protocol.py: numbers,
arrays, containers; never a pickle); a function of the course crosses by its module and name,
and nothing is called back. Each exercise's check(c) runs in the checker's process, which never
imports the student's file nor reads what it prints: it draws the inputs from the student's
seed, computes every truth and judges every row. Whatever the file replaces in its own process
(the checker's functions, bilinear_numpy, builtins) changes only its own answers.

Isolation (sandbox.mode(), one of three routes; docs/course.md, "What a student's file can and
cannot do"): "bwrap", inside bubblewrap (read-only copies, its own /tmp, PID and network
namespaces); "uid", root without bubblewrap: a user of its own per child, every process of that
uid ended after it; "none", an ordinary child of this user (a student's own machine): `check`
runs so, `grade` refuses unless --unsafe and flags every row. Limits (sandbox.Limits: memory,
processes, file size, CPU time) the child sets on itself before the student's code runs; past
a request's time limit the child is ended with all it started: a TIMEOUT row, the function's
later rows not run, a new child for the next request.

How a class is graded (gradebook.py): `roster` gives each student a code (HMAC of the id under
the course secret) whose seed gives their variants; `grade` snapshots every folder, checks it
in worker processes against its roster seed, and scores each exercise POINTS x rows passed /
rows, the rows being the number its check emits (counted from the check, checker.row_count;
rows not run score 0). An exercise whose checks file declares REASONING points (the capstone)
has those scored by hand in the gradebook's capstone_reasoning column, from the review sheet.
Exercises are known here by their slug and their place in course.TABLE, never by a number
typed in this folder.
"""
