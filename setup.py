"""The compiled parts of gatekeeper: the wandb history decoder (see
gatekeeper/sources/wandb/_history.c), the JSONL rows reader (see
gatekeeper/sources/jsonl/_rows.c) and the exact paths of the spike and trend checks
(gatekeeper/checks/_spike.c, gatekeeper/checks/_trend.c). Everything else is in
pyproject.toml.

All extensions are optional: without a C compiler the install still succeeds and
gatekeeper reads wandb history and JSONL rows with its pure-Python paths (slower, the
same results; `gatekeeper check --debug` and GATEKEEPER_DEBUG=1 say so on stderr) and
judges spike and trend rules with numpy and bottleneck (the same verdicts, slower). The
check kernels are built without fused multiply-adds (-ffp-contract=off) so their
roundings are numpy's, bit for bit.
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "gatekeeper.sources.wandb._history",
            sources=["gatekeeper/sources/wandb/_history.c"],
            optional=True,
            extra_compile_args=["-O2"],
        ),
        Extension(
            "gatekeeper.sources.jsonl._rows",
            sources=["gatekeeper/sources/jsonl/_rows.c"],
            optional=True,
            extra_compile_args=["-O2"],
        ),
        Extension(
            "gatekeeper.checks._spike",
            sources=["gatekeeper/checks/_spike.c"],
            optional=True,
            extra_compile_args=["-O3", "-ffp-contract=off"],
        ),
        Extension(
            "gatekeeper.checks._trend",
            sources=["gatekeeper/checks/_trend.c"],
            optional=True,
            extra_compile_args=["-O2", "-ffp-contract=off"],
        ),
    ]
)
