"""The one compiled part of gatekeeper: the wandb history decoder (see
gatekeeper/sources/wandb/_history.c). Everything else is in pyproject.toml.

The extension is optional: without a C compiler the install still succeeds and
gatekeeper reads wandb history with its pure-Python path (slower; `gatekeeper check
--debug` and GATEKEEPER_DEBUG=1 say so on stderr).
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "gatekeeper.sources.wandb._history",
            sources=["gatekeeper/sources/wandb/_history.c"],
            optional=True,
            extra_compile_args=["-O2"],
        )
    ]
)
