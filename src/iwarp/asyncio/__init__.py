"""asyncio adapters: thin shells that run the sans-IO cores on real sockets.

Each protocol has its own module (``iwarp.asyncio.mpa`` for MPA connection
setup and FPDU exchange); import from those modules directly. This package
re-exports nothing, so new adapters are added without editing this file.
"""
