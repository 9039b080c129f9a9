"""sigma and sigma' of every activation against independent high-precision values.

tests/data/activation_values.csv holds f(z) and df(z) to 40 digits, computed once by
tests/data/make_activation_values.py with the decimal module (no NumPy, no code of
bilinear_numpy). The bounds, in units in the last place (ulp) of the true value in the
dtype, are the ones stated in bilinear_numpy.py, section 1:
- identity, relu: exact;
- sigmoid: 4 ulp, in both tails (the form e^-|z| / (1 + e^-|z|) never cancels);
- silu: 4 ulp; sigma' is a sum s + z s', so near its zero (z = -1.28) the bound is
  4 kappa_df ulp, kappa_df = (|s| + |z s'|) / |sigma'|;
- gelu, gelu_tanh: as silu, plus 2 kappa_f ulp with kappa_f = |z f'(z) / f(z)|, where an
  argument computed from z (z / sqrt 2, 2u) is rounded: a relative error eps/2 in it
  becomes kappa_f eps/2 in f (z^2 eps / 2 for exact GELU far in the negative tail);
  exact GELU in float32 is computed in float64, so no kappa_f there;
- below the normal range (a true value under the smallest normal number: silu at
  z = -104 in float32, whose sigma(z) underflows; SciPy's erfc, 0 from x = 26.6), an
  absolute error of at most the smallest normal number.
"""
import csv
import decimal
import math
import sys
import warnings
from decimal import Decimal
from pathlib import Path

import numpy as np
import pytest

import bilinear_numpy as bn

TABLE = Path(__file__).resolve().parent / "data" / "activation_values.csv"
with open(TABLE, encoding="utf-8") as _fh:
    ROWS = list(csv.DictReader(line for line in _fh if not line.startswith("#")))
DTYPES = [np.float32, np.float64]


def ulp_bound(name, key, dtype, kappa_f, kappa_df):
    if name in ("identity", "relu"):
        return 0.0
    bound = 4 * (kappa_df if key == "df" else 1.0)
    if name == "gelu_tanh" or (name == "gelu" and dtype == np.float64):
        bound += 2 * kappa_f
    return bound


def errors_in_ulps(name, dtype):
    """[(z, 'f' or 'df', error in ulps, bound)] for every row of `name`."""
    act = bn.ACTIVATIONS[name]
    decimal.getcontext().prec = 60
    out = []
    for row in (r for r in ROWS if r["activation"] == name):
        z = np.array([float(row["z"])], dtype)
        assert z[0] == float(row["z"])            # every z of the table is a float32 number
        for key, fn in (("f", act.f), ("df", act.df)):
            got, true = fn(z)[0], Decimal(row[key])
            assert got.dtype == dtype and np.isfinite(got), (row["z"], key)
            rounded = np.abs(np.float64(true)).astype(dtype)      # the true value, in dtype
            below_max = np.nextafter(np.finfo(dtype).max, dtype(0))  # its ulp is max's ulp
            ulp = Decimal(float(np.spacing(np.minimum(rounded, below_max))))
            smallest_normal = Decimal(float(np.finfo(dtype).smallest_normal))
            tiny = smallest_normal if abs(true) < smallest_normal else Decimal(0)
            error = max(Decimal(0), abs(Decimal(float(got)) - true) - tiny) / ulp
            out.append((row["z"], key, float(error),
                        ulp_bound(name, key, dtype, float(row["kappa_f"]), float(row["kappa_df"]))))
    return out


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", list(bn.ACTIVATIONS))
def test_f_and_df_within_their_ulp_bounds(name, dtype):
    rows = errors_in_ulps(name, dtype)
    assert len(rows) >= 2 * 60                    # the whole table was read
    too_far = [r for r in rows if not r[2] <= r[3] + 1e-9]
    assert too_far == [], too_far


