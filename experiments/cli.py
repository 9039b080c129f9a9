"""The command line of bilinear_numpy.py: `python bilinear_numpy.py [COMMAND]`.

bilinear_numpy.py imports this module's main at its top when it runs as a script (never on
`import bilinear_numpy`, which needs NumPy alone). Subcommands: verify (verification_report below),
figures, train, bench, inspect; with none, verify and then `train text --quick` and
`train image --quick`. Each subcommand imports its experiments/ module when it runs.

Every option is checked as it is parsed and every output folder before any work (a bad one:
`error: ...` on one line, exit status 2); Ctrl-C prints one line, "stopped (Ctrl-C); ..." with
what was kept, exit 130; EXIT_STATUSES lists them all.
"""

from __future__ import annotations

import argparse
import math
import os
import sys

from experiments import runtime  # noqa: E402  (imports no NumPy)

# One BLAS thread unless the caller asks for more, set before NumPy loads its BLAS (this module
# is the first that `python bilinear_numpy.py` imports): experiments/runtime.py says why.
# (Imported after NumPy, as by the tests, it changes nothing.) main() also keeps freed memory.
runtime.one_blas_thread()

import bilinear_numpy as bn  # noqa: E402  (after the BLAS threads are set)
import claims  # noqa: E402
from experiments import outputs  # noqa: E402


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
    out(f"1. Equivalences (hold when deviation <= {claims.CLAIM_TOL:.0e})")
    for row in claims.equivalences(seed):
        failures += not row["holds"]
        mark = "ok" if row["holds"] else "DISAGREES"
        out(f"   {row['statement']:<54} {row['deviation']:9.1e}  {mark}")

    out("\n2. Symmetries: kept / broken with the measured deviation ('!' = disagrees with theory)")
    rows = claims.symmetry_table(seed)
    acts = list(bn.ACTIVATIONS)
    labels = {"exchange": "exchange Q<->K", "inverse_scaling_pos": "(aQ, K/a), a>0",
              "inverse_scaling_neg": "(aQ, K/a), a<0", "key_value_rescaling": "(ak, v/a), a>0",
              "permutation": "permutation", "parity": "y(-x) = y(x)"}
    out(f"   {'formulation':<17}{'symmetry':<16}" + "".join(f"{a:>13}" for a in acts))
    for formulation in bn.FORMULATIONS:
        for symmetry in claims.SYMMETRIES:
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
    for row in claims.conservation_table(seed):
        failures += row["holds"] != row["expected"]
        if row["activation"] in ("relu", "silu"):
            word = "conserved" if row["holds"] else "not conserved"
            out(f"   {row['formulation']:<17} {row['activation']:<9} ({row['pair']}) "
                f"{row['residual']:9.1e}  {word:<14}{'' if row['holds'] == row['expected'] else 'DISAGREES'}")
    out("   (every activation is checked; relu and silu are shown)")

    out("\n5. Continuous symmetries: n_params - rank of the output Jacobian (d = 5, d_out = 3, r = 2),")
    out("   measured / theory ('!' = disagrees; derivations.md, 4.9)")
    rows = claims.symmetry_dimension_table(seed)
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
    rows = claims.conservation_law_table(seed)
    acts = list(bn.ACTIVATIONS)
    out("\n6. Flat directions / conservation laws of gradient flow, measured (laws: n_params - dim of")
    out("   the Lie algebra of the loss gradients; '!' = disagrees; derivations.md, 5.10)")
    out(f"   {'formulation':<17}{'(d,m,d_out,r)':>14}" + "".join(f"{a:>10}" for a in acts))
    for size in claims.LAW_SIZES:
        for formulation in bn.FORMULATIONS:
            cells = {r["activation"]: r for r in rows
                     if r["formulation"] == formulation and r["sizes"] == tuple(size)}
            text = "".join(f"{str(cells[a]['flat']) + ' / ' + str(cells[a]['laws']) + ('' if cells[a]['holds'] else '!'):>10}"
                           for a in acts)
            out(f"   {formulation:<17}{str(tuple(size)).replace(' ', ''):>14}{text}")
    out("   Laws equal flat directions where every generator is a rescaling or a translation (full")
    out("   bilinear relu: their bracket is a translation, 7 / 7); fewer where the group is GL or")
    out("   O(r, r): for these forms only its symmetric generators give a law (derivations.md, 5.10).")
    return sum(not r["holds"] for r in rows)


