"""Exercise 16: its checks, its variant, the slips it recognises, its hints."""

from __future__ import annotations

from pathlib import Path

import numpy as np

import bilinear_numpy as bn
import claims
from exercises.tiny_checkpoint import tiny_weights, write_safetensors, write_tiny_checkpoint
from exercises.checks.common import D, M, pick, raised, returned
from exercises.checks.exchange_symmetry import predicted_rows, set_text

TITLE = "A trained model's file, read by hand: the balances"
WRITES = ("symmetry_expected", "symmetry_deviation", "transform_params")


def variant(rng):
    v = {"file": int(rng.integers(1, 10 ** 6)), "form": "gated_mlp", "act": "silu"}
    while (v["form"], v["act"]) == ("gated_mlp", "silu"):      # SwiGLU: derivations.md 9.2
        v |= {"form": pick(rng, DECAY_FORMS),
              "act": pick(rng, tuple(a for a in bn.ACTIVATIONS if a != "identity"))}
    return v | {"y": f"your file: write_tiny_checkpoint(folder, seed={v['file']}); your unit "
                     f"for the decay question: {v['form']} with {v['act']}"}


def read_raw_from_file_start(path, weights, name):
    """The slip of counting data_offsets from the file's start: that tensor, misread. Found
    from where the tensor's bytes are (the data fill the end of the file), not from the
    header: no reader of the format here."""
    raw, tensor = Path(path).read_bytes(), weights[name].astype("<f4")
    data_start = len(raw) - sum(w.nbytes for w in weights.values())
    begin = raw.index(tensor.tobytes()) - data_start            # the offset the header holds
    return np.frombuffer(raw[begin:begin + tensor.nbytes], dtype="<f4").reshape(tensor.shape)


def odd_unit_measured(weights):
    """(layer, unit) of the unit whose value row's norm is farthest, as a ratio, from its key
    row's: measured on the arrays written (the file's own balances are the student's)."""
    layer = lambda i, proj: weights[f"model.layers.{i}.mlp.{proj}.weight"]   # noqa: E731
    ratios = np.stack([np.log(np.linalg.norm(layer(i, "down_proj"), axis=0)
                              / np.linalg.norm(layer(i, "up_proj"), axis=1)) for i in range(2)])
    i, unit = np.unravel_index(np.argmax(np.abs(ratios)), ratios.shape)     # ratios (layers, m)
    return int(i), int(unit)


DECAY_FORMS = ("gated_mlp", "rank1_bilinear", "double_gated_mlp")


PAIRS = {"qk": "inverse_scaling_pos", "kv": "key_value_rescaling"}  # pair: its rescaling


TENSORS = {"L1.gate_proj": "model.layers.1.mlp.gate_proj.weight", "L1.norm":
           "model.layers.1.post_attention_layernorm.weight",
           "L0.down_proj": "model.layers.0.mlp.down_proj.weight",
           "embed_tokens": "model.embed_tokens.weight"}     # label: a tensor read_f32_tensor reads


def balanced_truth(form, act):
    """The pairs weight decay balances: those whose rescaling (α > 0) leaves the unit's
    output unchanged, measured by claims.symmetry_deviation."""
    return {pair for pair, sym in PAIRS.items()
            if claims.symmetry_deviation(form, act, sym) <= claims.CLAIM_TOL}


def checkpoint_rows(c, folder, file, seed):
    """The rows of one written file: tensors read, one layer (both for file 1) as Q, K, V,
    and its odd unit."""
    (folder / f"file{file}").mkdir()
    path, weights = write_tiny_checkpoint(folder / f"file{file}", seed), tiny_weights(seed)
    path = str(path)                                   # a str crosses to the child, a Path not
    for label, name in TENSORS.items():
        try:
            misread = {("the values come from another place in the file: look at where the "
                        "byte offsets count from", "data_offsets count from the first byte after "
                        "the header (8 + n), not from the start of the file"):
                       read_raw_from_file_start(path, weights, name)}
        except ValueError:                               # those bytes are nowhere else
            misread = {}
        c.close(f"read_f32_tensor, file {file}, {label}", "read_f32_tensor", weights[name],
                lambda name=name: c.call("read_f32_tensor", path, name), tol=0.0, mistakes=misread)
    c.equal(f"read_f32_tensor, file {file}: float32", "read_f32_tensor", "float32",
            lambda: str(np.asarray(c.call("read_f32_tensor", path, TENSORS["L1.gate_proj"])).dtype))
    for i in ((0, 1) if file == 1 else (1,)):
        QKV = [weights[f"model.layers.{i}.mlp.{proj}.weight"] for proj in ("gate_proj", "up_proj")]
        QKV.append(weights[f"model.layers.{i}.mlp.down_proj.weight"].T)       # each (m, d)
        swapped = ("look at which stored projection goes through the gate",
                   "Q and K swapped: Q is gate_proj (the gate), K is up_proj")
        for k, name in enumerate("QKV"):
            c.close(f"load_layer, file {file}, layer {i}: {name}", "load_layer", QKV[k],
                    lambda i=i, k=k: c.call("load_layer", path, i)[k], tol=0.0,
                    mistakes={swapped: QKV[1 - k]} if name != "V" else None)
    c.predicted(f"unbalanced, file {file}", "unbalanced", odd_unit_measured(weights),
                lambda: returned(c.call("unbalanced", path), tuple, "a pair of ints (layer, unit)",
                                 (list, np.ndarray)))
    return path


