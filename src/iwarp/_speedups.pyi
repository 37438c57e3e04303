"""Types of the optional C accelerator (src/iwarp/_speedups.c).

Its kernels have exactly the signatures of their pure-Python twins in
``iwarp._kernels`` (the contract of both is written there, once); its
``FastPath`` type has those of ``iwarp.rdma.fastpath.PyFastPath``.
"""

from iwarp._kernels import crc32c as crc32c
from iwarp._kernels import describe as describe
from iwarp._kernels import frame_run as frame_run
from iwarp._kernels import place_run as place_run
from iwarp._kernels import scan as scan
from iwarp._kernels import segment_run as segment_run
from iwarp.rdma.fastpath import PyFastPath

FastPath = PyFastPath
