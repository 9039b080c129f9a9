"""A backward pass is judged by how its cost grows with the width d (issue 37, part 4): reverse
mode costs a few forwards whatever d; every way of differencing the forward costs forwards in
proportion to d. Backwards that difference the forward (a column of x for all tokens at once
and a column of Q, of K, for all units at once; complex steps; every entry) are WRONG with the
growth in the cost row's message, and their gradient rows earn nothing; the solutions pass.

The hostile backwards are written here, appended to a copy of the solution in a temporary
folder (the solution's own backward redefined); nothing reads the files a student edits, and
without exercises/solutions/ (a handout) the tests that need it skip. The verdicts do not
depend on the machine's load: the cost row's limit (common.GROWTH_LIMIT) sits between the
solutions' growth and the differences' with a margin of about 2 on each side, measured at
load 4 to 10 on 2 cores (docs/course.md, "A backward pass is judged by how its cost grows")."""
import re
from pathlib import Path

import pytest

from exercises.grading import checker, gradebook
from exercises.checks import common
from exercises.course import COURSE, POINTS
from exercises.grading.release import solution_file

ROWS = [checker.row_count(n, e) for n, e in enumerate(COURSE, start=1)]   # counted

SOLVED = checker.SOLUTIONS_FOLDER.is_dir()
needs_solutions = pytest.mark.skipif(not SOLVED, reason="no exercises/solutions/ (a handout)")
BACKWARD = {9: ("unit_forward", "unit_backward", ()),                 # forward, backward, extra
            15: ("temperature_forward", "temperature_backward", ("beta",))}

COLOURED = '''

def {backward}(dy, x, Q, K, V, {extra}variant):
    """Coloured central differences of {forward}: one column of x for every token at once, one
    column of Q (of K) for every unit at once, the hidden layer read with V = identity:
    about 6 d + 1 forwards, no derivation."""
    inputs = {{"x": x, "Q": Q, "K": K, "V": V{extra_items}}}
    eye, step = np.eye(V.shape[0]), 1e-5

    def f(**changed):
        return {forward}(**(inputs | changed), variant=variant)
    dh = dy @ V.T                                            # (N, m)
    grads = {{"V": f(V=eye).T @ dy}}                           # the hidden layer, (N, m)
    for name, value in inputs.items():
        if name == "V":
            continue
        grad = np.zeros_like(value)
        for j in range(value.shape[1]) if value.ndim == 2 else [slice(None)]:
            e = np.zeros_like(value)
            e[..., j] = step                   # a column; a parameter (m,): every unit's
            if name == "x":                                  # tokens are independent
                grad[:, j] = np.sum((f(x=x + e) - f(x=x - e)) * dy, axis=1) / (2 * step)
            else:                                            # units are, in the hidden layer
                moved = (f(**{{name: value + e, "V": eye}}) - f(**{{name: value - e, "V": eye}}))
                grad[..., j] = np.sum(moved / (2 * step) * dh, axis=0)
        grads[name] = grad
    return grads
'''

COMPLEX_STEP = '''

def _analytic(name, z):
    """The activation `name` by a formula that holds for complex z."""
    s = 1 / (1 + np.exp(-z))
    return {"identity": z, "sigmoid": s, "silu": z * s,
            "gelu_tanh": 0.5 * z * (1 + np.tanh(np.sqrt(2 / np.pi) * (z + 0.044715 * z ** 3)))
            }[name]


def _complex_forward(x, Q, K, V, variant):
    G, L = (Q, K) if variant["gate"] == "Q" else (K, Q)
    g = _analytic(variant["sigma"], x @ G.T) ** variant["power"]
    return (g * _analytic(variant["branch"], x @ L.T)) @ V


def unit_backward(dy, x, Q, K, V, variant):
    """Complex steps, Im f(p + i h e) / h, along one column for every token (unit) at once:
    about 3 d + 1 complex forwards, no derivation."""
    h, eye = 1e-30, np.eye(V.shape[0])
    dh = dy @ V.T
    dx, dQ, dK = np.zeros_like(x), np.zeros_like(Q), np.zeros_like(K)
    for j in range(x.shape[1]):
        e = np.zeros(x.shape, complex)
        e[:, j] = 1j * h
        dx[:, j] = np.sum(_complex_forward(x + e, Q, K, V, variant).imag * dy, axis=1) / h
        e = np.zeros(Q.shape, complex)
        e[:, j] = 1j * h
        dQ[:, j] = np.sum(_complex_forward(x, Q + e, K, eye, variant).imag * dh, axis=0) / h
        dK[:, j] = np.sum(_complex_forward(x, Q, K + e, eye, variant).imag * dh, axis=0) / h
    return {"x": dx, "Q": dQ, "K": dK, "V": _complex_forward(x, Q, K, eye, variant).T @ dy}
'''

EVERY_ENTRY = '''

def unit_backward(dy, x, Q, K, V, variant):
    """Central differences of unit_forward, entry by entry: two forwards per entry."""
    inputs, grads = {"x": x, "Q": Q, "K": K, "V": V}, {}
    for name, value in inputs.items():
        grad = np.zeros_like(value)
        for i in np.ndindex(value.shape):
            for sign in (1.0, -1.0):
                moved = value.copy()
                moved[i] += sign * 1e-5
                grad[i] += sign * np.sum(unit_forward(**(inputs | {name: moved}),
                                                      variant=variant) * dy) / 2e-5
        grads[name] = grad
    return grads
'''


