"""The figures: every PNG and CSV is written, and the data agree with theory where it is exact."""
import csv
import sys
from pathlib import Path

import numpy as np
import pytest

import bilinear_numpy as bn
import claims
from experiments import cli
from experiments import figures as fg

ROOT = Path(__file__).resolve().parent.parent
QUICK = fg.QUICK
NONLINEAR = [a for a in bn.ACTIVATIONS if a != "identity"]


@pytest.fixture(scope="module")
def drawn(tmp_path_factory):
    """`figures --quick --panels`, run once: the folder written, each figure's matplotlib
    Figure (kept as the command draws it) and a renderer for it, and the rows the command
    computed for it, by name."""
    out = tmp_path_factory.mktemp("figures")
    figs, data = {}, {}

    def keeping(name, compute, draw):
        def compute_and_keep(**sizes):
            data[name] = compute(**sizes)
            return data[name]

        def draw_and_keep(rows, path):
            figs[name] = draw(rows, path)
            return figs[name]
        return compute_and_keep, draw_and_keep

    with pytest.MonkeyPatch.context() as mp:
        for name, (compute, draw) in fg.FIGURES.items():
            mp.setitem(fg.FIGURES, name, keeping(name, compute, draw))
        assert cli.main(["figures", "--quick", "--panels", "--out", str(out)]) == 0
    assert sorted(figs) == sorted(data) == sorted(fg.FIGURES)
    renderers = {name: _renderer(fig) for name, fig in figs.items()}
    return out, figs, renderers, data


def test_every_figure_and_csv_is_written(drawn):
    tmp_path = drawn[0]
    for name in fg.FIGURES:
        png = (tmp_path / f"{name}.png").read_bytes()
        assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 20_000, name
        with (tmp_path / f"{name}.csv").open(encoding="utf-8", newline="") as f:
            rows = list(csv.DictReader(f))
        assert rows and list(rows[0]) == ["panel", "series", "x", "y"], name
        assert all(np.isfinite(float(r["y"])) for r in rows), name
    # The CSV holds exactly the numbers of the data function.
    with (tmp_path / "fig1_exchange.csv").open(encoding="utf-8", newline="") as f:
        written = [float(r["y"]) for r in csv.DictReader(f)]
    assert written == [r["y"] for r in fg.exchange_data(**QUICK["fig1_exchange"])]


def test_exchange_symmetric_flat_gated_broken():
    rows = fg.exchange_data(**QUICK["fig1_exchange"])
    acts, sym = fg.pick(rows, "deviation", "rank1_bilinear")
    assert acts == list(bn.ACTIVATIONS) and np.all(sym <= 1e-12)
    _, gated = fg.pick(rows, "deviation", "gated_mlp")
    assert gated[acts.index("identity")] <= 1e-12
    assert all(gated[acts.index(a)] > 1e-3 for a in NONLINEAR)
    # sigma(z)/z is constant for the linear sigma only.
    z, ratio = fg.pick(rows, "sigma_over_z", "identity")
    assert 0 not in z and np.ptp(ratio) <= 1e-12
    for act in NONLINEAR:
        assert np.ptp(fg.pick(rows, "sigma_over_z", act)[1]) > 0.1, act


def test_inverse_scaling_curves():
    rows = fg.inverse_scaling_data(**QUICK["fig2_inverse_scaling"])
    for panel in ("alpha>0", "alpha<0"):
        for act in bn.ACTIVATIONS:
            assert np.all(fg.pick(rows, panel, f"rank1_bilinear {act}")[1] <= 1e-12)
        assert np.all(fg.pick(rows, panel, "gated_mlp identity")[1] <= 1e-12)
    assert np.all(fg.pick(rows, "alpha>0", "gated_mlp relu")[1] <= 1e-12)    # flat, alpha > 0
    assert np.all(fg.pick(rows, "alpha<0", "gated_mlp relu")[1] > 1e-3)      # not, alpha < 0
    alpha, dev = fg.pick(rows, "alpha>0", "gated_mlp silu")
    away_from_1 = ~np.isclose(alpha, 1.0)
    assert np.all(dev[away_from_1] > 1e-3) and np.all(dev[~away_from_1] <= 1e-12)