# ----- exit statuses -------------------------------------------------------------------
EXIT_OK = 0            # done; for verify and the main job: every check agrees with theory
EXIT_FAILED = 1        # the work failed on the way (a full disk; a bug's traceback also gives 1)
EXIT_USAGE = 2         # refused before any work: a bad option or value, an output folder that
                       # is a file or cannot be written, another run writing there, no data
EXIT_DISAGREES = 3     # verify (and the main job): a claim disagrees with theory
EXIT_STOPPED = 130     # stopped by Ctrl-C (128 + SIGINT, the shell's convention)

EXIT_STATUSES = f"""exit statuses:
  {EXIT_OK}    done (verify and the main job: every check agrees with theory)
  {EXIT_FAILED}    the work failed on the way, e.g. a full disk (one line says what was kept)
  {EXIT_USAGE}    refused before any work: a bad option or value, an output folder that is
       a file or cannot be written, another run writing into it, missing data
  {EXIT_DISAGREES}    verify, or the main job: a claim disagrees with theory
  {EXIT_STOPPED}  stopped by Ctrl-C (one line says what finished was kept, and where)"""


def _cmd_verify(args):
    return EXIT_DISAGREES if verification_report(seed=args.seed) else EXIT_OK


def _cmd_figures(args):
    from experiments import figures   # matplotlib is imported inside its drawing functions
    out = outputs.output_folder("--out", args.out)
    with outputs.one_run_at_a_time(out, "figures"):
        figures.make_figures(out, quick=args.quick, panels=args.panels)
    return EXIT_OK


def _run_training(task, mode, **options):
    # Bad input or missing data (e.g. no corpus file) stops with the message, not a traceback.
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
        return EXIT_USAGE
    return EXIT_OK


def _cmd_train(args):
    from experiments import ablation, train
    if args.task not in ("text", "image", "ablation"):
        raise outputs.UsageError(f"task: got {args.task!r}; expected text, image or ablation")
    if args.image is not None and args.task == "text":
        raise outputs.UsageError(f"--image: the text task reads no image, got {args.image!r} "
                                 "(--image is for the image task and the ablation)")
    if args.seeds is not None and args.task == "ablation" and args.seeds < 2:
        raise outputs.UsageError(f"--seeds: expected at least 2 seeds for the ablation (its "
                                 f"paired comparison), got {args.seeds}")
    if args.variants is not None:
        known = ablation.CELLS if args.task == "ablation" else None
        try:
            train.check_names("--variants", args.variants, known)
            if known is None:
                for name in args.variants:
                    train.resolve_variant(name)
        except ValueError as exc:
            raise outputs.UsageError(f"--variants: {exc}") from None
    if args.out is not None:
        outputs.output_folder("--out", args.out)
    return _run_training(args.task, args.mode, seeds=args.seeds, steps=args.steps,
                         variants=args.variants, lr=args.lr, out=args.out, image=args.image)


def _cmd_default(args):
    """The main job: the verification report, then both experiments in their --quick form."""
    from experiments import train
    quick = train.default_out("quick")                 # checked before verify starts
    for folder in (quick / "results", quick / "figures"):
        outputs.output_folder("the main job's output folder", folder)
    status = _cmd_verify(args)
    finished = []
    for task in ("text", "image"):
        try:
            status = max(status, _run_training(task, "quick"))
        except outputs.Stopped as exc:
            done = "".join(f"{t} finished (its files in {quick}); " for t in finished)
            raise outputs.Stopped(f"{done}{task}: {exc}") from None
        finished.append(task)
    return status


def _cmd_bench(args):
    from experiments import bench   # each subcommand imports only its own driver
    return bench.main(args)


def _cmd_inspect(args):
    from experiments import inspect_model   # each subcommand imports only its own driver
    try:
        layers = inspect_model.parse_layers(args.layers)
    except ValueError as exc:
        raise outputs.UsageError(str(exc)) from None
    out = outputs.output_folder("--out", args.out)
    try:
        with outputs.one_run_at_a_time(out, "inspect"):
            inspect_model.run(args.path, layers, out, args.tokens, args.seed)
    except UnicodeEncodeError:                # a ValueError, but never the user's input
        raise
    except (ValueError, OSError) as exc:     # a bad file or layout: the message, not a traceback
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    return EXIT_OK


