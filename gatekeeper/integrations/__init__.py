"""Trainer integrations: one module per framework, each importing its framework at the
top and turning a missing install into "install gatekeeper[...]".

hf.py (transformers `Trainer`, and TRL's trainers that subclass it) · lightning.py
(Lightning `Trainer`) · core.py (what every callback does with its gate, framework-free).
Nothing here is imported by `import gatekeeper`; custom loops use `gatekeeper.GateLogger`,
which needs no framework.
"""
