"""No import cycle anywhere in the project: the graph of every project module's imports
(bilinear_numpy, bilinear_torch, claims, experiments/, exercises/ with its grading/, checks/,
solutions/ and the student's files), read from the source with ast, is acyclic. An import counts
wherever it is written, at the top of a module or inside a function (a function-level import
that closes a cycle works only as long as the function is not called while the module loads);
importlib.import_module of a text counts too (a text built as "exercises.checks.{...}" stands
for every module under that prefix). Code under `if __name__ == "__main__":` does not: it runs
only as the script __main__, a module of its own (bilinear_numpy.py's command line imports
experiments/cli.py, which imports the module bilinear_numpy afresh)."""

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def project_sources():
    """{module name: source text} of every project module."""
    paths = [ROOT / "bilinear_numpy.py", ROOT / "bilinear_torch.py", ROOT / "claims.py",
             *sorted((ROOT / "experiments").glob("*.py")),
             *sorted((ROOT / "exercises").rglob("*.py"))]
    sources = {}
    for path in paths:
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        sources[".".join(parts)] = path.read_text(encoding="utf-8")
    return sources


def is_main_guard(node):
    """True for `if __name__ == "__main__":`."""
    test = node.test if isinstance(node, ast.If) else None
    return (isinstance(test, ast.Compare) and isinstance(test.left, ast.Name)
            and test.left.id == "__name__" and len(test.comparators) == 1
            and isinstance(test.comparators[0], ast.Constant)
            and test.comparators[0].value == "__main__")


def imported_names(tree, module, is_package):
    """The dotted names a module's code imports, anywhere in it but under a main guard:
    (name, line) pairs; a name ending in "." stands for every module under it."""
    found = []

    def visit(node):
        if is_main_guard(node):
            for child in node.orelse:                  # the else branch runs as the module
                visit(child)
            return
        if isinstance(node, ast.Import):
            found.extend((alias.name, node.lineno) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:                             # relative: from the module's package
                package = module.split(".") if is_package else module.split(".")[:-1]
                package = package[:len(package) - (node.level - 1)]
                base = ".".join(package + ([base] if base else []))
            found.extend((f"{base}.{alias.name}", node.lineno) for alias in node.names)
            found.append((base, node.lineno))
        elif isinstance(node, ast.Call) and getattr(node.func, "attr", getattr(
                node.func, "id", "")) == "import_module" and node.args:
            text = node.args[0]
            if isinstance(text, ast.Constant) and isinstance(text.value, str):
                found.append((text.value, node.lineno))
            elif isinstance(text, ast.JoinedStr) and text.values and \
                    isinstance(text.values[0], ast.Constant):
                found.append((str(text.values[0].value), node.lineno))   # "pkg.": every one
        for child in ast.iter_child_nodes(node):
            visit(child)
    visit(tree)
    return found


def import_graph(sources):
    """{module: {imported project module: line}} of `sources` ({name: text})."""
    graph = {}
    for module, text in sources.items():
        is_package = any(other.startswith(module + ".") for other in sources)
        edges = {}
        names = imported_names(ast.parse(text), module, is_package)
        for name, line in names:
            if name.endswith("."):
                targets = [m for m in sources if m.startswith(name)]
            elif name in sources:
                targets = [name]
            else:
                continue              # not a module of the project (numpy), or a name in one
            for target in targets:
                if target != module:
                    edges.setdefault(target, line)
        # `from exercises import variant` is an edge to exercises; `from exercises import
        # course` to exercises.course alone (the module, not its package's code)
        for name, line in names:
            parent = name.rpartition(".")[0]
            if name not in sources and parent in sources and parent != module:
                edges.setdefault(parent, line)
        graph[module] = edges
    return graph


def find_cycle(graph):
    """A cycle [a, b, ..., a] of the graph, or None."""
    state, stack = {}, []

    def walk(node):
        state[node] = "open"
        stack.append(node)
        for nxt in sorted(graph.get(node, {})):
            if state.get(nxt) == "open":
                return stack[stack.index(nxt):] + [nxt]
            if nxt not in state:
                cycle = walk(nxt)
                if cycle:
                    return cycle
        state[node] = "done"
        stack.pop()
        return None
    for node in sorted(graph):
        if node not in state:
            cycle = walk(node)
            if cycle:
                return cycle
    return None


def described(graph, cycle):
    return " -> ".join(f"{a} (line {graph[a][b]})" for a, b in zip(cycle, cycle[1:])) + \
        f" -> {cycle[-1]}"


def test_the_project_has_no_import_cycle():
    sources = project_sources()
    assert {"bilinear_numpy", "claims", "experiments.cli", "exercises", "exercises.course",
            "exercises.grading.checker", "exercises.checks.common"} <= set(sources)
    graph = import_graph(sources)
    cycle = find_cycle(graph)
    assert cycle is None, described(graph, cycle)
    # the machinery reads the course; the course reads nothing of the machinery
    course = [m for m in sources if m == "exercises.course" or m.startswith("exercises.checks")]
    assert not any(target.startswith("exercises.grading") for m in course for target in graph[m])
    assert "exercises.course" in graph["exercises.grading.checker"]
    assert {f"exercises.checks.{slug}" for slug in ("rank1", "port_to_pytorch")} <= \
        set(graph["exercises.course"])                  # import_module(f"exercises.checks.{slug}")


def test_a_cycle_is_found_at_module_or_function_level():
    top = {"a": "import b\n", "b": "from a import x\n", "c": "import a\n"}
    assert find_cycle(import_graph(top)) in (["a", "b", "a"], ["b", "a", "b"])
    inside = {"p": "", "p.m": "def f():\n    from p import n\n", "p.n": "import p.m\n"}
    assert find_cycle(import_graph(inside)) in (["p.m", "p.n", "p.m"], ["p.n", "p.m", "p.n"])
    guarded = {"s": 'if __name__ == "__main__":\n    import t\n', "t": "import s\n"}
    assert find_cycle(import_graph(guarded)) is None            # the script is another module
    dynamic = {"q": "import importlib\nimportlib.import_module(f'r.{x}')\n", "r": "",
               "r.one": "import q\n"}
    assert find_cycle(import_graph(dynamic)) == ["q", "r.one", "q"]
    # The project itself, had the course kept importing the checker (as it did): caught.
    sources = project_sources()
    sources["exercises.course"] += "\nfrom exercises.grading.checker import Row\n"
    assert find_cycle(import_graph(sources)) is not None
