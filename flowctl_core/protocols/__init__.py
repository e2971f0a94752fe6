"""Protocol-level flow control on top of the queue engine (DESIGN.md §2, seeds 002/003/004).

Each module is a sans-IO state machine: it is driven by method calls on the virtual clock and
emits events through the broker's :class:`~flowctl_core.events.EventBus`; nothing here does I/O.
"""
