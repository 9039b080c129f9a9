"""derivations.md cannot drift from the code: every cited test exists, every formulation,
symmetry and consequence is cited, and the mathematics renders on GitHub.

The checks are plain functions of the text (each returns a list of problems), so the
last tests can feed them bad text and see them fail.
"""
import ast
import re
from pathlib import Path

import pytest

import bilinear_numpy as bn
import claims

ROOT = Path(__file__).resolve().parent.parent
DOC = (ROOT / "derivations.md").read_text(encoding="utf-8")

CITATION = re.compile(r"tests/((?:\w+/)*test_\w*\.py)::(test_\w+)")
TEMPLATE = "tests/FILE.py::TEST_NAME"     # how the introduction describes a citation
HEADING = re.compile(r"^(#{2,3}) (.*)$", re.M)


# ----- reading the document ----------------------------------------------------------


def sections(text):
    """{heading title: body} for every '## ' and '### ' heading; a '## ' body runs to the
    next '## ' (so it holds its subsections), a '### ' body to the next heading."""
    heads = list(HEADING.finditer(text))
    out = {}
    for i, h in enumerate(heads):
        level = len(h.group(1))
        end = len(text)
        for later in heads[i + 1:]:
            if len(later.group(1)) <= level:
                end = later.start()
                break
        out[h.group(2).strip()] = text[h.end():end]
    return out


def citations(text):
    """[(file, test name)] in order of appearance."""
    return CITATION.findall(text)


