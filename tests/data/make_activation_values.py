"""Write activation_values.csv: sigma(z) and sigma'(z) of every activation, to 40 digits.

Run once: `python tests/data/make_activation_values.py` (about 10 s). It uses the standard
library's decimal module at 80 digits and nothing from bilinear_numpy, so the table is an
independent route to the numbers that tests/test_activation_tails.py checks the code against.

Every z is a float32 number (so one table serves both dtypes). Besides f and df, each row
holds the two condition numbers the accuracy bounds need:
- kappa_f = |z f'(z) / f(z)|: how much a relative error of eps in an argument computed from
  z (z / sqrt 2 in exact GELU, 2u in tanh-GELU) grows in f;
- kappa_df = (sum of |terms|) / |df|, for a df computed as a sum of two terms (SiLU:
  sigma + z sigma'; GELU: Phi + z phi; tanh-GELU: sigma(2u) + z 2u' sigma'(2u)); large only
  near a zero of df, where every formula cancels.
"""
import csv
import math
import decimal
from decimal import Decimal as D
from pathlib import Path

decimal.getcontext().prec = 80
decimal.getcontext().Emin = decimal.MIN_EMIN      # e^-(7e10) is still a number here
decimal.getcontext().Emax = decimal.MAX_EMAX


def pi():
    # Machin: pi = 16 atan(1/5) - 4 atan(1/239), atan by its series.
    def atan_inv(n):
        total, term, k, sign = D(0), D(1) / n, 1, 1
        while term > D(10) ** -90:
            total += sign * term / k
            term /= n * n
            k += 2
            sign = -sign
        return total
    return 16 * atan_inv(5) - 4 * atan_inv(239)


PI = pi()
SQRT2 = D(2).sqrt()
C = (2 / PI).sqrt()                               # tanh-GELU's sqrt(2 / pi)
A = D("0.044715")


def sigmoid(w):
    e = (-abs(w)).exp()
    return 1 / (1 + e) if w >= 0 else e / (1 + e)


def sigmoid_slope(w):
    e = (-abs(w)).exp()
    return e / ((1 + e) * (1 + e))


def erfc(x, series=None):
    # x < 4: 1 - erf(x), erf by its Taylor series at 80 digits (terms up to e^16: 7 digits
    # lost). x >= 4: the continued fraction e^-x^2 / sqrt(pi) / (x + (1/2)/(x + 1/(x + ...))),
    # evaluated from 400 levels down. x < 0: erfc(x) = 2 - erfc(-x).
    if x < 0:
        return 2 - erfc(-x)
    if series if series is not None else x < 4:
        total, term, n = D(0), x, 0
        while abs(term) > D(10) ** -85:
            total += term / (2 * n + 1)
            n += 1
            term = -term * x * x / n
        return 1 - 2 / PI.sqrt() * total
    tail = D(0)
    for k in range(400, 0, -1):
        tail = (D(k) / 2) / (x + tail)
    return (-x * x).exp() / PI.sqrt() / (x + tail)


def row(name, z):
    z = D(float(z))                               # the exact value of the binary number
    if name == "identity":
        return z, D(1), D(1), D(1)
    if name == "relu":
        return max(z, D(0)), D(1) if z > 0 else D(0), D(1), D(1)
    if name == "sigmoid":
        s, ds = sigmoid(z), sigmoid_slope(z)
        return s, ds, abs(z * ds / s), D(1)
    if name == "silu":
        s, ds = sigmoid(z), sigmoid_slope(z)
        f, df = z * s, s + z * ds
        return f, df, abs(z * df / f) if f else D(0), (abs(s) + abs(z * ds)) / abs(df)
    if name == "gelu":
        cdf = erfc(-z / SQRT2) / 2
        pdf = (-z * z / 2).exp() / (2 * PI).sqrt()
        f, df = z * cdf, cdf + z * pdf
        return f, df, abs(z * df / f) if f else D(0), (abs(cdf) + abs(z * pdf)) / abs(df)
    if name == "gelu_tanh":
        two_u = 2 * C * (z + A * z * z * z)
        two_du = 2 * C * (1 + 3 * A * z * z)
        s, ds = sigmoid(two_u), sigmoid_slope(two_u)
        f, df = z * s, s + z * two_du * ds
        return f, df, abs(z * df / f) if f else D(0), (abs(s) + abs(z * two_du * ds)) / abs(df)
    raise ValueError(name)


# float32 numbers: the tails of both dtypes, the region near 0, and the largest float32.
Z = ["-1e4", "-745", "-700", "-200", "-104", "-100", "-89", "-88", "-60", "-50", "-40", "-38",
     "-35", "-30", "-25", "-20", "-17", "-15", "-14", "-13", "-12", "-10", "-9", "-8", "-7",
     "-6", "-5", "-4", "-3", "-2.5", "-2", "-1.75", "-1.5", "-1.25", "-1", "-0.875", "-0.75",
     "-0.5", "-0.25", "-0.125", "-0.0009765625", "-9.313225746154785e-10", "0",
     "9.313225746154785e-10", "0.0009765625", "0.125", "0.25", "0.5", "0.75", "1", "1.25",
     "1.5", "2", "3", "4", "5", "6", "8", "10", "12", "15", "17", "20", "30", "40", "60",
     "89", "100", "700", "1e4", "3.4028234663852886e38"]


def main():
    out = Path(__file__).with_name("activation_values.csv")
    with open(out, "w", newline="", encoding="utf-8") as fh:
        fh.write("# made by tests/data/make_activation_values.py (decimal, 80 digits)\n")
        writer = csv.writer(fh)
        writer.writerow(["activation", "z", "f", "df", "kappa_f", "kappa_df"])
        for name in ("identity", "relu", "sigmoid", "silu", "gelu", "gelu_tanh"):
            for z in Z:
                if name in ("gelu", "gelu_tanh") and abs(float(z)) > 1e5:
                    continue                      # z^3 and e^-z^2/2 of 3e38: not needed
                f, df, kf, kdf = row(name, z)
                writer.writerow([name, z] + [format(v, ".40e") for v in (f, df, kf, kdf)])
    # A self-check: the two routes to erfc agree where they meet, and with known values.
    assert abs(erfc(D(4), series=True) / erfc(D(4), series=False) - 1) < D("1e-40")
    assert abs(float(erfc(D(1))) / math.erfc(1) - 1) < 1e-15


if __name__ == "__main__":
    main()
