"""exercises/tour.py, the lecture path: it runs as a script with no display, draws its seven
figures, and the claims it prints hold (checked here on the printed numbers), its links to
derivations.md resolve, and the course's exercise list does not pick it up."""
import os
import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
TOUR = ROOT / "exercises" / "tour.py"


def run_the_tour(folder):
    env = {k: v for k, v in os.environ.items() if k not in ("DISPLAY", "MPLBACKEND")}
    env["PYTHONPATH"] = str(ROOT)
    return [sys.executable, str(TOUR)], {"cwd": folder, "env": env, "timeout": 120}


# Started early, on the other core (conftest.py, RealProcesses).
REAL_PROCESSES = {"tour_run": run_the_tour}


@pytest.fixture(scope="module")
def tour_run(real_processes):
    proc = real_processes.result("tour_run")
    out, err = proc.stdout.decode("utf-8"), proc.stderr.decode("utf-8")
    assert proc.returncode == 0, out + err
    return proc.folder, out


def number(out, pattern):
    found = re.search(pattern + r"\s*(-?[0-9.]+(?:e[-+][0-9]+)?)", out)
    assert found, pattern
    return float(found.group(1))


def test_the_tour_runs_headless_and_saves_one_figure_per_step(tour_run):
    folder, out = tour_run
    pngs = sorted(p.name for p in (folder / "runs" / "tour").glob("*.png"))
    assert [name[0] for name in pngs] == list("1234567"), pngs
    for name in pngs:
        assert (folder / "runs" / "tour" / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert out.count("figure: ") == 7


def test_the_claims_it_prints_hold(tour_run):
    out = tour_run[1]
    tol = 1e-12
    assert number(out, r"slot-by-slot sum against mlp_forward, rel_error") < tol
    assert number(out, r"A_j against A_j\^T, rel_error") < tol
    assert number(out, r"A_j = q_j\^T k_j, rel_error") < tol
    assert number(out, r"sym\(q_0\^T k_0\) has") == 2                      # two eigen-terms
    signs = re.search(r"non-zero eigenvalues: \[(\S+)\s+(\S+)\]", out).groups()
    assert float(signs[0]) * float(signs[1]) < 0                            # one of each sign
    assert number(out, r"gated identity \(Bilinear\) against rank-1 identity, rel_error") < tol
    assert number(out, r"rank-1 SiLU unit on the plane, \(q, k\) against \(k, q\), rel_error") < tol
    assert number(out, r"gated SiLU unit on the plane, \(q, k\) against \(k, q\), rel_error") > 1e-2
    # The symmetry table: rank-1 keeps all three for every sigma; the gated form as theory says.
    rows = {m.group(1): [float(v) for v in m.group(2).split()]
            for m in re.finditer(r"^symmetry: (\S+ \S+)\s+(.+)$", out, re.M)}
    acts = out.split("kept means")[1].splitlines()[1].split()
    assert acts == ["identity", "relu", "sigmoid", "silu", "gelu", "gelu_tanh"]
    for s in ("exchange", "inverse_scaling_pos", "inverse_scaling_neg"):
        assert max(rows[f"rank1_bilinear {s}"]) < 1e-10, s
    kept = {"exchange": {"identity"}, "inverse_scaling_pos": {"identity", "relu"},
            "inverse_scaling_neg": {"identity"}}
    for s, acts_kept in kept.items():
        for act, dev in zip(acts, rows[f"gated_mlp {s}"]):
            assert (dev < 1e-10) == (act in acts_kept), (s, act, dev)
    # What gating trades: each form keeps one gap (moves it far less than the other form does).
    moved = {(f, p): number(out, rf"trade: {f} SiLU, \|\|{p[0]}_j\|\|\^2 - \|\|{p[1]}_j\|\|\^2 "
                                 r"moved by at most")
             for f in ("rank-1", "gated") for p in ("qk", "kv")}
    assert moved["rank-1", "qk"] < 0.2 * moved["gated", "qk"]
    assert moved["gated", "kv"] < 0.2 * moved["rank-1", "kv"]
    counts = dict(re.findall(r"count: (\S+ \S+), one unit: (\d+)", out))
    assert counts == {"rank1_bilinear silu": "1", "gated_mlp silu": "1",
                      "double_gated_mlp silu": "0", "gated_mlp relu": "2"}
    # The real model (results/smollm2): every layer far from exchange-symmetric; (k, v) the
    # balanced pair.
    assert number(out, r"exchange deviation") > 0.1
    qk = number(out, r"median \|balance\| over layers, \(q, k\)")
    kv = number(out, r"\(k, v\)")
    assert kv < 0.5 * qk


def test_prose_cites_the_paper_and_its_links_resolve():
    text = TOUR.read_text(encoding="utf-8")
    assert "arXiv 2606.22172" in text and "Gated MLPs as Symmetry-Broken Rank-1 Bilinear" in text
    headings = re.findall(r"^#{2,4} (.+)$", (ROOT / "derivations.md").read_text(encoding="utf-8"),
                          re.M)
    anchors = {re.sub(r"[^\w\- ]", "", h.lower()).replace(" ", "-") for h in headings}
    links = re.findall(r"\(\.\./derivations\.md#([^)]+)\)", text)
    assert len(links) >= 8 and [a for a in links if a not in anchors] == []


def test_cells_are_py_percent_and_each_step_draws_one_figure():
    text = TOUR.read_text(encoding="utf-8")
    cells = re.split(r"^# %%", text, flags=re.M)[1:]
    markdown = [c for c in cells if c.startswith(" [markdown]")]
    code = [c for c in cells if not c.startswith(" [markdown]")]
    steps = [c for c in markdown if re.search(r"^# ## [1-7]\. ", c, re.M)]
    assert len(steps) == 7 and len(code) >= 8
    assert [len(re.findall(r"^show\(fig, ", c, re.M)) for c in code] == [0] + [1] * 7
    for c in markdown:                          # prose states no measured number by hand
        prose = re.sub(r"arXiv \d{4}\.\d{4,5}", "", c)
        assert not re.search(r"\d\.\d{2,}|\de-\d", prose), prose[:80]


def test_the_course_does_not_grade_the_tour():
    # The files the checker grades, one per exercise of the course's table, exist in
    # exercises/, and the tour is not one of them.
    from exercises.grading.checker import file_name
    from exercises.course import COURSE
    graded = [file_name(number, exercise) for number, exercise in enumerate(COURSE, start=1)]
    assert graded and all((TOUR.parent / name).is_file() for name in graded)
    assert TOUR.name not in graded
