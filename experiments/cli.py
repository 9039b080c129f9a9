"""The command line of bilinear_numpy.py: `python bilinear_numpy.py [COMMAND]`.

bilinear_numpy.main imports this module when the script runs, so that `import
bilinear_numpy` needs NumPy alone. Subcommands: verify (verification_report below),
figures, train, bench, inspect; with none, verify and then `train text --quick` and
`train image --quick`. Each subcommand imports its experiments/ module when it runs.
"""

from __future__ import annotations

import argparse
import os
import sys

import bilinear_numpy as bn


def verification_report(seed=0, out=print):
    """Print every check of the paper's claims; return the number of disagreements.

    Sections: equivalences; the symmetry table (with input parity); the gradient check of
    every formulation x activation on x of shape (2, 3, 4); the conservation identity; the
    number of continuous symmetries, one unit and a layer of 3.

    Args: seed: int for every random draw; out: function that prints one line.
    Returns: int, the number of checks that disagree with theory (0 when all agree).
    Source: Breslow (arXiv 2606.22172); derivations.md.
    """
    failures = 0
    out("bilinear-numpy: the paper's claims, measured in float64 (deviation = rel_error)\n")
    out(f"1. Equivalences (hold when deviation <= {bn.CLAIM_TOL:.0e})")
    for row in bn.equivalences(seed):
        failures += not row["holds"]
        mark = "ok" if row["holds"] else "DISAGREES"
        out(f"   {row['statement']:<54} {row['deviation']:9.1e}  {mark}")

    out("\n2. Symmetries: kept / broken with the measured deviation ('!' = disagrees with theory)")
    rows = bn.symmetry_table(seed)
    acts = list(bn.ACTIVATIONS)
    labels = {"exchange": "exchange Q<->K", "inverse_scaling_pos": "(aQ, K/a), a>0",
              "inverse_scaling_neg": "(aQ, K/a), a<0", "key_value_rescaling": "(ak, v/a), a>0",
              "permutation": "permutation", "parity": "y(-x) = y(x)"}
    out(f"   {'formulation':<17}{'symmetry':<16}" + "".join(f"{a:>13}" for a in acts))
    for formulation in bn.FORMULATIONS:
        for symmetry in bn.SYMMETRIES:
            cells = {r["activation"]: r for r in rows
                     if r["formulation"] == formulation and r["symmetry"] == symmetry}
            if not cells:
                continue
            text = ""
            for a in acts:
                r = cells[a]
                flag = "" if r["holds"] == r["expected"] else "!"
                failures += r["holds"] != r["expected"]
                text += f"{('kept' if r['holds'] else 'broken') + flag:>7} {r['deviation']:5.0e}"
            out(f"   {formulation:<17}{labels[symmetry]:<16}{text}")
    out("   (for bilinear, exchange is A_j <-> A_j^T and key-value rescaling scales A_j; y(-x) = y(x)")
    out("   is input parity, a property of the functions, not a change of parameters: derivations.md, 4.8)")

    out("\n3. Gradient check (float64, x of shape (2, 3, 4), worst relative error, tol 1e-7)")
    out(f"   {'formulation':<17}" + "".join(f"{a:>11}" for a in acts))
    for formulation in bn.FORMULATIONS:
        reports = [bn.gradcheck(formulation, a, seed=seed) for a in acts]
        failures += sum(not rep.passed for rep in reports)
        out(f"   {formulation:<17}" + "".join(
            f"{rep.worst:>10.1e}{'' if rep.passed else '!'}" for rep in reports))

    out("\n4. Conservation, pair (w, w'): max_j |<w_j, dL/dw_j> - <w'_j, dL/dw'_j>| / scale (0 <=> symmetry)")
    for row in bn.conservation_table(seed):
        failures += row["holds"] != row["expected"]
        if row["activation"] in ("relu", "silu"):
            word = "conserved" if row["holds"] else "not conserved"
            out(f"   {row['formulation']:<17} {row['activation']:<9} ({row['pair']}) "
                f"{row['residual']:9.1e}  {word:<14}{'' if row['holds'] == row['expected'] else 'DISAGREES'}")
    out("   (every activation is checked; relu and silu are shown)")

    out("\n5. Continuous symmetries: n_params - rank of the output Jacobian (d = 5, d_out = 3, r = 2),")
    out("   measured / theory ('!' = disagrees; derivations.md, 4.9)")
    rows = bn.symmetry_dimension_table(seed)
    out(f"   {'formulation':<17}{'m':>2}" + "".join(f"{a:>10}" for a in acts))
    for m in (1, 3):
        for formulation in bn.FORMULATIONS:
            cells = {r["activation"]: r for r in rows if r["formulation"] == formulation and r["m"] == m}
            failures += sum(not r["holds"] for r in cells.values())
            out(f"   {formulation:<17}{m:>2}" + "".join(
                f"{str(cells[a]['measured']) + '/' + str(cells[a]['expected']) + ('' if cells[a]['holds'] else '!'):>10}"
                for a in acts))
    out("   A smooth gated unit keeps one continuous symmetry, (k, v) -> (a k, v / a), and one")
    out("   conserved quantity, as the rank-1 unit does with (q, k) -> (a q, k / a): gating trades")
    out("   ||q_j||^2 - ||k_j||^2 for ||k_j||^2 - ||v_j||^2. It loses exchange and input parity.")

    failures += conservation_law_report(seed, out)
    out(f"\n{'All checks agree with theory.' if failures == 0 else f'{failures} checks DISAGREE with theory.'}")
    out("Pictures of these results: figures/*.png; make them with `python bilinear_numpy.py figures`.")
    return failures


