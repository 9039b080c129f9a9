"""One BLAS thread for the test suite, as `python bilinear_numpy.py` uses (see the top of
bilinear_numpy.py): the tests' matrices are small, and on a busy machine BLAS threads that
wait for each other doubled the suite's time (measured 29 s instead of 15 s on 2 shared
cores). Set before any test module imports NumPy; a value already set is kept."""
import os

import pytest   # pytest imports no NumPy

for _name in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS",
              "VECLIB_MAXIMUM_THREADS"):
    os.environ.setdefault(_name, "1")


@pytest.fixture(scope="session")
def verify_report():
    """`verify`'s report, measured once in this process for every test that reads it
    (test_cli.py, test_figures.py): (the number of disagreements it returned, its lines)."""
    from experiments import cli
    lines = []
    failures = cli.verification_report(out=lines.append)
    return failures, lines
