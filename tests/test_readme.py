"""The README's examples run, and its commands match what CI runs."""
import contextlib
import io
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text(encoding="utf-8")


def test_python_examples_run():
    blocks = re.findall(r"```python\n(.*?)```", README, re.S)
    assert blocks, "README has no Python example"
    for code in blocks:
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            exec(compile(code, "README.md", "exec"), {})
        assert "WRONG" not in out.getvalue()


def test_ci_runs_the_readme_test_command():
    bash_blocks = re.findall(r"```bash\n(.*?)```", README, re.S)
    assert "python -m pytest" in bash_blocks[1]
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    assert "pip install --quiet -r requirements.txt" in ci
    assert "\npython -m pytest\n" in ci
    assert "pip install -r requirements.txt" in bash_blocks[0]


def test_every_formulation_is_in_the_readme_table():
    import bilinear_numpy as bn
    for name in bn.FORMULATIONS:
        assert f"| `{name}`" in README


def test_thesis_paragraph_agrees_with_the_law_table():
    # The README's opening claim, against conservation_law_table (verify, section 6): a
    # smooth gated unit and a rank-1 unit keep 1 flat direction and 1 law each; a rank-2
    # bilinear unit has 6 flat directions and 4 laws.
    start = README.index("What gating breaks, counted precisely")
    thesis = README[start:README.index("\n## ", start)]
    thesis = " ".join(thesis.split())
    assert "1 and 1 per unit" in thesis
    flat, laws = map(int, re.search(r"rank-2 bilinear unit has (\d+) flat directions and (\d+) laws",
                                    thesis).groups())
    import claims
    rows = claims.conservation_law_table()
    smooth = ("sigmoid", "silu", "gelu", "gelu_tanh")
    for r in rows:
        per_unit = r["sizes"][1]
        if r["formulation"] in ("rank1_bilinear", "gated_mlp") and r["activation"] in smooth:
            assert r["flat"] == r["laws"] == per_unit, r
        if r["formulation"] == "rank_r_bilinear" and r["sizes"] == (4, 1, 2, 2) and r["activation"] in smooth:
            assert (r["flat"], r["laws"]) == (flat, laws) == (6, 4), r
    # Its conditions: a smooth sigma and 2r <= d (at d = 4, r = 2); ReLU and the identity, 7 and 5.
    assert "smooth σ and 2r ≤ d a rank-2 bilinear unit" in thesis
    flat_ph, laws_ph = map(int, re.search(r"ReLU or the identity it has (\d+) and (\d+)", thesis).groups())
    for r in rows:
        if (r["formulation"] == "rank_r_bilinear" and r["sizes"] == (4, 1, 2, 2)
                and r["activation"] in ("relu", "identity")):
            assert (r["flat"], r["laws"]) == (flat_ph, laws_ph), r
