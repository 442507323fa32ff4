"""The bottom layer: what the rest of the product is told, and where things live.

``config`` (the YAML's endpoint, campaign and recipe specs: the component schemas), ``pool_schema``
(the replay pool's columns), ``paths``, ``engine_args`` (argument lists and diffs) and ``models``
(builtin models, built once). It imports no other package of the project (tests/test_layering.py).
"""
