"""Build the optional C hot path of ``aiperf_sdk.stage``.

Everything else is configured in pyproject.toml. The extension is ``optional``: where no C
compiler or Python headers are available the build goes on without it and ``aiperf_sdk``
runs its pure-Python hot path (same behaviour, slower).
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "aiperf_sdk._speedups",
            sources=["src/aiperf_sdk/_speedups.c"],
            optional=True,
            extra_compile_args=["-O2"],
        )
    ]
)
