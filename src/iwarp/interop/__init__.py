"""Interoperability suite: iwarp against Linux soft-iWARP (siw) and rdma-core tools.

``guest`` builds a small Linux guest with siw from Debian packages, ``vm`` boots
it under qemu and runs commands in it, ``suite`` runs the interop cases and
``profiles`` holds MPA configurations that behave like the peers users meet.
"""
