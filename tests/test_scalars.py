"""Numbers passed to the public API never change the dtype of the work.

Under NumPy 2's promotion rules (NEP 50) a NumPy float64 *scalar* turns a float32 array
into float64, while a Python float takes the array's dtype. Every public function that
takes a number (eps, lr, betas, h, tol, alpha, eta, ...) must give the same arrays, in the
same dtype, whether the number is a Python float, an np.float64 or an np.float32. The
numbers used here are exact in float32 (0.875, 2**-10, ...), so all three kinds carry the
same value and the results must be identical, not only of the same dtype.
"""
import ast
import functools
import importlib
import inspect
import io
import pathlib
import pkgutil

import numpy as np
import pytest

import bilinear_numpy as bn
import claims
import experiments
from experiments import ablation, data, figures, model, train, train_figures
from experiments.hessian import hessian_at_minimum

KINDS = {"python float": float, "np.float64": np.float64, "np.float32": np.float32}
F32 = np.dtype(np.float32)


class SmallImageTask(train.ImageTask):
    """The image task at 15 x 12 pixels, d = 8: the training paths in a fraction of a second."""

    def __init__(self, path=None, lr=1e-2, sigma=10.0):
        super().__init__(path, stride=40, n_freq=4, sigma=sigma, d=8, budget_units=6,
                         batch=16, lr=lr, curve_size=16)


def same(a, b):
    """Equal values and dtypes, through nested dicts, lists and tuples of arrays."""
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    if isinstance(a, np.ndarray):
        return a.dtype == np.asarray(b).dtype and np.array_equal(a, b)
    return type(a) is type(b) and a == b


def float32_arrays(tree):
    """Every array in a nested dict / list / tuple is float32."""
    if isinstance(tree, dict):
        return all(float32_arrays(v) for v in tree.values())
    if isinstance(tree, (list, tuple)):
        return all(float32_arrays(v) for v in tree)
    return not isinstance(tree, np.ndarray) or tree.dtype == F32


