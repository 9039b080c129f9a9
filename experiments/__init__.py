"""Drivers that are not about the formulations themselves (experiments, figures).

Each module here is imported only inside the func of a subcommand of bilinear_numpy.py,
so that `import bilinear_numpy` needs NumPy alone.
"""
