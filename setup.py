"""Build of the optional C accelerator, ``iwarp._speedups``.

Everything else is in pyproject.toml. The extension is optional: without a C
compiler (or with IWARP_NO_BUILD_ACCEL=1) the build prints why and goes on,
and iwarp runs its pure-Python paths (``iwarp --version`` says which).
"""

from __future__ import annotations

import os
import sys

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext


class OptionalBuildExt(build_ext):
    """build_ext that treats a failed compile as "no accelerator", not an error."""

    def run(self) -> None:
        try:
            super().run()
        except Exception as exc:  # no compiler, no headers: fall back
            self._skip(exc)

    def build_extension(self, ext: Extension) -> None:
        try:
            super().build_extension(ext)
        except Exception as exc:
            self._skip(exc)

    @staticmethod
    def _skip(exc: BaseException) -> None:
        print(
            f"warning: iwarp's C accelerator was not built ({exc}); "
            "the pure-Python paths will be used",
            file=sys.stderr,
        )


def extensions() -> list[Extension]:
    if os.environ.get("IWARP_NO_BUILD_ACCEL"):
        return []
    args = [] if sys.platform == "win32" else ["-O2", "-std=gnu11"]
    return [
        Extension(
            "iwarp._speedups",
            sources=[
                "src/iwarp/_speedups.c",
                "src/iwarp/_lanes.c",
                "src/iwarp/_decode.c",
                "src/iwarp/_small.c",
                "src/iwarp/_fastpath.c",
                "src/iwarp/_qpbase.c",
            ],
            depends=["src/iwarp/_speedups.h", "src/iwarp/_wire.h"],
            extra_compile_args=args,
            optional=True,
        )
    ]


setup(ext_modules=extensions(), cmdclass={"build_ext": OptionalBuildExt})
