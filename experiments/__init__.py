"""Drivers that are not about the formulations themselves (experiments, figures, the
benchmark).

Each module here is imported only when `python bilinear_numpy.py COMMAND` runs (cli.py by
bilinear_numpy.py run as a script, the others by their subcommand), so that `import bilinear_numpy`
needs NumPy alone.

    cli.py            the command line: the parser, one function per subcommand, verify's report
    runtime.py        the drivers' process settings: one BLAS thread, freed memory kept

    figures.py        the figures of the symmetries and their consequences (`figures`)
    hessian.py        zero modes of the loss Hessian at a minimum (figure 6)
    low_rank.py       the best rank-r unit for a full bilinear score, as a matrix and as a function
    data.py           the two real data sets of `train`, shipped with the dependencies
    model.py          the one-block model that `train` fits, and match_units (one parameter budget)
    train.py          `train`: the variants, the training loop, CSV and Markdown output
    train_figures.py  learning curves, image reconstructions and the ablation grid of `train`
    ablation.py       `train ablation`: which broken symmetry matters, the 2 x 2 cells
    bench.py          `bench`: forward and backward of every formulation against its GEMM floor
    compare_versions.py  `python -m experiments.compare_versions OLD.py CELL...`: an older
                      bilinear_numpy.py timed in alternation with this one
    numpy_vs_torch.py `python -m experiments.numpy_vs_torch`: the pairs against torch eager and
                      torch.compile, with the GEMM floor, in one run (optional: PyTorch)
    safetensors_reader.py  safetensors files (F32, F16, BF16; sharded) read with NumPy alone
    inspect_model.py  `inspect`: the SwiGLU layers of a trained LLaMA-style checkpoint, measured
    train_torch.py    `python -m experiments.train_torch`: train text in PyTorch (optional), on
                      one process or under torchrun, against the NumPy run (docs/pytorch.md)
"""
