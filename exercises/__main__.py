"""`python -m exercises ...`: the course's command line (exercises/grading/cli.py)."""

import os

if __name__ == "__main__":       # one BLAS thread, set before NumPy loads, as in the child:
    for _name in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS",
                  "VECLIB_MAXIMUM_THREADS"):        # the cost rows time the forward here and
        os.environ[_name] = "1"                     # the backward there alike
    from exercises.grading.cli import run
    run()
