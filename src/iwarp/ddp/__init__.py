"""DDP: Direct Data Placement (RFC 5041), sans-IO.

``wire`` declares the headers, ``errors`` the RFC 5041 §7.2 error numbers,
``segmentation`` cuts messages into segments that fit the MULPDU, and
``placement`` validates received segments and places their payload into
tagged or untagged buffers.
"""

from __future__ import annotations