def _x32(shape=(3, 4), seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


# ----- one case per public function (or group) with a number among its arguments ----------
# Each case runs with `num`, the kind of number, and returns what it computed; the test
# checks that the float32 work stayed float32 and that the result equals the Python float's.


def rmsnorm(num, tmp_path):
    x, g = _x32(), _x32((4,), 1)
    y, cache = bn.rmsnorm_forward(x, g, eps=num(2 ** -20))
    return {"y": y, "grads": bn.rmsnorm_backward(np.ones_like(y), cache)}


def adam(num, tmp_path):
    params = {"w": _x32()}
    state = bn.adam_init(params)
    for _ in range(2):                            # the second step reads the state of the first
        grads = {"w": params["w"] * np.float32(2)}
        params, state = bn.adam_step(params, grads, state, lr=num(2 ** -10), beta1=num(0.875),
                                     beta2=num(1 - 2 ** -10), eps=num(2 ** -27),
                                     weight_decay=num(0.125))
    return {"params": params, "m": state["m"], "v": state["v"]}


def adamw_balances(num, tmp_path):
    from experiments import inspect_model
    params = {"Q": _x32((3, 4), 1), "K": _x32((3, 4), 2), "V": _x32((3, 5), 3)}
    state = bn.adam_step(params, {k: v * np.float32(2) for k, v in params.items()},
                         bn.adam_init(params))[1]
    return inspect_model.adamw_balances(params, state, eps=num(2 ** -27), beta2=num(0.875))


def loss_backwards(num, tmp_path):
    z = _x32()
    _, ce = bn.cross_entropy_forward(z, np.array([0, 1, 2]))
    _, mse = bn.mse_forward(z, z * np.float32(0.5))
    return [bn.cross_entropy_backward(num(0.75), ce), bn.mse_backward(num(0.75), mse)]


def transform(num, tmp_path):
    params = bn.get_formulation("rank1_bilinear").init(np.random.default_rng(0), 4, 3, 2,
                                                       dtype=np.float32)
    alpha = [num(0.5), num(2.0), num(1.25)]
    return [claims.transform_params("rank1_bilinear", params, s, alpha)
            for s in ("inverse_scaling_pos", "key_value_rescaling")]


def numerical_gradient(num, tmp_path):         # float64 work by design: a step of any kind is taken
    x = np.linspace(-1.0, 1.0, 5)
    grad = bn.numerical_gradient(np.sin, x, np.ones(5), step=num(2 ** -20))
    np.testing.assert_allclose(grad, np.cos(x), rtol=1e-9)
    return grad


def gradcheck(num, tmp_path):
    report = bn.gradcheck("gated_mlp", "relu", x_shape=(2, 3), m=2, d_out=2, step=num(2 ** -20),
                          tol=num(2 ** -23), kink_margin=num(2 ** -10))
    assert report.passed, str(report)
    record = bn.GradcheckReport(report.formulation, report.activation, report.rows, num(0.25))
    return [report.tol, report.rows[0].shape, report.draws, record.passed]


def match_units(num, tmp_path):
    return model.match_units("gated_mlp", 32768, 64, tol=num(0.015625))


def text_dataset(num, tmp_path):
    split = data.text_dataset("abcdefghij" * 10, val_fraction=num(0.125))
    return [split.vocab, split.train, split.val]


def figure_data(num, tmp_path):                # the figures' data are float64 by design
    sizes = {"d": 3, "m": 2, "d_out": 2, "n_tokens": 8}
    return [
        figures.exchange_data(z_max=num(4.0), n_z=5),
        figures.train_gd("gated_mlp", "silu", bn.get_formulation("gated_mlp").init(
            np.random.default_rng(0), 3, 2, 2), *figures.teacher_task(0, 3, 2, 8)[:2],
            eta=num(0.0625), steps=2)[:2],
        figures.conservation_data(**sizes, eta=num(0.0625), steps=2, units=2, every=1,
                                  total_time=num(0.25), drift_steps=(2, 4)),
        figures.tied_data(**sizes, eta=num(0.0625), steps=2, every=1),
        figures.rank_data(**sizes, eta=num(0.0625), steps=2, init_scale=num(0.125),
                          student_tokens=8, student_eta=num(0.0625), student_steps=2,
                          ranks=(1,)),
    ]


def image_task_and_run(num, tmp_path):
    task = SmallImageTask(lr=num(2 ** -7), sigma=num(2.0))
    result = train.train_run(task, "SwiGLU", 0, 2, lr=num(2 ** -6), n_evals=1)
    assert float32_arrays(result["params"]), {k: v.dtype for k, v in result["params"].items()}
    return [task.lr, task.features, result["row"], result["params"]]


_corpus = functools.lru_cache(maxsize=None)(data.load_text_corpus)    # read once for all kinds


def text_task(num, tmp_path, monkeypatch):
    monkeypatch.setattr(data, "load_text_corpus", _corpus)
    task = train.TextTask(lr=num(2 ** -7), d=8, budget_units=6, batch=16, curve_size=16)
    result = train.train_run(task, "Bilinear", 0, 1, n_evals=1)
    assert float32_arrays(result["params"])
    return [task.lr, result["row"]]


def run_task_and_ablation(num, tmp_path, monkeypatch):
    monkeypatch.setattr(train, "TASKS", {"image": SmallImageTask, "text": train.TextTask})
    for name in ("learning_curves", "reconstruction_grid", "ablation_grid"):   # drawn below
        monkeypatch.setattr(train_figures, name, lambda *args: args[-1])
    quiet = {"log": lambda line: None, "progress_stream": io.StringIO()}
    rows = train.run_task("image", mode="quick", seeds=1, steps=2, variants=["SwiGLU"],
                          lr=num(2 ** -6), out=tmp_path / "task", **quiet)
    cells = ablation.run_ablation(mode="quick", seeds=2, steps=1, variants=["SwiGLU"],
                                  tasks=("image",), lr=num(2 ** -6), out=tmp_path / "ablation",
                                  **quiet)
    return [rows, cells]


def learning_curves(num, tmp_path):
    curves = {"SwiGLU": [(np.arange(3), np.array([3.0, 2.0, 1.5]))]}
    path = train_figures.learning_curves(curves, {"SwiGLU": "gated_mlp"}, num(2.5), "metric",
                                         "title", tmp_path / "curves.png")
    return path.stat().st_size > 0


def inspect_layer(num, tmp_path):
    from experiments import inspect_model
    Q, K, g = _x32((6, 4), 2), _x32((6, 4), 3), _x32((4,), 4)
    fwd = inspect_model.forward_measures(_x32((8, 4), 1), Q, K, _x32((6, 3), 5), g,
                                         eps=num(2 ** -20), tol=num(0.125))
    return [fwd, inspect_model.near_linear_threshold(num(0.125))]


# case -> the public functions (module.qualname) it covers
def hessian(num, tmp_path):
    # float64 work throughout (a Hessian by finite differences); the kind of number must not
    # change a digit.
    result = hessian_at_minimum("mlp", "relu", d=3, m=1, d_out=2, n_tokens=12,
                                noise=num(0.125), step=num(2 ** -16), kink_margin=num(0.25))
    rows = figures.hessian_data(d=3, m=1, d_out=2, n_tokens=20, noise=num(0.125), n_small=3)
    return {"eigenvalues": result["eigenvalues"], "rows": [r["y"] for r in rows]}


CASES = {
    hessian: ["experiments.hessian.hessian_at_minimum", "experiments.figures.hessian_data"],
    rmsnorm: ["bilinear_numpy.rmsnorm_forward"],
    adam: ["bilinear_numpy.adam_step"],
    loss_backwards: ["bilinear_numpy.cross_entropy_backward", "bilinear_numpy.mse_backward"],
    transform: ["claims.transform_params"],
    numerical_gradient: ["bilinear_numpy.numerical_gradient"],
    gradcheck: ["bilinear_numpy.gradcheck", "bilinear_numpy.GradcheckReport"],
    match_units: ["experiments.model.match_units"],
    text_dataset: ["experiments.data.text_dataset"],
    figure_data: ["experiments.figures.exchange_data", "experiments.figures.train_gd",
                  "experiments.figures.conservation_data", "experiments.figures.tied_data",
                  "experiments.figures.rank_data"],
    image_task_and_run: ["experiments.train.ImageTask", "experiments.train.train_run"],
    text_task: ["experiments.train.TextTask"],
    run_task_and_ablation: ["experiments.train.run_task", "experiments.ablation.run_ablation"],
    learning_curves: ["experiments.train_figures.learning_curves"],
    adamw_balances: ["experiments.inspect_model.adamw_balances"],
    inspect_layer: ["experiments.inspect_model.forward_measures",
                    "experiments.inspect_model.near_linear_threshold"],
}


def _run(case, num, tmp_path, monkeypatch):
    if "monkeypatch" in inspect.signature(case).parameters:
        return case(num, tmp_path, monkeypatch)
    return case(num, tmp_path)


@pytest.mark.parametrize("case", list(CASES), ids=lambda case: case.__name__)
def test_every_kind_of_number_gives_the_python_floats_result(case, tmp_path, monkeypatch):
    reference = _run(case, float, tmp_path / "python", monkeypatch)
    for kind in ("np.float64", "np.float32"):
        result = _run(case, KINDS[kind], tmp_path / kind, monkeypatch)
        assert float32_arrays(result) == float32_arrays(reference), kind
        assert same(result, reference), f"{case.__name__}: {kind} changed the result"


def test_float32_work_stays_float32_with_a_numpy_float64_number():
    # The example of the report: an np.float64 eps made y float64, then backward refused dy.
    x, g = _x32(), _x32((4,), 1)
    y, cache = bn.rmsnorm_forward(x, g, eps=np.float64(1e-6))
    assert y.dtype == F32
    assert bn.rmsnorm_backward(np.ones_like(y), cache)["x"].dtype == F32
    for case in (rmsnorm, adam, loss_backwards, transform, image_task_and_run):
        assert float32_arrays(_run(case, np.float64, None, None)), case.__name__


def test_a_gradient_or_moment_of_another_dtype_than_its_parameter_is_refused():
    params = {"w": _x32()}
    state = bn.adam_init(params)
    with pytest.raises(TypeError, match=r"^grads\['w'\]: expected dtype float32 "
                                        r"\(params\['w'\]'s\), got float64$"):
        bn.adam_step(params, {"w": np.ones((3, 4))}, state)
    with pytest.raises(TypeError, match=r"^state\['v'\]\['w'\]: expected dtype float32"):
        bn.adam_step(params, {"w": params["w"]}, state | {"v": {"w": np.zeros((3, 4))}})
    for bad in (np.ones(2), "0.1", None, 1j):
        with pytest.raises(TypeError, match=r"^lr: expected a real number"):
            bn.adam_step(params, {"w": params["w"]}, state, lr=bad)


# ----- the sweep is complete: every public function with a number is a case above ---------

# Parameters that take a number but have no float default.
NUMBER_NAMES = {"dloss", "alpha", "eta", "lr", "baseline", "eps", "h", "tol", "sigma"}


def _imports_torch(module_name):
    """True if the experiments module imports torch at its top level (found by parsing it)."""
    path = pathlib.Path(experiments.__path__[0]) / f"{module_name}.py"
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.Import) and any(a.name.split(".")[0] == "torch" for a in node.names):
            return True
        if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "torch":
            return True
    return False