# ----- option values, checked as they are parsed -----------------------------------------


def integer_at_least(least):
    """An argparse type: an integer >= least."""
    def parse(text):
        try:
            value = int(text)
        except ValueError:
            value = None
        if value is None or value < least:
            raise argparse.ArgumentTypeError(f"expected an integer >= {least}, got {text!r}")
        return value
    return parse


def _finite_positive(text):
    """An argparse type: a finite number > 0 (not nan, not inf)."""
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not 0 < value < math.inf:
        raise argparse.ArgumentTypeError(f"expected a finite number > 0, got {text!r}")
    return value


def _non_empty(text):
    """An argparse type: a value that is not empty (an empty one would mean a default)."""
    if not text.strip():
        raise argparse.ArgumentTypeError(f"expected a value, got {text!r}")
    return text


def _names(text):
    """An argparse type: comma-separated names, none empty: 'a,b' -> ['a', 'b']."""
    names = [name.strip() for name in text.split(",")]
    if not all(names):
        raise argparse.ArgumentTypeError(f"expected comma-separated names, none empty, got {text!r}")
    return names


class Parser(argparse.ArgumentParser):
    """argparse with no abbreviated options (--seed is never taken for --seeds) and a bad
    option reported as one line, `error: ...`, exit status 2."""

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)

    def error(self, message):
        self.exit(EXIT_USAGE, f"error: {message} (see {self.prog} --help)\n")


def build_parser():
    """The argparse parser: one subparser per subcommand, each with set_defaults(func=...).

    Each subcommand imports its experiments/ driver inside its func, so that one
    subcommand loads only what it needs (verify: NumPy alone). Option values are checked as
    they are parsed (an integer's range, a finite rate, no empty value); no option is
    abbreviated.
    """
    parser = Parser(
        prog="bilinear_numpy.py",
        description="Gated MLPs as symmetry-broken rank-1 bilinear attention, in NumPy. "
                    "With no subcommand, runs `verify`, then `train text --quick` and "
                    "`train image --quick`.",
        epilog=EXIT_STATUSES, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seed", type=integer_at_least(0), default=None,
                        help="seed of verify's random draws (default 0), for the main job, "
                             "verify and inspect")
    parser.set_defaults(func=_cmd_default)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    verify = sub.add_parser("verify", help="check every equivalence, symmetry, gradient and "
                                           f"conservation identity; exit {EXIT_DISAGREES} on a "
                                           "disagreement", epilog=EXIT_STATUSES,
                            formatter_class=argparse.RawDescriptionHelpFormatter)
    verify.add_argument("--seed", type=integer_at_least(0), default=argparse.SUPPRESS,
                        help="seed of the random draws, an integer >= 0 (default 0)")
    verify.set_defaults(func=_cmd_verify)

    figs = sub.add_parser("figures", help="draw the symmetries and their consequences as PNG "
                                          "files, with the numbers as CSV beside them")
    figs.add_argument("--out", default="figures", type=_non_empty,
                      help="output folder, made if missing (default: figures/ in the working "
                           "folder)")
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
    train.add_argument("--seeds", type=integer_at_least(1),
                       help="number of seeds 0, 1, ..., an integer >= 1 (>= 2 for ablation; "
                            "default: the mode's)")
    train.add_argument("--steps", type=integer_at_least(1),
                       help="Adam steps per run, an integer >= 1 (default: the mode's)")
    train.add_argument("--lr", type=_finite_positive,
                       help="Adam's learning rate, a finite number > 0 (default: the task's)")
    train.add_argument("--variants", type=_names,
                       help="comma-separated variant names, or formulation:activation[:r]; "
                            "for ablation, names of its cells; none empty or repeated "
                            "(default: the mode's)")
    train.add_argument("--out", type=_non_empty,
                       help="output folder for results/ and figures/, made if missing "
                            "(default: the working folder for --full, runs/<mode>/ in it "
                            "otherwise)")
    train.add_argument("--image", type=_non_empty,
                       help="image file for the image task and the ablation (default: "
                            "grace_hopper.jpg)")
    train.set_defaults(func=_cmd_train, mode="default")

    bench = sub.add_parser("bench", help="time forward and backward of every formulation "
                                         "against its GEMM floor; print and save a table")
    bench.add_argument("--quick", action="store_true", help="small sizes: seconds, not minutes")
    bench.add_argument("--out", type=_non_empty,
                       help="CSV file path, its folder made if missing (default, in the "
                            "working folder: results/bench.csv for the complete run, "
                            "runs/quick/ or runs/part/results/bench.csv otherwise)")
    bench.add_argument("--dtype", action="append", choices=["float32", "float64"],
                       help="run only this dtype (repeatable, each once)")
    bench.add_argument("--formulation", action="append", choices=list(bn.FORMULATIONS),
                       help="run only this formulation (repeatable, each once)")
    bench.add_argument("--activation", action="append", choices=list(bn.ACTIVATIONS),
                       help="run only this activation (repeatable, each once)")
    bench.add_argument("--tokens", type=integer_at_least(1),
                       help="number of tokens N, an integer >= 1 (overrides the size)")
    bench.add_argument("--repeats", type=integer_at_least(1),
                       help="timed repeats per measurement, an integer >= 1")
    bench.set_defaults(func=_cmd_bench)

    inspect = sub.add_parser("inspect", help="measure the SwiGLU feed-forwards of a trained "
                                             "LLaMA-style checkpoint (docs/real-model.md)")
    inspect.add_argument("path", type=_non_empty,
                         help="model.safetensors, model.safetensors.index.json, or their folder")
    inspect.add_argument("--layers", type=_non_empty,
                         help="layers to measure, each once, e.g. 0,10,20-29 (default: all)")
    inspect.add_argument("--out", default=os.path.join("runs", "inspect"), type=_non_empty,
                         help="output folder, made if missing (default: runs/inspect under "
                              "the current folder)")
    inspect.add_argument("--tokens", type=integer_at_least(1), default=1024,
                         help="random tokens per layer, an integer >= 1 (default 1024)")
    inspect.add_argument("--seed", type=integer_at_least(0), default=argparse.SUPPRESS,
                         help="seed of the random tokens, an integer >= 0 (default 0)")
    inspect.set_defaults(func=_cmd_inspect)
    return parser


