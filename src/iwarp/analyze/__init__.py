"""Capture analysis: read pcap/pcapng, reassemble TCP, decode iWARP and VI/TCP.

The analyzer is a passive user of the same sans-IO decoders the live stack
uses; only the command line opens files.
"""