def test_sigmoid_and_silu_tail_values():
    # float32 sigmoid(-20) = 2.0612e-9 (not 0), float64 sigmoid(-40) = 4.2484e-18 (not 0),
    # float32 sigmoid(-17) = 4.14e-8 (not 5.96e-8); silu(-10), silu(-12) in float32 to a
    # float32 rounding step.
    f = bn.ACTIVATIONS["sigmoid"].f
    assert f(np.array([-20.0], np.float32))[0] == pytest.approx(2.0612e-9, rel=1e-4)
    assert f(np.array([-40.0]))[0] == pytest.approx(4.2484e-18, rel=1e-4)
    assert f(np.array([-17.0], np.float32))[0] == pytest.approx(4.1399e-8, rel=1e-4)
    silu = bn.ACTIVATIONS["silu"].f
    for z in (-10.0, -12.0):
        true = z * math.exp(z) / (1 + math.exp(z))        # math.exp: a scalar second route
        assert abs(silu(np.array([z], np.float32))[0] / true - 1) < 2 ** -22


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", list(bn.ACTIVATIONS))
def test_f_df_and_their_one_pass_are_finite_and_silent_for_every_finite_input(name, dtype):
    act = bn.ACTIVATIONS[name]
    info = np.finfo(dtype)
    powers = np.ldexp(np.array(1.5, dtype), np.arange(info.minexp - info.nmant, info.maxexp - 1))
    magnitudes = np.concatenate([[info.smallest_subnormal], powers, [info.max]]).astype(dtype)
    z = np.concatenate([-magnitudes[::-1], [0], magnitudes]).astype(dtype)   # every binade
    with warnings.catch_warnings(), np.errstate(over="raise", invalid="raise", divide="raise"):
        warnings.simplefilter("error")
        f, df = act.f(z), act.df(z)
        f_pairs, df_pairs = act.f_and_df(z)       # as the pairs of section 2 call them
    assert np.isfinite(df).all() and np.array_equal(df, df_pairs)
    assert np.isfinite(f[1:-1]).all() and np.array_equal(f, f_pairs)


def test_exact_gelu_stdlib_and_scipy_paths_agree(monkeypatch):
    # Exact GELU's Phi uses scipy.special.erfc when SciPy is installed (CI's newest run),
    # else math.erfc element by element (CI's oldest run, and here the stdlib path is run
    # whether SciPy is installed or not). To 1e-15 relative where Phi(z) >= 3e-5 (z >= -4);
    # further out SciPy's erfc loses about x^2 eps relative (exp(-x^2) of a rounded x^2),
    # the size of the argument rounding the bound already allows, z^2 eps / 2: allowed z^2 eps.
    z = np.linspace(-37, 37, 7401)                 # Phi(-37) = 6e-300: still a normal float
    u = -z / np.sqrt(2)
    stdlib = np.array([math.erfc(t) for t in u])   # the standard library's, number by number
    act = bn.ACTIVATIONS["gelu"]
    monkeypatch.setitem(sys.modules, "scipy.special", None)   # the stdlib path, SciPy or not
    f_stdlib, df_stdlib = act.f(z), act.df(z)
    assert np.array_equal(f_stdlib, z * (0.5 * stdlib))
    monkeypatch.undo()
    special = pytest.importorskip("scipy.special")
    assert np.array_equal(act.f(z), z * (0.5 * special.erfc(u)))   # installed: the module uses it
    rel = np.abs(special.erfc(u) - stdlib) / stdlib
    assert np.max(rel[z >= -4]) <= 1e-15
    assert np.all(rel[z < -4] <= z[z < -4] ** 2 * np.finfo(np.float64).eps)
    tol = np.maximum(1e-15, z * z * np.finfo(np.float64).eps)
    assert np.all(np.abs(act.f(z) - f_stdlib) <= tol * np.abs(f_stdlib))
    near_root = np.abs(z + 0.7518) < 0.1           # GELU' = Phi + z phi is 0 at z = -0.7518
    scale = np.where(near_root, 1.0, np.abs(df_stdlib))
    assert np.all(np.abs(act.df(z) - df_stdlib) <= tol * scale)
