"""Network plans: where every tensor of a network lives (HBM or the chiplet's L2) and how each
layer runs there, chosen by one CP-SAT model over the whole network.

A layer above the search and simulation stages (like ``chiplets``): it asks the search for
each step's best mapping under every placement of its streams (``options``), builds the
network model (``network_model``) over those options, the tensors' lifetimes and the L2,
and returns the plan with each step's solution. ``greedy`` is the baseline it is compared
with, ``per_layer`` today's all-HBM schedule. The plan's data types live in ``ir.plan``.
"""