def _public_functions():
    # The drivers that import PyTorch (optional) are left out, so the sweep runs where torch is
    # absent: train_torch's numbers go to train.TextTask (swept here), bench_torch and
    # numpy_vs_torch are scripts of fixed sizes, torch_report's draws are tested by
    # tests/test_torch_bridge.py.
    names = [m.name for m in pkgutil.iter_modules(experiments.__path__)]
    modules = [bn, claims] + [importlib.import_module(f"experiments.{name}")
                              for name in names if not _imports_torch(name)]
    for module in modules:
        for name, obj in vars(module).items():
            if name.startswith("_") or getattr(obj, "__module__", None) != module.__name__:
                continue
            if inspect.isfunction(obj):
                yield f"{module.__name__}.{name}", obj
            elif inspect.isclass(obj):
                yield f"{module.__name__}.{name}", obj.__init__
                for attr, method in vars(obj).items():
                    if inspect.isfunction(method) and not attr.startswith("_"):
                        yield f"{module.__name__}.{name}.{attr}", method


def test_the_sweep_covers_every_public_function_that_takes_a_number():
    takes_a_number = set()
    for qualname, function in _public_functions():
        for p in inspect.signature(function).parameters.values():
            if (type(p.default) is float) or p.name in NUMBER_NAMES:
                takes_a_number.add(qualname)
    covered = {name for names in CASES.values() for name in names}
    assert takes_a_number == covered
