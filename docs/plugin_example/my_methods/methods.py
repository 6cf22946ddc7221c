"""MyFixMatch: FixMatch under a name of its own, the starting point of a new method."""
from mutexmatch.algorithms import FixMatch, register_algorithm


@register_algorithm("myfixmatch")
class MyFixMatch(FixMatch):
    """MyFixMatch: FixMatch (L_sup + lambda_p L_p, Eqs. s and p) under another name; override ``confidence_mask``,
    ``views`` or ``Params`` to make it a method of its own."""