def _check_nothing_ignored(args):
    # An option given where nothing reads it is refused, never silently dropped.
    if args.command in ("figures", "train", "bench") and args.seed is not None:
        raise outputs.UsageError(
            f"--seed: given before {args.command!r}, which has no seed (--seed is for verify, "
            "inspect and the main job" + ("; train takes --seeds N, the number of seeds)"
                                          if args.command == "train" else ")"))
    if args.seed is None:
        args.seed = 0


def _console_prints_anything():
    # A console that cannot show a character ("±", "−", "Δ" of the tables; PYTHONIOENCODING=ascii,
    # a Windows cp1252 console) shows "?" instead of raising UnicodeEncodeError after the work.
    for stream in (sys.stdout, sys.stderr):
        if hasattr(stream, "reconfigure"):        # a replaced stream (e.g. StringIO) has none
            stream.reconfigure(errors="replace")


def main(argv=None):
    """Entry point: parse argv (default sys.argv[1:]) and run the subcommand.

    Output the console cannot encode is printed as "?" (never an error). Bad usage, Ctrl-C
    and an OSError during the work (a full disk) each print one line, no traceback.
    Returns the process exit status (EXIT_STATUSES): 0 done, 1 failed on the way, 2 refused
    before any work, 3 a claim disagrees with theory, 130 stopped by Ctrl-C.
    """
    _console_prints_anything()
    runtime.keep_freed_memory()               # freed arrays' pages reused: runtime.py
    try:
        try:
            args = build_parser().parse_args(argv)
        except SystemExit as exc:             # --help (0), or a bad option (2), printed
            return exc.code
        _check_nothing_ignored(args)
        return args.func(args)
    except outputs.UsageError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt as exc:          # outputs.Stopped says what was kept
        print(f"stopped (Ctrl-C){'; ' + str(exc) if str(exc) else ''}", file=sys.stderr)
        return EXIT_STOPPED
    except outputs.Failed as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_FAILED
    except OSError as exc:                    # a full disk, a folder gone during the work
        where = f" ({exc.filename})" if exc.filename else ""
        print(f"error: {exc.strerror or exc}{where}", file=sys.stderr)
        return EXIT_FAILED