def name(number):
    return checker.file_name(number, COURSE[number - 1])


def analytic_seed(number):
    """The first seed whose variant's activations all have a complex formula here (no erf)."""
    return next(seed for seed in range(100) if {
        checker.own_variant(COURSE[number - 1], number, seed)[k] for k in ("sigma", "branch")}
        <= {"identity", "sigmoid", "silu", "gelu_tanh"})


def hostile_text(kind, number):
    """The solution of exercise `number`, its backward then redefined by the kind's."""
    text = solution_file(COURSE[number - 1]).read_text(encoding="utf-8")
    if kind == "coloured":
        forward, backward, extra = BACKWARD[number]
        return text + COLOURED.format(forward=forward, backward=backward,
                                      extra="".join(f"{e}, " for e in extra),
                                      extra_items="".join(f", {e!r}: {e}" for e in extra))
    return text + {"complex step": COMPLEX_STEP, "every entry": EVERY_ENTRY}[kind]


CASES = {"coloured 9": ("coloured", 9), "coloured 15": ("coloured", 15),
         "complex step 9": ("complex step", 9), "every entry 9": ("every entry", 9)}
# The solutions themselves: conftest.py's `solutions`, graded once for the suite.


def graded(case):
    """checker.run_exercise of the case's folder (a module-level function: parallel forks),
    with a time limit of 3 s a call (a backward that differences is ended there, sooner; the
    child's start and the other rows take well under it)."""
    number, folder, seed = case
    return checker.run_exercise(number, COURSE[number - 1], folder, 3.0, seed=seed)


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    """{case: its Result}: each file in a folder of its own, two checks at a time."""
    top = tmp_path_factory.mktemp("backward-cost")
    cases = []
    for key, (kind, number) in CASES.items():
        folder = top / key.replace(" ", "-")
        folder.mkdir()
        (folder / name(number)).write_text(hostile_text(kind, number), encoding="utf-8")
        cases.append((number, folder, analytic_seed(number) if kind == "complex step" else 3))
    return dict(zip(CASES, checker.parallel(graded, cases, 2)))


def cost_row(result):
    return next(row for row in result.rows if row.check.endswith(": cost in forwards"))


def backward_rows(result):
    """The rows of the backward (its topic): its gradients and its cost."""
    return [row for row in result.rows if row.topic == cost_row(result).topic]


def points_share(result):
    """The points of the rows that are not the backward's: the most a backward that fails
    its cost row may earn."""
    number = result.number
    return POINTS[number - 1] * (ROWS[number - 1] - len(backward_rows(result))) / ROWS[number - 1]


def points(result):
    student = gradebook.Graded("s", "n", None, 0, [None] * (result.number - 1) + [result])
    return student.points(result.number)


GROWN = (r"your backward cost [\d.,]+ forwards at d = {0} and (more than )?[\d,]+ at "
         r"d = {1} \((over )?(×(\d+)|stopped at the time limit)\): it grows with the width, "
         r"as differences do; reverse mode's cost does not").format(*common.COST_WIDTHS)


@needs_solutions
@pytest.mark.parametrize("case", ["coloured 9", "coloured 15", "complex step 9"])
def test_a_backward_that_differences_by_columns_is_wrong_with_its_growth(case, results):
    result = results[case]
    cost = cost_row(result)
    found = re.fullmatch(GROWN, cost.message)
    assert cost.verdict == "WRONG" and found, (case, cost)
    assert found.group(1) or int(found.group(4)) > common.GROWTH_LIMIT, cost   # or stopped
    gradients = [row for row in backward_rows(result) if row is not cost]
    assert gradients and all(row.verdict == "WRONG" and row.message.startswith("not counted")
                             for row in gradients), [(r.check, r.message) for r in gradients]
    forward = [row for row in result.rows if row.topic.endswith("forward")]
    assert forward and all(row.verdict == "ok" for row in forward), forward
    assert result.status == "failing"
    assert points(result) <= points_share(result) + 1e-12
    assert "derivations.md" in checker.advice(result)[0], checker.advice(result)


@needs_solutions
def test_a_backward_of_every_entry_earns_at_most_the_share_of_the_other_rows(results):
    result = results["every entry 9"]
    cost = cost_row(result)
    assert cost.verdict == "WRONG" and re.match(
        r"your backward cost more than [\d,]+ forwards at d = \d+: reverse mode costs a few",
        cost.message), cost
    assert points(result) == points_share(result) > 0, (points(result), result.rows)
    assert all(row.verdict == "ok" for row in result.rows if row.topic != cost.topic)


@needs_solutions
@pytest.mark.parametrize("number", [9, 15])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_the_solutions_pass_the_cost_row(number, seed, solutions):
    result = solutions[number, seed]
    cost = cost_row(result)
    assert cost.verdict == "ok" and result.status == "done", (number, seed, cost)
    grew = re.fullmatch(r"([\d.,]+) → ([\d.,]+) forwards \(×([\d.]+)\)", cost.got)
    assert grew and float(grew[3]) <= common.GROWTH_LIMIT, cost.got   # the growth shown
    assert points(result) == POINTS[result.number - 1]
