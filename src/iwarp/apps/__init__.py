"""Applications built on the stack, shared by the tools that run them.

* :mod:`iwarp.apps.rping`: rping's conversation (the buffer advertisement,
  the client's and server's steps), sans-IO: it posts work and reacts to
  completions, whatever queue pair carries it. ``iwarp ping`` runs it on
  asyncio, the conformance cases and ``iwarp listen``/``connect`` use its
  advertisement layout.
* :mod:`iwarp.apps.rping_sync`: that conversation on the blocking adapter
  (``iwarp ping --sync``).

They sit above the adapters and below the command line (docs/design.md,
"Layers and the import rule").
"""
