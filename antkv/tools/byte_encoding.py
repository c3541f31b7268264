"""How the ``antkv`` command reads keys and values from its arguments and prints them.

* text (default): an argument is the exact bytes the shell passed (``os.fsencode``); output is
  the raw bytes;
* ``--hex``: hexadecimal (an ``0x`` prefix is accepted on input, as ``ldb --hex`` prints it);
* ``--escape``: printable ASCII except ``\\`` as is, ``\\\\``, ``\\t``, ``\\n``, ``\\r`` and
  ``\\xNN`` for every other byte; input also accepts ``\\0``.  Every byte string round-trips.
"""

from __future__ import annotations

import binascii
import os


class UsageError(Exception):
    """Bad command-line input that argparse cannot see (e.g. a malformed hex string)."""


_PRINTABLE = frozenset(range(0x20, 0x7F)) - {ord("\\")}
_ESCAPE_OUT = {ord("\\"): "\\\\", ord("\t"): "\\t", ord("\n"): "\\n", ord("\r"): "\\r"}
_ESCAPE_IN = {"\\": 0x5C, "t": 0x09, "n": 0x0A, "r": 0x0D, "0": 0x00}


def escape(data: bytes) -> str:
    """``data`` with backslash escapes: printable ASCII (but ``\\``) as is, ``\\xNN`` otherwise."""
    out = []
    for b in data:
        if b in _PRINTABLE:
            out.append(chr(b))
        else:
            out.append(_ESCAPE_OUT.get(b) or f"\\x{b:02x}")
    return "".join(out)


def unescape(text: str) -> bytes:
    """The inverse of :func:`escape`; also accepts ``\\0``.  Non-ASCII characters are UTF-8."""
    out = bytearray()
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if c != "\\":
            out += os.fsencode(c)
            i += 1
            continue
        if i + 1 >= n:
            raise UsageError(f"trailing backslash in {text!r}")
        e = text[i + 1]
        if e == "x":
            digits = text[i + 2 : i + 4]
            if len(digits) != 2 or any(d not in "0123456789abcdefABCDEF" for d in digits):
                raise UsageError(f"bad \\x escape at position {i} of {text!r} (two hex digits needed)")
            out.append(int(digits, 16))
            i += 4
        elif e in _ESCAPE_IN:
            out.append(_ESCAPE_IN[e])
            i += 2
        else:
            raise UsageError(f"unknown escape \\{e} in {text!r} (use \\\\, \\t, \\n, \\r, \\0 or \\xNN)")
    return bytes(out)


def parse_hex(text: str) -> bytes:
    s = text[2:] if text[:2] in ("0x", "0X") else text
    try:
        return binascii.unhexlify(s)
    except (binascii.Error, ValueError):
        raise UsageError(f"not a hex string: {text!r}") from None


class Codec:
    """How one command's keys and values are read from arguments and printed."""

    def __init__(self, mode: str):
        self.mode = mode  # "text", "hex" or "escape"

    def parse(self, arg: str) -> bytes:
        if self.mode == "hex":
            return parse_hex(arg)
        if self.mode == "escape":
            return unescape(arg)
        return os.fsencode(arg)

    def show(self, data: bytes) -> bytes:
        if self.mode == "hex":
            return data.hex().encode()
        if self.mode == "escape":
            return escape(data).encode()
        return data
