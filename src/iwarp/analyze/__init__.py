"""Capture analysis: read pcap/pcapng, reassemble TCP, decode iWARP and VI/TCP.

The analyzer reads every field with the wire declarations the live stack
encodes and decodes with (``iwarp.mpa.wire``, ``iwarp.ddp.wire``,
``iwarp.rdmap.wire``, ``fpdu_wire_size``, CRC32C); it walks FPDUs with its
own walker, which goes on past errors (docs/design.md, "FPDU walkers").
Only the command line opens files.
"""
