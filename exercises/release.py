"""`python -m exercises.release [--write]`: the stubs made from the solutions
(exercises/grading/release.py; docs/course.md, "Release the exercises")."""

if __name__ == "__main__":
    import sys

    from exercises.grading.release import main
    sys.exit(main(sys.argv[1:]))