def test_one_step_changes_c_by_exactly_eta_squared_times_gradient_difference():
    X, T, _ = fg.teacher_task(seed=3, n_tokens=32)
    eta = 0.1
    for name, act in (("rank1_bilinear", "silu"), ("gated_mlp", "relu")):
        form = bn.get_formulation(name)
        p = form.init(np.random.default_rng(4), 8, 5, 4)
        y, cache = form.forward(X, **p, act=act)
        g = form.backward((y - T) / len(X), cache)
        predicted = eta ** 2 * (np.sum(g["Q"] ** 2, axis=1) - np.sum(g["K"] ** 2, axis=1))
        trained = fg.train_gd(name, act, p, X, T, eta, 1, watch=fg.qk_norm_gap)[2]
        assert np.allclose(trained[1] - trained[0], predicted, rtol=1e-9, atol=1e-14), name


@pytest.fixture(scope="module")
def drift_rows():
    """conservation_data at the QUICK sizes with four drift step counts (eta <= 0.04), computed
    once for the two tests below."""
    return fg.conservation_data(**(QUICK["fig3_conservation"]
                                   | {"drift_steps": (25, 50, 100, 200)}))


def test_conservation_drift_slopes(drift_rows):
    rows = drift_rows
    kept, broken = ("rank1_bilinear silu", "gated_mlp relu"), "gated_mlp silu"
    for series in kept:
        assert abs(fg.loglog_slope(*fg.pick(rows, "one step", series)) - 2) < 0.02, series
        assert abs(fg.loglog_slope(*fg.pick(rows, "fixed time", series)) - 1) < 0.1, series
    assert abs(fg.loglog_slope(*fg.pick(rows, "one step", broken)) - 1) < 0.1
    assert abs(fg.loglog_slope(*fg.pick(rows, "fixed time", broken))) < 0.2
    # The traces: a kept symmetry moves c_j far less than the broken one.
    def total_move(series):
        units = [s for s in fg.series_names(rows, "trace") if s.startswith(series)]
        return max(np.ptp(fg.pick(rows, "trace", s)[1]) for s in units)
    assert max(total_move(s) for s in kept) < 0.25 * total_move(broken)