def check(c):
    folder, mine = c.folder(), c.variant()     # the files: in a folder the child reads
    path = checkpoint_rows(c, folder, 1, mine["file"])
    checkpoint_rows(c, folder, 2, mine["file"] + 1)                     # and another file
    c.equal("read_f32_tensor, missing name: KeyError", "read_f32_tensor", "KeyError",
            lambda: raised(lambda: c.call("read_f32_tensor", path,
                                          "model.layers.9.mlp.up_proj.weight"), KeyError))
    half = str(write_safetensors(folder / "half.safetensors",
                                 {"a": np.ones(3, np.float32), "b": np.ones(2, np.float16)}))
    c.equal("read_f32_tensor, F16 tensor: ValueError", "read_f32_tensor", "ValueError",
            lambda: raised(lambda: c.call("read_f32_tensor", half, "b"), ValueError))
    rng = np.random.default_rng(165)
    scale = rng.uniform(0.5, 2.0, (3, M, 1))
    Q, K = rng.standard_normal((M, D)) * scale[0], rng.standard_normal((M, D)) * scale[1]
    V = rng.standard_normal((M, D + 1)) * scale[2]            # d_out = 6 here, m = 4, d = 5
    q, k, v = (np.linalg.norm(a, axis=1) for a in (Q, K, V))
    expected = np.stack([(q ** 2 - k ** 2) / (q ** 2 + k ** 2),
                         (k ** 2 - v ** 2) / (k ** 2 + v ** 2)])
    c.close("unit_balances, random units", "unit_balances", expected,
            lambda: np.stack(c.call("unit_balances", Q, K, V)),
            mistakes={("look at the power of the norms in each balance",
                       "the norms are not squared: the balance compares ‖q‖² with ‖k‖²"):
                      np.stack([(q - k) / (q + k), (k - v) / (k + v)]),
                      ("look at which pair each of the two returned balances compares",
                       "the two balances are swapped: (q, k) first, then (k, v)"):
                      expected[::-1]})
    c.close("unit_balances: balanced units give 0", "unit_balances", np.zeros((2, M)),
            lambda: np.stack(c.call("unit_balances", Q, Q.copy(), Q.copy())))
    predicted_rows(c, "decay_balances", lambda u, _: set_text(balanced_truth(u["form"], u["act"])),
                   lambda u: f"{u['form']}, {u['act']}", set_text, lambda u: (u["form"], u["act"]))
    c.holds("WHY_DECAY: a reason", "WHY_DECAY", "a sentence (8+ words) naming the symmetry",
            lambda: str(c.answer("WHY_DECAY")),
            lambda s: len(s.split()) >= 8 and any(w in s.lower() for w in ("symmetr", "rescal",
                                                                           "orbit", "scal")),
            "a sentence of 8 words or more that says which symmetry (a rescaling) and why")


HINTS = {
    'general': [
        ('derivations.md §9.1 (the balances) and §9.2 (what weight decay predicts); the '
         'format is at the top of the exercise.'),
        ("Three steps: read the header's length (a little-endian unsigned 64-bit integer), "
         'then the header, then the bytes of one tensor (their offsets count from the first '
         'byte after the header); map the three projections to Q, K, V; compute the squared '
         'row norms.'),
        ('n = the 8 bytes as <u8; header = JSON of bytes 8..8+n; tensor = bytes [8+n+begin, '
         '8+n+end) as <f4, reshaped (KeyError for a name not in the header, ValueError for a '
         'dtype other than F32); β = (‖a‖² − ‖b‖²) / (‖a‖² + ‖b‖²) per row.'),
    ],
    'load_layer': [
        ("The names of a LLaMA-style layer, and the mapping to this course's notation at the "
         'top of the exercise.'),
        ('gate_proj is the gate, up_proj the linear branch; down_proj is stored (d, m) while '
         'V is (m, d).'),
        'Q = gate_proj, K = up_proj, V = down_projᵀ.',
    ],
    'unbalanced': [
        'Run the file: it prints both balances of every unit, layer by layer.',
        ('The pair that weight decay balances in a SwiGLU layer is near 0 in every unit but '
         'one: look for the one far from 0.'),
        ("Compute that pair's balance for every unit of both layers and return the (layer, "
         'unit) of the largest in size, counted from 0.'),
    ],
    'decay_balances': [
        ('derivations.md §9.2 for SwiGLU, and §4.3, §4.4: which rescalings are symmetries of '
         'your unit.'),
        ('Weight decay balances a pair only when rescaling that pair leaves the output '
         'unchanged: for each pair, ask whether your form and σ allow it.'),
        ("Write your unit's term after (α q_j, k_j / α) and after (α k_j, v_j / α) and ask, "
         'for each, what σ would need for the term not to change.'),
    ],
    'WHY_DECAY': [
        'derivations.md §9.2: the penalty along an orbit of a symmetry.',
        ('Along an orbit the loss does not change but λ‖θ‖² does; its minimum on the orbit is '
         'where the two norms are equal.'),
        ('Find the α at which λ(α²‖k‖² + ‖v‖²/α²) is least and what it says of the two '
         'norms; then ask which pairs of a SwiGLU unit can be rescaled without changing its '
         'output, and say that in your sentence.'),
    ],
}
