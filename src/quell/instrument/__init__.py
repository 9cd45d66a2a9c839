"""Per-request instrumentation (Soroban's half that runs inside the service): the C library
``quelltoken`` (``c/``), its ctypes binding (``token``), an ASGI middleware (``asgi``), the
LD_PRELOAD shim for unmodified lighttpd (``c/quell_lighttpd.c``) and the reader of the records
they write (``log``). docs/reference/attribution.md, "Instrumentation"."""
