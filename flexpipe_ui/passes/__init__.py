"""Lowering passes: pure functions from a ``Schedule`` to the data a runtime executes (no mutation).

``comm.derive_comm``: the cross-rank messages (activations forward, input gradients back), numbered
per channel in sender order.
"""
from .comm import CommPlan, Message, RankComm, derive_comm

__all__ = ["CommPlan", "Message", "RankComm", "derive_comm"]