def conservation_law_report(seed=0, out=print):
    """Print section 6 of the report, flat directions and conservation laws counted apart;
    return the number of cells that disagree with theory.

    Each cell is flat / laws, measured (symmetry_dimension, conservation_law_count), at the
    sizes of LAW_SIZES; '!' marks a count that differs from its theory.

    Args: seed: int for the random draws; out: function that prints one line.
    Returns: int, the number of cells that disagree (0 when all agree).
    Source: Marcotte, Gribonval, Peyre (NeurIPS 2023); derivations.md, sections 4.9, 5.10.
    """
    from experiments import conservation_laws     # NumPy and the module only
    rows = conservation_laws.conservation_law_table(seed)
    acts = list(bn.ACTIVATIONS)
    out("\n6. Flat directions / conservation laws of gradient flow, measured (laws: n_params - dim of")
    out("   the Lie algebra of the loss gradients; '!' = disagrees; derivations.md, 5.10)")
    out(f"   {'formulation':<17}{'(d,m,d_out,r)':>14}" + "".join(f"{a:>10}" for a in acts))
    for size in conservation_laws.LAW_SIZES:
        for formulation in bn.FORMULATIONS:
            cells = {r["activation"]: r for r in rows
                     if r["formulation"] == formulation and r["sizes"] == tuple(size)}
            text = "".join(f"{str(cells[a]['flat']) + ' / ' + str(cells[a]['laws']) + ('' if cells[a]['holds'] else '!'):>10}"
                           for a in acts)
            out(f"   {formulation:<17}{str(tuple(size)).replace(' ', ''):>14}{text}")
    out("   Laws equal flat directions where the symmetries are commuting rescalings or translations;")
    out("   fewer where the group is GL or O(r, r): only its symmetric generators give a law.")
    return sum(not r["holds"] for r in rows)


def _cmd_verify(args):
    return 1 if verification_report(seed=args.seed) else 0


def _cmd_figures(args):
    from experiments import figures   # matplotlib is imported inside its drawing functions
    figures.make_figures(args.out, quick=args.quick, panels=args.panels)
    return 0