def test_tied_factors_stay_tied_exactly_where_theory_says():
    rows = fg.tied_data(**(QUICK["fig4_tied_factors"] | {"steps": 30}))
    for series in ("rank1_bilinear silu", "gated_mlp identity", "gated_mlp relu"):
        assert np.all(fg.pick(rows, "distance", series)[1] <= 1e-12), series
    for series in ("gated_mlp silu", "gated_mlp gelu", "gated_mlp sigmoid"):
        _, dist = fg.pick(rows, "distance", series)
        assert dist[0] == 0 and dist[-1] > 1e-3 and dist[-1] > dist[len(dist) // 2], series


def test_rank_truncation_matches_eckart_young():
    rows = fg.rank_data(**QUICK["fig5_rank"])
    d = QUICK["fig5_rank"]["d"]
    for unit in fg.series_names(rows, "spectrum trained"):
        _, lam = fg.pick(rows, "spectrum trained", unit)
        assert np.all(np.diff(lam) <= 0)                                   # |lambda| sorted
        _, err = fg.pick(rows, "truncation matrix", unit)
        tail = np.sqrt([np.sum(lam[r:] ** 2) / np.sum(lam ** 2) for r in range(1, d + 1)])
        assert np.allclose(err, tail, rtol=1e-8, atol=1e-12), unit
    _, out_err = fg.pick(rows, "truncation output", "layer output")
    assert out_err[-1] <= 1e-12 and out_err[0] > 1e-3                      # r = d is exact
    ranks, teacher = fg.pick(rows, "students", "teacher truncated")
    assert ranks[-1] == d and teacher[-1] <= 1e-12 and teacher[0] > 1e-2
    for series in ("rank_r_bilinear identity", "gated_rank_r silu"):
        assert len(fg.pick(rows, "students", series)[1]) == len(ranks)
    # The best function (derivations.md, 6.4) is exact at r = d and no worse than the
    # Frobenius-closest score matrix elsewhere (up to the sampling of the held-out tokens).
    _, best = fg.pick(rows, "students", "teacher best function")
    assert best[-1] <= 1e-12 and np.all(best <= 1.05 * teacher + 1e-12)


def test_a_factor_pair_holds_one_positive_and_one_negative_eigen_term():
    rng = np.random.default_rng(0)
    for r in (1, 2, 3):
        Q, K = rng.standard_normal((1, 7, r)), rng.standard_normal((1, 7, r))
        lam = claims.eigen_factors(Q @ K.transpose(0, 2, 1))[2]                # sym(Q K^T)
        assert np.sum(lam > 1e-10) <= r and np.sum(lam < -1e-10) <= r
        assert np.all(fg.signed_truncation(lam, r) | (np.abs(lam) <= 1e-10))
    lam = np.array([[3.0, -2.0, 1.0, -0.5]])
    assert fg.signed_truncation(lam, 1).tolist() == [[True, True, False, False]]
    assert fg.signed_truncation(lam, 2).all()


def test_bad_input_is_refused():
    with pytest.raises(ValueError, match="n_z"):
        fg.exchange_data(n_z=0)
    with pytest.raises(ValueError, match="units"):
        fg.conservation_data(units=9, m=8)
    with pytest.raises(ValueError, match="eta"):
        fg.train_gd("gated_mlp", "silu", {}, np.zeros((1, 2)), np.zeros((1, 2)), 0.0, 1)
    X, T, _ = fg.teacher_task(n_tokens=4)
    p = bn.get_formulation("gated_mlp").init(np.random.default_rng(0), 8, 3, 4)
    with pytest.raises(ValueError, match="T: expected"):
        fg.train_gd("gated_mlp", "silu", p, X, T[:, 0], 0.1, 1)           # no broadcasting
    with pytest.raises(ValueError, match="unknown figures"):
        fg.make_figures("unused", names=["fig9"])
    with pytest.raises(ValueError, match="no rows"):
        fg.pick([], "trace")


def without_matplotlib(folder):
    code = ("import sys; sys.modules['matplotlib'] = None\n"
            "from experiments import figures\n"
            "rows = figures.exchange_data(n_z=4)\n"
            "assert rows and 'matplotlib.pyplot' not in sys.modules\n")
    return [sys.executable, "-c", code], {"cwd": ROOT, "timeout": 60}


# Started early, on the other core (conftest.py, RealProcesses).
REAL_PROCESSES = {"no_matplotlib_run": without_matplotlib}


@pytest.fixture
def no_matplotlib_run(real_processes):
    return real_processes.result("no_matplotlib_run")


def test_data_functions_need_no_matplotlib(no_matplotlib_run):
    assert no_matplotlib_run.returncode == 0, no_matplotlib_run.stderr.decode()


def test_report_says_where_the_figures_are(verify_report):
    lines = verify_report[1]                  # verify's report, measured once (conftest.py)
    assert "python bilinear_numpy.py figures" in lines[-1] and "figures/" in lines[-1]


def test_hessian_zero_eigenvalues_equal_the_symmetry_count(drawn):
    # Figure 6 (derivations.md, 5.8): at a minimum, one zero eigenvalue per continuous
    # symmetry, and a wide gap to the others. The rows `figures --quick` computed (QUICK
    # sizes), read here rather than computed again.
    rows = drawn[3]["fig6_hessian"]
    for name, act in fg.HESSIAN_CASES:
        series = f"{name} {act}"
        _, (measured, theory) = fg.pick(rows, "zeros", series)
        assert measured == theory == claims.symmetry_dimension(name, act, 5, 2, 3), series
        _, relative = fg.pick(rows, "spectrum", series)
        zeros = int(measured)
        assert np.all(relative[:zeros] < 1e-10) and relative[zeros] > 1e-6, series
        assert fg.pick(rows, "gradient", series)[1][0] < 1e-9
    expected = {"rank1_bilinear silu": 2, "gated_mlp silu": 2, "double_gated_mlp silu": 0,
                "gated_mlp relu": 4}                      # m = 2 units: 1, 1, 0, 2 per unit
    assert {s: fg.pick(rows, "zeros", s)[1][1] for s in expected} == expected


def test_conservation_figure_shows_swiglu_conserved_pair(drift_rows):
    # SwiGLU conserves ||k_j||^2 - ||v_j||^2: one step changes it at second order in eta.
    rows = drift_rows
    assert abs(fg.loglog_slope(*fg.pick(rows, "one step", fg.KV_SERIES)) - 2) < 0.02
    assert abs(fg.loglog_slope(*fg.pick(rows, "fixed time", fg.KV_SERIES)) - 1) < 0.2


# -----------------------------------------------------------------------------
# How the figures read: properties of the drawn Figure objects (experiments/figures.py,
# the rules above its drawing section)
# -----------------------------------------------------------------------------


def _renderer(fig):
    # A renderer for the layout fig.savefig drew, the PNG's: no second draw (it would take
    # as long again, and constrained layout, run again, moves the axes by up to 0.1 pixel).
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    return FigureCanvasAgg(fig).get_renderer()


def _reading_order(fig):
    # The titled axes, row by row (top first; tops within 30 pixels are one row), left to right.
    axes = [ax for ax in fig.get_axes() if ax.get_title()]
    axes.sort(key=lambda ax: -ax.get_window_extent().y1)
    rows = []
    for ax in axes:
        if rows and abs(rows[-1][0].get_window_extent().y1 - ax.get_window_extent().y1) < 30:
            rows[-1].append(ax)
        else:
            rows.append([ax])
    return [ax for row in rows for ax in sorted(row, key=lambda a: a.get_window_extent().x0)]


@pytest.mark.parametrize("name", list(fg.FIGURES))
def test_panels_are_lettered_in_reading_order(drawn, name):
    fig = drawn[1][name]
    titles = [ax.get_title() for ax in _reading_order(fig)]
    if len(titles) > 1:
        letters = [t[:3] for t in titles]
        assert letters == [f"({chr(97 + i)})" for i in range(len(titles))], titles
    # figures --panels wrote each panel alone, one file per letter, in the same order; a
    # one-panel figure (4, 6) its one panel too, at the slide's size.
    written = sorted((drawn[0] / "panels").glob(f"{name}_*.png"))
    assert [p.stem for p in written] == [f"{name}_{chr(97 + i)}" for i in range(len(titles))]
    for path in written:
        assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", path


def _display_points(line, ax):
    # The line's points in pixels (segments sampled every few pixels), inside its axes only.
    xy = line.get_transform().transform(np.asarray(line.get_xydata(), dtype=float))
    xy = xy[np.all(np.isfinite(xy), axis=1)]
    if line.get_linestyle() not in ("None", "", " ") and len(xy) > 1:
        pieces = [np.linspace(a, b, 2 + int(np.hypot(*(b - a)) // 3)) for a, b in zip(xy, xy[1:])]
        xy = np.concatenate(pieces)
    box = ax.get_window_extent()
    inside = ((xy[:, 0] >= box.x0) & (xy[:, 0] <= box.x1) & (xy[:, 1] >= box.y0)
              & (xy[:, 1] <= box.y1))
    return xy[inside]


@pytest.mark.parametrize("name", list(fg.FIGURES))
def test_no_legend_over_data(drawn, name):
    fig, renderer = drawn[1][name], drawn[2][name]
    legends = [ax.get_legend() for ax in fig.get_axes() if ax.get_legend()]
    assert legends, name
    points = [_display_points(line, ax) for ax in fig.get_axes() for line in ax.get_lines()]
    points += [ax.transData.transform(c.get_offsets()) for ax in fig.get_axes()
               for c in ax.collections if len(c.get_offsets())]
    points = np.concatenate([p for p in points if len(p)])
    for legend in legends:
        box = legend.get_window_extent(renderer)
        over = ((points[:, 0] > box.x0 + 1) & (points[:, 0] < box.x1 - 1)
                & (points[:, 1] > box.y0 + 1) & (points[:, 1] < box.y1 - 1))
        assert not over.any(), f"{name}: the legend at {box} covers data at {points[over][:3]}"


def _meaning(text):
    # "(e) rank-1 bilinear, SiLU: slope 2.00" -> "rank-1 bilinear, SiLU"; "unit 3" -> "unit"
    text = " ".join(text.split())
    if len(text) > 3 and text[0] == "(" and text[2] == ")":
        text = text[4:]
    return text.split(":")[0].rstrip("0123456789 ")


@pytest.mark.parametrize("name", list(fg.FIGURES))
def test_one_meaning_per_colour(drawn, name):
    from matplotlib.colors import to_hex
    fig = drawn[1][name]
    meanings = {}                                    # colour -> the meanings it is given
    for ax in fig.get_axes():
        if ax.get_legend():
            legend = ax.get_legend()
            for handle, text in zip(legend.legend_handles, legend.get_texts()):
                meanings.setdefault(to_hex(handle.get_color()), set()).add(
                    _meaning(text.get_text()))
        if to_hex(ax.title.get_color()) != "#000000":                 # a coloured title
            meanings.setdefault(to_hex(ax.title.get_color()), set()).add(
                _meaning(ax.get_title()))
    assert meanings, name
    assert all(len(m) == 1 for m in meanings.values()), meanings      # one meaning per colour
    colour_of = {}
    for colour, (meaning,) in meanings.items():
        colour_of.setdefault(meaning, set()).add(colour)
    assert all(len(c) == 1 for c in colour_of.values()), colour_of    # one colour per meaning


def _solid(line):
    return line.get_linestyle() == "-"


@pytest.mark.parametrize("name", list(fg.FIGURES))
def test_no_curve_hidden_under_another(drawn, name):
    # Two curves of different colours that run together over a stretch of points: the one
    # on top lets the one beneath show (it is dashed, dotted or markers only, or marks other
    # points or another shape), or the one beneath is at least 2 points wider.
    from matplotlib.colors import to_hex
    fig = drawn[1][name]
    for ax in fig.get_axes():
        lines = sorted(ax.get_lines(), key=lambda line: line.get_zorder())   # stable: drawn order
        for i, below in enumerate(lines):
            for above in lines[i + 1:]:
                xb, xa = below.get_xydata(), above.get_xydata()
                if (to_hex(below.get_color()) == to_hex(above.get_color()) or len(xb) < 2
                        or xb.shape != xa.shape or not np.allclose(xb[:, 0], xa[:, 0])):
                    continue
                yb = ax.transData.transform(np.asarray(xb, dtype=float))[:, 1]
                ya = ax.transData.transform(np.asarray(xa, dtype=float))[:, 1]
                if np.mean(np.abs(yb - ya) < 1.5) < 0.3:
                    continue                                   # they do not run together
                shows = (not _solid(above) or below.get_linewidth() >= above.get_linewidth() + 2
                         or (above.get_marker() not in ("None", "", None)
                             and (above.get_marker() != below.get_marker()
                                  or above.get_markevery() != below.get_markevery())))
                assert shows, (f"{name}, {ax.get_title()!r}: {above.get_label()!r} hides "
                               f"{below.get_label()!r}")
