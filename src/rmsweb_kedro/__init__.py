"""RMSWeb recipe as Kedro pipelines."""

from rmsweb_kedro.models.numerics import pin_cpu_kernels

__version__ = "0.1.0"

# Before anything imports torch: the same CPU kernels on every x86-64 machine, so runs compute the same bits
# (models/numerics.py; RMSWEB_CPU_KERNELS=native opts out).
pin_cpu_kernels()