def _run_training(task, mode, **options):
    # Bad input or missing data (e.g. no pydoc_data) stops with the message, not a traceback.
    from experiments import train
    try:
        if task == "ablation":                # the 2 x 2 ablation, on both tasks
            from experiments import ablation
            ablation.run_ablation(mode=mode, **options)
        else:
            train.run_task(task, mode=mode, **options)
    except UnicodeEncodeError:                # a ValueError, but never the user's input
        raise
    except (ValueError, RuntimeError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


def _cmd_train(args):
    return _run_training(args.task, args.mode, seeds=args.seeds, steps=args.steps,
                         variants=args.variants.split(",") if args.variants else None,
                         lr=args.lr, out=args.out, image=args.image)


def _cmd_default(args):
    """The main job: the verification report, then both experiments in their --quick form."""
    status = _cmd_verify(args)
    for task in ("text", "image"):
        status = max(status, _run_training(task, "quick"))
    return status


def _cmd_bench(args):
    from experiments import bench   # each subcommand imports only its own driver
    return bench.main(args)


def _cmd_inspect(args):
    from experiments import inspect_model   # each subcommand imports only its own driver
    try:
        inspect_model.run(args.path, args.layers, args.out, args.tokens, args.seed)
    except UnicodeEncodeError:                # a ValueError, but never the user's input
        raise
    except (ValueError, OSError) as exc:     # a bad file or layout: the message, not a traceback
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


def build_parser():
    """The argparse parser: one subparser per subcommand, each with set_defaults(func=...).

    Each subcommand imports its experiments/ driver inside its func, so that one
    subcommand loads only what it needs (verify: NumPy alone).
    """
    parser = argparse.ArgumentParser(
        prog="bilinear_numpy.py",
        description="Gated MLPs as symmetry-broken rank-1 bilinear attention, in NumPy. "
                    "With no subcommand, runs `verify`, then `train text --quick` and "
                    "`train image --quick`.")
    parser.add_argument("--seed", type=int, default=0, help="seed of verify's random draws")
    parser.set_defaults(func=_cmd_default)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    verify = sub.add_parser("verify", help="check every equivalence, symmetry, gradient and "
                                           "conservation identity; exit 1 on a disagreement")
    verify.add_argument("--seed", type=int, default=argparse.SUPPRESS,
                        help="seed of the random draws (default 0)")
    verify.set_defaults(func=_cmd_verify)

    figs = sub.add_parser("figures", help="draw the symmetries and their consequences as PNG "
                                          "files, with the numbers as CSV beside them")
    figs.add_argument("--out", default="figures",
                      help="output directory (default: figures/ in the working folder)")
    figs.add_argument("--quick", action="store_true",
                      help="small sizes for a fast preview (the numbers differ)")
    figs.add_argument("--panels", action="store_true",
                      help="also write each panel alone, for slides: OUT/panels/fig3_a.png, ...")
    figs.set_defaults(func=_cmd_figures)

    train = sub.add_parser("train", help="train every variant at equal parameter count on "
                                         "real data: does breaking the symmetry help?")
    train.add_argument("task", help="text (next character of Python's documentation), "
                                    "image (grace_hopper.jpg as (row, col) -> RGB), or "
                                    "ablation (which broken symmetry matters: 2 x 2 cells, "
                                    "both tasks)")
    size = train.add_mutually_exclusive_group()
    size.add_argument("--quick", dest="mode", action="store_const", const="quick",
                      help="4 variants, short runs (under 30 s)")
    size.add_argument("--full", dest="mode", action="store_const", const="full",
                      help="every variant, 5 seeds, long runs (the README's tables)")
    train.add_argument("--seeds", type=int, help="number of seeds 0, 1, ... (default: the mode's)")
    train.add_argument("--steps", type=int, help="Adam steps per run (default: the mode's)")
    train.add_argument("--lr", type=float, help="Adam's learning rate (default: the task's)")
    train.add_argument("--variants", help="comma-separated variant names, or "
                                          "formulation:activation[:r]; for ablation, names "
                                          "of its cells (default: the mode's)")
    train.add_argument("--out", help="output folder for results/ and figures/ (default: "
                                     "the working folder for --full, runs/<mode>/ in it "
                                     "otherwise)")
    train.add_argument("--image", help="image file for the image task (default: grace_hopper.jpg)")
    train.set_defaults(func=_cmd_train, mode="default")

    bench = sub.add_parser("bench", help="time forward and backward of every formulation "
                                         "against its GEMM floor; print and save a table")
    bench.add_argument("--quick", action="store_true", help="small sizes: seconds, not minutes")
    bench.add_argument("--out", help="CSV path (default, in the working folder: "
                                     "results/bench.csv for the complete run, "
                                     "runs/quick/ or runs/part/results/bench.csv otherwise)")
    bench.add_argument("--dtype", action="append", choices=["float32", "float64"],
                       help="run only this dtype (repeatable)")
    bench.add_argument("--formulation", action="append", choices=list(bn.FORMULATIONS),
                       help="run only this formulation (repeatable)")
    bench.add_argument("--activation", action="append", choices=list(bn.ACTIVATIONS),
                       help="run only this activation (repeatable)")
    bench.add_argument("--tokens", type=int, help="number of tokens N (overrides the size)")
    bench.add_argument("--repeats", type=int, help="timed repeats per measurement")
    bench.set_defaults(func=_cmd_bench)

    inspect = sub.add_parser("inspect", help="measure the SwiGLU feed-forwards of a trained "
                                             "LLaMA-style checkpoint (docs/real-model.md)")
    inspect.add_argument("path", help="model.safetensors, model.safetensors.index.json, or "
                                      "their folder")
    inspect.add_argument("--layers", help="layers to measure, e.g. 0,10,20-29 (default: all)")
    inspect.add_argument("--out", default=os.path.join("runs", "inspect"),
                         help="output folder (default: runs/inspect under the current folder)")
    inspect.add_argument("--tokens", type=int, default=1024,
                         help="random tokens per layer (default 1024)")
    inspect.add_argument("--seed", type=int, default=argparse.SUPPRESS,
                         help="seed of the random tokens (default 0)")
    inspect.set_defaults(func=_cmd_inspect)
    return parser


def _console_prints_anything():
    # A console that cannot show a character ("±", "−", "Δ" of the tables; PYTHONIOENCODING=ascii,
    # a Windows cp1252 console) shows "?" instead of raising UnicodeEncodeError after the work.
    for stream in (sys.stdout, sys.stderr):
        if hasattr(stream, "reconfigure"):        # a replaced stream (e.g. StringIO) has none
            stream.reconfigure(errors="replace")


def main(argv=None):
    """Entry point: parse argv (default sys.argv[1:]) and run the subcommand.

    Output the console cannot encode is printed as "?" (never an error).
    Returns the process exit status: 0 when everything agrees with theory.
    """
    _console_prints_anything()
    args = build_parser().parse_args(argv)
    return args.func(args)
