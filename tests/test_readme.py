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
