"""gatekeeper: a training-run health gate."""

from __future__ import annotations

__version__ = "0.1.0"
