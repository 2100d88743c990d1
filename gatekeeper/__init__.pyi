# Types of the names gatekeeper/__init__.py loads lazily (keep the two lists equal:
# tests/integrations/test_check_api.py compares them).
from gatekeeper.gate import check as check
from gatekeeper.inprocess import Gate as Gate
from gatekeeper.inprocess import GateFailed as GateFailed
from gatekeeper.inprocess import GateLogger as GateLogger
from gatekeeper.inprocess import Observation as Observation
from gatekeeper.inprocess import OnFail as OnFail

__version__: str
__all__ = ["Gate", "GateFailed", "GateLogger", "Observation", "OnFail", "__version__", "check"]
