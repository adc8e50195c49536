"""MongoDB: what a driver built on poolkit needs around the pool (the ``poolkit[mongodb]`` extra).

* :mod:`.wire`: OP_MSG framing, sans I/O (pymongo's ``bson`` for documents).
"""