def function_names(path):
    """Names of the module-level functions of a test file, read with ast (nothing is run)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return {node.name for node in tree.body
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))}


def missing_citations(text, root=ROOT):
    """Cited tests whose file or function does not exist, and anything written like a
    citation that pytest would not collect (a name not starting with test_, say)."""
    problems, cache = [], {}
    for written in re.findall(r"tests/[^\s`]*::[^\s`]*", text):
        if written != TEMPLATE and not CITATION.fullmatch(written):
            problems.append(f"{written}: not of the form tests/test_*.py::test_*")
    for file, name in citations(text):
        path = root / "tests" / file
        if not path.is_file():
            problems.append(f"tests/{file}::{name}: no such file")
            continue
        if path not in cache:
            cache[path] = function_names(path)
        if name not in cache[path]:
            problems.append(f"tests/{file}::{name}: no such test function")
    return problems


# ----- the citations ----------------------------------------------------------------


def test_no_placeholder_is_left():
    assert re.findall(r"\[\[cite:.*?\]\]", DOC) == []


def test_every_cited_test_exists():
    cited = citations(DOC)
    assert len(cited) > 50        # the document does cite; the regex does match
    assert missing_citations(DOC) == []


def section_naming(text, code_name):
    """The body of the one '### ' section whose heading ends with `code_name`."""
    found = [body for title, body in sections(text).items()
             if title.startswith(tuple("0123456789")) and title.endswith(f"`{code_name}`")]
    return found


@pytest.mark.parametrize("name", list(bn.FORMULATIONS))
def test_every_formulation_has_cited_sections(name):
    # Its section in 2 (the forward pass) and in 3 (the backward pass) each cite a test.
    for code_name in (name, f"{name}_backward"):
        found = section_naming(DOC, code_name)
        assert len(found) == 1, f"no single section headed `{code_name}`"
        assert citations(found[0]), f"the section of `{code_name}` cites no test"


def symmetry_section(text, symmetry):
    # inverse_scaling_pos and _neg share "Inverse scaling"; key_value_rescaling is
    # "Key-value rescaling".
    words = re.sub(r"_(pos|neg)$", "", symmetry).replace("_", " ")
    return [body for title, body in sections(text).items()
            if title.startswith("4.") and words in title.lower().replace("-", " ")]


@pytest.mark.parametrize("symmetry", claims.SYMMETRIES)
def test_every_symmetry_has_a_cited_section(symmetry):
    assert f"`{symmetry}`" in DOC                  # the code's name is in the text
    found = symmetry_section(DOC, symmetry)
    assert len(found) == 1, f"no single section of 4 for {symmetry}"
    assert citations(found[0]), f"the section of {symmetry} cites no test"


def test_every_consequence_in_section_5_is_cited():
    subsections = {t: b for t, b in sections(DOC).items() if re.match(r"5\.\d ", t)}
    assert len(subsections) >= 7
    uncited = [t for t, b in subsections.items() if not citations(b)]
    assert uncited == []


def test_docstring_section_references_exist():
    # "derivations.md, section 3.6" in a docstring must name a heading that exists.
    numbers = {m.group(1) for m in re.finditer(r"^#{2,3} (\d+(?:\.\d+)?)\.? ", DOC, re.M)}
    tree = ast.parse((ROOT / "bilinear_numpy.py").read_text(encoding="utf-8"))
    refs = 0
    for node in ast.walk(tree):
        if not isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            continue
        doc = ast.get_docstring(node) or ""
        for m in re.finditer(r"derivations\.md,\s+sections?\s+([\d.\-,\sandto]+)", doc):
            for number in re.findall(r"\d+(?:\.\d+)?", m.group(1)):
                refs += 1
                assert number.rstrip(".") in numbers, f"{node.name}: no section {number}"
    assert refs > 10


# ----- rendering on GitHub ----------------------------------------------------------

UNSUPPORTED = [r"\newcommand", r"\renewcommand", r"\def", r"\let", r"\label", r"\eqref",
               r"\ref", r"\tag", r"\require", r"\,", r"\;", r"\!", r"\:", r"\>",
               r"\begin{align}", r"\begin{align*}", r"\begin{equation}", r"\begin{eqnarray}",
               r"\begin{gather}", r"\begin{multline}"]
ENVIRONMENTS = {"aligned", "array", "cases", "matrix", "pmatrix", "bmatrix", "vmatrix"}


def paragraphs(text):
    """Blocks separated by blank lines, with inline code spans removed and fenced code
    blocks left out (neither is rendered as math)."""
    text = re.sub(r"```.*?```", "", text, flags=re.S)
    return [re.sub(r"`[^`\n]*`", "", p) for p in re.split(r"\n\s*\n", text)]


def math_problems(text):
    """Every problem found in the math of the text, one string each."""
    problems = []
    for k, par in enumerate(paragraphs(text)):
        where = f"paragraph {k} ({par.strip()[:40]!r})"
        if par.count("$$") % 2:
            problems.append(f"{where}: odd number of $$")
            continue
        display = re.findall(r"\$\$(.+?)\$\$", par, re.S)
        rest = re.sub(r"\$\$.+?\$\$", " ", par, flags=re.S)
        if rest.replace(r"\$", "").count("$") % 2:
            problems.append(f"{where}: odd number of $")
            continue
        inline = re.findall(r"\$(.+?)\$", rest, re.S)
        outside = re.sub(r"\$.+?\$", " ", rest, flags=re.S)
        for m in re.findall(r"\\[A-Za-z]+", outside):
            problems.append(f"{where}: LaTeX {m} outside math")
        table_math = [b for line in par.splitlines() if line.startswith("|")
                      for b in re.findall(r"\$(.+?)\$", line)]
        if any("|" in body for body in table_math):
            problems.append(f"{where}: a raw | in math inside a table ends the cell: use \\lvert")
        for body in inline:
            if body != body.strip():
                problems.append(f"{where}: inline math ${body}$ starts or ends with a space")
            if r"\begin" in body:
                problems.append(f"{where}: environment in inline math")
        for body in display + inline:
            problems += [f"{where}: {p}" for p in body_problems(body)]
    return problems


def body_problems(body):
    """Braces, macros and environments of one piece of math."""
    problems = []
    depth = 0
    for ch in re.sub(r"\\[{}]", "", body):
        depth += (ch == "{") - (ch == "}")
        if depth < 0:
            break
    if depth != 0:
        problems.append(f"unbalanced braces in {body.strip()[:40]!r}")
    for macro in UNSUPPORTED:
        if re.search(re.escape(macro) + (r"(?![A-Za-z])" if macro[-1].isalpha() else ""), body):
            problems.append(f"{macro} is not supported by GitHub's math")
    begins = re.findall(r"\\begin\{(\w+\*?)\}", body)
    ends = re.findall(r"\\end\{(\w+\*?)\}", body)
    if begins != ends:
        problems.append(f"\\begin {begins} and \\end {ends} do not pair")
    problems += [f"environment {e} is not one GitHub renders here" for e in set(begins) - ENVIRONMENTS]
    if re.search(r"[<>]", body):
        problems.append("a raw < or > in math can be read as HTML: use \\lt, \\gt")
    return problems


def test_math_renders_on_github():
    assert DOC.count("$") > 1000            # there is math to check
    assert math_problems(DOC) == []


def test_internal_links_resolve():
    # GitHub's anchors: lowercase, punctuation dropped, spaces to hyphens.
    anchors = {re.sub(r"[^\w\- ]", "", t.lower()).replace(" ", "-")
               for t in (h.group(2) for h in HEADING.finditer(DOC))}
    links = re.findall(r"\]\(#([^)]+)\)", DOC)
    assert links and [a for a in links if a not in anchors] == []


# ----- the checks above can fail ----------------------------------------------------


def test_checks_catch_bad_text(tmp_path):
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_a.py").write_text("def test_b():\n    assert 1\n", encoding="utf-8")
    good = "see `tests/test_a.py::test_b`"
    assert missing_citations(good, tmp_path) == []
    assert len(missing_citations("`tests/test_a.py::test_c` `tests/test_z.py::test_b`",
                                 tmp_path)) == 2
    assert missing_citations("`tests/test_a.py::helper`", tmp_path) != []
    bad_math = {
        "one $x dollar": "odd number of $",
        "a $$x$ b": "odd number of $",
        "$\\frac{a}{b$": "unbalanced braces",
        "$a\\,b$": "\\, is not supported",
        "$\\label{x}$": "\\label is not supported",
        "$ x$": "starts or ends with a space",
        "$$\\begin{align}a\\end{align}$$": "\\begin{align} is not supported",
        "$\\begin{aligned}a\\end{aligned}$": "environment in inline math",
        "$a < b$": "raw < or >",
        "the \\alpha outside": "LaTeX \\alpha outside math",
        "| cell | $|x|$ |": "raw | in math inside a table",
    }
    for text, message in bad_math.items():
        assert any(message in p for p in math_problems(text)), text
    assert math_problems("$a$ and $$\\begin{aligned}a &= b \\\\ c &= d\\end{aligned}$$ "
                         "`$not math` and $\\lbrace x\\rbrace$") == []
    doc = "### 2.1 Key: `mlp`\n\nno test here\n\n### 2.2 `other`\n\n`tests/test_a.py::test_b`\n"
    assert not citations(section_naming(doc, "mlp")[0])
    assert citations(section_naming(doc, "other")[0])


def test_function_index_names_real_functions_and_sections():
    # The two tables near the top: every name exists in its module (bilinear_numpy, then
    # claims), every section exists, and every formulation's forward and backward is listed.
    numbers = {m.group(1) for m in re.finditer(r"^#{2,3} (\d+(?:\.\d+)?)\.? ", DOC, re.M)}
    listed = set()
    for module, title in ((bn, "`bilinear_numpy.py` is worked out"),
                          (claims, "`claims.py` (the paper's claims, measured) is worked out")):
        body = DOC.split(f"**Where each function of {title}**", 1)[1]
        rows = [line for line in body.split("\n\n")[1].splitlines() if line.startswith("| `")]
        assert rows, title
        for row in rows:
            names_cell, sections_cell = row.strip("|").rsplit("|", 1)
            names = re.findall(r"`(\w+)`", names_cell)
            assert names and all(hasattr(module, n) for n in names), row
            listed.update(names)
            cited = re.findall(r"\d+\.\d+", sections_cell)
            assert cited and all(n in numbers for n in cited), row
    for name in bn.FORMULATIONS:                   # the plain pairs, the ones to read
        assert {f"{name}_forward", f"{name}_backward"} <= listed, name
