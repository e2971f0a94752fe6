"""The event-log contract tests live in tests/engine/test_event_log_contract.py; this module only
keeps ``from tests.test_event_log_contract import EVENT_TYPES, PROTOCOLS`` (tests/test_schemas.py)
working until that import names the new home. It holds no tests."""

from tests.engine.test_event_log_contract import EVENT_TYPES, PROTOCOLS

__all__ = ["EVENT_TYPES", "PROTOCOLS"]
